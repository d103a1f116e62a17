/**
 * identity-router/client in headless Chromium (docs/client.md), against the example server: the
 * client is bundled from src/client with esbuild and served, with a blank page that loads it, on
 * the example's own origin. Each test names the rule it guards:
 * - three tabs whose access tokens expire together send one refresh and keep the session; with
 *   no Web Lock the same tabs replay the token and reuse detection ends the session;
 * - the MFA gate, and a step-up retry of a write (a wrong code asks again, null cancels);
 * - passkey registration and login through a virtual authenticator;
 * - the social round trip through the example's demo provider, bound to the tab's verifier;
 * - the cookie mode, where no refresh token is ever readable by page script, and its recovery
 *   after a reload;
 * - switchOrg, logoutAll, session_ended, and the smaller members of docs/client.md.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { BrowserContext, Request } from 'playwright-core';
import speakeasy from 'speakeasy';
import { addVirtualAuthenticator } from '../helpers/virtual-authenticator.js';
import { type BrowserSuite, browserSkipReason, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';
import { ClientPages, inPage, type Json, startClient } from './client-page.js';

const skip = browserSkipReason();

describe('identity-router/client in Chromium', { skip }, () => {
  let pages: ClientPages;
  let suite: BrowserSuite;

  before(async () => {
    pages = await ClientPages.start('client');
    suite = pages.suite;
  });
  after(async () => {
    await pages?.close();
  });

  const newContext = (init?: string) => pages.newContext(init ? { init } : {});
  const openTab = (context: BrowserContext, path?: string) => pages.openTab(context, path);
  const call = (method: string, path: string, body?: unknown, token?: string) => pages.call(method, path, body, token);
  const verifiedAccount = (name: string) => pages.verifiedAccount(name);

  const totp = (secret: string) => speakeasy.totp({ secret, encoding: 'base32', time: Math.floor(suite.clock.now() / 1000) });

  /**
   * The slowest network for refreshes: each refresh request is held until `together` have arrived
   * (or 1.5 s pass), so tabs that would send the same token do overlap.
   */
  async function holdRefreshes(context: BrowserContext, path: string, together = 3): Promise<{ sent: Request[] }> {
    const sent: Request[] = [];
    const waiting: Array<() => void> = [];
    await context.route(`**${path}`, async (route) => {
      sent.push(route.request());
      if (sent.length >= together) for (const release of waiting.splice(0)) release();
      else await new Promise<void>((resolve) => waiting.push(resolve) && setTimeout(resolve, 1500));
      await route.continue();
    });
    return { sent };
  }

  /**
   * A channel whose messages arrive 300 ms late once `globalThis.lateChannel` is set: the tab that
   * takes the refresh lock next then holds it before the new tokens reach it.
   */
  const LATE_CHANNEL = `const post = BroadcastChannel.prototype.postMessage;
BroadcastChannel.prototype.postMessage = function (message) {
  if (globalThis.lateChannel) setTimeout(() => post.call(this, message), 300);
  else post.call(this, message);
};`;

  async function threeTabsRefreshTogether(init?: string): Promise<{ refreshes: number; answers: Json[]; after: Json[]; ended: unknown[]; sessions: number }> {
    const email = await verifiedAccount('race');
    const context = await newContext(init);
    const refreshes = await holdRefreshes(context, '/identity/auth/token/refresh');
    const tabs = [await openTab(context), await openTab(context), await openTab(context)];
    await startClient(tabs[0]!);
    const signedIn = await inPage(tabs[0]!, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });
    await startClient(tabs[1]!);
    await startClient(tabs[2]!);
    for (const tab of tabs.slice(1)) assert.equal((await inPage(tab, 'async (client) => client.getSession()')).sessionId, signedIn.sessionId, 'an opened tab takes the open session');
    // Memory mode: no token in any web storage.
    assert.equal(await tabs[0]!.evaluate('sessionStorage.length + localStorage.length'), 0);
    for (const tab of tabs) await tab.evaluate('globalThis.lateChannel = true');

    suite.clock.advance(16 * 60); // every tab's access token has expired on the router's clock
    const answers = await Promise.all(tabs.map((tab) => inPage(tab, `async (client) => client.request('GET', '/auth/me')`)));
    const afterwards = await Promise.all(tabs.map((tab) => inPage(tab, `async (client) => client.request('GET', '/auth/sessions')`)));
    const ended = await Promise.all(tabs.map((tab) => tab.evaluate('globalThis.ended')));
    const login = await call('POST', '/auth/login', { email, password: STRONG_PASSWORD });
    const sessions = (await call('GET', '/auth/sessions', undefined, login.body.data.access_token)).body.data.sessions.length - 1;
    await context.close();
    return { refreshes: refreshes.sent.length, answers, after: afterwards, ended, sessions };
  }

  test('three tabs whose access tokens expire together send one refresh, and the session survives', async () => {
    const result = await threeTabsRefreshTogether();
    console.log(`tab race with the Web Lock: ${result.refreshes} refresh request(s), session ${result.sessions === 1 ? 'alive' : 'ended'}`);
    assert.equal(result.refreshes, 1, 'one POST /auth/token/refresh for three tabs');
    for (const answer of result.answers) assert.equal(typeof answer.email, 'string', JSON.stringify(answer));
    for (const answer of result.after) assert.equal(answer.sessions?.length, 1, JSON.stringify(answer));
    assert.deepEqual(result.ended, [[], [], []]);
    assert.equal(result.sessions, 1, 'the session is still active on the router');
  });

  test('the same holds when the new tokens reach the other tabs after the lock does', async () => {
    const result = await threeTabsRefreshTogether(LATE_CHANNEL);
    console.log(`tab race with the Web Lock and a late channel: ${result.refreshes} refresh request(s), session ${result.sessions === 1 ? 'alive' : 'ended'}`);
    assert.equal(result.refreshes, 1, 'the next lock holder waited for the newer generation instead of replaying its token');
    for (const answer of result.answers) assert.equal(typeof answer.email, 'string', JSON.stringify(answer));
    assert.deepEqual(result.ended, [[], [], []]);
    assert.equal(result.sessions, 1);
  });

  /** A browser without navigator.locks (a page outside a secure context). */
  const NO_WEB_LOCKS = `Object.defineProperty(Navigator.prototype, 'locks', { get: () => undefined });`;

  test('without the Web Lock the same tabs replay the refresh token and reuse detection ends the session', async () => {
    // The rule the previous test guards, removed: a browser without navigator.locks (tab rule only).
    const result = await threeTabsRefreshTogether(NO_WEB_LOCKS);
    console.log(`tab race without the Web Lock: ${result.refreshes} refresh request(s), session ${result.sessions === 1 ? 'alive' : 'ended'}`);
    assert.ok(result.refreshes >= 2, `${result.refreshes} refresh requests`);
    assert.equal(result.sessions, 0, 'reuse detection revoked the session');
    assert.ok(
      result.ended.every((reasons) => JSON.stringify(reasons) === '["revoked"]'),
      `every tab heard the end once: ${JSON.stringify(result.ended)}`,
    );
  });

  test('the MFA gate answers {mfa}, verify opens the session; withStepUp asks for a code, asks again after a wrong one, and retries the write', async () => {
    const email = await verifiedAccount('gate');
    const login = await call('POST', '/auth/login', { email, password: STRONG_PASSWORD });
    const token = login.body.data.access_token as string;
    const enrolled = (await call('POST', '/auth/mfa/totp/enroll', {}, token)).body.data;
    assert.equal((await call('POST', '/auth/mfa/totp/confirm', { factor_id: enrolled.factor_id, code: totp(enrolled.secret) }, token)).status, 200);
    suite.clock.advance(60);

    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    const gate = await inPage(page, `async (client, arg) => { const result = await client.login(arg); globalThis.gate = result.mfa; return { session: result.session ?? null, factors: result.mfa?.factors } }`, {
      email,
      password: STRONG_PASSWORD,
    });
    assert.equal(gate.session, null, 'no session before the second factor');
    assert.deepEqual(
      gate.factors.map((factor: Json) => factor.type),
      ['totp'],
    );
    const wrong = await inPage(page, `async (client, arg) => globalThis.gate.verify(arg)`, { factor_id: enrolled.factor_id, code: '000000' });
    assert.deepEqual(wrong.error, { name: 'IdentityClientError', code: 'invalid_code', status: 422 });
    const verified = await inPage(page, `async (client, arg) => (await globalThis.gate.verify(arg)).session`, { factor_id: enrolled.factor_id, code: totp(enrolled.secret) });
    assert.equal(verified.claims.mfa, true);
    assert.equal(typeof verified.expiresAt, 'number');

    // Past security.stepUp.maxAge the write needs a step-up.
    suite.clock.advance(6 * 60);
    const direct = await inPage(page, `async (client) => client.request('POST', '/auth/mfa/recovery-codes/regenerate')`);
    assert.equal(direct.error.code, 'step_up_required');
    const cancelled = await inPage(page, `async (client) => client.withStepUp(() => client.request('POST', '/auth/mfa/recovery-codes/regenerate'), () => null)`);
    assert.deepEqual(cancelled.error, { name: 'IdentityClientError', code: 'step_up_required', status: 401 });

    const good = totp(enrolled.secret);
    const stepped = await inPage(
      page,
      `async (client, arg) => {
        const asks = [];
        const codes = await client.withStepUp(
          () => client.request('POST', '/auth/mfa/recovery-codes/regenerate'),
          (prompt) => {
            asks.push({ factors: prompt.factors.map((factor) => factor.type), error: prompt.error?.code ?? null });
            return { factor_id: prompt.factors[0].id, code: asks.length === 1 ? '000000' : arg };
          },
        );
        return { asks, codes };
      }`,
      good,
    );
    assert.deepEqual(stepped.asks, [
      { factors: ['totp'], error: null },
      { factors: ['totp'], error: 'invalid_code' },
    ]);
    assert.equal(stepped.codes.recovery_codes?.length, 10, JSON.stringify(stepped.codes));
    await context.close();
  });

  /** A browser without PublicKeyCredential.parse*OptionsFromJSON and toJSON(): the client's base64url by hand. */
  const WITHOUT_JSON_HELPERS = `delete PublicKeyCredential.parseCreationOptionsFromJSON; delete PublicKeyCredential.parseRequestOptionsFromJSON; delete PublicKeyCredential.prototype.toJSON;`;

  for (const variant of ['with the browser JSON helpers', 'without them (base64url by hand)']) {
    test(`passkeys ${variant}: register() runs the creation ceremony, login() signs in with the passkey alone`, async () => {
      const email = await verifiedAccount('passkey');
      const context = await newContext(variant.startsWith('without') ? WITHOUT_JSON_HELPERS : undefined);
      if (variant.startsWith('without')) {
        const probe = await openTab(context);
        assert.equal(await probe.evaluate('typeof PublicKeyCredential.parseCreationOptionsFromJSON + typeof PublicKeyCredential.prototype.toJSON'), 'undefinedundefined');
        await probe.close();
      }
      const page = await openTab(context);
      const authenticator = await addVirtualAuthenticator(context, page);
      await startClient(page);
      await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
      const registered = await inPage(page, `async (client) => client.passkeys.register({ label: 'Laptop' })`);
      assert.equal(registered.status, 'confirmed', JSON.stringify(registered));
      assert.equal(registered.recovery_codes?.length, 10);
      assert.equal(await authenticator.credentialCount(), 1);

      await inPage(page, `async (client) => client.logout()`);
      assert.deepEqual(await page.evaluate('globalThis.ended'), ['logout']);
      assert.equal(await inPage(page, 'async (client) => client.getSession()'), null);
      const session = await inPage(page, `async (client) => (await client.passkeys.login()).session`);
      assert.deepEqual(session.claims.amr, ['hwk', 'user']);
      const me = await inPage(page, `async (client) => client.request('GET', '/auth/me')`);
      assert.equal(me.email, email);

      await authenticator.setUserVerified(false);
      const refused = await inPage(page, `async (client) => client.passkeys.login()`);
      assert.deepEqual(refused.error, { name: 'IdentityClientError', code: 'passkey_failed', status: 0 });
      await context.close();
    });
  }

  test('social: start() keeps the verifier in the tab, complete() exchanges the code once and cleans the address; another tab cannot', async () => {
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    await inPage(page, `async (client, arg) => { client.social.start('demo', { returnTo: arg }); }`, `${suite.url}/social-return`);
    await page.getByRole('heading', { level: 1, name: 'Demo identity provider' }).waitFor();
    await page.getByRole('button', { name: /^Continue as Grace Hopper/ }).click();
    await page.waitForURL(/\/social-return\?social_code=/);
    await page.waitForSelector('body[data-ready="true"]');
    const landed = page.url();
    assert.equal(await page.evaluate('sessionStorage.length'), 1, 'the handoff verifier waited in the tab');

    // A tab that did not start the flow holds no verifier: it sends nothing.
    const stranger = await openTab(await newContext(), new URL(landed).pathname + new URL(landed).search);
    const exchanges: string[] = [];
    stranger.on('request', (request) => void (request.url().includes('/auth/social/exchange') && exchanges.push(request.url())));
    await startClient(stranger);
    const refused = await inPage(stranger, `async (client) => client.social.complete()`);
    assert.deepEqual(refused?.error, { name: 'IdentityClientError', code: 'handoff_missing', status: 0 }, `${landed} ${stranger.url()} ${JSON.stringify(refused)}`);
    assert.deepEqual(exchanges, []);

    await startClient(page);
    const result = await inPage(page, `async (client) => client.social.complete()`);
    assert.equal(result.isNewUser, true, JSON.stringify(result));
    assert.equal(typeof result.session.userId, 'string');
    assert.equal(new URL(page.url()).search, '', 'social_code is gone from the address');
    assert.equal(await page.evaluate('sessionStorage.length'), 0, 'the verifier is used once');
    assert.equal(await inPage(page, `async (client) => client.social.complete()`), null, 'nothing left to complete');
    const me = await inPage(page, `async (client) => client.request('GET', '/auth/me')`);
    assert.equal(me.email_verified, true);
    await context.close();
  });

  test("'session' storage survives a reload, and a token under 30 s from expiry is refreshed before use", async () => {
    const email = await verifiedAccount('reload');
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page, { baseUrl: '/identity', storage: 'session' });
    const first = await inPage(page, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    await startClient(page, { baseUrl: '/identity', storage: 'session' });
    assert.equal((await inPage(page, 'async (client) => client.getSession()')).sessionId, first.sessionId, 'the session came back from sessionStorage');

    // The stored expiry moved to 10 s from now: the next token is a fresh one, refreshed first.
    const refreshes: string[] = [];
    page.on('request', (request) => void (request.url().endsWith('/auth/token/refresh') && refreshes.push(request.url())));
    await page.evaluate(`(() => {
      const key = Object.keys(sessionStorage).find((name) => name.startsWith('identity-router:http'));
      const held = JSON.parse(sessionStorage.getItem(key));
      held.expiresAt = Date.now() + 10000;
      sessionStorage.setItem(key, JSON.stringify(held));
    })()`);
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    await startClient(page, { baseUrl: '/identity', storage: 'session' });
    const before = await inPage(page, 'async (client) => client.getSession().expiresAt - Date.now()');
    assert.ok(before < 30_000);
    await inPage(page, 'async (client) => client.getAccessToken()');
    assert.equal(refreshes.length, 1, 'one refresh ahead of expiry');
    assert.ok((await inPage(page, 'async (client) => client.getSession().expiresAt - Date.now()')) > 60_000);
    await context.close();
  });

  test('fetch() sends the access token to the page, router and listed origins only, and never replaces a caller\'s own Authorization', async () => {
    const email = await verifiedAccount('fetch');
    const context = await newContext();
    const page = await openTab(context);
    const seen: Array<{ url: string; authorization: string | undefined }> = [];
    await context.route(
      (url) => url.hostname === 'elsewhere.test' || url.hostname === 'api.partner.test',
      (route) => route.fulfill({ status: 200, contentType: 'application/json', headers: { 'access-control-allow-origin': '*' }, body: '{}' }),
    );
    page.on('request', (request) => void seen.push({ url: request.url(), authorization: request.headers().authorization }));
    await startClient(page, { baseUrl: '/identity', apiOrigins: ['http://api.partner.test'] });
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    const statuses = await inPage(
      page,
      `async (client) => [
        (await client.fetch('/invoices')).status,
        (await client.fetch('http://api.partner.test/data')).status,
        (await client.fetch('http://elsewhere.test/data')).status,
        (await client.fetch('/invoices', { headers: { authorization: 'Bearer own' } })).status,
      ]`,
    );
    assert.deepEqual(statuses, [403, 200, 200, 401]);
    const authorization = (url: string) => seen.filter((request) => request.url === url).map((request) => request.authorization?.slice(0, 12));
    assert.deepEqual(authorization(`${suite.url}/invoices`), ['Bearer eyJhb', 'Bearer own']);
    assert.deepEqual(authorization('http://api.partner.test/data'), ['Bearer eyJhb']);
    assert.deepEqual(authorization('http://elsewhere.test/data'), [undefined], 'no token to an origin not listed');
    await context.close();
  });

  test("cookie mode ('none'): the refresh token stays in the httpOnly cookie, never in the page, and refresh still works", async () => {
    const email = await verifiedAccount('cookie');
    const context = await newContext();
    const page = await openTab(context);
    const bodies: string[] = [];
    page.on('response', (response) => {
      if (response.url().includes('/api/auth/')) void response.text().then((text) => bodies.push(text), () => undefined);
    });
    const refreshBodies: Array<string | null> = [];
    page.on('request', (request) => void (request.url().endsWith('/api/auth/token/refresh') && refreshBodies.push(request.postData())));
    // Signed out, the host lets the client ask nothing (restore: false): the one refresh below is the expired token's.
    await startClient(page, { baseUrl: '/api', storage: 'none', restore: false });
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    suite.clock.advance(16 * 60);
    const me = await inPage(page, `async (client) => client.request('GET', '/auth/me')`);
    assert.equal(me.email, email, JSON.stringify(me));
    assert.deepEqual(refreshBodies, ['{}'], 'the refresh sends no token');

    const cookies = await context.cookies();
    assert.ok(cookies.some((cookie) => cookie.name === 'example_refresh' && cookie.httpOnly), 'the refresh token is in an httpOnly cookie');
    // The example's one script-readable cookie is its signed-in hint, which holds no token.
    const readable = String(await page.evaluate('document.cookie'));
    assert.ok(!readable.includes('example_refresh'), `page script reads the refresh cookie: ${readable}`);
    assert.ok(readable === '' || readable === 'example_session=1', `page script reads only the session hint: ${readable}`);
    const refreshCookie = cookies.find((cookie) => cookie.name === 'example_refresh')!;
    assert.ok(!readable.includes(refreshCookie.value), 'the refresh token is not readable by page script');
    assert.equal(await page.evaluate('sessionStorage.length + localStorage.length'), 0, 'no web storage holds a token');
    assert.ok(bodies.length >= 2);
    for (const body of bodies) assert.ok(!body.includes('refresh_token'), `an answer the page saw carries a refresh token: ${body}`);

    await inPage(page, `async (client) => client.logout()`);
    assert.equal((await context.cookies()).some((cookie) => cookie.name === 'example_refresh'), false, 'logout clears the cookie');
    await context.close();
  });

  test("cookie mode after a reload: the client recovers the session through the cookie (ready waits 500 ms at most), two tabs opened together send one refresh, restore: false sends none", async () => {
    const email = await verifiedAccount('restore');
    const context = await newContext();
    const refreshBodies: Array<string | null> = [];
    const answers: string[] = [];
    context.on('request', (request) => void (request.url().endsWith('/api/auth/token/refresh') && refreshBodies.push(request.postData())));
    context.on('response', (response) => {
      if (response.url().includes('/api/auth/')) void response.text().then((text) => answers.push(text), () => undefined);
    });
    const cookieMode = { baseUrl: '/api', storage: 'none' };
    const first = await openTab(context);
    await startClient(first, { ...cookieMode, restore: false });
    const signedIn = await inPage(first, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });

    await first.reload();
    await first.waitForSelector('body[data-ready="true"]');
    await startClient(first, cookieMode);
    // getAccessToken() waits for a recovery still on the network (ready waits 500 ms at most).
    const restored = await inPage(first, 'async (client) => (await client.getAccessToken(), client.getSession())');
    assert.equal(restored?.sessionId, signedIn.sessionId, 'the reloaded tab is signed in to the same session');
    assert.equal((await inPage(first, `async (client) => client.request('GET', '/auth/me')`)).email, email);
    assert.deepEqual(refreshBodies, ['{}'], 'one refresh, which carries no token');

    // Both tabs closed, then two opened together: the first recovers, the second takes its session under the lock.
    await first.close();
    const held = await holdRefreshes(context, '/api/auth/token/refresh', 2);
    const tabs = [await openTab(context), await openTab(context)];
    const readyTook = await Promise.all(tabs.map((tab) => startClient(tab, cookieMode)));
    // CONTRACT 14: ready never longer than 500 ms, even while the recovery's refresh is held 1.5 s.
    for (const took of readyTook) assert.ok(took < 1000, `ready took ${took} ms while the refresh was held`);
    const sessions = await Promise.all(tabs.map((tab) => inPage(tab, 'async (client) => (await client.getAccessToken(), client.getSession())')));
    console.log(`cookie mode, two tabs opened together: ${held.sent.length} refresh request(s)`);
    assert.equal(held.sent.length, 1, 'one refresh for two tabs: the same cookie is never sent twice at once');
    for (const session of sessions) assert.equal(session?.sessionId, signedIn.sessionId);
    for (const tab of tabs) assert.equal((await inPage(tab, `async (client) => client.request('GET', '/auth/me')`)).email, email);

    // No refresh token is ever readable by page script: not in a cookie, web storage or any answer the page saw.
    const readable = String(await tabs[0]!.evaluate('document.cookie'));
    const refreshCookie = (await context.cookies()).find((cookie) => cookie.name === 'example_refresh')!;
    assert.ok(refreshCookie.httpOnly && !readable.includes(refreshCookie.value), `page script reads: ${readable}`);
    assert.equal(await tabs[0]!.evaluate('sessionStorage.length + localStorage.length'), 0);
    for (const answer of answers) assert.ok(!answer.includes('refresh_token'), `an answer the page saw carries a refresh token: ${answer}`);

    // A host that knows the visitor is signed out (no hint cookie) lets the client ask nothing.
    for (const tab of tabs) await tab.close();
    const quiet = await openTab(context);
    const before = refreshBodies.length;
    await startClient(quiet, { ...cookieMode, restore: false });
    assert.equal(await inPage(quiet, 'async (client) => client.getSession()'), null);
    assert.equal(refreshBodies.length, before, 'restore: false sends no refresh');
    await context.close();
  });

  test('switchOrg() takes the new tokens in every tab; a 401 session_ended ends the session without a refresh', async () => {
    const email = await verifiedAccount('switch');
    const context = await newContext();
    const tabs = [await openTab(context), await openTab(context)];
    await startClient(tabs[0]!);
    await inPage(tabs[0]!, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    await startClient(tabs[1]!);
    const org = await inPage(tabs[0]!, `async (client) => client.request('POST', '/orgs', { body: { name: 'Switchers' } })`);
    assert.equal(typeof org.id, 'string', JSON.stringify(org));
    assert.equal((await inPage(tabs[0]!, 'async (client) => client.getSession()')).claims.org ?? null, null);

    const answer = await inPage(tabs[0]!, `async (client, arg) => client.switchOrg(arg)`, org.id);
    assert.equal(typeof answer.access_token, 'string');
    assert.equal((await inPage(tabs[0]!, 'async (client) => client.getSession()')).claims.org, org.id, 'this tab holds the switched session');
    await tabs[1]!.waitForFunction((orgId) => (globalThis as any).client.getSession()?.claims.org === orgId, org.id, { timeout: 1000 });
    const members = await inPage(tabs[1]!, `async (client, arg) => client.request('GET', '/orgs/' + arg + '/members', { query: { limit: 1 } })`, org.id);
    assert.equal(members.length, 1, JSON.stringify(members));

    // The session ends elsewhere (every session of the account); switch-org answers 401 session_ended.
    const refreshes: string[] = [];
    context.on('request', (request) => void (request.url().endsWith('/auth/token/refresh') && refreshes.push(request.url())));
    const direct = await call('POST', '/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal((await call('POST', '/auth/logout-all', undefined, direct.body.data.access_token)).status, 200);
    const refused = await inPage(tabs[0]!, `async (client, arg) => client.switchOrg(arg)`, org.id);
    assert.deepEqual(refused.error, { name: 'IdentityClientError', code: 'session_ended', status: 401 });
    assert.deepEqual(refreshes, [], 'no refresh after session_ended');
    await tabs[1]!.waitForFunction(() => (globalThis as any).ended.length > 0, undefined, { timeout: 1000 });
    for (const tab of tabs) {
      assert.deepEqual(await tab.evaluate('globalThis.ended'), ['revoked']);
      assert.equal(await inPage(tab, 'async (client) => client.getSession()'), null);
    }
    await context.close();
  });

  test('logoutAll() ends the session in every tab once and every other device is revoked; logout() ends it even when the router cannot be reached; fetch() offline is network_error', async () => {
    const email = await verifiedAccount('everywhere');
    const here = await newContext();
    const tabs = [await openTab(here), await openTab(here)];
    await startClient(tabs[0]!);
    await inPage(tabs[0]!, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    await startClient(tabs[1]!);
    const elsewhere = await newContext();
    const device = await openTab(elsewhere);
    await startClient(device);
    await inPage(device, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });

    assert.equal(await inPage(tabs[1]!, 'async (client) => client.logoutAll()'), undefined);
    await tabs[0]!.waitForFunction(() => (globalThis as any).ended.length > 0, undefined, { timeout: 1000 });
    for (const tab of tabs) {
      assert.deepEqual(await tab.evaluate('globalThis.ended'), ['logout'], 'each tab hears the end once');
      assert.equal(await inPage(tab, 'async (client) => client.getSession()'), null);
    }
    // The other device learns it at its next call: the refused refresh ends its session.
    const refused = await inPage(device, `async (client) => client.request('GET', '/auth/me')`);
    assert.equal(refused.error.status, 401);
    assert.deepEqual(await device.evaluate('globalThis.ended'), ['revoked']);

    // Signed in again, then offline: logout() rejects with network_error and still ends the session.
    await inPage(device, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    await elsewhere.setOffline(true);
    const offline = await inPage(device, 'async (client) => client.logout()');
    assert.deepEqual(offline.error, { name: 'IdentityClientError', code: 'network_error', status: 0 });
    assert.deepEqual(await device.evaluate('globalThis.ended'), ['revoked', 'logout']);
    assert.equal(await inPage(device, 'async (client) => client.getSession()'), null);
    // fetch() too: no HTTP answer is network_error (it was the browser's bare TypeError), to the
    // page's origin and to any other; the caller's own abort stays an AbortError.
    for (const url of ['/invoices', 'http://elsewhere.test/data']) {
      const unreachable = await inPage(device, `async (client, arg) => client.fetch(arg)`, url);
      assert.deepEqual(unreachable.error, { name: 'IdentityClientError', code: 'network_error', status: 0 }, url);
    }
    const aborted = await inPage(device, `async (client) => client.fetch('/invoices', { signal: AbortSignal.abort() })`);
    assert.equal(aborted.error?.name, 'AbortError');
    await here.close();
    await elsewhere.close();
  });

  test('the smaller members: register and verifyEmail, {message} bodies whole, validation_failed, the fetch option, no bearer without a session, one refresh for a tab\'s concurrent callers, the second 401 is the answer, withStepUp on a Response, unsubscribe, social_error', async () => {
    // Without Web Locks, so that only the tab's own single-flight rule keeps its callers to one refresh.
    const context = await newContext(NO_WEB_LOCKS);
    const page = await openTab(context);
    // A string: tsx would wrap a named function given to evaluate() in a helper the page lacks.
    await page.evaluate(`(async () => {
      globalThis.sent = [];
      globalThis.client = globalThis.identity.createIdentityClient({
        baseUrl: '/identity',
        fetch: (input, init) => {
          globalThis.sent.push(new URL(typeof input === 'string' ? input : input.url).pathname);
          globalThis.bearers = [...(globalThis.bearers ?? []), (input instanceof Request ? input.headers : new Headers(init?.headers)).get('authorization')];
          return fetch(input, init);
        },
      });
      await globalThis.client.ready;
    })()`);
    const email = uniqueEmail('members');
    const registered = await inPage(page, `async (client, arg) => client.register({ email: arg, password: '${STRONG_PASSWORD}' })`, email);
    assert.equal(typeof registered.message, 'string', `a {message} answer comes whole: ${JSON.stringify(registered)}`);
    const invalid = await inPage(page, `async (client) => client.register({ email: 'not an address', password: 'x' })`);
    assert.equal(invalid.error.code, 'validation_failed');
    assert.equal(invalid.error.status, 422);
    const errors = await page.evaluate(`globalThis.client.register({ email: 'not an address', password: 'x' }).catch((error) => error.errors)`);
    assert.ok(Array.isArray(errors) && errors.length > 0, JSON.stringify(errors));
    const mail = suite.example.inbox!.messages.find((message) => message.to === email && /token=/.test(message.text));
    const token = decodeURIComponent(/token=([^\s&"<>]+)/.exec(mail!.text)![1]!);
    const verified = await inPage(page, `async (client, arg) => client.verifyEmail(arg)`, token);
    assert.ok(verified && !verified.error, JSON.stringify(verified));

    // With no session, a request carries no bearer.
    assert.equal(await inPage(page, `async (client) => (await client.fetch('/invoices')).status`), 401);
    assert.equal((await page.evaluate('globalThis.bearers') as unknown[]).at(-1), null);
    await page.evaluate('globalThis.sent.pop()');
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    assert.deepEqual(await page.evaluate('globalThis.sent'), ['/identity/auth/register', '/identity/auth/register', '/identity/auth/register', '/identity/auth/email/verify', '/identity/auth/login'], 'the fetch option sends every request');

    // Expired on the router's clock: three concurrent callers in one tab share one refresh (a second would be reuse).
    suite.clock.advance(16 * 60);
    await page.evaluate('globalThis.sent.length = 0');
    const answers = await inPage(page, `async (client) => Promise.all([client.request('GET', '/auth/me'), client.request('GET', '/auth/sessions'), client.getAccessToken().then(() => client.request('GET', '/auth/me'))])`);
    assert.ok(Array.isArray(answers), `every caller is answered: ${JSON.stringify(answers)}`);
    assert.equal(answers[0].email, email);
    assert.equal((await page.evaluate('globalThis.sent') as string[]).filter((path) => path.endsWith('/auth/token/refresh')).length, 1, 'one refresh for the tab');

    // A host route that answers 401 whatever the token: one refresh, one retry, and the second 401 is the answer.
    await context.route('**/always-unauthorized', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"unauthorized"}' }));
    await page.evaluate('globalThis.sent.length = 0');
    assert.equal(await inPage(page, `async (client) => (await client.fetch('/always-unauthorized')).status`), 401);
    assert.deepEqual(await page.evaluate('globalThis.sent'), ['/always-unauthorized', '/identity/auth/token/refresh', '/always-unauthorized']);
    assert.notEqual(await inPage(page, 'async (client) => client.getSession()'), null, 'the session stays');

    // withStepUp also takes a 401 step_up_required Response (client.fetch); an askForCode answering null cancels.
    await context.route('**/needs-step-up', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"step_up_required","message":"Step-up required."}' }));
    const cancelled = await page.evaluate(`(async () => {
      const asked = [];
      const outcome = await globalThis.client.withStepUp(() => globalThis.client.fetch('/needs-step-up'), (prompt) => { asked.push(prompt.factors.length); return null; })
        .then(() => 'resolved', (error) => error.code + ' ' + error.status);
      return { asked, outcome };
    })()`);
    assert.deepEqual(cancelled, { asked: [0], outcome: 'step_up_required 401' });

    // An unsubscribed callback hears nothing.
    const heard = await inPage(page, `async (client) => {
      const heard = [];
      const unsubscribe = client.onSessionEnded((event) => heard.push('removed:' + event.reason));
      client.onSessionEnded((event) => heard.push('kept:' + event.reason));
      unsubscribe();
      await client.logout();
      return heard;
    }`);
    assert.deepEqual(heard, ['kept:logout']);

    // social.complete rejects on social_error (status 0, the code as given) and sends nothing.
    await page.evaluate('globalThis.sent.length = 0');
    const failed = await inPage(page, `async (client) => client.social.complete(location.origin + '/social-return?social_error=provider_error')`);
    assert.deepEqual(failed.error, { name: 'IdentityClientError', code: 'provider_error', status: 0 });
    assert.deepEqual(await page.evaluate('globalThis.sent'), []);
    await context.close();
  });

  // CONTRACT 14 sentence by sentence: what the tests above do not prove.

  /** Ends every session of the account on the router, as another device's logout-all does. */
  async function revokeEverywhere(email: string): Promise<void> {
    const login = await call('POST', '/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal((await call('POST', '/auth/logout-all', undefined, login.body.data.access_token)).status, 200);
  }

  test('fetch() answers the host\'s Response whatever its status, even when the refresh after its 401 is refused; the session ends (revoked)', async () => {
    const email = await verifiedAccount('host401');
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    const session = await inPage(page, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });
    // Session.expiresAt: expires_in after receipt, on the browser's clock.
    const left = session.expiresAt - ((await page.evaluate('Date.now()')) as number);
    assert.ok(left > 890_000 && left <= 900_000, `expiresAt is expires_in (900 s) after receipt: ${left} ms left`);
    await context.route('**/always-unauthorized', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"unauthorized"}' }));
    await revokeEverywhere(email);
    const answer = await inPage(page, `async (client) => { const response = await client.fetch('/always-unauthorized'); return { status: response.status, body: await response.json() }; }`);
    assert.deepEqual(answer, { status: 401, body: { error: 'unauthorized' } }, `fetch() rejected instead of answering the host's Response: ${JSON.stringify(answer)}`);
    assert.deepEqual(await page.evaluate('globalThis.ended'), ['revoked'], 'the refused refresh ended the session');
    assert.equal(await inPage(page, 'async (client) => client.getSession()'), null);
    await context.close();
  });

  test('getAccessToken() answers null when its early refresh is refused (the session ended), and fetch() then carries no bearer', async () => {
    const email = await verifiedAccount('early');
    const context = await newContext();
    const page = await openTab(context);
    // The router's answers pass through a fetch that shortens the access token's announced life to 10 s: under 30 s left.
    await startClient(
      page,
      `{ baseUrl: '/identity', fetch: async (input, init) => {
        const response = await fetch(input, init);
        const url = typeof input === 'string' ? input : input.url;
        if (!url.endsWith('/auth/login') || !response.ok) return response;
        const body = await response.json();
        body.data.expires_in = 10;
        return new Response(JSON.stringify(body), { status: response.status, headers: response.headers });
      } }`,
    );
    await inPage(page, `async (client, arg) => client.login(arg)`, { email, password: STRONG_PASSWORD });
    await revokeEverywhere(email);
    const token = await inPage(page, 'async (client) => client.getAccessToken()');
    assert.equal(token, null, `getAccessToken() must answer string | null: ${JSON.stringify(token)}`);
    assert.deepEqual(await page.evaluate('globalThis.ended'), ['revoked']);
    const bearers: Array<string | undefined> = [];
    page.on('request', (request) => void (request.url().endsWith('/invoices') && bearers.push(request.headers().authorization)));
    assert.equal(await inPage(page, `async (client) => (await client.fetch('/invoices')).status`), 401);
    assert.deepEqual(bearers, [undefined], 'no session, no bearer');
    await context.close();
  });

  test('key is baseUrl resolved against the page without a trailing slash: /identity and /identity/ share one session', async () => {
    const email = await verifiedAccount('slash');
    const context = await newContext();
    const first = await openTab(context);
    await startClient(first, `{ baseUrl: '/identity' }`);
    const session = await inPage(first, `async (client, arg) => (await client.login(arg)).session`, { email, password: STRONG_PASSWORD });
    const second = await openTab(context);
    await startClient(second, `{ baseUrl: location.origin + '/identity/' }`);
    assert.equal((await inPage(second, 'async (client) => client.getSession()'))?.sessionId, session.sessionId);
    await context.close();
  });

  test('withStepUp asks 5 times at most: five wrong codes, then the call rejects without a sixth ask', async () => {
    const email = await verifiedAccount('fiveasks');
    const login = await call('POST', '/auth/login', { email, password: STRONG_PASSWORD });
    const token = login.body.data.access_token as string;
    const enrolled = (await call('POST', '/auth/mfa/totp/enroll', {}, token)).body.data;
    const code = speakeasy.totp({ secret: enrolled.secret, encoding: 'base32', time: Math.floor(suite.clock.now() / 1000) });
    assert.equal((await call('POST', '/auth/mfa/totp/confirm', { factor_id: enrolled.factor_id, code }, token)).status, 200);
    suite.clock.advance(60);
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    await inPage(page, `async (client, arg) => client.login(arg).then((result) => result.mfa.verify({ factor_id: arg.factorId, code: arg.code }))`, {
      email,
      password: STRONG_PASSWORD,
      factorId: enrolled.factor_id,
      code: speakeasy.totp({ secret: enrolled.secret, encoding: 'base32', time: Math.floor(suite.clock.now() / 1000) }),
    });
    suite.clock.advance(6 * 60); // past security.stepUp.maxAge
    const outcome = await page.evaluate(`(async () => {
      const asks = [];
      const error = await globalThis.client.withStepUp(
        () => globalThis.client.request('POST', '/auth/mfa/recovery-codes/regenerate'),
        (prompt) => { asks.push(prompt.error?.code ?? null); return { factor_id: prompt.factors[0].id, code: '000000' }; },
      ).then(() => null, (failure) => ({ name: failure.name, code: failure.code }));
      return { asks, error };
    })()`);
    assert.deepEqual(outcome, { asks: [null, 'invalid_code', 'invalid_code', 'invalid_code', 'invalid_code'], error: { name: 'IdentityClientError', code: 'invalid_code' } });
    await context.close();
  });

  test('social.start with redirect: false answers {authorizationUrl}, stays on the page, keeps a 32-byte verifier and posts its S256 challenge', async () => {
    const context = await newContext();
    const page = await openTab(context);
    await startClient(page);
    const bodies: Json[] = [];
    page.on('request', (request) => void (request.url().endsWith('/auth/social/demo/authorize') && bodies.push(JSON.parse(request.postData() ?? '{}'))));
    const before = page.url();
    const started = await inPage(page, `async (client) => client.social.start('demo', { redirect: false })`);
    assert.equal(typeof started.authorizationUrl, 'string', JSON.stringify(started));
    assert.equal(page.url(), before, 'no navigation with redirect: false');
    const stored = (await page.evaluate('Object.values(sessionStorage)')) as string[];
    assert.equal(stored.length, 1);
    const verifier = stored[0]!;
    assert.match(verifier, /^[A-Za-z0-9_-]{43}$/, '32 random bytes in base64url');
    assert.equal(bodies.length, 1);
    assert.equal(bodies[0]!.handoff_challenge_method, 'S256');
    assert.equal(bodies[0]!.handoff_challenge, createHash('sha256').update(verifier).digest('base64url'));
    await context.close();
  });
});
