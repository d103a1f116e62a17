/**
 * Multi-factor flows of the example web app in headless Chromium: TOTP enrollment by scanning
 * the QR code off the screen, recovery codes shown once, the login gate with TOTP, SMS, e-mail
 * and a recovery code, step-up when an operation answers step_up_required, factor removal.
 * The server runs on the test clock, which moves instead of the tests sleeping.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, checkAccessibility, codeFromInbox, expectHeading, finishFlow, navLink, scanQrCode, screenshot, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { signedInPerson, signIn } from './flows.js';

const skip = browserSkipReason();
let phoneCounter = 0;
const uniquePhone = () => `+1415555${String(process.pid % 1000).padStart(3, '0')}${++phoneCounter}`;

describe('example web app: multi-factor authentication', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('mfa');
  });
  after(async () => {
    await suite?.close();
  });

  /** On the Two-step sign-in page: scan the QR, type the code; answers the scanned secret and the recovery codes shown. */
  async function enrollTotp(page: Page, screenshotName?: string): Promise<{ secret: string; recoveryCodes: string[] }> {
    await navLink(page, 'Two-step sign-in').click();
    await expectHeading(page, 'Two-step sign-in');
    await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
    const qr = page.getByRole('img', { name: /QR code/ });
    await qr.waitFor();
    const uri = new URL(await scanQrCode(qr));
    assert.equal(uri.protocol, 'otpauth:');
    const secret = uri.searchParams.get('secret')!;
    assert.equal(secret, await page.locator('.totp-secret').innerText(), 'the QR code carries the key shown under it');
    if (screenshotName) await finishFlow(page, screenshotName);
    if (screenshotName && process.env.UPDATE_DOCS_SCREENSHOTS === '1') {
      // The README's picture: regenerate with UPDATE_DOCS_SCREENSHOTS=1 node scripts/run-tests.mjs --sqlite-only test/browser/mfa.test.ts
      await page.setViewportSize({ width: 1000, height: 760 });
      await page.evaluate('window.scrollTo(0, 0)');
      await page.screenshot({ path: 'docs/mfa-enrollment.png' });
    }
    suite.clock.advance(30);
    await page.getByLabel('Six-digit code from the app').fill(suite.totp(secret));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: 'Second factor confirmed.' }).waitFor();
    const recoveryCodes = await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').allInnerTexts();
    return { secret, recoveryCodes };
  }

  async function logOut(page: Page): Promise<void> {
    await navLink(page, 'Sessions').click();
    await page.getByRole('button', { name: 'Log out', exact: true }).click();
    await expectHeading(page, 'Sign in');
  }

  /** In the gate or the step-up dialog: pick a way, continue, type the code, verify. */
  async function answerSecondFactor(page: Page, way: RegExp, code: () => Promise<string> | string): Promise<void> {
    await page.getByRole('radio', { name: way }).check();
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.getByRole('button', { name: 'Verify' }).waitFor();
    await page.getByRole('textbox', { name: /^(Code from your authenticator app|Code sent to|Recovery code)/ }).fill(await code());
    await page.getByRole('button', { name: 'Verify' }).click();
  }

  test('TOTP: scan the QR code, confirm, see the recovery codes once, then pass the login gate with the app', async () => {
    const email = uniqueEmail('totp');
    const { context, page } = await signedInPerson(suite, email);
    const { secret, recoveryCodes } = await enrollTotp(page, 'mfa-totp-enroll');
    assert.equal(recoveryCodes.length, 10);
    await finishFlow(page, 'mfa-recovery-codes');
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    assert.equal(await page.getByRole('list', { name: 'Recovery codes' }).count(), 0, 'recovery codes are shown once');
    await page.getByText('Authenticator app (default)').waitFor();

    await logOut(page);
    await signIn(suite, page, email, STRONG_PASSWORD, { expectGate: true });
    await checkAccessibility(page, 'mfa-gate');
    suite.clock.advance(30);
    await answerSecondFactor(page, /Authenticator app/, () => suite.totp(secret));
    await expectHeading(page, 'Your account');
    await finishFlow(page, 'mfa-gate-totp');
    await context.close();
  });

  test('SMS: enroll a phone, answer a step-up dialog with a texted code, pass the login gate with one', async () => {
    const email = uniqueEmail('sms');
    const phone = uniquePhone();
    const { context, page } = await signedInPerson(suite, email);
    await enrollTotp(page);

    await page.getByLabel('Mobile number').fill(phone);
    await page.getByRole('button', { name: 'Send code' }).first().click();
    await page.getByLabel(/Code sent to \+\*+\d{4}/).fill(await codeFromInbox(context, suite, phone, /Text message/));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: 'Second factor confirmed.' }).waitFor();
    await page.getByText(/Text message to \+\*+/).first().waitFor();
    await page.getByRole('button', { name: /^Make default: Text message/ }).click();
    await page.getByText(/Text message to \+\*+\d{4} \(default\)/).waitFor();
    await finishFlow(page, 'mfa-sms-enroll');

    // Past security.stepUp.maxAge, new recovery codes answer step_up_required: the dialog asks, a texted code answers.
    suite.clock.advance(301);
    await page.getByRole('button', { name: 'Generate new recovery codes' }).click();
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    await dialog.waitFor();
    await answerSecondFactor(page, /Text message/, async () => {
      await checkAccessibility(page, 'step-up-dialog');
      await screenshot(page, 'step-up-dialog');
      return codeFromInbox(context, suite, phone, /Text message/);
    });
    await dialog.waitFor({ state: 'hidden' });
    await page.getByRole('list', { name: 'Recovery codes' }).waitFor();
    await finishFlow(page, 'step-up-sms-recovery-codes');

    await logOut(page);
    suite.clock.advance(31); // the per-factor resend cooldown
    await signIn(suite, page, email, STRONG_PASSWORD, { expectGate: true });
    await answerSecondFactor(page, /Text message/, () => codeFromInbox(context, suite, phone, /Text message/));
    await expectHeading(page, 'Your account');
    await finishFlow(page, 'mfa-gate-sms');
    await context.close();
  });

  test('e-mail codes: enroll as the first factor, then pass the gate with a mailed code', async () => {
    const email = uniqueEmail('emailcode');
    const { context, page } = await signedInPerson(suite, email);
    await navLink(page, 'Two-step sign-in').click();
    await page.getByRole('button', { name: 'Send code' }).nth(1).click();
    await page.getByLabel(/Code sent to/).fill(await codeFromInbox(context, suite, email, /verification code/));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: 'Second factor confirmed.' }).waitFor();
    assert.equal(await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').count(), 10);
    await finishFlow(page, 'mfa-email-enroll');

    await logOut(page);
    suite.clock.advance(31);
    await signIn(suite, page, email, STRONG_PASSWORD, { expectGate: true });
    await answerSecondFactor(page, /E-mail to/, () => codeFromInbox(context, suite, email, /verification code/));
    await expectHeading(page, 'Your account');
    await finishFlow(page, 'mfa-gate-email');
    await context.close();
  });

  test('a recovery code passes the gate; step-up guards password change, new recovery codes and factor removal', async () => {
    const email = uniqueEmail('recovery');
    const { context, page } = await signedInPerson(suite, email);
    const { secret, recoveryCodes } = await enrollTotp(page);
    await logOut(page);
    await signIn(suite, page, email, STRONG_PASSWORD, { expectGate: true });
    await answerSecondFactor(page, /A recovery code/, () => recoveryCodes[0]!);
    await expectHeading(page, 'Your account');
    await page.getByText('Recovery codes left: 9').waitFor();
    await finishFlow(page, 'mfa-gate-recovery-code');

    // Step-up on password change.
    suite.clock.advance(301);
    await navLink(page, 'Password').click();
    await page.getByLabel('Current password').fill(STRONG_PASSWORD);
    await page.getByLabel('New password').fill('a stepped-up passphrase');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('dialog', { name: 'Confirm it is you' }).waitFor();
    suite.clock.advance(30);
    await answerSecondFactor(page, /Authenticator app/, () => suite.totp(secret));
    await page.getByRole('status').filter({ hasText: 'Password changed' }).waitFor();
    await finishFlow(page, 'step-up-change-password');

    // Fresh from step-up: new recovery codes and removing the factor go straight through.
    await navLink(page, 'Two-step sign-in').click();
    await page.getByRole('button', { name: 'Generate new recovery codes' }).click();
    await page.getByRole('list', { name: 'Recovery codes' }).waitFor();
    assert.equal(await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').count(), 10);
    await page.getByRole('button', { name: 'Remove Authenticator app' }).click();
    await page.getByText('None yet.').waitFor();
    await finishFlow(page, 'mfa-factor-removed');
    await context.close();
  });
});
