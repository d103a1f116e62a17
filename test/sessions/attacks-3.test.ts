import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { createIdentityClient } from '../../src/client/index.js';
import { SessionRepository } from '../../src/store/session-repository.js';
import { assertError, assertUnauthorized } from '../helpers/account.js';
import { decodeJwt, Harness, TEST_DB } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt } from '../helpers/mfa.js';
import { addMember, createOrg, switchOrg } from '../helpers/orgs.js';
import { callerHostApp, listening } from '../helpers/host-app.js';
import { signWithRouterKey } from '../helpers/forged-tokens.js';

/*
 * Attacks on tokens and sessions (SPEC 2.1, 2.2, 3 "Session and refresh token", 4.1, 5; CONTRACT 5,
 * 6, 7): one kind of token presented where another is due (an MFA ticket as a refresh token or a
 * bearer, an access or refresh token as a ticket), a claim that is not yet valid on host
 * middleware, one router mount's tokens at another mount that shares the secret and issuer,
 * refresh-token reuse across switch-org (and inside its window on PostgreSQL), a logout inside a
 * refresh's window, switch-org and step-up minting a token for an organization the caller left,
 * and lifetimes at their boundaries on the injected clock.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

let h: Harness;
let host: { base: string; close(): Promise<void> };

/** GET on the host app: `/whoami` behind authenticate(), `/org` behind requirePermission('org.read'). */
async function hostStatus(path: '/whoami' | '/org', token: string): Promise<number> {
  const response = await fetch(`${host.base}${path}`, { headers: { authorization: `Bearer ${token}` } });
  await response.arrayBuffer();
  return response.status;
}

async function sessionRow(sessionId: string): Promise<{ revoked_at: unknown; revoked_reason: unknown; organization_id: unknown; refresh_generation: unknown }> {
  return h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first();
}

const reuseEventsOf = (sessionId: string) => h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId);

before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } } });
  host = await callerHostApp(h.identity);
});
after(async () => {
  await host.close();
  await h.close();
});

describe('one kind of token where another is due', () => {
  test('an MFA ticket is no refresh token and no bearer anywhere, and stays usable for its own route; access and refresh tokens are no ticket', async () => {
    const user = await signUpWithTotp(h);
    const org = await createOrg(h, { owner: user });
    const { ticket } = await loginForTicket(h, user);

    assertError(await h.post('/auth/token/refresh', { refresh_token: ticket }), 401, 'invalid_grant', 'ticket as refresh token');
    // A ticket is not a genuine access token of an ended session either: unauthorized, never session_ended.
    assertUnauthorized(await h.post('/auth/switch-org', { organization_id: org.id }, { token: ticket }), 'switch-org');
    assertUnauthorized(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: ticket }), 'step-up');
    assertUnauthorized(await h.post('/auth/mfa/step-up/challenge', { factor_id: user.factorId }, { token: ticket }), 'step-up challenge');
    assertUnauthorized(await h.get('/auth/sessions', { token: ticket }), 'sessions');
    assertUnauthorized(await h.post('/auth/logout', {}, { token: ticket }), 'logout');
    assert.equal(await hostStatus('/whoami', ticket), 401, 'authenticate()');
    assert.equal(await hostStatus('/org', ticket), 401, 'requirePermission()');

    // The other way round: the session's own tokens open no MFA gate.
    for (const [name, token] of [['access token', user.accessToken], ['refresh token', user.refreshToken], ['org-scoped access token', org.owner.token]] as const) {
      assertUnauthorized(await h.post('/auth/mfa/challenge', { factor_id: user.factorId }, { token }), `${name} at challenge`);
      assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret, 1) }, { token }), `${name} at verify`);
    }
    // A refresh token is no bearer on router or host routes.
    assertUnauthorized(await h.get('/auth/me', { token: user.refreshToken }), 'refresh token as bearer');
    assert.equal(await hostStatus('/whoami', user.refreshToken), 401);

    // Nothing above spent or exhausted the ticket: it still completes its login.
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    assert.equal((await h.get('/auth/me', { token: verified.body.data.access_token })).status, 200);
  });

  test('a token not valid before a future time (nbf), right key and claims otherwise, is 401 on the router and both middlewares', async () => {
    const org = await createOrg(h);
    const claims = decodeJwt(org.owner.token) as Record<string, unknown>;
    // The same claims re-signed pass everywhere: only nbf differs below.
    const genuine = await signWithRouterKey(h, {}, claims);
    assert.equal((await h.get('/auth/me', { token: genuine })).status, 200);
    assert.equal(await hostStatus('/whoami', genuine), 200);
    assert.equal(await hostStatus('/org', genuine), 200);
    const now = Math.floor(h.clock.now() / 1000);
    for (const [name, extra] of [['nbf an hour ahead', { nbf: now + 3600 }], ['another issuer', { iss: 'https://evil.example.test' }]] as const) {
      const token = await signWithRouterKey(h, {}, { ...claims, ...extra });
      assertUnauthorized(await h.get('/auth/me', { token }), name);
      assert.equal(await hostStatus('/whoami', token), 401, `${name}: authenticate()`);
      assert.equal(await hostStatus('/org', token), 401, `${name}: requirePermission()`);
    }
  });
});

