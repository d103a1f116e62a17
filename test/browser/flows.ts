/** Steps many flows share, each done through the pages the way a person would. */
import type { BrowserContext, Page } from 'playwright-core';
import { type BrowserSuite, expectHeading, inboxMessage, openInbox, STRONG_PASSWORD } from './browser-harness.js';

export async function register(suite: BrowserSuite, page: Page, email: string, password = STRONG_PASSWORD): Promise<void> {
  await suite.open(page, '/register');
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByLabel('Display name').fill('Ada Lovelace');
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.getByRole('status').filter({ hasText: 'verification link' }).waitFor();
}

/** Opens the newest matching mail in the inbox and clicks its link (the inbox tab becomes the page that follows it). */
export async function followMailedLink(suite: BrowserSuite, context: BrowserContext, to: string, subject: RegExp): Promise<Page> {
  const inbox = await openInbox(context, suite);
  await inboxMessage(inbox, to, subject).getByRole('link').first().click();
  await inbox.waitForSelector('body[data-ready="true"]');
  return inbox;
}

export async function verifyEmail(suite: BrowserSuite, context: BrowserContext, email: string): Promise<Page> {
  const page = await followMailedLink(suite, context, email, /Confirm your email/);
  await expectHeading(page, 'Verify your e-mail address');
  await page.getByRole('button', { name: 'Verify my e-mail address' }).click();
  await page.getByRole('status').filter({ hasText: 'is verified' }).waitFor();
  return page;
}

/** Password step only; answers when the account page or the MFA gate shows. */
export async function signIn(suite: BrowserSuite, page: Page, email: string, password = STRONG_PASSWORD, { expectGate = false } = {}): Promise<void> {
  if (!page.url().includes('/login')) await suite.open(page, '/login');
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  if (expectGate) await page.getByRole('heading', { name: 'Second step' }).waitFor();
  else await expectHeading(page, 'Your account');
}

/** Register, verify through the inbox link, sign in: a fresh signed-in person in a fresh context. */
export async function signedInPerson(suite: BrowserSuite, email: string): Promise<{ context: BrowserContext; page: Page }> {
  const { context, page } = await suite.newPage();
  await register(suite, page, email);
  const verified = await verifyEmail(suite, context, email);
  await verified.close();
  await signIn(suite, page, email);
  return { context, page };
}
