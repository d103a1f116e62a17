/**
 * Organization flows of the example web app in headless Chromium: create and switch, invite
 * (send, list, revoke) and accept through the mailed link, member roles, suspend, reactivate and
 * remove, custom roles from the permission catalog, and the audit log.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, checkAccessibility, expectHeading, finishFlow, navLink, uniqueEmail } from './browser-harness.js';
import { followMailedLink, register, signedInPerson, verifyEmail } from './flows.js';

const skip = browserSkipReason();

describe('example web app: organizations', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('orgs');
  });
  after(async () => {
    await suite?.close();
  });

  async function createAndSwitch(page: Page, name: string): Promise<void> {
    await navLink(page, 'Organizations').click();
    await expectHeading(page, 'Organizations');
    await page.getByLabel('Name', { exact: true }).fill(name);
    await page.getByRole('button', { name: 'Create organization' }).click();
    await page.getByRole('button', { name: `Switch to ${name}` }).click();
    await page.getByText('active:').waitFor();
  }

  const memberRow = (page: Page, email: string) => page.getByRole('row').filter({ hasText: email });

  test('create, switch, invite; the invitee follows the mailed link, signs in and joins; members are managed; an invite is revoked', async () => {
    const ownerEmail = uniqueEmail('owner');
    const inviteeEmail = uniqueEmail('invitee');
    const owner = await signedInPerson(suite, ownerEmail);
    await createAndSwitch(owner.page, 'Acme Rockets');
    await finishFlow(owner.page, 'orgs');

    await navLink(owner.page, 'Members').click();
    await expectHeading(owner.page, 'Members and invitations');
    await owner.page.getByLabel('E-mail').fill(inviteeEmail);
    await owner.page.getByLabel('Role', { exact: true }).selectOption('member');
    await owner.page.getByRole('button', { name: 'Send invitation' }).click();
    await owner.page.getByRole('button', { name: `Revoke the invitation to ${inviteeEmail}` }).waitFor();
    const strayEmail = uniqueEmail('stray');
    await owner.page.getByLabel('E-mail').fill(strayEmail);
    await owner.page.getByRole('button', { name: 'Send invitation' }).click();
    await owner.page.getByRole('button', { name: `Revoke the invitation to ${strayEmail}` }).click();
    await owner.page.getByRole('button', { name: `Revoke the invitation to ${strayEmail}` }).waitFor({ state: 'detached' });
    await owner.page.getByRole('button', { name: `Revoke the invitation to ${inviteeEmail}` }).waitFor();
    await finishFlow(owner.page, 'org-invites');

    // The invitee has no account yet: registers, verifies, then follows the invitation link.
    const invitee = await suite.newPage();
    await register(suite, invitee.page, inviteeEmail);
    (await verifyEmail(suite, invitee.context, inviteeEmail)).close();
    const acceptPage = await followMailedLink(suite, invitee.context, inviteeEmail, /invited you to join Acme Rockets/);
    await expectHeading(acceptPage, 'Join an organization');
    await checkAccessibility(acceptPage, 'accept-invite-signed-out');
    await acceptPage.getByRole('main').getByRole('link', { name: 'Sign in' }).click();
    await expectHeading(acceptPage, 'Sign in');
    await acceptPage.getByLabel('E-mail').fill(inviteeEmail);
    await acceptPage.getByLabel('Password').fill('correct horse battery staple');
    await acceptPage.getByRole('button', { name: 'Sign in', exact: true }).click();
    await expectHeading(acceptPage, 'Join an organization');
    await acceptPage.getByRole('button', { name: 'Accept invitation' }).click();
    await expectHeading(acceptPage, 'Organizations');
    await acceptPage.getByText('Acme Rockets').waitFor();
    await acceptPage.getByText('active:').waitFor();
    await finishFlow(acceptPage, 'accept-invite');

    // The owner manages the new member.
    await owner.page.reload();
    await owner.page.waitForSelector('body[data-ready="true"]');
    const row = memberRow(owner.page, inviteeEmail);
    await row.getByText('active').waitFor();
    await row.getByRole("combobox", { name: `Role of ${inviteeEmail}` }).selectOption('admin');
    await row.getByRole('button', { name: `Set role of ${inviteeEmail}` }).click();
    await memberRow(owner.page, inviteeEmail).getByRole('cell', { name: 'Admin', exact: true }).waitFor();
    await memberRow(owner.page, inviteeEmail).getByRole('button', { name: `Suspend ${inviteeEmail}` }).click();
    await memberRow(owner.page, inviteeEmail).getByRole('cell', { name: 'suspended' }).waitFor();
    await finishFlow(owner.page, 'org-members');
    await memberRow(owner.page, inviteeEmail).getByRole('button', { name: `Reactivate ${inviteeEmail}` }).click();
    await memberRow(owner.page, inviteeEmail).getByRole('cell', { name: 'active', exact: true }).waitFor();
    await memberRow(owner.page, inviteeEmail).getByRole('button', { name: `Remove ${inviteeEmail}` }).click();
    await memberRow(owner.page, inviteeEmail).waitFor({ state: 'detached' });

    // The removed member's page no longer reaches the organization.
    await acceptPage.reload();
    await acceptPage.waitForSelector('body[data-ready="true"]');
    assert.equal(await acceptPage.getByRole('button', { name: /Switch to Acme/ }).count() + (await acceptPage.getByText('Acme Rockets').count()), 0);

    await owner.context.close();
    await invitee.context.close();
  });

  test('roles with the permission catalog, and the audit log', async () => {
    const email = uniqueEmail('roles');
    const { context, page } = await signedInPerson(suite, email);
    await createAndSwitch(page, 'Globex');
    await navLink(page, 'Roles').click();
    await expectHeading(page, 'Roles and permissions');
    await page.getByLabel('Name', { exact: true }).fill('Billing');
    await page.getByLabel('Slug').fill('billing');
    await page.getByLabel('Description').fill('Reads invoices');
    await page.getByRole('checkbox', { name: /invoices\.read/ }).check();
    await page.getByRole('checkbox', { name: /members\.read/ }).check();
    await page.getByRole('button', { name: 'Create role' }).click();
    const billing = page.getByRole('row').filter({ hasText: '(billing)' });
    await billing.getByText('invoices.read').waitFor();
    await finishFlow(page, 'org-roles');
    await billing.getByRole('button', { name: 'Delete role Billing' }).click();
    await billing.waitFor({ state: 'detached' });

    await navLink(page, 'Audit log').click();
    await expectHeading(page, 'Audit log');
    for (const type of ['org.created', 'role.created', 'role.deleted']) await page.getByRole('cell', { name: type, exact: true }).first().waitFor();
    // Who acted, by e-mail (not a user id), and roles by name (not slug).
    const created = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'role.created', exact: true }) });
    await created.getByRole('cell', { name: email, exact: true }).waitFor();
    await created.getByRole('cell', { name: 'role: Billing' }).waitFor();
    assert.equal(await page.getByRole('cell', { name: /^[0-9a-f]{8}-[0-9a-f]{4}-/ }).count(), 0, 'no raw user ids');
    await finishFlow(page, 'org-audit-log');
    await context.close();
  });
});
