/**
 * Passwordless sign-in in the example web app, in headless Chromium (docs/passwordless.md): "E-mail me a
 * code" on the sign-in page with the code read from the development inbox, the mailed link whose
 * page POSTs the token on a click, and both through the MFA gate of a person with an
 * authenticator app.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, checkAccessibility, codeFromInbox, expectHeading, finishFlow, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { followMailedLink, signedInPerson } from './flows.js';

const skip = browserSkipReason();
const SUBJECT = /^Sign in to /;

describe('example web app: passwordless sign-in', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('passwordless');
  });
  after(async () => {
    await suite?.close();
  });

  /** A person with a verified account, signed out: a fresh context. */
  async function person(name: string): Promise<string> {
    const email = uniqueEmail(name);
    const { context } = await signedInPerson(suite, email);
    await context.close();
    return email;
  }

  /** On the sign-in page: ask for a code by e-mail. */
  async function askForCode(page: Page, email: string): Promise<void> {
    await suite.open(page, '/login');
    await page.getByLabel('Address for a sign-in code').fill(email);
    await page.getByRole('button', { name: 'E-mail me a code' }).click();
    await page.getByLabel('Code we mailed you').waitFor();
    // The next start of this address waits out the resend cooldown on the test clock.
    suite.clock.advance(31);
  }

  async function typeCode(context: BrowserContext, page: Page, email: string): Promise<void> {
    await page.getByLabel('Code we mailed you').fill(await codeFromInbox(context, suite, email, SUBJECT));
    await page.getByRole('button', { name: 'Sign in with the code' }).click();
  }

  test('sign in with a code from the inbox', async () => {
    const email = await person('code');
    const { context, page } = await suite.newPage();
    await askForCode(page, email);
    await checkAccessibility(page, 'passwordless-code');
    await typeCode(context, page, email);
    await expectHeading(page, 'Your account');
    await page.getByText(email).first().waitFor();
    await finishFlow(page, 'passwordless-code-signed-in');
    await context.close();
  });

  test('the mailed link opens a page that signs in only when its button POSTs the token', async () => {
    const email = await person('link');
    const { context, page } = await suite.newPage();
    await askForCode(page, email);
    const landing = await followMailedLink(suite, context, email, SUBJECT);
    await expectHeading(landing, 'Sign in with the e-mailed link');
    // Opening the page (what a mail scanner does) spent nothing: the button still signs in.
    await landing.reload();
    await landing.waitForSelector('body[data-ready="true"]');
    await checkAccessibility(landing, 'passwordless-link');
    const verify = landing.waitForResponse((response) => response.url().endsWith('/api/auth/passwordless/verify'));
    await landing.getByRole('button', { name: 'Sign in', exact: true }).click();
    const answer = (await (await verify).json()) as { data: Record<string, unknown> };
    assert.equal(typeof answer.data.access_token, 'string');
    assert.equal('refresh_token' in answer.data, false, 'the refresh token went to the httpOnly cookie');
    await expectHeading(landing, 'Your account');
    assert.equal(new URL(landing.url()).hash, '', 'the token left the address bar');
    await finishFlow(landing, 'passwordless-link-signed-in');
    await context.close();
  });

  test('a person with an authenticator app passes the MFA gate after the code and after the link', async () => {
    const email = await person('gate');
    const secret = await enrollTotpThroughApi(email);
    const { context, page } = await suite.newPage();
    await askForCode(page, email);
    await typeCode(context, page, email);
    await page.getByRole('heading', { name: 'Second step' }).waitFor();
    await checkAccessibility(page, 'passwordless-gate');
    suite.clock.advance(30);
    await answerWithApp(page, secret);
    await expectHeading(page, 'Your account');
    await finishFlow(page, 'passwordless-gate-code');

    const second = await suite.newPage();
    await askForCode(second.page, email);
    const landing = await followMailedLink(suite, second.context, email, SUBJECT);
    await landing.getByRole('button', { name: 'Sign in', exact: true }).click();
    await landing.getByRole('heading', { name: 'Second step' }).waitFor();
    suite.clock.advance(30);
    await answerWithApp(landing, secret);
    await expectHeading(landing, 'Your account');
    await finishFlow(landing, 'passwordless-gate-link');
    await second.context.close();
    await context.close();
  });

  async function answerWithApp(page: Page, secret: string): Promise<void> {
    await page.getByRole('radio', { name: /Authenticator app/ }).check();
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.getByRole('textbox', { name: /^Code from your authenticator app/ }).fill(suite.totp(secret));
    await page.getByRole('button', { name: 'Verify' }).click();
  }

  /** The enrollment itself is the MFA suite's subject; here it is set up through the API. */
  async function enrollTotpThroughApi(email: string): Promise<string> {
    const call = async (path: string, body: unknown, token?: string) => {
      const response = await fetch(`${suite.url}/identity${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify(body),
      });
      assert.ok(response.ok, `${path}: ${response.status}`);
      return ((await response.json()) as { data: Record<string, string> }).data;
    };
    const { access_token: token } = await call('/auth/login', { email, password: STRONG_PASSWORD });
    const enrolled = await call('/auth/mfa/totp/enroll', {}, token);
    suite.clock.advance(30);
    await call('/auth/mfa/totp/confirm', { factor_id: enrolled.factor_id, code: suite.totp(enrolled.secret!) }, token);
    return enrolled.secret!;
  }
});
