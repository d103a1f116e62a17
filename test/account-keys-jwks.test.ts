import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, decodeJwtHeader } from './helpers/harness.js';
import { assertUnauthorized } from './helpers/account.js';

// Spec 2.3 JWKS, spec 9 key rotation, CONTRACT 1 rotateSigningKey and several instances on one database.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('JWKS publishes public members only', async () => {
  const response = await h.get('/auth/.well-known/jwks.json');
  assert.equal(response.status, 200);
  assert.equal(response.body.keys.length, 1);
  const [key] = response.body.keys;
  assert.deepEqual(Object.keys(key).sort(), ['alg', 'e', 'kid', 'kty', 'n', 'use']);
  assert.equal(key.kty, 'RSA');
  assert.equal(key.use, 'sig');
  assert.equal(key.alg, 'RS256');
  assert.ok(key.n.length > 300, '2048-bit modulus');
  assert.doesNotMatch(response.text, /"(d|p|q|dp|dq|qi)"/);
});

// Threat: a database dump exposing the signing key.
test('the private key is stored sealed, never as PEM', async () => {
  const rows = await h.knex(`${h.tablePrefix}signing_keys`).select('private_key_sealed', 'public_key_pem');
  assert.ok(rows.length >= 1);
  for (const row of rows) {
    assert.doesNotMatch(row.private_key_sealed, /PRIVATE KEY/);
    assert.match(row.private_key_sealed, /^v1\./);
    assert.match(row.public_key_pem, /PUBLIC KEY/);
  }
});

test('rotation: both keys published, new tokens use the new kid, old tokens still verify; the old key leaves after one access-token lifetime', async () => {
  const before = await h.signUp();
  const oldKid = decodeJwtHeader(before.accessToken).kid;
  const { kid: newKid } = await h.identity.service.rotateSigningKey();
  assert.notEqual(newKid, oldKid);
  const jwks = await h.get('/auth/.well-known/jwks.json');
  assert.deepEqual(jwks.body.keys.map((key: { kid: string }) => key.kid).sort(), [oldKid, newKid].sort());
  const after = await h.signUp();
  assert.equal(decodeJwtHeader(after.accessToken).kid, newKid);
  assert.equal((await h.get('/auth/me', { token: before.accessToken })).status, 200, 'a token of the retiring key still verifies');
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: before.refreshToken });
  assert.equal(decodeJwtHeader(refreshed.body.data.access_token).kid, newKid);

  h.clock.advance(901);
  const later = await h.get('/auth/.well-known/jwks.json');
  assert.deepEqual(later.body.keys.map((key: { kid: string }) => key.kid), [newKid]);
  const login = await h.post('/auth/login', { email: after.email, password: after.password });
  assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).status, 200);
  assertUnauthorized(await h.get('/auth/me', { token: before.accessToken }));
});

// Regression: on SQLite (one pooled connection) re-reading the key table from inside the token-signing
// transaction deadlocked until the pool's acquire timeout once the key cache went stale.
test('signing keeps working promptly after the key cache goes stale', async () => {
  const user = await h.signUp();
  h.clock.advance(120);
  const started = performance.now();
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  const refresh = await h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token });
  assert.equal(refresh.status, 200, refresh.text);
  assert.ok(performance.now() - started < 5000, 'no wait for a pool timeout');
});

test('two routers on one database sign with the same kid and accept each other\'s tokens', async () => {
  const twin = await Harness.start({ shareDatabaseWith: h });
  try {
    const here = await h.signUp();
    const there = await twin.signUp();
    assert.equal(decodeJwtHeader(here.accessToken).kid, decodeJwtHeader(there.accessToken).kid);
    assert.equal((await twin.get('/auth/me', { token: here.accessToken })).status, 200);
    assert.equal((await h.get('/auth/me', { token: there.accessToken })).status, 200);
    // A rotation on one instance: the other verifies the new kid on first sight.
    const { kid } = await twin.identity.service.rotateSigningKey();
    const rotated = await twin.post('/auth/login', { email: there.email, password: there.password });
    assert.equal(decodeJwtHeader(rotated.body.data.access_token).kid, kid);
    assert.equal((await h.get('/auth/me', { token: rotated.body.data.access_token })).status, 200);
    // The other instance's JWKS picks the new key up within its cache period.
    h.clock.advance(61);
    assert.ok((await h.get('/auth/.well-known/jwks.json')).body.keys.some((key: { kid: string }) => key.kid === kid));
  } finally {
    await twin.close();
  }
});
