import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync, randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import jwt from 'jsonwebtoken';
import { Harness, STRONG_PASSWORD, decodeJwt, decodeJwtHeader, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { assertError, assertNoInternals, assertUnauthorized, assertValidationErrors } from '../helpers/account.js';
import { servicesOf } from '../../src/create-identity-router.js';

// docs/security.md bearer rules and docs/getting-started.md input handling (invalid_json, payload_too_large, no 500s).

let h: Harness;
let user: SignedUpUser;
before(async () => {
  h = await Harness.start();
  user = await h.signUp();
});
after(async () => {
  await h.close();
});

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');

/** Signs claims with the router's own active key, so only the property under test is wrong. */
async function signWithRouterKey(claims: Record<string, unknown>, header: Record<string, unknown> = {}): Promise<string> {
  const { kid, privateKey } = await servicesOf(h.identity).keyRing.signingKey();
  return jwt.sign(claims, privateKey, { algorithm: 'RS256', header: { alg: 'RS256', typ: 'at+jwt', kid, ...header } as jwt.JwtHeader });
}

function validClaims(): Record<string, unknown> {
  const { iat: _iat, exp: _exp, jti: _jti, ...rest } = decodeJwt(user.accessToken);
  const now = Math.floor(h.clock.now() / 1000);
  return { ...rest, jti: randomUUID(), iat: now, exp: now + 900 };
}

test('the forging helper is sound: a correctly signed token with valid claims is accepted', async () => {
  const response = await h.get('/auth/me', { token: await signWithRouterKey(validClaims()) });
  assert.equal(response.status, 200, response.text);
});

test('missing, malformed and garbage credentials are 401 unauthorized with WWW-Authenticate: Bearer', async () => {
  assertUnauthorized(await h.get('/auth/me'), 'no header');
  for (const authorization of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer ', `Token ${user.accessToken}`, 'Bearer a b', 'Bearer garbage', 'Bearer a.b.c', `Bearer ${user.accessToken}x`, `Bearer ${user.accessToken.slice(0, -2)}`]) {
    assertUnauthorized(await h.get('/auth/me', { headers: { authorization } }), authorization.slice(0, 20));
  }
  assert.equal((await h.get('/auth/me', { headers: { authorization: `bearer ${user.accessToken}` } })).status, 200, 'the scheme is case-insensitive');
});

// Threat: replaying a token after its lifetime.
test('an expired access token is refused', async () => {
  const fresh = await h.post('/auth/login', { email: user.email, password: user.password });
  const token = fresh.body.data.access_token;
  h.clock.advance(899);
  assert.equal((await h.get('/auth/me', { token })).status, 200);
  h.clock.advance(2);
  assertUnauthorized(await h.get('/auth/me', { token }));
});

// Threat: forged tokens — another key under our kid, alg none, HS256 keyed with the public key (RFC 8725 2.1).
test('forged tokens are refused: wrong key, alg none, HS256 with the public key', async () => {
  const claims = validClaims();
  const { kid } = decodeJwtHeader(user.accessToken);
  const { privateKey: otherKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  assertUnauthorized(await h.get('/auth/me', { token: jwt.sign(claims, otherKey, { algorithm: 'RS256', header: { alg: 'RS256', typ: 'at+jwt', kid } as jwt.JwtHeader }) }), 'other key');

  const unsigned = `${base64url({ alg: 'none', typ: 'at+jwt', kid })}.${base64url(claims)}.`;
  assertUnauthorized(await h.get('/auth/me', { token: unsigned }), 'alg none');
  assertUnauthorized(await h.get('/auth/me', { headers: { authorization: `Bearer ${unsigned}` } }), 'alg none raw');

  const jwks = await h.get('/auth/.well-known/jwks.json');
  const jwk = jwks.body.keys.find((key: { kid: string }) => key.kid === kid);
  const { createPublicKey } = await import('node:crypto');
  const publicPem = createPublicKey({ key: jwk, format: 'jwk' }).export({ format: 'pem', type: 'spki' }).toString();
  const signingInput = `${base64url({ alg: 'HS256', typ: 'at+jwt', kid })}.${base64url(claims)}`;
  const hs256 = `${signingInput}.${createHmac('sha256', publicPem).update(signingInput).digest('base64url')}`;
  assertUnauthorized(await h.get('/auth/me', { token: hs256 }), 'HS256 with the public key');

  // Tampering with a real token's payload breaks its signature.
  const [header, , signature] = user.accessToken.split('.');
  const tampered = `${header}.${base64url({ ...decodeJwt(user.accessToken), sub: randomUUID() })}.${signature}`;
  assertUnauthorized(await h.get('/auth/me', { token: tampered }), 'tampered payload');
});

test('tokens signed with the right key but without exp, with another typ, issuer or unknown kid are refused', async () => {
  const { exp: _exp, ...withoutExp } = validClaims();
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey(withoutExp) }), 'no exp');
  for (const typ of ['JWT', 'mfa+jwt', undefined]) {
    assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey(validClaims(), { typ }) }), `typ ${typ}`);
  }
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey({ ...validClaims(), iss: 'https://evil.example' }) }), 'issuer');
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey(validClaims(), { kid: 'unknown-kid' }) }), 'kid');
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey({ ...validClaims(), sid: randomUUID() }) }), 'unknown session');
  const stranger = await h.signUp();
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey({ ...validClaims(), sub: stranger.userId }) }), 'sid of another user');
  const now = Math.floor(h.clock.now() / 1000);
  assertUnauthorized(await h.get('/auth/me', { token: await signWithRouterKey({ ...validClaims(), iat: now + 3600, exp: now + 4500 }) }), 'issued in the future');
});

