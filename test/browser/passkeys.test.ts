/**
 * Passkeys in the example web app, with real WebAuthn ceremonies: Chromium's virtual
 * authenticator (CTAP2, internal transport, resident keys, user verification) answers
 * navigator.credentials on the example's own pages. One person adds a passkey on the Passkeys
 * page, signs out and back in without a password, passes the MFA gate after a password with
 * it, and answers a step-up dialog with it before removing another factor. A second browser
 * context with its own authenticator cannot sign in as that person. The app is served as
 * http://localhost:<port> (an IP address cannot be an RP id; localhost is a secure context).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { addVirtualAuthenticator, type VirtualAuthenticator } from '../helpers/virtual-authenticator.js';
import { BrowserSuite, browserSkipReason, checkAccessibility, expectHeading, finishFlow, navLink, scanQrCode, screenshot, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { signedInPerson, signIn } from './flows.js';

const skip = browserSkipReason();

/**
 * A ceremony the authenticator cannot answer (no credential for this site) waits for the person
 * until the options' timeout; this makes the page give up after 3 s instead, as a person would.
 */
const GIVE_UP_AFTER_3S = `(() => {
  const get = navigator.credentials.get.bind(navigator.credentials);
  navigator.credentials.get = (options) => get({ ...options, signal: AbortSignal.timeout(3000) });
})();`;

describe('example web app: passkeys', { skip }, () => {
  let suite: BrowserSuite;
  let ada: { email: string; context: BrowserContext; page: Page; authenticator: VirtualAuthenticator };

  before(async () => {
    suite = await BrowserSuite.start('passkeys', { publicHost: 'localhost' });
  });
  after(async () => {
    await suite?.close();
  });

  async function logOut(page: Page): Promise<void> {
    await navLink(page, 'Sessions').click();
    await page.getByRole('button', { name: 'Log out', exact: true }).click();
    await expectHeading(page, 'Sign in');
  }

  async function addPasskey(page: Page, label: string): Promise<void> {
    await navLink(page, 'Passkeys').click();
    await expectHeading(page, 'Passkeys');
    await page.getByLabel('Name for this passkey').fill(label);
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByRole('status').filter({ hasText: 'Passkey added.' }).waitFor();
  }

  test('add a passkey on the Passkeys page: confirmed, default, recovery codes shown once', async () => {
    const email = uniqueEmail('passkey');
    const { context, page } = await signedInPerson(suite, email);
    const authenticator = await addVirtualAuthenticator(context, page);
    ada = { email, context, page, authenticator };
    await addPasskey(page, 'Laptop');
    assert.equal(await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').count(), 10);
    assert.equal(await authenticator.credentialCount(), 1, 'the authenticator holds the new credential');
    await page.getByText('Laptop (default)').waitFor();
    await finishFlow(page, 'passkeys-added');
    await navLink(page, 'Two-step sign-in').click();
    await page.getByText('Passkey (Laptop) (default)').waitFor();
  });

  test('log out, then sign in with the passkey alone (no e-mail, no password)', async () => {
    const { page, email } = ada;
    await logOut(page);
    await page.getByRole('button', { name: 'Sign in with a passkey' }).waitFor();
    await checkAccessibility(page, 'passkeys-sign-in-page');
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
    await expectHeading(page, 'Your account');
    await page.getByRole('main').getByText(email).waitFor();
    await finishFlow(page, 'passkeys-passwordless-sign-in');
  });

  test('after a password, the MFA gate offers the passkey and it answers without a code', async () => {
    const { page, email } = ada;
    await logOut(page);
    await signIn(suite, page, email, STRONG_PASSWORD, { expectGate: true });
    const passkeyChoice = page.getByRole('radio', { name: 'Passkey (Laptop)' });
    assert.equal(await passkeyChoice.isChecked(), true, 'the default factor is preselected');
    await checkAccessibility(page, 'passkeys-mfa-gate');
    await page.getByRole('button', { name: 'Continue' }).click();
    await expectHeading(page, 'Your account');
    await page.getByRole('main').getByText(email).waitFor();
    await finishFlow(page, 'passkeys-mfa-gate-passed');
  });

  test('a step-up dialog answered with the passkey before removing another factor', async () => {
    const { page } = ada;
    // Fresh from the gate, so the authenticator app can be added without a step-up.
    await navLink(page, 'Two-step sign-in').click();
    await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
    const secret = new URL(await scanQrCode(page.getByRole('img', { name: /QR code/ }))).searchParams.get('secret')!;
    suite.clock.advance(30);
    await page.getByLabel('Six-digit code from the app').fill(suite.totp(secret));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: 'Second factor confirmed.' }).waitFor();
    assert.equal(await page.getByRole('list', { name: 'Recovery codes' }).count(), 0, 'a later factor brings no new recovery codes');

    // Past security.stepUp.maxAge, removing a factor answers step_up_required: the dialog asks, the passkey answers.
    suite.clock.advance(301);
    await page.getByRole('button', { name: 'Remove Authenticator app' }).click();
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    await dialog.waitFor();
    assert.equal(await dialog.getByRole('radio', { name: 'Passkey (Laptop)' }).isChecked(), true);
    await checkAccessibility(page, 'passkeys-step-up-dialog');
    await screenshot(page, 'passkeys-step-up-dialog');
    await dialog.getByRole('button', { name: 'Continue' }).click();
    await dialog.waitFor({ state: 'hidden' });
    // The retried DELETE went through: the authenticator app is gone, the passkey stays.
    await page.getByRole('button', { name: 'Remove Authenticator app' }).waitFor({ state: 'detached' });
    await page.getByText('Passkey (Laptop) (default)').waitFor();
    await finishFlow(page, 'passkeys-step-up-removed-factor');
  });

  test('a second browser context with another authenticator cannot sign in as the first person', async () => {
    const otherEmail = uniqueEmail('other');
    const { context, page } = await signedInPerson(suite, otherEmail);
    await context.addInitScript({ content: GIVE_UP_AFTER_3S });
    const authenticator = await addVirtualAuthenticator(context, page);
    await logOut(page);
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    // Its authenticator holds no credential for this site: the ceremony fails, no one is signed in.
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
    await page.getByRole('alert').filter({ hasText: /.+/ }).waitFor();
    await expectHeading(page, 'Sign in');
    assert.equal(await authenticator.credentialCount(), 0);
    await finishFlow(page, 'passkeys-other-authenticator-refused');

    // Its own passkey signs in its own account, never the first person's.
    await signIn(suite, page, otherEmail);
    await addPasskey(page, 'Other laptop');
    await logOut(page);
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
    await expectHeading(page, 'Your account');
    await page.getByRole('main').getByText(otherEmail).waitFor();
    assert.equal(await page.getByText(ada.email).count(), 0);
    await finishFlow(page, 'passkeys-other-authenticator-own-account');
    await context.close();
    await ada.context.close();
  });
});