describe('session fixation', () => {
  test('a sign-in never adopts a session the request names: login and MFA verify open a session of their own, the presented one untouched', async () => {
    const attacker = await h.signUp();
    const attackerSession = decodeJwt(attacker.accessToken).sid as string;
    const victim = await signUpWithTotp(h);
    const login = await h.post('/auth/login', { email: victim.email, password: victim.password }, { token: attacker.accessToken });
    assert.equal(login.status, 200, login.text);
    const verified = await h.post('/auth/mfa/verify', { factor_id: victim.factorId, code: nextTotpCode(h, victim.secret) }, { token: login.body.data.mfa_token, headers: { cookie: `sid=${attackerSession}` } });
    assert.equal(verified.status, 200, verified.text);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.equal(claims.sub, victim.userId);
    assert.notEqual(claims.sid, attackerSession);
    assert.ok(!verified.body.data.refresh_token.includes(attackerSession), 'the refresh token names the new session');
    // The attacker's own session is still the attacker's and knows nothing of the victim.
    const me = await h.get('/auth/me', { token: attacker.accessToken });
    assert.equal(me.body.data.id, attacker.userId);
    const row = await h.knex(`${h.tablePrefix}sessions`).where({ id: claims.sid }).first();
    assert.equal(row.user_id, victim.userId);
    assert.equal((await sessionRow(attackerSession)).revoked_at, null);
  });
});

describe('cross-site requests a browser sends without asking (CSRF)', () => {
  test('a form or text/plain POST carrying a JSON body is 415 on refresh and login, and rotates or opens nothing', async () => {
    const user = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const before = h.eventsOfType('user.logged_in').length;
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'text/plain;charset=UTF-8']) {
      assertError(await h.request('POST', '/auth/token/refresh', { rawBody: JSON.stringify({ refresh_token: user.refreshToken }), headers: { 'content-type': contentType } }), 415, 'unsupported_media_type', contentType);
      assertError(await h.request('POST', '/auth/login', { rawBody: JSON.stringify({ email: user.email, password: user.password }), headers: { 'content-type': contentType } }), 415, 'unsupported_media_type', contentType);
    }
    assert.equal(Number((await sessionRow(sessionId)).refresh_generation), 0, 'no refresh happened');
    assert.equal(h.eventsOfType('user.logged_in').length, before, 'no login happened');
    // The refresh token is still the current one.
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: user.refreshToken })).status, 200);
  });
});

describe('one mount\'s tokens at another mount (its own tables; the same secret and issuer)', () => {
  test('refresh token, access token and MFA ticket of A are refused by B, and A\'s session is untouched', async () => {
    const b = await Harness.start();
    try {
      const user = await signUpWithTotp(h);
      const { ticket } = await loginForTicket(h, user);
      const sessionId = decodeJwt(user.accessToken).sid as string;

      assertError(await b.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant', 'A\'s refresh token at B');
      assertUnauthorized(await b.get('/auth/me', { token: user.accessToken }), 'A\'s access token at B');
      assertUnauthorized(await b.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket }), 'A\'s ticket at B');
      assert.equal(b.eventsOfType('auth.token_refreshed').length, 0);
      assert.equal(b.eventsOfType('user.logged_in').length, 0);

      // A is as it was: the refresh token of generation 0 is still the current one, the ticket unspent.
      const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
      assert.equal(refreshed.status, 200, refreshed.text);
      assert.equal(reuseEventsOf(sessionId).length, 0);
      const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
      assert.equal(verified.status, 200, verified.text);
    } finally {
      await b.close();
    }
  });
});

