/**
 * identity-router/client in hostile browser environments, in a real Chromium (docs/client.md,
 * CONTRACT 14): every public call settles, with the session or an IdentityClientError, and no
 * token goes anywhere less safe than the storage mode says.
 * - a page of another site that frames the app: the frame's web storage throws and its Web Locks
 *   refuse every request and query (SecurityError), as with third-party storage blocked;
 * - a sandboxed frame without allow-same-origin (an opaque origin), refused the same way;
 * - one part missing or refusing in a tab of its own: `navigator.locks.request` rejecting,
 *   `BroadcastChannel` missing or refusing to open, web storage refusing writes (quota exceeded).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { build } from 'esbuild';
import type { BrowserContext, Frame, Page } from 'playwright-core';
import { type BrowserSuite, browserSkipReason, STRONG_PASSWORD } from './browser-harness.js';
import { ClientPages, type Json, type Scope, startClient } from './client-page.js';

/** The test page's loader (as client-page.ts serves it), for a frame that needs it with CORS. */
const LOADER = `import * as identity from '/__client/identity-client.js';
globalThis.identity = identity;
document.body.dataset.ready = 'true';`;

const skip = browserSkipReason();

/** How long a call may take before the test calls it hung: far above any answer of the local router. */
const HANG_MS = 5000;

/**
 * Runs `body` (an async function's text taking `client`) in the page, bounded: answers `{value}`,
 * `{error}` (name, code, status and whether it is an IdentityClientError) or `{hung: true}`.
 */
function settled(scope: Scope, body: string, arg?: unknown): Promise<{ value?: any; error?: Json; hung?: true }> {
  return scope.evaluate(
    `(async ({ body, arg, ms }) => {
      const run = (async () => new Function('client', 'arg', 'return (' + body + ')(client, arg);')(globalThis.client, arg))();
      const timeout = new Promise((resolve) => setTimeout(() => resolve({ hung: true }), ms));
      return Promise.race([
        run.then((value) => ({ value: value === undefined ? null : value }), (error) => ({
          error: { name: error?.name, code: error?.code, status: error?.status, typed: error instanceof globalThis.identity.IdentityClientError, message: String(error?.message) },
        })),
        timeout,
      ]);
    })(${JSON.stringify({ body, arg, ms: HANG_MS })})`,
  ) as Promise<{ value?: any; error?: Json; hung?: true }>;
}

/** Starts the client in the scope with `ready` bounded too; answers what `ready` did. */
function startBounded(scope: Scope, options: Json): Promise<{ value?: any; error?: Json; hung?: true }> {
  return scope.evaluate(
    `(async (options) => {
      try {
        globalThis.ended = [];
        globalThis.client = globalThis.identity.createIdentityClient(options);
        globalThis.client.onSessionEnded((event) => globalThis.ended.push(event.reason));
      } catch (error) {
        return { error: { name: error?.name, message: String(error?.message), thrownBy: 'createIdentityClient' } };
      }
      const timeout = new Promise((resolve) => setTimeout(() => resolve({ hung: true }), ${HANG_MS}));
      return Promise.race([globalThis.client.ready.then(() => ({ value: 'ready' }), (error) => ({ error: { name: error?.name, message: String(error?.message) } })), timeout]);
    })(${JSON.stringify(options)})`,
  ) as Promise<{ value?: any; error?: Json; hung?: true }>;
}

/** What the scope's sessionStorage, Web Lock request and lock query answer: 'ok' or the error's name. */
function refusals(scope: Scope): Promise<string[]> {
  return scope.evaluate(`(async () => [
    await (async () => { try { sessionStorage.length; return 'ok'; } catch (error) { return error.name; } })(),
    await navigator.locks.request('probe', () => 'ok').catch((error) => error.name),
    await navigator.locks.query().then(() => 'ok', (error) => error.name),
  ])()`) as Promise<string[]>;
}

