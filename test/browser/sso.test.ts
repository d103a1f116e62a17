/**
 * Single sign-on in the example web app, in headless Chromium (docs/sso.md): an owner adds the
 * demo provider's domain on the organization's "Single sign-on" page, publishes its TXT record
 * in the example's DNS stand-in and verifies it, connects the demo OpenID provider as the
 * organization's identity provider, and a person at the domain signs in identifier-first and
 * joins the organization just in time. With "Require single sign-on" on, social sign-in at the
 * domain is refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, expectHeading, finishFlow, navLink, uniqueEmail } from './browser-harness.js';
import { signedInPerson } from './flows.js';

const skip = browserSkipReason();
const DOMAIN = 'demo.example.org';

describe('example web app: single sign-on', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('sso');
  });
  after(async () => {
    await suite?.close();
  });

  async function createAndSwitch(page: Page, name: string): Promise<string> {
    await navLink(page, 'Organizations').click();
    await expectHeading(page, 'Organizations');
    await page.getByLabel('Name', { exact: true }).fill(name);
    const created = page.waitForResponse((response) => response.url().endsWith('/api/orgs') && response.request().method() === 'POST');
    await page.getByRole('button', { name: 'Create organization' }).click();
    const organizationId = ((await (await created).json()) as { data: { id: string } }).data.id;
    await page.getByRole('button', { name: `Switch to ${name}` }).click();
    await page.getByText('active:').waitFor();
    return organizationId;
  }

  async function chooseDemoAccount(page: Page, name: string): Promise<void> {
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    assert.ok(page.url().startsWith(`${suite.example.demoIssuer}/interaction/`), page.url());
    await page.getByRole('button', { name: new RegExp(`^Continue as ${name}`) }).click();
  }

  const domains = (page: Page) => page.getByRole('region', { name: 'Verified domains' });
  const provider = (page: Page) => page.getByRole('region', { name: 'Identity provider' });

  test('verify a domain against the DNS stand-in, connect the demo provider, sign in identifier-first and join; then require it', async () => {
    const owner = await signedInPerson(suite, uniqueEmail('sso-owner'));
    const organizationId = await createAndSwitch(owner.page, 'Demo Rockets');

    await navLink(owner.page, 'Single sign-on').click();
    await expectHeading(owner.page, 'Single sign-on');
    await domains(owner.page).getByText('No domain yet.').waitFor();
    assert.equal(await domains(owner.page).getByLabel('Domain', { exact: true }).inputValue(), DOMAIN, "the demo provider's domain is suggested");
    await domains(owner.page).getByRole('button', { name: 'Add domain' }).click();
    await owner.page.getByRole('status').filter({ hasText: `${DOMAIN} is added` }).waitFor();
    const row = domains(owner.page).getByRole('row').filter({ hasText: DOMAIN });
    await row.getByText('pending').waitFor();
    await row.getByText(`_identity-router.${DOMAIN}`).waitFor();

    // Nothing published yet: DNS (the stand-in) has no record, and the domain stays pending.
    await row.getByRole('button', { name: `Verify ${DOMAIN}` }).click();
    await domains(owner.page).getByRole('alert').filter({ hasText: 'TXT record' }).waitFor();
    await row.getByRole('button', { name: `Publish the TXT record of ${DOMAIN} in the DNS stand-in` }).click();
    await owner.page.getByRole('status').filter({ hasText: 'is published' }).waitFor();
    await row.getByRole('button', { name: `Verify ${DOMAIN}` }).click();
    await owner.page.getByRole('status').filter({ hasText: `${DOMAIN} is verified.` }).waitFor();
    await row.getByText('verified', { exact: true }).waitFor();

    // The connect form holds the demo provider's issuer and client; connecting runs discovery through the guard.
    assert.equal(await provider(owner.page).getByLabel('Issuer URL').inputValue(), suite.example.demoIssuer);
    await provider(owner.page).getByRole('button', { name: 'Connect' }).click();
    await owner.page.getByRole('status').filter({ hasText: 'The identity provider is connected.' }).waitFor();
    await provider(owner.page).getByText('active', { exact: true }).waitFor();
    await provider(owner.page).getByText(`${suite.url}/identity/auth/sso/`).waitFor();
    assert.doesNotMatch(await owner.page.locator('main').innerText(), /\bnull\b|undefined/, 'no empty value printed as text');
    await finishFlow(owner.page, 'sso-admin');

    // Ada has no account here yet: she types her work address and goes to her company's provider.
    const ada = await suite.newPage();
    await suite.open(ada.page, '/login');
    await ada.page.getByLabel('Work address for single sign-on').fill(`ada.lovelace@${DOMAIN}`);
    await ada.page.getByRole('button', { name: 'Sign in through my organization' }).click();
    await ada.page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    assert.equal(new URL(ada.page.url()).origin, suite.example.demoIssuer);
    const exchangeAnswer = ada.page.waitForResponse((response) => response.url().endsWith('/api/auth/social/exchange'));
    await chooseDemoAccount(ada.page, 'Ada Lovelace');
    const exchange = (await (await exchangeAnswer).json()) as { data: Record<string, unknown> };
    assert.equal(exchange.data.organization_id, organizationId);
    assert.equal(exchange.data.is_new_user, true);
    assert.equal(typeof exchange.data.access_token, 'string');
    assert.equal('refresh_token' in exchange.data, false, 'the refresh token went to the httpOnly cookie');
    await expectHeading(ada.page, 'Your account');
    await ada.page.getByText(`ada.lovelace@${DOMAIN}`).first().waitFor();
    assert.equal(await ada.page.evaluate('sessionStorage.length + localStorage.length'), 0, 'the verifier is gone once used');
    // Joined just in time: the organization is hers to switch to.
    await navLink(ada.page, 'Organizations').click();
    await ada.page.getByRole('button', { name: 'Switch to Demo Rockets' }).waitFor();
    await finishFlow(ada.page, 'sso-signed-in');
    await ada.context.close();

    // Require single sign-on: Grace at the domain can no longer come in through social sign-in.
    await navLink(owner.page, 'Single sign-on').click();
    await provider(owner.page).getByRole('button', { name: 'Require single sign-on' }).click();
    await owner.page.getByRole('status').filter({ hasText: 'Single sign-on is now required' }).waitFor();
    const grace = await suite.newPage();
    await suite.open(grace.page, '/login');
    await grace.page.getByRole('button', { name: 'Sign in with Demo' }).click();
    await chooseDemoAccount(grace.page, 'Grace Hopper');
    await grace.page.getByRole('alert').filter({ hasText: 'sso_required' }).waitFor();
    await grace.context.close();

    // An address with no single sign-on is told so, and stays on the sign-in page.
    const other = await suite.newPage();
    await suite.open(other.page, '/login');
    await other.page.getByLabel('Work address for single sign-on').fill(uniqueEmail('elsewhere'));
    await other.page.getByRole('button', { name: 'Sign in through my organization' }).click();
    await other.page.getByRole('alert').filter({ hasText: 'sso_not_configured' }).waitFor();
    assert.equal(await other.page.evaluate('sessionStorage.length'), 0, 'a refused start leaves no verifier behind');
    await finishFlow(other.page, 'sso-not-configured');
    await other.context.close();
    await owner.context.close();
  });
});