describe('refresh-token reuse and switch-org', () => {
  test('switch-org keeps the generation: a replay of the generation before it revokes the family, the switched token and the host admission with it', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    const login = await h.post('/auth/login', { email: member.email, password: member.password });
    const sessionId = decodeJwt(login.body.data.access_token).sid as string;
    const first = await h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token });
    assert.equal(first.status, 200, first.text);
    const switched = await switchOrg(h, first.body.data.access_token, org.id);
    // Refreshes after the switch stay in the organization.
    const second = await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token });
    assert.equal(second.status, 200, second.text);
    assert.equal(decodeJwt(second.body.data.access_token).org, org.id);
    // The host admits the switched token, twice (the second from memory).
    assert.equal(await hostStatus('/org', switched), 200);
    assert.equal(await hostStatus('/org', switched), 200);
    assert.equal(await hostStatus('/whoami', second.body.data.access_token), 200);

    // A thief replays the token of the generation the switch was made in.
    assertError(await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token }), 401, 'invalid_grant');
    assert.equal(reuseEventsOf(sessionId).length, 1);
    assert.equal((await sessionRow(sessionId)).revoked_reason, 'refresh_reuse');
    for (const token of [switched, second.body.data.access_token]) {
      assertUnauthorized(await h.get('/auth/me', { token }));
      assert.equal(await hostStatus('/org', token), 401);
      assert.equal(await hostStatus('/whoami', token), 401);
      assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token }), 401, 'session_ended');
    }
    assertError(await h.post('/auth/token/refresh', { refresh_token: second.body.data.refresh_token }), 401, 'invalid_grant');
    assert.equal(reuseEventsOf(sessionId).length, 1, 'a revoked family is reported once');
  });

  test('a replay committed inside switch-org\'s window: 401 session_ended, or a token that no longer works', PG_ONLY, async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    const login = await h.post('/auth/login', { email: member.email, password: member.password });
    const sessionId = decodeJwt(login.body.data.access_token).sid as string;
    const first = await h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token });
    assert.equal(first.status, 200, first.text);
    const { outer: switched, inner: replayed } = await withRequestInTheWindow(
      h,
      { prototype: SessionRepository.prototype, method: 'setOrganization', when: (id) => id === sessionId, at: 'before' },
      () => h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token }),
      () => h.post('/auth/switch-org', { organization_id: org.id }, { token: first.body.data.access_token }),
    );
    assert.equal(replayed?.status, 401, replayed?.text);
    assert.equal(reuseEventsOf(sessionId).length, 1);
    const row = await sessionRow(sessionId);
    assert.notEqual(row.revoked_at, null);
    if (switched.status === 200) {
      assertUnauthorized(await h.get('/auth/me', { token: switched.body.data.access_token }), 'the switched token outlived the reuse revocation');
    } else {
      assertError(switched, 401, 'session_ended');
      assert.equal(h.eventsOfType('auth.org_switched').filter((event) => (event.data as { session_id?: string }).session_id === sessionId).length, 0, 'no switch recorded for a refused switch');
    }
    assertError(await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token }), 401, 'invalid_grant');
  });

  test('a logout committed between a refresh\'s read and its rotation: 401 invalid_grant, no reuse reported, the session ended by the logout', PG_ONLY, async () => {
    const user = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    // Warm the access cache, so the refresh reads a live session from memory.
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
    const { outer: refreshed, inner: loggedOut } = await withRequestInTheWindow(
      h,
      { prototype: SessionRepository.prototype, method: 'rotate', when: (id) => id === sessionId, at: 'before' },
      () => h.post('/auth/logout', {}, { token: user.accessToken }),
      () => h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
    );
    assert.equal(loggedOut?.status, 200, loggedOut?.text);
    assertError(refreshed, 401, 'invalid_grant');
    assert.equal(reuseEventsOf(sessionId).length, 0, 'a logout is no replay');
    const row = await sessionRow(sessionId);
    assert.equal(row.revoked_reason, 'logout');
    assert.equal(Number(row.refresh_generation), 0, 'the revoked session did not move on');
  });
});

