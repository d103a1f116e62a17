import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, decodeJwtHeader } from '../helpers/harness.js';
import { assertUnauthorized } from '../helpers/account.js';
import { RETIRE_GRACE_SECONDS } from '../../src/services/shared/key-ring.js';

async function waitFor(condition: () => Promise<boolean>, withinMs: number): Promise<void> {
  const deadline = performance.now() + withinMs;
  while (!(await condition())) {
    if (performance.now() > deadline) assert.fail(`not true within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

// docs/database.md JWKS, docs/openapi.yaml key rotation, docs/getting-started.md rotateSigningKey and several instances on one database.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('JWKS publishes public members only: the active key and the next key', async () => {
  const response = await h.get('/auth/.well-known/jwks.json');
  assert.equal(response.status, 200);
  assert.equal(response.body.keys.length, 2, 'the active key and the next one, published ahead of its use (CONTRACT 7)');
  for (const key of response.body.keys) {
    assert.deepEqual(Object.keys(key).sort(), ['alg', 'e', 'kid', 'kty', 'n', 'use']);
    assert.equal(key.kty, 'RSA');
    assert.equal(key.use, 'sig');
    assert.equal(key.alg, 'RS256');
    assert.ok(key.n.length > 300, '2048-bit modulus');
  }
  assert.doesNotMatch(response.text, /"(d|p|q|dp|dq|qi)"/);
  const user = await h.signUp();
  assert.equal(response.body.keys[0].kid, decodeJwtHeader(user.accessToken).kid, 'the active key comes first');
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

test('rotation: the published next key becomes active, a fresh next key is published, old tokens still verify; the old key leaves once its last token has expired', async () => {
  const before = await h.signUp();
  const oldKid = decodeJwtHeader(before.accessToken).kid;
  const published = (await h.get('/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);
  const { kid: newKid } = await h.identity.service.rotateSigningKey();
  assert.notEqual(newKid, oldKid);
  assert.deepEqual(published, [oldKid, newKid], 'the key a rotation activates was published before it');
  const jwks = await h.get('/auth/.well-known/jwks.json');
  const kids = jwks.body.keys.map((key: { kid: string }) => key.kid);
  assert.equal(kids.length, 3);
  assert.deepEqual(kids.slice(0, 1), [newKid]);
  assert.ok(kids.includes(oldKid), 'the retiring key stays published');
  const nextKid = kids.find((kid: string) => kid !== newKid && kid !== oldKid);
  const after = await h.signUp();
  assert.equal(decodeJwtHeader(after.accessToken).kid, newKid);
  assert.equal((await h.get('/auth/me', { token: before.accessToken })).status, 200, 'a token of the retiring key still verifies');
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: before.refreshToken });
  assert.equal(decodeJwtHeader(refreshed.body.data.access_token).kid, newKid);

  // A token the retiring key signed on an instance that had not yet heard of the rotation
  // expires at most one access-token lifetime plus the propagation grace after it.
  h.clock.advance(900 + RETIRE_GRACE_SECONDS - 1);
  assert.ok((await h.get('/auth/.well-known/jwks.json')).body.keys.some((key: { kid: string }) => key.kid === oldKid));
  h.clock.advance(2);
  const later = await h.get('/auth/.well-known/jwks.json');
  assert.deepEqual(later.body.keys.map((key: { kid: string }) => key.kid), [newKid, nextKid]);
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
    // The other instance's JWKS already listed the new key (it was the next key); it now lists the fresh next key too.
    const expected = (await twin.get('/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);
    await waitFor(async () => JSON.stringify((await h.get('/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid)) === JSON.stringify(expected), 1500);
  } finally {
    await twin.close();
  }
});

// Threat: a stream of tokens with made-up kids making every request re-read the key table.
test('unknown kids re-read the key table at most once per interval', async () => {
  const user = await h.signUp();
  const [header, payload, signature] = user.accessToken.split('.') as [string, string, string];
  const forged = (kid: string) => {
    const decoded = JSON.parse(Buffer.from(header, 'base64url').toString()) as Record<string, unknown>;
    return `${Buffer.from(JSON.stringify({ ...decoded, kid })).toString('base64url')}.${payload}.${signature}`;
  };
  const table = `${h.tablePrefix}signing_keys`;
  let reads = 0;
  const onQuery = (query: { sql: string }) => {
    if (query.sql.includes(table)) reads += 1;
  };
  // Let any re-read for staleness happen first, then count only what forged kids cause.
  await h.get('/auth/me', { token: user.accessToken });
  h.knex.on('query', onQuery);
  try {
    for (let index = 0; index < 20; index += 1) assertUnauthorized(await h.get('/auth/me', { token: forged(`forged-${index}`) }));
  } finally {
    h.knex.off('query', onQuery);
  }
  assert.ok(reads <= 2, `20 unknown kids caused ${reads} reads of the key table`);
});

test('two rotations at once on two instances: each promotes the key the other published, one active and one next key remain', async () => {
  const twin = await Harness.start({ shareDatabaseWith: h });
  try {
    const before = (await h.get('/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);
    const [first, second] = await Promise.all([h.identity.service.rotateSigningKey(), twin.identity.service.rotateSigningKey()]);
    assert.notEqual(first.kid, second.kid);
    assert.ok([first.kid, second.kid].includes(before[1]), 'one rotation activated the key published before both');
    const rows = await h.knex(`${h.tablePrefix}signing_keys`).select('kid', 'active_slot', 'next_slot');
    assert.equal(rows.filter((row) => row.active_slot !== null).length, 1);
    assert.equal(rows.filter((row) => row.next_slot !== null).length, 1);
    // Both instances sign with the surviving active key within a second (at once on PostgreSQL,
    // where the later rotation's notice reaches the other instance; SQLite re-reads every second).
    const active = rows.find((row) => row.active_slot !== null)!.kid;
    const user = await twin.signUp();
    for (const instance of [h, twin]) {
      await waitFor(async () => {
        const login = await instance.post('/auth/login', { email: user.email, password: user.password });
        return decodeJwtHeader(login.body.data.access_token).kid === active && (await h.get('/auth/me', { token: login.body.data.access_token })).status === 200;
      }, 1500);
    }
  } finally {
    await twin.close();
  }
});
