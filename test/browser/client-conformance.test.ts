/**
 * identity-router/client (CONTRACT 14) in headless Chromium, sentence by sentence: the rules
 * test/browser/client.test.ts does not prove. Same set-up: the client bundled from src/client with
 * esbuild, served on the example server's origin with a blank page that loads it.
 *   node scripts/run-tests.mjs --sqlite-only test/browser/client-conformance.test.ts
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { build } from 'esbuild';
import type { BrowserContext, Page } from 'playwright-core';
import speakeasy from 'speakeasy';
import { BrowserSuite, browserSkipReason, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';

const skip = browserSkipReason();

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>client conformance page</title></head>
<body><main><h1>client conformance page</h1></main>
<script type="module" src="/app.js"></script></body></html>`;

const LOADER = `import * as identity from '/__client/identity-client.js';
globalThis.identity = identity;
document.body.dataset.ready = 'true';`;

type Json = Record<string, any>;

describe('identity-router/client, CONTRACT 14', { skip }, () => {
  let suite: BrowserSuite;
  let bundle: string;
  let api: string;

  before(async () => {
    suite = await BrowserSuite.start('client-conformance');
    api = `${suite.url}/identity`;
    const built = await build({ entryPoints: ['src/client/index.ts'], bundle: true, format: 'esm', platform: 'browser', target: 'es2020', write: false });
    bundle = built.outputFiles[0]!.text;
  });
  after(async () => {
    await suite?.close();
  });

  async function newContext(): Promise<BrowserContext> {
    const context = await suite.browser.newContext({ bypassCSP: true });
    context.setDefaultTimeout(10_000);
    await context.route(
      (url) => url.pathname.startsWith('/__client/') || url.pathname === '/app.js',
      (route) => {
        const path = new URL(route.request().url()).pathname;
        if (path === '/__client/identity-client.js') return route.fulfill({ status: 200, contentType: 'text/javascript', body: bundle });
        if (path === '/app.js') return route.fulfill({ status: 200, contentType: 'text/javascript', body: LOADER });
        return route.fulfill({ status: 200, contentType: 'text/html', body: PAGE });
      },
    );
    return context;
  }

  async function openTab(context: BrowserContext): Promise<Page> {
    const page = await context.newPage();
    await page.goto(`${suite.url}/__client/page`);
    await page.waitForSelector('body[data-ready="true"]');
    return page;
  }

  /** Creates `globalThis.client` from options given as a script expression, waits for `ready`, answers how long it took. */
  async function startClient(page: Page, optionsExpression = `{ baseUrl: '/identity' }`): Promise<number> {
    return page.evaluate(`(async () => {
      globalThis.ended = [];
      const started = performance.now();
      globalThis.client = globalThis.identity.createIdentityClient(${optionsExpression});
      globalThis.client.onSessionEnded((event) => globalThis.ended.push(event.reason));
      await globalThis.client.ready;
      return performance.now() - started;
    })()`) as Promise<number>;
  }

  function inPage<T = any>(page: Page, body: string, arg?: unknown): Promise<T> {
    return page.evaluate(
      async ({ body, arg }) => {
        const scope = globalThis as any;
        try {
          return await new Function('client', 'arg', `return (${body})(client, arg);`)(scope.client, arg);
        } catch (error: any) {
          return { error: { name: error.name, code: error.code, status: error.status } };
        }
      },
      { body, arg },
    ) as Promise<T>;
  }

  async function call(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: Json }> {
    const response = await fetch(api + path, {
      method,
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Json };
  }

  async function verifiedAccount(name: string): Promise<string> {
    const email = uniqueEmail(name);
    assert.equal((await call('POST', '/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    const mail = suite.example.inbox!.messages.find((message) => message.to === email && /token=/.test(message.text));
    const token = decodeURIComponent(/token=([^\s&"<>]+)/.exec(mail!.text)![1]!);
    assert.equal((await call('POST', '/auth/email/verify', { token })).status, 200);
    return email;
  }

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
