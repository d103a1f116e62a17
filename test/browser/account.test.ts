/**
 * Account flows of the example web app in headless Chromium: register and the verify link,
 * sign-in, the refresh cookie across reloads, profile, forgot/reset and change password,
 * sessions with revoke, logout and logout-all, one session shared by the tabs, account deletion.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BrowserSuite, browserSkipReason, checkAccessibility, expectHeading, finishFlow, navLink, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { followMailedLink, register, signedInPerson, signIn, verifyEmail } from './flows.js';

const skip = browserSkipReason();

describe('example web app: account', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('account');
  });
  after(async () => {
    await suite?.close();
  });

  test('register, follow the verify link from the inbox, sign in; the session survives a reload without localStorage', async () => {
    const email = uniqueEmail('ada');
    const { context, page } = await suite.newPage();
    await register(suite, page, email);
    await checkAccessibility(page, 'register');
    const verifyPage = await verifyEmail(suite, context, email);
    await finishFlow(verifyPage, 'verify-email');
    await verifyPage.close();

    await suite.open(page, '/login');
    await checkAccessibility(page, 'login');
    const loginAnswer = page.waitForResponse((response) => response.url().endsWith('/api/auth/login'));
    await signIn(suite, page, email);
    const loginBody = (await (await loginAnswer).json()) as { data: Record<string, unknown> };
    assert.equal(typeof loginBody.data.access_token, 'string');
    assert.equal('refresh_token' in loginBody.data, false, 'the page never sees the refresh token');
    await page.getByText(`${email}`).first().waitFor();
    await page.getByText('(verified)').waitFor();

    // The refresh token is an httpOnly cookie: a reload signs straight back in, and no script can see a token.
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    await expectHeading(page, 'Your account');
    assert.equal(await page.evaluate('localStorage.length + sessionStorage.length'), 0);
    // Scripts see only the session hint, which holds no token (it spares signed-out pages a refresh that must fail).
    assert.equal(await page.evaluate('document.cookie'), 'example_session=1');
    const cookies = await context.cookies();
    assert.deepEqual(cookies.map((cookie) => cookie.name).sort(), ['example_refresh', 'example_session']);
    const refreshCookie = cookies.find((cookie) => cookie.name === 'example_refresh')!;
    assert.equal(refreshCookie.httpOnly, true);
    assert.equal(refreshCookie.sameSite, 'Strict');
    assert.equal(refreshCookie.path, '/api/auth');
    await finishFlow(page, 'account');
    await context.close();
  });

  test('edit the profile', async () => {
    const { context, page } = await signedInPerson(suite, uniqueEmail('profile'));
    await page.getByLabel('Display name').fill('Countess of Lovelace');
    await page.getByRole('button', { name: 'Save profile' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    assert.equal(await page.getByLabel('Display name').inputValue(), 'Countess of Lovelace');
    await finishFlow(page, 'profile');
    await context.close();
  });

  test('forgot password: the reset link from the inbox sets a new password that signs in', async () => {
    const email = uniqueEmail('forgot');
    const { context, page } = await signedInPerson(suite, email);
    await navLink(page, 'Sessions').click();
    await page.getByRole('button', { name: 'Log out', exact: true }).click();
    await expectHeading(page, 'Sign in');
    await page.getByRole('link', { name: 'Forgot your password?' }).click();
    await page.getByLabel('E-mail').fill(email);
    await page.getByRole('button', { name: 'Send reset link' }).click();
    await page.getByRole('status').filter({ hasText: 'reset link' }).waitFor();
    await checkAccessibility(page, 'forgot-password');

    const resetPage = await followMailedLink(suite, context, email, /Reset your/);
    await expectHeading(resetPage, 'Choose a new password');
    await resetPage.getByLabel('New password').fill('a brand new passphrase');
    await resetPage.getByRole('button', { name: 'Set new password' }).click();
    await resetPage.getByRole('status').filter({ hasText: 'password is changed' }).waitFor();
    await finishFlow(resetPage, 'reset-password');

    await resetPage.getByRole('link', { name: 'Sign in with the new password' }).click();
    await signIn(suite, resetPage, email, 'a brand new passphrase');
    await context.close();
  });

  test('change password, then sign in with it', async () => {
    const email = uniqueEmail('change');
    const { context, page } = await signedInPerson(suite, email);
    await navLink(page, 'Password').click();
    await expectHeading(page, 'Change your password');
    await page.getByLabel('Current password').fill(STRONG_PASSWORD);
    await page.getByLabel('New password').fill('another long passphrase');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('status').filter({ hasText: 'Password changed' }).waitFor();
    await finishFlow(page, 'change-password');
    await context.close();

    const fresh = await suite.newPage();
    await signIn(suite, fresh.page, email, 'another long passphrase');
    await fresh.context.close();
  });

  test('sessions: list, revoke another device, log out everywhere', async () => {
    const email = uniqueEmail('sessions');
    const first = await signedInPerson(suite, email);
    const second = await suite.newPage();
    await signIn(suite, second.page, email);
    const third = await suite.newPage();
    await signIn(suite, third.page, email);

    await navLink(first.page, 'Sessions').click();
    await expectHeading(first.page, 'Sessions');
    await first.page.getByText('(this session)').waitFor();
    const revokeButtons = first.page.getByRole('button', { name: /^Revoke the session/ });
    assert.equal(await revokeButtons.count(), 2);
    await finishFlow(first.page, 'sessions');
    await revokeButtons.first().click();
    await first.page.getByRole('button', { name: /^Revoke the session/ }).nth(1).waitFor({ state: 'detached' });

    // One of the other two devices is now signed out: its reload lands on the sign-in page.
    const stillIn = [];
    for (const other of [second, third]) {
      await other.page.reload();
      await other.page.waitForSelector('body[data-ready="true"]');
      stillIn.push((await other.page.getByRole('heading', { level: 1 }).innerText()) === 'Your account');
    }
    assert.deepEqual(stillIn.sort(), [false, true]);

    await first.page.getByRole('button', { name: 'Log out everywhere' }).click();
    await expectHeading(first.page, 'Sign in');
    for (const other of [second, third]) {
      await other.page.reload();
      await other.page.waitForSelector('body[data-ready="true"]');
      await expectHeading(other.page, 'Sign in');
    }
    for (const person of [first, second, third]) await person.context.close();
  });

  test('tabs share one session: a new tab opens signed in without a refresh, and "Log out" in one tab signs the other out', async () => {
    const email = uniqueEmail('tabs');
    const { context, page } = await signedInPerson(suite, email);
    const refreshes: string[] = [];
    context.on('request', (request) => void (request.url().endsWith('/auth/token/refresh') && refreshes.push(request.url())));
    const second = await context.newPage();
    await suite.open(second, '/sessions');
    await expectHeading(second, 'Sessions');
    assert.deepEqual(refreshes, [], 'the new tab took the open tab\'s session (identity-router/client shares it over a BroadcastChannel)');
    assert.equal(await second.getByRole('button', { name: /^Revoke the session/ }).count(), 0, 'one session for both tabs');

    await second.getByRole('banner').getByRole('button', { name: 'Log out', exact: true }).click();
    await expectHeading(second, 'Sign in');
    // The first tab was on its account page: it leaves for the sign-in page by itself.
    await expectHeading(page, 'Sign in');
    assert.equal(await navLink(page, 'Sessions').count(), 0);
    await finishFlow(page, 'tabs-signed-out-together');
    await context.close();
  });

  test('delete the account', async () => {
    const email = uniqueEmail('delete');
    const { context, page } = await signedInPerson(suite, email);
    await page.getByRole('button', { name: 'Delete my account' }).click();
    await page.getByRole('status').filter({ hasText: 'Your account is deleted.' }).waitFor();
    await finishFlow(page, 'delete-account');
    await suite.open(page, '/login');
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Password').fill(STRONG_PASSWORD);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('alert').filter({ hasText: /./ }).first().waitFor();
    await context.close();
  });
});
