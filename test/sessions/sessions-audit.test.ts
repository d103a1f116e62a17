import assert from 'node:assert/strict';
import { createSign } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import jwt from 'jsonwebtoken';
import { servicesOf } from '../../src/create-identity-router.js';
import { assertError, assertNoInternals, assertUnauthorized } from '../helpers/account.js';
import { Harness, decodeJwt } from '../helpers/harness.js';
import { addMember, createOrg, switchOrg } from '../helpers/orgs.js';
import { type RawResponse, rawRequest } from '../helpers/raw-request.js';
import { callerHostApp } from '../helpers/host-app.js';
import { b64, signWithRouterKey } from '../helpers/forged-tokens.js';

/*
 * Audit of access tokens and refresh tokens (SPEC 2.1, 5, 7; docs/security.md "Refresh tokens and
 * sessions"; CONTRACT 6). Threats: a forged or foreign token accepted (alg none, HS256 keyed with
 * the public key, another issuer or audience, an MFA ticket, a wrong typ); a refresh token that
 * outlives its session's end (logout, logout-all, a deleted session); odd Authorization lines
 * that answer 500 or leak internals.
 */

let h: Harness;
let host: { base: string; close(): Promise<void> };


function hostRequest(path: string, headers: Record<string, string | string[]>): Promise<RawResponse> {
  return rawRequest(`${host.base}${path}`, headers);
}

before(async () => {
  h = await Harness.start();
  host = await callerHostApp(h.identity);
});
after(async () => {
  await host.close();
  await h.close();
});

describe('forged and foreign access tokens', () => {
  test('alg none, HS256 keyed with the public key, another issuer or audience, a wrong typ or an MFA ticket: 401 on router and host routes', async () => {
    const user = await h.signUp();
    const claims = decodeJwt(user.accessToken) as Record<string, unknown>;
    const header = JSON.parse(Buffer.from(user.accessToken.split('.')[0]!, 'base64url').toString('utf8')) as Record<string, unknown>;
    // The genuine token re-signed with the real key works: the probes below differ in one point only.
    const genuine = await signWithRouterKey(h, {}, claims);
    assert.equal((await h.get('/auth/me', { token: genuine })).status, 200);
    const jwks = (await h.get('/auth/.well-known/jwks.json')).body.keys as Array<Record<string, string>>;
    const publicJwk = jwks.find((key) => key.kid === header.kid)!;
    const { createPublicKey } = await import('node:crypto');
    const publicPem = createPublicKey({ key: publicJwk as any, format: 'jwk' }).export({ type: 'spki', format: 'pem' }).toString();
    const forged: Record<string, string> = {
      'alg none': `${b64({ alg: 'none', typ: 'at+jwt', kid: header.kid })}.${b64(claims)}.`,
      'HS256 with the public key': jwt.sign(claims, publicPem, { algorithm: 'HS256', header: { alg: 'HS256', typ: 'at+jwt', kid: header.kid as string } as any, noTimestamp: true }),
      'another issuer': await signWithRouterKey(h, {}, { ...claims, iss: 'https://evil.example.test' }),
      'typ JWT': await signWithRouterKey(h, { typ: 'JWT' }, claims),
      'no exp': await signWithRouterKey(h, {}, { ...claims, exp: undefined }),
      'issued an hour ahead': await signWithRouterKey(h, {}, { ...claims, iat: (claims.iat as number) + 3600, exp: (claims.exp as number) + 3600 }),
      'unknown kid': await signWithRouterKey(h, { kid: 'not-a-published-kid' }, claims),
      'a purpose claim (an MFA ticket\'s)': await signWithRouterKey(h, {}, { ...claims, purpose: 'login_mfa' }),
    };
    for (const [name, token] of Object.entries(forged)) {
      assertUnauthorized(await h.get('/auth/me', { token }), name);
      const hosted = await hostRequest('/whoami', { authorization: `Bearer ${token}` });
      assert.equal(hosted.status, 401, `${name} (host): ${hosted.text}`);
      assert.match(String(hosted.headers['www-authenticate'] ?? ''), /^Bearer/, name);
    }
  });

  test('with an audience configured, a token of another audience (same key, same issuer) is 401', async () => {
    const other = await Harness.start({ config: { audience: 'https://api.example.test' } as any });
    try {
      const user = await other.signUp();
      assert.equal((await other.get('/auth/me', { token: user.accessToken })).status, 200);
      const claims = decodeJwt(user.accessToken) as Record<string, unknown>;
      const { kid, privateKey } = await servicesOf(other.identity).keyRing.signingKey();
      for (const aud of ['https://other.example.test', undefined]) {
        const input = `${b64({ alg: 'RS256', typ: 'at+jwt', kid })}.${b64({ ...claims, aud })}`;
        const token = `${input}.${createSign('sha256').update(input).sign(privateKey).toString('base64url')}`;
        assertUnauthorized(await other.get('/auth/me', { token }), `aud ${aud}`);
      }
    } finally {
      await other.close();
    }
  });

  test('an MFA ticket is refused as an access token on host routes too', async () => {
    const user = await h.signUp();
    // An MFA ticket made by the router's own codec for this user.
    const { token } = await servicesOf(h.identity).context.jwt.signMfaTicket(user.userId, '00000000-0000-4000-8000-000000000000');
    const hosted = await hostRequest('/whoami', { authorization: `Bearer ${token}` });
    assert.equal(hosted.status, 401, hosted.text);
    assertUnauthorized(await h.get('/auth/me', { token }));
  });
});

