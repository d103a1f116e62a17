import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import express, { type RequestHandler } from 'express';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { assertError } from './helpers/account.js';
import { decodeJwt, Harness, TEST_DB, type SignedUpUser } from './helpers/harness.js';
import { enrollTotp } from './helpers/mfa.js';
import { addVirtualAuthenticator, chromiumPath, launchChromium, PASSKEY_PAGE, type VirtualAuthenticator } from './helpers/virtual-authenticator.js';

/*
 * Real WebAuthn ceremonies in Chromium against the router: a virtual authenticator (CTAP2,
 * internal transport, resident keys, user verification) behind navigator.credentials, driven
 * from a minimal page served on the router's own origin (test/browser-passkeys/passkey-page.html).
 * Runs in the SQLite phase only (the browser part does not depend on the database). Without
 * Chromium the suite is skipped, except under CI=true, where that is a failure.
 */
const chromium = chromiumPath();
const skip = TEST_DB !== 'sqlite' ? 'browser tests run in the SQLite phase only' : !chromium ? 'Chromium not found (set CHROMIUM_PATH); browser passkey tests skipped' : false;
if (!chromium && TEST_DB === 'sqlite') {
  if (process.env.CI === 'true') throw new Error('Chromium is required for the passkey browser tests under CI=true (set CHROMIUM_PATH)');
  console.warn(`# ${skip}`);
}

interface BrowserUser {
  context: BrowserContext;
  page: Page;
  authenticator: VirtualAuthenticator;
}

type PageAnswer = { status?: number; body?: any; step?: string; error?: string };

describe('passkeys in Chromium', { skip }, () => {
  let h: Harness;
  let browser: Browser;
  let server: ReturnType<express.Express['listen']>;
  let origin: string;
  let alice: BrowserUser;
  let aliceAccount: SignedUpUser;
  let passkeyFactorId: string;

  /** Runs one of the page's `passkeys` helpers in the page (fetch + navigator.credentials). */
  const inPage = (user: BrowserUser, helper: 'register' | 'login' | 'passGate' | 'stepUp', ...args: unknown[]): Promise<PageAnswer> =>
    user.page.evaluate(([name, input]) => (globalThis as any).passkeys[name as string](...(input as unknown[])), [helper, args] as const);

  async function openBrowserUser(): Promise<BrowserUser> {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${origin}/`);
    return { context, page, authenticator: await addVirtualAuthenticator(context, page) };
  }

  before(async () => {
    // The page and the router share one origin, as a host's pages would; the origin (with its port) must be known before the router is configured.
    let identity: RequestHandler | undefined;
    const app = express();
    app.get('/', (_req, res) => void res.type('html').send(PASSKEY_PAGE));
    app.use('/identity', (req, res, next) => (identity ? identity(req, res, next) : next()));
    await new Promise<void>((resolve) => {
      server = app.listen(0, () => resolve());
    });
    origin = `http://localhost:${(server.address() as AddressInfo).port}`;
    h = await Harness.start({ config: { webauthn: { rpId: 'localhost', origins: [origin] } } });
    identity = h.identity;
    browser = await launchChromium();
    alice = await openBrowserUser();
    aliceAccount = await h.signUp();
  });

  after(async () => {
    await browser?.close();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    await h?.close();
  });

  test('register a passkey from the page', async () => {
    const registered = await inPage(alice, 'register', aliceAccount.accessToken, 'This browser');
    assert.equal(registered.status, 200, JSON.stringify(registered));
    assert.equal(registered.body.data.status, 'confirmed');
    assert.equal(registered.body.data.recovery_codes.length, 10);
    passkeyFactorId = registered.body.data.factor_id;
    assert.equal(await alice.authenticator.credentialCount(), 1, 'a resident credential on the authenticator');
    assert.equal(h.eventsOfType('mfa.enrolled').at(-1)!.data.type, 'webauthn');
  });

  test('log out, then log in with the passkey and no password', async () => {
    assert.equal((await h.post('/auth/logout', {}, { token: aliceAccount.accessToken })).status, 200);
    const login = await inPage(alice, 'login');
    assert.equal(login.status, 200, JSON.stringify(login));
    assert.equal(login.body.data.user.id, aliceAccount.userId);
    const claims = decodeJwt(login.body.data.access_token);
    assert.deepEqual([claims.mfa, claims.amr], [true, ['hwk', 'user']]);
    assert.equal(h.eventsOfType('user.logged_in').at(-1)!.data.method, 'passkey');
    aliceAccount.accessToken = login.body.data.access_token;
  });

  test('pass the MFA gate with the passkey after a password', async () => {
    const login = await h.post('/auth/login', { email: aliceAccount.email, password: aliceAccount.password });
    assert.equal(login.body.data.mfa_required, true, login.text);
    assert.deepEqual(login.body.data.factors.map((factor: { type: string }) => factor.type), ['webauthn']);
    const verified = await inPage(alice, 'passGate', login.body.data.mfa_token, passkeyFactorId);
    assert.equal(verified.status, 200, JSON.stringify(verified));
    assert.deepEqual(decodeJwt(verified.body.data.access_token).amr, ['pwd', 'hwk']);
    aliceAccount.accessToken = verified.body.data.access_token;
  });

  test('step up with the passkey before deleting another factor', async () => {
    const totp = await enrollTotp(h, aliceAccount.accessToken);
    h.clock.advance(301);
    assertError(await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: aliceAccount.accessToken }), 401, 'step_up_required');
    const stepped = await inPage(alice, 'stepUp', aliceAccount.accessToken, passkeyFactorId);
    assert.equal(stepped.status, 200, JSON.stringify(stepped));
    assert.equal(h.eventsOfType('mfa.step_up_completed').at(-1)!.data.method, 'webauthn');
    const deleted = await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: stepped.body.data.access_token });
    assert.equal(deleted.status, 200, deleted.text);
  });

  test('a second browser context with another authenticator cannot log in as the first user', async () => {
    const mallory = await openBrowserUser();
    try {
      await mallory.page.evaluate(() => {
        (globalThis as any).ceremonyTimeoutMs = 3000;
      });
      const sessionsBefore = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: aliceAccount.userId }).count({ count: '*' }).first();
      // Discoverable login: the other authenticator holds no credential for this RP.
      const discoverable = await inPage(mallory, 'login');
      assert.equal(discoverable.step, 'get', JSON.stringify(discoverable));
      assert.match(discoverable.error ?? '', /NotAllowedError/);
      // Naming the first user's e-mail lists her credential, which this authenticator does not hold.
      const named = await inPage(mallory, 'login', aliceAccount.email);
      assert.equal(named.step, 'get', JSON.stringify(named));
      // Its own passkey signs in its own account, never the first user's.
      const malloryAccount = await h.signUp();
      assert.equal((await inPage(mallory, 'register', malloryAccount.accessToken)).status, 200);
      const own = await inPage(mallory, 'login');
      assert.equal(own.status, 200, JSON.stringify(own));
      assert.equal(own.body.data.user.id, malloryAccount.userId);
      const sessionsAfter = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: aliceAccount.userId }).count({ count: '*' }).first();
      assert.equal(Number(sessionsAfter!.count), Number(sessionsBefore!.count));
    } finally {
      await mallory.context.close();
    }
  });
});