describe('switch-org and step-up mint nothing the caller does not hold', () => {
  test('a token of an organization the caller was suspended from: switch-org there is 403, and a step-up with it answers the session\'s organization', async () => {
    const user = await signUpWithTotp(h);
    const left = await createOrg(h);
    const kept = await createOrg(h);
    const inLeft = await addMember(h, left, left.owner.token, ['member'], user);
    const inKept = await addMember(h, kept, kept.owner.token, ['member'], user);
    const sessionId = decodeJwt(inLeft.token).sid as string;
    assert.equal(decodeJwt(inKept.token).sid, sessionId, 'one session, switched twice');
    const suspended = await h.patch(`/orgs/${left.id}/members/${user.userId}`, { status: 'suspended' }, { token: left.owner.token });
    assert.equal(suspended.status, 200, suspended.text);
    // The session lives on in the organization it was switched to last.
    assert.equal((await sessionRow(sessionId)).revoked_at, null);
    assert.equal((await h.get('/auth/me', { token: inLeft.token })).status, 200);

    assertError(await h.post('/auth/switch-org', { organization_id: left.id }, { token: inLeft.token }), 403, 'forbidden');
    assertError(await h.post('/auth/switch-org', { organization_id: left.id }, { token: inKept.token }), 403, 'forbidden');
    assert.equal((await sessionRow(sessionId)).organization_id, kept.id, 'a refused switch leaves the session where it was');

    const stepped = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: inLeft.token });
    assert.equal(stepped.status, 200, stepped.text);
    const claims = decodeJwt(stepped.body.data.access_token);
    assert.equal(claims.org, kept.id, `step-up minted a token for ${String(claims.org)}`);
    assert.deepEqual(claims.amr, ['pwd', 'otp']);
    assert.equal(claims.sid, sessionId);
    assert.equal(await hostStatus('/org', stepped.body.data.access_token), 200);
    // The refresh token answers the same organization.
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    assert.equal(decodeJwt(refreshed.body.data.access_token).org, kept.id);
  });
});

describe('lifetimes at their boundaries (injected clock)', () => {
  test('an MFA ticket verifies one second before its 300 s end and not at it', async () => {
    const user = await signUpWithTotp(h);
    const early = await loginForTicket(h, user);
    h.clock.advance(299);
    const inTime = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: early.ticket });
    assert.equal(inTime.status, 200, inTime.text);

    const late = await loginForTicket(h, user);
    h.clock.advance(300);
    assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: late.ticket }), 'a ticket at its end');
  });

  test('host middleware: an access token admitted from memory is refused from the second it expires', async () => {
    const org = await createOrg(h);
    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    const token = await switchOrg(h, login.body.data.access_token, org.id);
    const exp = decodeJwt(token).exp as number;
    h.clock.set((exp - 1) * 1000);
    for (const path of ['/org', '/whoami', '/org', '/whoami'] as const) assert.equal(await hostStatus(path, token), 200, `${path} one second before exp`);
    h.clock.set(exp * 1000);
    assert.equal(await hostStatus('/org', token), 401, 'requirePermission() at exp');
    assert.equal(await hostStatus('/whoami', token), 401, 'authenticate() at exp');
    assertUnauthorized(await h.get('/auth/me', { token }), 'router at exp');
  });
});

describe('the browser client keeps the bearer on the router', () => {
  test('request() with a path that is no route under baseUrl sends nothing: the bearer never leaves the mount', async () => {
    // The router mounted at the root of its origin, as an identity origin of its own would be.
    const app = express();
    app.use(h.identity);
    const { base: served, server, close } = await listening(app);
    // The page and the router at https://id.example.test (a name with no port, as in production), served by `server`.
    const origin = 'https://id.example.test';
    const elsewhere: Array<{ url: string; authorization: string | null }> = [];
    const recordingFetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const request = new Request(input, init);
      const url = new URL(request.url);
      if (url.origin === origin) return fetch(new Request(`${served}${url.pathname}${url.search}`, request));
      elsewhere.push({ url: request.url, authorization: request.headers.get('authorization') });
      return new Response('{}', { status: 404, headers: { 'content-type': 'application/json' } });
    };
    const globals = globalThis as Record<string, unknown>;
    const savedChannel = globals.BroadcastChannel;
    Object.defineProperty(globalThis, 'location', { value: new URL(`${origin}/app/`), configurable: true, writable: true });
    // Node's BroadcastChannel would keep the test process alive; one tab needs none.
    globals.BroadcastChannel = undefined;
    try {
      const client = createIdentityClient({ baseUrl: origin, fetch: recordingFetch });
      await client.ready;
      const user = await h.signUp();
      await client.login({ email: user.email, password: user.password });
      assert.equal(((await client.request('GET', '/auth/me')) as { email: string }).email, user.email);
      const outcomes: unknown[] = [];
      for (const path of ['.evil.example/collect', '-evil.example/auth/me', 'auth/me']) {
        outcomes.push(await client.request('GET', path).then(() => 'answered', (error: unknown) => error));
      }
      const leaked = elsewhere.filter((sent) => sent.authorization !== null).map((sent) => sent.url);
      assert.deepEqual(leaked, [], 'request() sent the session\'s bearer off the router');
      assert.deepEqual(elsewhere, [], 'request() sent something off the router');
      // A path that names no route is the caller's mistake, refused before anything is sent.
      for (const outcome of outcomes) assert.ok(outcome instanceof TypeError, String(outcome));
    } finally {
      globals.BroadcastChannel = savedChannel;
      delete globals.location;
      server.closeAllConnections();
      await close();
    }
  });
});