describe('a refresh token does not outlive its session', () => {
  test('after logout, logout-all, or DELETE /auth/sessions/{id}: 401 invalid_grant, and no reuse event', async () => {
    const user = await h.signUp();
    const reuseBefore = h.eventsOfType('auth.refresh_reuse_detected').length;
    assert.equal((await h.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
    assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant', 'after logout');

    const second = await h.post('/auth/login', { email: user.email, password: user.password });
    const third = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal((await h.post('/auth/logout-all', {}, { token: second.body.data.access_token })).status, 200);
    assertError(await h.post('/auth/token/refresh', { refresh_token: third.body.data.refresh_token }), 401, 'invalid_grant', 'after logout-all');
    assertUnauthorized(await h.get('/auth/me', { token: third.body.data.access_token }), 'access after logout-all');

    const fourth = await h.post('/auth/login', { email: user.email, password: user.password });
    const fifth = await h.post('/auth/login', { email: user.email, password: user.password });
    const sid = decodeJwt(fifth.body.data.access_token).sid;
    assert.equal((await h.delete(`/auth/sessions/${sid}`, { token: fourth.body.data.access_token })).status, 200);
    assertError(await h.post('/auth/token/refresh', { refresh_token: fifth.body.data.refresh_token }), 401, 'invalid_grant', 'after DELETE');
    assertUnauthorized(await h.get('/auth/me', { token: fifth.body.data.access_token }), 'access after DELETE');
    const hosted = await hostRequest('/whoami', { authorization: `Bearer ${fifth.body.data.access_token}` });
    assert.equal(hosted.status, 401, hosted.text);
    assert.equal(h.eventsOfType('auth.refresh_reuse_detected').length, reuseBefore, 'an ended session is no replay');
  });

  test('the refresh token of one user cannot act for another, and an access token is not a refresh token', async () => {
    const user = await h.signUp();
    const response = await h.post('/auth/token/refresh', { refresh_token: user.accessToken });
    // Longer than any refresh token: refused by the schema (422), as docs/security.md allows; never a grant.
    assert.ok(response.status === 401 || response.status === 422, response.text);
    const other = await h.signUp();
    const [, , generation, mac] = other.refreshToken.split('.');
    const grafted = `rt1.${decodeJwt(user.accessToken).sid}.${generation}.${mac}`;
    assertError(await h.post('/auth/token/refresh', { refresh_token: grafted }), 401, 'invalid_grant');
  });
});

describe('odd Authorization lines', () => {
  test('answer 401 with WWW-Authenticate, never 500 nor internals, on router and host routes', async () => {
    const user = await h.signUp();
    const values = [
      '', 'Bearer', 'Bearer ', 'bearer', `Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer a.b.c', 'Bearer ....', 'Bearer =',
      `Bearer ${'a'.repeat(8000)}`, `Bearer ${'a'.repeat(3000)}.${'b'.repeat(3000)}.${'c'.repeat(1000)}`,
      `Bearer ${user.accessToken}x`, `Bearer ${user.accessToken} ${user.accessToken}`, `Bearer ${user.accessToken},Bearer ${user.accessToken}`,
      `Token ${user.accessToken}`, `Bearer\t${user.accessToken}`, `Bearer ${user.refreshToken}`,
      `Bearer ${b64({ alg: 'RS256', typ: 'at+jwt', kid: { a: 1 } })}.${b64({ sub: 1 })}.sig`,
      `Bearer ${b64({ alg: 'RS256', typ: 'at+jwt', kid: 'x'.repeat(5000) })}.${b64({})}.sig`,
      `Bearer ${b64({ alg: 'RS256', typ: 'at+jwt', kid: '__proto__' })}.${b64({})}.sig`,
      `Bearer ${Buffer.from('null').toString('base64url')}.${Buffer.from('[]').toString('base64url')}.sig`,
    ];
    for (const value of values) {
      const label = value.slice(0, 40);
      const response = await h.request('GET', '/auth/me', { headers: { authorization: value } });
      assertNoInternals(response, label);
      assertUnauthorized(response, label);
      const hosted = await hostRequest('/whoami', { authorization: value });
      assert.equal(hosted.status, 401, `${label} (host): ${hosted.text}`);
      assert.equal(hosted.body?.error, 'unauthorized', label);
      assert.match(String(hosted.headers['www-authenticate'] ?? ''), /^Bearer/, label);
    }
    // Two lines, one genuine: ambiguous (CONTRACT 6).
    const twice = await hostRequest('/whoami', { authorization: [`Bearer ${user.accessToken}`, `Bearer ${user.accessToken}`] });
    assert.equal(twice.status, 401, twice.text);
    assert.equal(h.logs.filter((line) => line.level === 'error').length, 0, JSON.stringify(h.logs.filter((line) => line.level === 'error')));
  });
});

describe('odd input on the session routes', () => {
  test('odd refresh bodies, cursors, limits and session ids are 401 invalid_grant, 404 or 422, never 500', async () => {
    const user = await h.signUp();
    const sid = decodeJwt(user.accessToken).sid as string;
    const refreshBodies: unknown[] = [
      { refresh_token: 42 }, { refresh_token: ['x'] }, { refresh_token: { a: 1 } }, { refresh_token: '' }, { refresh_token: null },
      { refresh_token: `rt1.${sid}.999999999999999.${'A'.repeat(43)}` }, { refresh_token: `rt1.${sid.toUpperCase()}.0.${'A'.repeat(43)}` },
      { refresh_token: 'rt1.' }, { refresh_token: 'x'.repeat(512) }, { refresh_token: '\u0000' }, { refresh_token: '%00' },
    ];
    for (const body of refreshBodies) {
      const response = await h.post('/auth/token/refresh', body);
      assertNoInternals(response, JSON.stringify(body));
      assert.ok([401, 422].includes(response.status), `${JSON.stringify(body)}: ${response.text}`);
      if (response.status === 401) assert.equal(response.body.error, 'invalid_grant');
    }
    const raw = await h.request('POST', '/auth/token/refresh', { rawBody: '{"refresh_token":' });
    assertNoInternals(raw, 'broken JSON');
    for (const query of ['cursor=abc', 'cursor=', 'limit=0', 'limit=-1', 'limit=1e9', 'limit=abc', 'cursor[]=x', 'limit=1&limit=2', `cursor=${Buffer.from('[1,"x"]').toString('base64url')}`, `cursor=${Buffer.from('{"a":1}').toString('base64url')}`]) {
      const response = await h.get(`/auth/sessions?${query}`, { token: user.accessToken });
      assertNoInternals(response, query);
      assert.ok([200, 422].includes(response.status), `${query}: ${response.text}`);
    }
    for (const id of ['not-a-uuid', '00000000-0000-0000-0000-000000000000', `${sid}x`, '%00', 'x'.repeat(300)]) {
      const response = await h.delete(`/auth/sessions/${id}`, { token: user.accessToken });
      assertNoInternals(response, id);
      assert.ok([404, 422].includes(response.status), `${id}: ${response.text}`);
    }
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'none of it touched the session');
    assert.equal(h.logs.filter((line) => line.level === 'error').length, 0, JSON.stringify(h.logs.filter((line) => line.level === 'error')));
  });
});

describe('CONTRACT 6: a token of an organization the user has left', () => {
  test('answers 403 on both middlewares though its session lives on in another organization, remembered admission or not', async () => {
    for (const ending of ['removed', 'suspended'] as const) {
      const a = await createOrg(h);
      const member = await addMember(h, a, a.owner.token, ['member']);
      const b = await createOrg(h, { owner: member });
      for (const path of ['/whoami', '/org']) {
        // Twice: the second answer is the remembered admission.
        for (let n = 0; n < 2; n += 1) assert.equal((await hostRequest(path, { authorization: `Bearer ${member.token}` })).status, 200, `${ending} ${path} before`);
      }
      // The session moves to B: the token of A stays in time, its session live.
      const inB = await switchOrg(h, member.token, b.id);
      const change = ending === 'removed'
        ? await h.delete(`/orgs/${a.id}/members/${member.userId}`, { token: a.owner.token })
        : await h.patch(`/orgs/${a.id}/members/${member.userId}`, { status: 'suspended' }, { token: a.owner.token });
      assert.equal(change.status, 200, change.text);
      for (const path of ['/whoami', '/org']) {
        const response = await hostRequest(path, { authorization: `Bearer ${member.token}` });
        assert.equal(response.status, 403, `${ending} ${path}: ${response.text}`);
        assert.equal(response.body?.error, 'forbidden', `${ending} ${path}`);
        assert.equal((await hostRequest(path, { authorization: `Bearer ${inB}` })).status, 200, `${ending} ${path}: the session in B lives on`);
      }
    }
  });

  test('the session caller carries the contract\'s fields', async () => {
    const a = await createOrg(h);
    const response = await hostRequest('/org', { authorization: `Bearer ${a.owner.token}` });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(Object.keys(response.body.data).sort(), ['amr', 'auth_time', 'email_verified', 'kind', 'mfa', 'organization_id', 'permissions', 'session_id', 'superadmin', 'user_id']);
    assert.equal(response.body.data.kind, 'session');
    assert.equal(response.body.data.organization_id, a.id);
    assert.ok(response.body.data.permissions.includes('org.read'));
  });
});

describe('CONTRACT 6: a token of an organization deleted since', () => {
  test('answers 403 forbidden on both middlewares though its session lives on in another organization', async () => {
    const a = await createOrg(h);
    const member = await addMember(h, a, a.owner.token, ['admin']);
    const b = await createOrg(h, { owner: member });
    for (const path of ['/whoami', '/org']) assert.equal((await hostRequest(path, { authorization: `Bearer ${member.token}` })).status, 200, `${path} before`);
    const inB = await switchOrg(h, member.token, b.id);
    // The owner deletes A (step-up is moot: the owner has no factor and signed in just now).
    const deleted = await h.delete(`/orgs/${a.id}`, { token: a.owner.token });
    assert.equal(deleted.status, 200, deleted.text);
    for (const path of ['/whoami', '/org']) {
      const response = await hostRequest(path, { authorization: `Bearer ${member.token}` });
      assert.equal(response.status, 403, `${path}: ${response.text}`);
      assert.equal(response.body?.error, 'forbidden', path);
      assert.equal((await hostRequest(path, { authorization: `Bearer ${inB}` })).status, 200, `${path}: the session in B lives on`);
    }
  });
});
