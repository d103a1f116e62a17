/**
 * Social sign-in in the example web app, in headless Chromium, against the demo OpenID provider
 * the example starts in-process (node-oidc-provider standing in for Google): sign-up through the
 * provider, the handoff verifier and the refresh cookie, linking and unlinking from the account
 * page, the last sign-in method kept, a stale sign-in asked to sign in again, a cancelled login.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, checkAccessibility, expectHeading, finishFlow, screenshot, uniqueEmail } from './browser-harness.js';
import { signedInPerson } from './flows.js';

const skip = browserSkipReason();

describe('example web app: social sign-in', { skip }, () => {
  let suite: BrowserSuite;
  // oidc-provider's "you MUST/SHOULD change it" lines go to console.warn and console.info.
  const providerNotices: string[] = [];
  const original = { warn: console.warn, info: console.info };
  before(async () => {
    for (const level of ['warn', 'info'] as const) {
      console[level] = (...args: unknown[]) => {
        if (args.some((arg) => String(arg).includes('oidc-provider'))) providerNotices.push(args.map(String).join(' '));
        else original[level](...args);
      };
    }
    suite = await BrowserSuite.start('social');
  });
  after(async () => {
    Object.assign(console, original);
    await suite?.close();
  });

  /** On the demo provider's page: waits for it, checks it, picks an account. */
  async function chooseDemoAccount(page: Page, name: string, check?: string): Promise<void> {
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    assert.ok(page.url().startsWith(`${suite.example.demoIssuer}/interaction/`), page.url());
    if (check) {
      await screenshot(page, check);
      await checkAccessibility(page, check);
    }
    await page.getByRole('button', { name: new RegExp(`^Continue as ${name}`) }).click();
  }

  const linkedSection = (page: Page) => page.getByRole('region', { name: 'Linked sign-in accounts' });

  test('sign up through the provider: signed in with a verified e-mail, no token in the page storage, the only method cannot be unlinked', async () => {
    const { context, page } = await suite.newPage();
    await suite.open(page, '/login');
    await checkAccessibility(page, 'login-with-social');
    await page.getByRole('button', { name: 'Sign in with Demo' }).click();
    // Only the handoff verifier waits in sessionStorage while the browser is at the provider.
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    const exchangeAnswer = page.waitForResponse((response) => response.url().endsWith('/api/auth/social/exchange'));
    await chooseDemoAccount(page, 'Ada Lovelace', 'demo-provider-login');

    const exchange = (await (await exchangeAnswer).json()) as { data: Record<string, unknown> };
    assert.equal(typeof exchange.data.access_token, 'string');
    assert.equal(exchange.data.is_new_user, true);
    assert.equal('refresh_token' in exchange.data, false, 'the refresh token went to the httpOnly cookie');
    await expectHeading(page, 'Your account');
    assert.equal(new URL(page.url()).pathname, '/account');
    await page.getByText('ada.lovelace@demo.example.org').first().waitFor();
    await page.getByText('(verified)').waitFor();
    assert.equal(await page.evaluate('sessionStorage.length + localStorage.length'), 0, 'the verifier is gone once used');

    const row = linkedSection(page).getByRole('row').filter({ hasText: 'ada.lovelace@demo.example.org' });
    await row.waitFor();
    await row.getByRole('button', { name: /^Unlink the Demo account/ }).click();
    await linkedSection(page).getByRole('alert').filter({ hasText: 'last_login_method_protected' }).waitFor();
    await row.waitFor();

    // The session came through the same cookie as a password login: a reload signs straight back in.
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    await expectHeading(page, 'Your account');
    await finishFlow(page, 'social-signup');
    await context.close();
  });

  test('link a provider account from the account page, then unlink it', async () => {
    const { context, page } = await signedInPerson(suite, uniqueEmail('linker'));
    await linkedSection(page).getByText('No provider account is linked yet.').waitFor();
    await page.getByRole('button', { name: 'Link a Demo account' }).click();
    const exchangeAnswer = page.waitForResponse((response) => response.url().endsWith('/api/auth/social/exchange'));
    await chooseDemoAccount(page, 'Grace Hopper');
    const exchange = (await (await exchangeAnswer).json()) as { data: { identity?: { provider: string; email: string } } };
    assert.equal(exchange.data.identity?.provider, 'demo');
    assert.equal(exchange.data.identity?.email, 'grace.hopper@demo.example.org');

    await expectHeading(page, 'Your account');
    await page.getByRole('status').filter({ hasText: 'Your account is linked.' }).waitFor();
    const row = linkedSection(page).getByRole('row').filter({ hasText: 'grace.hopper@demo.example.org' });
    await row.waitFor();
    assert.equal(await page.evaluate('sessionStorage.length'), 0);
    assert.doesNotMatch(await linkedSection(page).innerText(), /\bnull\b|undefined/, 'no empty value printed as text');
    await finishFlow(page, 'social-linked');

    await row.getByRole('button', { name: /^Unlink the Demo account/ }).click();
    await linkedSection(page).getByRole('status').filter({ hasText: 'The Demo account is unlinked.' }).waitFor();
    await linkedSection(page).getByText('No provider account is linked yet.').waitFor();
    await finishFlow(page, 'social-unlinked');
    await context.close();
  });

  test('a stale sign-in must sign in again before linking; a cancelled provider login shows its error code', async () => {
    const { context, page } = await signedInPerson(suite, uniqueEmail('stale'));
    // Past security.stepUp.maxAge (5 minutes) a user without a factor must sign in again (docs/social-login.md).
    suite.clock.advance(6 * 60);
    await page.getByRole('button', { name: 'Link a Demo account' }).click();
    const alert = linkedSection(page).getByRole('alert').filter({ hasText: 'reauthentication_required' });
    await alert.waitFor();
    await alert.getByRole('link', { name: 'Sign in again' }).waitFor();
    assert.equal(await page.evaluate('sessionStorage.length'), 0, 'a refused start leaves no verifier behind');
    await finishFlow(page, 'social-reauthentication');

    await suite.open(page, '/login');
    await page.getByRole('button', { name: 'Sign in with Demo' }).click();
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    await page.getByRole('button', { name: 'Cancel and go back' }).click();
    await expectHeading(page, 'Signing in');
    await page.getByRole('alert').filter({ hasText: 'provider_error' }).waitFor();
    assert.equal(new URL(page.url()).search, '', 'the error code leaves the address bar');
    await finishFlow(page, 'social-cancelled');
    await context.close();
  });

  test('the demo provider logs no warning or notice through all of the above', () => {
    assert.deepEqual(providerNotices, []);
  });
});