test('a token of a revoked session or a disabled account is refused', async () => {
  const victim = await h.signUp();
  await h.post('/auth/logout', {}, { token: victim.accessToken });
  assertUnauthorized(await h.get('/auth/me', { token: victim.accessToken }), 'revoked');
  const disabled = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: disabled.userId }).update({ status: 'disabled' });
  assertUnauthorized(await h.get('/auth/me', { token: disabled.accessToken }), 'disabled');
});

test('malformed JSON is 400 invalid_json; a body over 100 kB is 413 payload_too_large', async () => {
  const malformed = await h.request('POST', '/auth/login', { rawBody: '{"email": "a@b.io", "password": ' });
  assertError(malformed, 400, 'invalid_json');
  const huge = await h.request('POST', '/auth/register', { rawBody: JSON.stringify({ email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'x'.repeat(101 * 1024) }) });
  assertError(huge, 413, 'payload_too_large');
  const bearerHuge = await h.request('POST', '/auth/logout', { rawBody: JSON.stringify({ padding: 'x'.repeat(101 * 1024) }), token: user.accessToken });
  assert.ok([401, 413].includes(bearerHuge.status), bearerHuge.text);
});

test('a JSON body that is not an object is 422', async () => {
  for (const rawBody of ['[]', '[{"email":"a@b.io"}]', '"a string"', '42', 'true']) {
    assertValidationErrors(await h.request('POST', '/auth/login', { rawBody }), undefined, rawBody);
  }
  // null is no body at all: the required fields are missing.
  assertValidationErrors(await h.request('POST', '/auth/login', { rawBody: 'null' }), /required/);
  // A body of another media type is refused, naming the type expected.
  const form = await h.request('POST', '/auth/login', { rawBody: 'email=a@b.io', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  assertError(form, 415, 'unsupported_media_type');
  assert.match(form.body.message, /application\/json/);
});

// Threat: odd input reaching SQL or crashing a handler (a 500 with internals in the body).
test('fuzzed bodies never produce a 500 or leak internals', async () => {
  const odd: unknown[] = [
    null, 0, -1, 1e308, true, 'string', [], [1, 2], {}, { nested: { deep: { deeper: [1, { x: null }] } } },
    'x'.repeat(50_000), '\u0000', 'a\u0000b@example.com', '💥'.repeat(200), '\ud800', 'Ω≈ç√∫˜µ≤≥÷', '<script>alert(1)</script>', "' OR 1=1 --",
    { $ne: null }, { toString: 'x' }, ['a@b.io'],
  ];
  const fields = ['email', 'password', 'display_name', 'token', 'refresh_token', 'new_password', 'current_password', 'organization_id'];
  const routes: Array<[string, boolean]> = [
    ['/auth/register', false], ['/auth/login', false], ['/auth/email/verify', false], ['/auth/email/verify/resend', false],
    ['/auth/token/refresh', false], ['/auth/password/forgot', false], ['/auth/password/reset', false],
    ['/auth/password/change', true], ['/auth/switch-org', true],
  ];
  const fresh = await h.signUp();
  for (const [path, needsToken] of routes) {
    for (const value of odd) {
      const body: Record<string, unknown> = {};
      for (const field of fields) body[field] = value;
      const response = await h.post(path, body, needsToken ? { token: fresh.accessToken } : {});
      assertNoInternals(response, `${path} ${JSON.stringify(value)?.slice(0, 40)}`);
      // Valid-looking strings with a NUL byte and odd unicode per field, one at a time.
      if (typeof value === 'string' && value.length < 1000) {
        for (const field of fields) {
          const single = await h.post(path, { email: uniqueEmail(), password: STRONG_PASSWORD, [field]: value }, needsToken ? { token: fresh.accessToken } : {});
          assertNoInternals(single, `${path} ${field}=${JSON.stringify(value).slice(0, 40)}`);
        }
      }
    }
  }
  for (const path of ['/auth/sessions/%00', '/auth/sessions/%FF', '/auth/sessions/a%00b', `/auth/sessions/${'x'.repeat(300)}`, '/auth/sessions/%E2%82']) {
    assertNoInternals(await h.delete(path, { token: fresh.accessToken }), path);
  }
  for (const query of ['?limit=1e400', '?limit=-1', '?limit=%00', '?cursor=%00', '?limit=1&limit=2', '?cursor[]=x']) {
    assertNoInternals(await h.get(`/auth/sessions${query}`, { token: fresh.accessToken }), query);
  }
  assertNoInternals(await h.request('POST', '/auth/login', { rawBody: '{"email":"a@b.io"', headers: { 'content-type': 'application/json; charset=utf-16' } }), 'charset');
  assert.equal((await h.get('/auth/me', { token: fresh.accessToken })).status, 200, 'the account still works');
  // The odd current_password values above count toward the lockout; lift it to log in again.
  await servicesOf(h.identity).context.store.repos.users.clearFailedLogins(fresh.userId);
  for (const value of odd) assertNoInternals(await h.post('/auth/logout-all', value, { token: (await h.post('/auth/login', { email: fresh.email, password: fresh.password })).body.data.access_token }), `logout-all ${JSON.stringify(value)?.slice(0, 40)}`);
  assert.equal(h.logs.filter((line) => line.msg === 'unexpected error').length, 0, JSON.stringify(h.logs.filter((line) => line.msg === 'unexpected error')));
});
