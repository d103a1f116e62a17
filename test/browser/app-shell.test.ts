/**
 * The parts of the example around the flows: the start page, the development inbox (and its
 * absence in production), the API reference served from node_modules with no outside request,
 * and the browser mount that keeps the refresh token out of page scripts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startExampleServer } from '../../examples/basic/app.js';
import { BrowserSuite, browserSkipReason, checkAccessibility, expectHeading, finishFlow, navLink, openInbox, uniqueEmail } from './browser-harness.js';
import { register } from './flows.js';

const skip = browserSkipReason();

describe('example web app: shell, inbox, API docs', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('app-shell');
  });
  after(async () => {
    await suite?.close();
  });

  test('the start page links to sign-up, sign-in and the development inbox', async () => {
    const { context, page } = await suite.newPage();
    await suite.open(page, '/');
    await expectHeading(page, 'Identity Router Example');
    await navLink(page, 'Dev inbox').waitFor();
    await finishFlow(page, 'home');
    await suite.open(page, '/no-such-page');
    await expectHeading(page, 'Page not found');
    await context.close();
  });

  test('the development inbox shows mail with clickable links that point at pages of the app', async () => {
    const email = uniqueEmail('inbox');
    const { context, page } = await suite.newPage();
    await register(suite, page, email);
    const inbox = await openInbox(context, suite);
    await expectHeading(inbox, 'Development inbox');
    const link = inbox.locator('article.message').filter({ hasText: email }).getByRole('link');
    assert.match((await link.getAttribute('href'))!, new RegExp(`^${suite.url}/verify-email\\?token=`));
    await finishFlow(inbox, 'dev-inbox');
    await context.close();
  });

  test('the API reference renders docs/openapi.yaml from local files only', async () => {
    const { context, page } = await suite.newPage();
    const foreign: string[] = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(suite.url) && !request.url().startsWith('data:')) foreign.push(request.url());
    });
    await page.goto(`${suite.url}/api-docs`);
    await page.locator('.swagger-ui .info .title').waitFor();
    await page.locator('.opblock-summary-path', { hasText: '/auth/login' }).first().waitFor();
    assert.deepEqual(foreign, [], 'the viewer loads nothing from a CDN');
    await finishFlow(page, 'api-docs', { ownPage: false });
    await context.close();
  });

  test('in production there is no inbox: the page answers 404 and the menu has no link to it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-example-prod-'));
    const production = await startExampleServer({
      port: 0,
      databaseFile: join(dir, 'example.sqlite'),
      secret: 'production-test-secret-that-is-at-least-32-characters',
      development: false,
      config: { password: { bcryptCost: 4 }, auth: { rateLimits: false } },
    });
    try {
      assert.equal((await fetch(`${production.url}/dev/inbox`, { headers: { accept: 'text/html' } })).status, 404);
      assert.equal((await fetch(`${production.url}/dev/inbox.json`)).status, 404);
      const { context, page } = await suite.newPage();
      await page.goto(production.url);
      await page.waitForSelector('body[data-ready="true"]');
      await navLink(page, 'Register').waitFor();
      assert.equal(await navLink(page, 'Dev inbox').count(), 0);
      await checkAccessibility(page, 'home-production');
      await context.close();
    } finally {
      await production.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
