/**
 * identity-router/client and the example web app attacked from a real Chromium (docs/client.md,
 * CONTRACT 14). Each test names the threat it answers:
 * - what a script injected into the page can take in each storage mode (cookie mode: never the
 *   refresh token, whichever way it asks: storage, cookies, the tabs' channel, the answers);
 * - a page of another site framing the client: it neither takes the app's session nor injects
 *   its own, through the channel, the locks or window messages;
 * - login CSRF through the social return page: an attacker's `social_code` in a tab that started
 *   its own flow is refused, and the tab does not become the attacker's;
 * - `returnTo` steered elsewhere: refused, nothing kept, no navigation;
 * - the bearer of `fetch()` against tricky URLs and a redirect, and of `request()` against paths
 *   that climb out of the mount;
 * - the example app: framing refused on every answer, no page needing inline script, and no
 *   `return_to` that leaves the origin after sign-in.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Frame, Page } from 'playwright-core';
import { type BrowserSuite, browserSkipReason, expectHeading, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { ClientPages, inPage, type Json, startClient } from './client-page.js';
import { signedInPerson, signIn } from './flows.js';

const skip = browserSkipReason();

describe('identity-router/client and the example app under attack in Chromium', { skip }, () => {
  let pages: ClientPages;
  let suite: BrowserSuite;
  /** The app's origin in the browser (localhost) and another site on the same server (127.0.0.1). */
  let app: string;
  let otherSite: string;

  before(async () => {
    pages = await ClientPages.start('client-attacks');
    suite = pages.suite;
    app = suite.url;
    otherSite = suite.url.replace('//localhost:', '//127.0.0.1:');
  });
  after(async () => {
    await pages?.close();
  });

  /** A context that also serves, at /__client/framing, a page of another site framing the app's page. */
  const newContext = () => pages.newContext({ pages: { '/__client/framing': `<!doctype html><title>another site</title><iframe src="${app}/__client/page"></iframe>` } });
  const openTab = (context: BrowserContext, path?: string) => pages.openTab(context, path);
  const call = (method: string, path: string, body?: unknown, token?: string) => pages.call(method, path, body, token);
  const verifiedAccount = (name: string) => pages.verifiedAccount(name);

  /**
   * What a script injected into the page can gather without the client object: every web
   * storage entry, the readable cookies, and what the tabs' channel tells anyone on it (it asks
   * with a `hello`, then listens while `during` runs in the page).
   */
  async function injectedScriptTakes(page: Page, baseUrl: string, during: string): Promise<string> {
    await page.evaluate(`(async () => {
      const key = new URL(${JSON.stringify(baseUrl)}, location.href).href.replace(/\\/+$/, '');
      globalThis.overheard = [];
      globalThis.spy = new BroadcastChannel('identity-router:' + key);
      globalThis.spy.onmessage = (event) => globalThis.overheard.push(event.data);
      globalThis.spy.postMessage({ type: 'hello' });
      await new Promise((resolve) => setTimeout(resolve, 300));
    })()`);
    await inPage(page, during);
    await page.waitForTimeout(300);
    return JSON.stringify(
      await page.evaluate(`({
        local: Object.entries(localStorage),
        session: Object.entries(sessionStorage),
        cookies: document.cookie,
        channel: globalThis.overheard,
      })`),
    );
  }

  test('an injected script in cookie mode takes no refresh token: not from storage, cookies, the tabs\' channel or an answer; other modes are logged', async () => {
    for (const mode of ['none', 'memory', 'session', 'local']) {
      const email = await verifiedAccount(`inject-${mode}`);
      const context = await newContext();
      const page = await openTab(context);
      const baseUrl = mode === 'none' ? '/api' : '/identity';
      const refreshTokens: string[] = [];
      page.on('response', (response) => {
        if (/\/auth\/(login|token\/refresh)$/.test(response.url())) {
          void response.json().then((body: Json) => body?.data?.refresh_token && refreshTokens.push(body.data.refresh_token), () => undefined);
        }
      });
      await startClient(page, { baseUrl, storage: mode, ...(mode === 'none' ? { restore: false } : {}) });
      await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
      await inPage(page, `async (client) => client.social.start('demo', { redirect: false })`);
      // A rotation while the script listens: the new tokens go to the other tabs over the channel.
      suite.clock.advance(16 * 60);
      const taken = await injectedScriptTakes(page, baseUrl, `async (client) => client.request('GET', '/auth/me')`);
      const cookie = (await context.cookies()).find((entry) => entry.name === 'example_refresh')?.value;
      const secrets = mode === 'none' ? [cookie!, decodeURIComponent(cookie!)] : refreshTokens;
      assert.ok(secrets.length > 0 && secrets.every(Boolean), `${mode}: the test saw the refresh token`);
      const refreshTaken = secrets.some((secret) => taken.includes(secret));
      const accessTaken = taken.includes('"access":"eyJ');
      const verifierTaken = /identity-router:handoff:/.test(taken);
      console.log(`injected script, storage '${mode}': refresh token ${refreshTaken ? 'TAKEN' : 'not taken'}, access token ${accessTaken ? 'taken' : 'not taken'}, handoff verifier ${verifierTaken ? 'taken' : 'not taken'}`);
      assert.equal(await page.evaluate('localStorage.length'), 0, `${mode}: nothing in localStorage`);
      if (mode === 'none') {
        assert.equal(refreshTaken, false, `cookie mode: an injected script took the refresh token: ${taken}`);
        assert.equal(accessTaken, true, 'the access token is shared with the tabs (documented): the probe would see a refresh token the same way');
      }
      await context.close();
    }
  });
  /** The client page of the app framed by a page of another site (127.0.0.1 is another site than localhost). */
  async function framedByAnotherSite(context: BrowserContext): Promise<{ top: Page; frame: Frame }> {
    const top = await context.newPage();
    await top.goto(`${otherSite}/__client/framing`);
    const frame = top.frames().find((candidate) => candidate.url().startsWith(`${app}/__client/page`));
    assert.ok(frame, 'the framed client page');
    await frame.waitForSelector('body[data-ready="true"]');
    return { top, frame };
  }

  test('a page of another site framing the app\'s page injects nothing and ends nothing: not over a channel of the same name, nor by window messages', async () => {
    // (The frame's own client is not driven here: playwright runs Chromium without third-party storage
    // partitioning, so the frame's storage and Web Locks refuse it (SecurityError), where a browser would partition them.)
    const victim = await verifiedAccount('framed-victim');
    const context = await newContext();
    const tab = await openTab(context);
    await startClient(tab);
    const session = await inPage(tab, `async (client, arg) => (await client.login(arg)).session`, { email: victim, password: STRONG_PASSWORD });

    const { top } = await framedByAnotherSite(context);
    // The framing page knows the key: it speaks on a channel of that name, and posts to the frame and to itself.
    const forged = { type: 'set', held: { access: 'x.eyJzdWIiOiJldmlsIiwic2lkIjoiZXZpbCJ9.x', refresh: 'evil', expiresAt: Date.now() + 900_000, stamp: Date.now() + 10_000_000 } };
    const ending = { type: 'end', reason: 'logout', sessionId: session.sessionId };
    await top.evaluate(
      `((messages) => {
        const channel = new BroadcastChannel(${JSON.stringify(`identity-router:${app}/identity`)});
        for (const message of [{ type: 'hello' }, ...messages]) {
          channel.postMessage(message);
          window.frames[0].postMessage(message, '*');
          window.postMessage(message, '*');
        }
      })(${JSON.stringify([forged, ending])})`,
    );
    await tab.waitForTimeout(1200); // CONTRACT 14: a session applies in every instance within 1 s
    const now = await inPage(tab, 'async (client) => client.getSession()');
    assert.equal(now?.sessionId, session.sessionId, `the app's tab now holds ${JSON.stringify(now)}`);
    assert.deepEqual(await tab.evaluate('globalThis.ended'), [], 'the app\'s tab was signed out from the framing page');
    assert.equal((await inPage(tab, `async (client) => client.request('GET', '/auth/me')`)).email, victim);
    await context.close();
  });

  /** Runs the demo provider as `person` from a tab whose client starts a social sign-in; answers the return address. */
  async function socialReturnAddress(context: BrowserContext, person: RegExp): Promise<string> {
    const page = await openTab(context);
    await startClient(page);
    await inPage(page, `async (client, arg) => { client.social.start('demo', { returnTo: arg }); }`, `${app}/social-return`);
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    await page.getByRole('button', { name: person }).click();
    await page.waitForURL(/\/social-return\?social_code=/);
    return page.url();
  }

  test('login CSRF: an attacker\'s social_code opened in a tab that started its own flow is refused, and the tab stays the victim\'s', async () => {
    // The attacker signs in at the provider as themself and stops at the return page: the code is theirs, unspent.
    const attackerContext = await newContext();
    const planted = await socialReturnAddress(attackerContext, /^Continue as Alan Turing/);
    const code = new URL(planted).searchParams.get('social_code');

    const email = await verifiedAccount('csrf-victim');
    const context = await newContext();
    const tab = await openTab(context);
    await startClient(tab, { baseUrl: '/identity', storage: 'session' });
    const victim = await inPage(tab, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });
    // The victim started a social sign-in of their own (a verifier waits in the tab) when the planted link opens in it.
    await inPage(tab, `async (client) => client.social.start('demo', { redirect: false })`);
    const exchanges: Array<string | null> = [];
    tab.on('request', (request) => void (request.url().endsWith('/auth/social/exchange') && exchanges.push(request.postData())));
    await tab.goto(planted);
    await tab.waitForSelector('body[data-ready="true"]');
    await startClient(tab, { baseUrl: '/identity', storage: 'session' });
    const refused = await inPage(tab, 'async (client) => client.social.complete()');
    assert.deepEqual(refused.error && { code: refused.error.code, status: refused.error.status }, { code: 'invalid_token', status: 400 }, JSON.stringify(refused));
    assert.equal(exchanges.length, 1);
    assert.equal(new URL(tab.url()).searchParams.get('social_code'), null, 'the planted code left the address');
    const after = await inPage(tab, 'async (client) => client.getSession()');
    assert.equal(after?.userId, victim.userId, `the tab became ${JSON.stringify(after)}`);
    assert.equal((await inPage(tab, `async (client) => client.request('GET', '/auth/me')`)).email, email);
    // The refusal spent the code: the attacker cannot hand it to anyone else either.
    const replay = await call('POST', '/auth/social/exchange', { code, handoff_verifier: 'A'.repeat(43) });
    assert.equal(replay.status, 400);
    await attackerContext.close();
    await context.close();
  });

  test('social.start refuses a returnTo on another origin or outside the return URL: nothing kept, no navigation', async () => {
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    const before = page.url();
    const steered = [
      'http://evil.test/social-return',
      '//evil.test/social-return',
      `${app}@evil.test/social-return`,
      `${app.replace('http:', 'https:')}/social-return`,
      `${app}/social-return/../dev/inbox`,
      `${app}/social-return/%2e%2e/dev/inbox`,
      `${app}/social-return@evil.test`,
      `${app}/social-returnx`,
      `${app}/social-return#@evil.test`,
      `javascript:alert(1)//${app}/social-return`,
    ];
    for (const returnTo of steered) {
      const refused = await inPage(page, `async (client, arg) => client.social.start('demo', { returnTo: arg })`, returnTo);
      assert.deepEqual(refused?.error && { name: refused.error.name, code: refused.error.code, status: refused.error.status }, { name: 'IdentityClientError', code: 'validation_failed', status: 422 }, `${returnTo}: ${JSON.stringify(refused)}`);
      assert.equal(await page.evaluate('sessionStorage.length'), 0, `${returnTo}: a verifier was kept`);
      assert.equal(page.url(), before);
    }
    // sso.start goes through the same handoff (leaveWithHandoff) and the same return_to rule (FederatedFlows.start).
    await context.close();
  });
  test('fetch() keeps the bearer to the allowed origins against tricky URLs, and a redirect to another origin does not carry it', async () => {
    const email = await verifiedAccount('origins');
    const context = await newContext();
    const page = await openTab(context);
    const seen: Array<{ url: string; authorization: string | undefined }> = [];
    await context.route(
      (url) => url.hostname !== 'localhost' || url.pathname.startsWith('/echo') || url.pathname === '/hop',
      (route) => {
        const url = new URL(route.request().url());
        if (url.pathname === '/hop') return route.fulfill({ status: 302, headers: { location: 'http://elsewhere.test/echo/after-redirect', 'access-control-allow-origin': '*' } });
        return route.fulfill({ status: 200, contentType: 'application/json', headers: { 'access-control-allow-origin': '*' }, body: '{}' });
      },
    );
    page.on('request', (request) => void seen.push({ url: request.url(), authorization: request.headers().authorization }));
    await startClient(page, { baseUrl: '/identity', apiOrigins: ['http://api.partner.test'] });
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    const port = new URL(app).port;
    const tricky = [
      '//elsewhere.test/echo/protocol-relative',
      `https://localhost:${port}/echo/https`,
      `http://localhost:${Number(port) + 1}/echo/port`,
      `http://localhost.:${port}/echo/trailing-dot`,
      `http://127.0.0.1:${port}/echo/ip`,
      'http://api.partner.test.elsewhere.test/echo/suffix',
      'http://xn--pi-6kc.partner.test/echo/homograph', // "аpi" with a Cyrillic а
      'http://api.partner.test@elsewhere.test/echo/userinfo',
      `http://localhost:${port}@elsewhere.test/echo/userinfo-app`,
      '\\\\elsewhere.test/echo/backslashes',
      '/\\elsewhere.test/echo/slash-backslash',
      'http:elsewhere.test/echo/no-slashes',
    ];
    for (const url of tricky) await inPage(page, `async (client, arg) => client.fetch(arg)`, url);
    const leaked = seen.filter((request) => request.authorization && new URL(request.url).origin !== app && new URL(request.url).origin !== 'http://api.partner.test');
    assert.deepEqual(leaked, [], 'the bearer went to an origin that is not allowed');
    // The lookalikes of allowed origins that did go out, went without it.
    assert.ok(seen.some((request) => request.url.startsWith('http://elsewhere.test/echo/protocol-relative') && !request.authorization));
    assert.ok(seen.some((request) => request.url.startsWith(`http://127.0.0.1:${port}/echo/ip`) && !request.authorization));
    // The page's own origin answers a redirect to another: the bearer stays behind.
    // (Chromium drops the header at the redirect; the preflight then fails, so the call answers network_error: either way, no bearer.)
    await inPage(page, `async (client) => client.fetch('/hop')`);
    const hop = seen.filter((request) => request.url.endsWith('/hop') || request.url.endsWith('/after-redirect'));
    assert.deepEqual(
      hop.map((request) => [new URL(request.url).pathname, request.authorization?.slice(0, 10)]),
      [['/hop', 'Bearer eyJ'], ['/echo/after-redirect', undefined]],
    );
    await context.close();
  });

  test('request() sends the bearer to routes under the mount only: a path that climbs out of it (dot segments, encoded or not) sends nothing', async () => {
    const email = await verifiedAccount('mount');
    const context = await newContext();
    const page = await openTab(context);
    const sent: Array<{ url: string; authorization: string | undefined }> = [];
    await context.route('**/echo/**', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: '{"data":{}}' }));
    page.on('request', (request) => void sent.push({ url: request.url(), authorization: request.headers().authorization }));
    await startClient(page);
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    const climbing = ['/../echo/a', '/%2e%2e/echo/b', '/.%2E/echo/c', '/auth/../../echo/d', '/..\\echo/e', '/%2E%2E\\echo/f', '/..', '/auth/%2e%2e/%2e%2e/echo/g'];
    for (const path of climbing) {
      sent.length = 0;
      const answer = await inPage(page, `async (client, arg) => client.request('GET', arg)`, path);
      assert.equal(answer?.error?.name, 'TypeError', `${path}: ${JSON.stringify(answer)}`);
      assert.deepEqual(sent, [], `${path} sent ${JSON.stringify(sent)}`);
    }
    // What stays under the mount is sent there, and only there.
    const mount = `${app}/identity/`;
    for (const path of ['/auth/me', '/auth/me?x=1#y', '/auth/%2F%2Fevil.test/x', '//evil.test/x', '/auth/me/../me', '/@evil.test']) {
      sent.length = 0;
      await inPage(page, `async (client, arg) => client.request('GET', arg)`, path);
      assert.equal(sent.length, 1, `${path}: ${JSON.stringify(sent)}`);
      assert.ok(sent[0]!.url.startsWith(mount), `${path} went to ${sent[0]!.url}`);
    }
    await context.close();
  });
  // The example web app itself, its own shell and CSP (no test routes in these contexts).

  const APP_PAGES = ['/', '/login', '/register', '/forgot-password', '/reset-password', '/verify-email', '/accept-invite', '/passwordless/link', '/social-return', '/sso-return', '/api-docs'];
  const SIGNED_IN_PAGES = ['/account', '/password', '/mfa', '/passkeys', '/sessions', '/orgs', '/org/members', '/org/roles', '/org/api-keys', '/org/audit', '/org/webhooks', '/org/sso'];

  test('the example app: every answer forbids framing, and a page of another site that frames it gets nothing drawn', async () => {
    for (const path of [...APP_PAGES, ...SIGNED_IN_PAGES, '/app.js', '/client/identity-client.js', '/identity/auth/me', '/api/auth/token/refresh', '/no/such/page', '/dev/inbox', '/pages']) {
      const response = await fetch(app + path, { method: path.endsWith('/refresh') ? 'POST' : 'GET', headers: { accept: 'text/html,*/*' }, redirect: 'manual' });
      const policy = response.headers.get('content-security-policy') ?? '';
      // (serve-static's own redirect of a directory, `/pages` to `/pages/`, sets `default-src 'none'`: a page with nothing in it.)
      if (path !== '/pages') assert.match(policy, /frame-ancestors 'none'/, `${path}: ${policy}`);
      assert.doesNotMatch(/script-src[^;]*|default-src[^;]*/.exec(policy)?.[0] ?? '', /unsafe-inline|unsafe-eval/, `${path}: ${policy}`);
      const location = response.headers.get('location');
      if (location) assert.equal(new URL(location, app).origin, app, `${path} redirects to ${location}`);
    }
    const context = await suite.browser.newContext();
    await context.route(`${otherSite}/framing-the-app`, (route) =>
      route.fulfill({ status: 200, contentType: 'text/html', body: `<!doctype html><title>another site</title><iframe src="${app}/login"></iframe>` }),
    );
    const top = await context.newPage();
    await top.goto(`${otherSite}/framing-the-app`);
    await top.waitForLoadState('load');
    await top.waitForTimeout(300);
    const frame = top.frames().find((candidate) => candidate !== top.mainFrame());
    const drawn = await frame?.evaluate('document.body?.dataset.ready ?? null').catch(() => null);
    assert.equal(drawn ?? null, null, 'the app drew its page inside another site\'s frame');
    assert.match(frame?.url() ?? '', /^chrome-error:/, 'Chromium refused the frame (its error page stands in it)');
    await context.close();
  });

  test('the example app needs no inline script nor inline style on any page: none runs under a policy without \'unsafe-inline\'', async () => {
    const email = uniqueEmail('csp');
    const { context, page } = await signedInPerson(suite, email);
    const strict = "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";
    await context.route('**/*', async (route) => {
      const response = await route.fetch();
      const headers = response.headers();
      if (headers['content-security-policy']) headers['content-security-policy'] = strict;
      await route.fulfill({ response, headers });
    });
    await context.addInitScript(`globalThis.violations = []; document.addEventListener('securitypolicyviolation', (event) => globalThis.violations.push(event.violatedDirective + ' ' + (event.blockedURI || 'inline') + ' ' + event.sourceFile + ':' + event.lineNumber));`);
    const found: string[] = [];
    for (const path of [...SIGNED_IN_PAGES, ...APP_PAGES.filter((path) => path !== '/login' && path !== '/register')]) {
      await page.goto(app + path);
      await page.waitForSelector(path === '/api-docs' ? '.swagger-ui' : 'body[data-ready="true"]');
      await page.waitForTimeout(path === '/api-docs' ? 1000 : 100);
      for (const violation of (await page.evaluate('globalThis.violations')) as string[]) found.push(`${path}: ${violation}`);
    }
    console.log(`pages under a policy without 'unsafe-inline': ${found.length} violation(s)${found.length ? `\n${found.join('\n')}` : ''}`);
    assert.deepEqual(found.filter((violation) => !violation.startsWith('/api-docs')), [], 'a page of the app needs an inline script or style');
    await context.close();
  });

  test('the example app\'s return_to never takes a fresh session off its origin', async () => {
    const email = await verifiedAccount('return-to');
    const steered = ['//evil.test/x', '/\\evil.test/x', '/\t/evil.test/x', '\\/evil.test/x', 'https://evil.test/x', 'javascript:alert(document.domain)', '/%2F%2Fevil.test', '/%5Cevil.test', ' //evil.test/x'];
    for (const returnTo of steered) {
      const { context, page } = await suite.newPage();
      const offOrigin: string[] = [];
      page.on('request', (request) => void (!request.url().startsWith(app) && !request.url().startsWith('data:') && offOrigin.push(request.url())));
      await suite.open(page, `/login?return_to=${encodeURIComponent(returnTo)}`);
      await page.getByLabel('E-mail').fill(email);
      await page.getByLabel('Password').fill(STRONG_PASSWORD);
      await page.getByRole('button', { name: 'Sign in', exact: true }).click();
      // Signed in, the page goes to return_to, or says why it cannot (the page's CSP refuses waitForFunction's eval).
      for (let waited = 0; waited < 5000 && new URL(page.url()).pathname === '/login' && (await page.locator('[role=alert].error').filter({ hasText: /\S/ }).count()) === 0; waited += 100) {
        await page.waitForTimeout(100);
      }
      assert.equal(new URL(page.url()).origin, app, `${JSON.stringify(returnTo)} led to ${page.url()}`);
      assert.deepEqual(offOrigin, [], `${JSON.stringify(returnTo)}`);
      console.log(`return_to ${JSON.stringify(returnTo)}: ${new URL(page.url()).pathname}${(await page.locator('[role=alert].error').allTextContents()).join(' ').trim() ? ` (alert: ${(await page.locator('[role=alert].error').allTextContents()).join(' ').trim()})` : ''}`);
      await context.close();
    }
  });
  /**
   * Cookie tossing: a page of the same site (a sibling subdomain: `Domain=<parent>`) or any script that
   * may set a cookie writes `example_refresh` with the attacker's refresh token on a longer path, which
   * the browser sends first. The example's backend-for-frontend (examples/basic/refresh-token-cookie.ts,
   * `readCookie`) takes the first cookie of that name, so the victim's page comes back signed in as the
   * attacker (login CSRF). A TODO: the fix belongs to the example (refuse a Cookie header with two
   * `example_refresh`, or a `__Host-` name), outside this file's reach; it fails until then.
   */
  test('the example app: a refresh cookie tossed beside the victim\'s (longer path) does not sign the page in as someone else', async () => {
    const attackerEmail = await verifiedAccount('tossing-attacker');
    const attacker = await suite.newPage();
    await signIn(suite, attacker.page, attackerEmail);
    const attackerCookie = (await attacker.context.cookies()).find((cookie) => cookie.name === 'example_refresh');
    assert.ok(attackerCookie);
    await attacker.context.close();

    const victimEmail = await verifiedAccount('tossing-victim');
    const { context, page } = await suite.newPage();
    await signIn(suite, page, victimEmail);
    await context.addCookies([{ name: 'example_refresh', value: attackerCookie.value, domain: new URL(app).hostname, path: '/api/auth/token', sameSite: 'Lax' }]);
    await suite.open(page, '/account');
    // Two cookies of the name: the backend takes neither, so the page is signed out, never the attacker's.
    await expectHeading(page, 'Sign in');
    assert.equal(await page.locator('.who').count(), 0, 'no one is signed in');
    await context.close();
  });
});