describe('identity-router/client in hostile environments in Chromium: every call settles', { skip }, () => {
  let pages: ClientPages;
  let suite: BrowserSuite;
  let app: string;
  let otherSite: string;
  /** A page's unhandled rejections and uncaught errors, per page. */
  const pageErrors: string[] = [];

  before(async () => {
    pages = await ClientPages.start('client-hostile-environment');
    suite = pages.suite;
    app = suite.url;
    otherSite = suite.url.replace('//localhost:', '//127.0.0.1:');
  });
  after(async () => {
    await pages?.close();
  });

  const watch = (page: Page) => page.on('pageerror', (error) => void pageErrors.push(`${page.url()}: ${error.message}`));

  /** The app's client page framed by a page of another site; answers the frame and its top page. */
  async function framed(context: BrowserContext, framing: string): Promise<Frame> {
    const top = await context.newPage();
    watch(top);
    await top.goto(`${otherSite}${framing}`);
    const frame = top.frames().find((candidate) => candidate.url().startsWith(`${app}/__client/page`));
    assert.ok(frame, 'the framed client page');
    await frame.waitForSelector('body[data-ready="true"]');
    return frame;
  }

  /** Login, a router call, a refresh after the access token expired on the router's clock, then logout: each settles as it should. */
  async function signedInRoundTrip(scope: Scope, label: string): Promise<void> {
    const email = await pages.verifiedAccount(`hostile-${label.replace(/[^a-z]+/g, '-')}`);
    const login = await settled(scope, 'async (client, arg) => (await client.login(arg)).session', { email, password: STRONG_PASSWORD });
    assert.ok(!login.hung, `${label}: login() never settled`);
    assert.equal(login.error, undefined, `${label}: login() rejected: ${JSON.stringify(login.error)}`);
    assert.equal(typeof login.value?.sessionId, 'string', `${label}: login() answered ${JSON.stringify(login)}`);
    assert.equal((await settled(scope, `async (client) => (await client.request('GET', '/auth/me')).email`)).value, email, `${label}: request()`);
    const first = (await settled(scope, 'async (client) => client.getAccessToken()')).value;
    suite.clock.advance(16 * 60); // the access token expired on the router's clock: the next call refreshes
    const me = await settled(scope, `async (client) => (await client.request('GET', '/auth/me')).email`);
    assert.deepEqual(me, { value: email }, `${label}: request() through a refresh`);
    const second = (await settled(scope, 'async (client) => client.getAccessToken()')).value;
    assert.ok(typeof second === 'string' && second !== first, `${label}: the refresh took new tokens`);
    assert.deepEqual(await settled(scope, 'async (client) => client.logout()'), { value: null }, `${label}: logout()`);
    assert.equal((await settled(scope, 'async (client) => client.getSession()')).value, null, `${label}: signed out`);
    assert.deepEqual((await pages.call('GET', '/auth/me', undefined, second)).status, 401, `${label}: the session ended on the router`);
  }

  test('a frame on another site, where web storage throws and Web Locks refuse (SecurityError): ready resolves, login() and every later call settle, in memory and session modes', async () => {
    const context = await pages.newContext({ pages: { '/__client/framing': `<!doctype html><title>another site</title><iframe src="${app}/__client/page"></iframe>` } });
    for (const storage of ['memory', 'session'] as const) {
      const frame = await framed(context, '/__client/framing');
      // The environment as Chromium gives it (no partitioning under playwright): storage and locks refused.
      assert.deepEqual(await refusals(frame), ['SecurityError', 'SecurityError', 'SecurityError'], 'the frame is refused storage and locks');

      const ready = await startBounded(frame, { baseUrl: '/identity', storage });
      assert.deepEqual(ready, { value: 'ready' }, `${storage}: ready`);
      await signedInRoundTrip(frame, `frame ${storage}`);

      // The social handoff needs sessionStorage: start and complete reject with handoff_missing, and nothing navigates.
      const start = await settled(frame, `async (client) => client.social.start('demo', { redirect: false })`);
      assert.equal(start.error?.typed, true, `social.start: ${JSON.stringify(start)}`);
      assert.equal(start.error?.code, 'handoff_missing');
      assert.equal(start.error?.status, 0);
      assert.match(String(start.error?.message), /sessionStorage/);
      const complete = await settled(frame, `async (client) => client.social.complete(location.origin + '/__client/page?social_code=x')`);
      assert.deepEqual([complete.error?.typed, complete.error?.code, complete.error?.status], [true, 'handoff_missing', 0], `social.complete: ${JSON.stringify(complete)}`);
      assert.ok(frame.url().startsWith(`${app}/__client/page`), 'the frame stayed where it was');
      await frame.page().close();
    }
    assert.deepEqual(pageErrors.splice(0), [], 'no uncaught error or unhandled rejection in the pages');
    await context.close();
  });

  test('a sandboxed frame without allow-same-origin (an opaque origin: storage and Web Locks refused): ready resolves, login() and every later call settle', async () => {
    const context = await pages.newContext({ pages: { '/__client/sandboxing': `<!doctype html><title>another site</title><iframe sandbox="allow-scripts" src="${app}/__client/page"></iframe>` } });
    // The frame's origin is opaque (null): its module scripts and its calls to the router are cross-origin, so they are served with CORS here.
    const bundle = (await build({ entryPoints: ['src/client/index.ts'], bundle: true, format: 'esm', platform: 'browser', target: 'es2020', write: false })).outputFiles[0]!.text;
    const cors = { 'access-control-allow-origin': '*', 'access-control-allow-headers': 'content-type, authorization, accept', 'access-control-allow-methods': 'GET, POST, PATCH, PUT, DELETE' };
    await context.route(
      (url) => url.pathname === '/app.js' || url.pathname === '/__client/identity-client.js',
      (route) => route.fulfill({ status: 200, contentType: 'text/javascript', headers: cors, body: new URL(route.request().url()).pathname === '/app.js' ? LOADER : bundle }),
    );
    await context.route('**/identity/**', async (route) => {
      if (route.request().method() === 'OPTIONS') return route.fulfill({ status: 204, headers: cors });
      const response = await route.fetch();
      return route.fulfill({ response, headers: { ...response.headers(), ...cors } });
    });
    const frame = await framed(context, '/__client/sandboxing');
    assert.equal(await frame.evaluate('origin'), 'null', 'the frame\'s origin is opaque');
    assert.deepEqual(await refusals(frame), ['SecurityError', 'SecurityError', 'SecurityError'], 'the frame is refused storage and locks');
    assert.deepEqual(await startBounded(frame, { baseUrl: `${app}/identity`, storage: 'session' }), { value: 'ready' }, 'ready');
    await signedInRoundTrip(frame, 'sandboxed frame');
    assert.deepEqual(pageErrors.splice(0), [], 'no uncaught error or unhandled rejection in the pages');
    await context.close();
  });

  test('a tab of its own where one part is missing or refuses: locks.request rejecting, no BroadcastChannel, a BroadcastChannel that refuses to open', async () => {
    const environments: Record<string, string> = {
      'locks.request rejecting': `LockManager.prototype.request = function () { return Promise.reject(new DOMException('The request was denied.', 'SecurityError')); };`,
      'locks.request throwing': `LockManager.prototype.request = function () { throw new DOMException('The request was denied.', 'SecurityError'); };
LockManager.prototype.query = function () { throw new DOMException('The request was denied.', 'SecurityError'); };`,
      'no BroadcastChannel': 'delete globalThis.BroadcastChannel;',
      'a BroadcastChannel that refuses to open': `globalThis.BroadcastChannel = class { constructor() { throw new DOMException('The operation is insecure.', 'SecurityError'); } };`,
    };
    for (const [label, init] of Object.entries(environments)) {
      const context = await pages.newContext({ init });
      const tab = await pages.openTab(context);
      watch(tab);
      assert.deepEqual(await startBounded(tab, { baseUrl: '/identity', storage: 'session' }), { value: 'ready' }, `${label}: ready`);
      await signedInRoundTrip(tab, label);
      assert.deepEqual(pageErrors.splice(0), [], `${label}: no uncaught error or unhandled rejection in the page`);
      await context.close();
    }
  });

  test("'session' storage that refuses a write (quota exceeded) keeps no replaced refresh token: a reload never replays it and the session lives on", async () => {
    const context = await pages.newContext();
    const tab = await pages.openTab(context);
    watch(tab);
    const key = `identity-router:${app}/identity`;
    await startClient(tab, { baseUrl: '/identity', storage: 'session' });
    const email = await pages.verifiedAccount('hostile-quota');
    const login = await settled(tab, 'async (client, arg) => (await client.login(arg)).session', { email, password: STRONG_PASSWORD });
    assert.equal(typeof login.value?.sessionId, 'string');
    const stored = JSON.parse((await tab.evaluate(`sessionStorage.getItem(${JSON.stringify(key)})`)) as string) as Json;
    assert.equal(typeof stored.refresh, 'string', 'the first generation is stored');

    // Storage full from now on: every write throws, reads and removals still work.
    await tab.evaluate(`Storage.prototype.setItem = function () { throw new DOMException('The quota has been exceeded.', 'QuotaExceededError'); }`);
    suite.clock.advance(16 * 60);
    assert.deepEqual(await settled(tab, `async (client) => (await client.request('GET', '/auth/me')).email`), { value: email }, 'request() through a refresh');
    const current = (await settled(tab, 'async (client) => client.getAccessToken()')).value as string;
    const left = (await tab.evaluate(`sessionStorage.getItem(${JSON.stringify(key)})`)) as string | null;
    assert.ok(left === null || (JSON.parse(left) as Json).refresh !== stored.refresh, 'the replaced refresh token stays in sessionStorage after the write failed');

    // A reload (the write refused no longer) starts from what storage kept: never the replaced token.
    const refreshBodies: string[] = [];
    tab.on('request', (request) => void (request.url().endsWith('/auth/token/refresh') && refreshBodies.push(request.postData() ?? '')));
    await tab.reload();
    await tab.waitForSelector('body[data-ready="true"]');
    await startClient(tab, { baseUrl: '/identity', storage: 'session' });
    await settled(tab, `async (client) => client.request('GET', '/auth/me')`);
    for (const body of refreshBodies) assert.ok(!body.includes(String(stored.refresh)), 'the reloaded tab replayed the replaced refresh token');
    assert.equal((await pages.call('GET', '/auth/me', undefined, current)).status, 200, 'reuse detection ended the session');
    assert.deepEqual(pageErrors.splice(0), [], 'no uncaught error or unhandled rejection in the page');
    await context.close();
  });
});
