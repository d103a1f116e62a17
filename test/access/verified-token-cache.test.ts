import assert from 'node:assert/strict';
import { createPublicKey } from 'node:crypto';
import { after, before, test } from 'node:test';
import { importJWK, jwtVerify } from 'jose';
import { Harness, decodeJwt, decodeJwtHeader } from '../helpers/harness.js';
import { assertUnauthorized } from '../helpers/account.js';

// Issue 11: an access token verified once is answered from memory the next time it is
// presented. Only time and the key ring can make a signature invalid, so a remembered token
// must still fail the moment it expires or its key leaves the ring, and a revoked session
// must fail at once (docs/multiple-instances.md) whether or not its token was verified before.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('a remembered token is refused from the second it expires', async () => {
  const user = await h.signUp();
  const { exp } = decodeJwt(user.accessToken);
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'presented again: answered from memory');
  h.clock.advance(exp - Math.floor(h.clock.now() / 1000) - 1);
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'one second before exp');
  h.clock.advance(1);
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }), 'at exp');
});

test('a remembered token is refused once its key has left the ring', async () => {
  const user = await h.signUp();
  const { kid } = decodeJwtHeader(user.accessToken);
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  await h.identity.service.rotateSigningKey();
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'a retiring key still verifies');
  // An operator removes the key (say it leaked); the next rotation makes the ring re-read the table.
  await h.knex(`${h.tablePrefix}signing_keys`).where({ kid }).delete();
  await h.identity.service.rotateSigningKey();
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }), 'its key is gone');
});

test('a token that ends like a remembered one but differs before its signature is verified in full and refused', async () => {
  const victim = await h.signUp();
  const attacker = await h.signUp();
  assert.equal((await h.get('/auth/me', { token: victim.accessToken })).status, 200, 'the victim\'s token is remembered');
  // The attacker's own claims under the victim's signature: only the whole token may count as a hit.
  const [, , signature] = victim.accessToken.split('.');
  const [header, payload] = attacker.accessToken.split('.');
  const forged = `${header}.${payload}.${signature}`;
  assertUnauthorized(await h.get('/auth/me', { token: forged }), 'a forged token with a remembered signature');
  const me = await h.get('/auth/me', { token: victim.accessToken });
  assert.equal(me.status, 200);
  assert.equal(me.body.data.email, victim.email, 'the victim\'s token still answers as the victim');
});

test('a remembered token of a revoked session is refused at once', async () => {
  const user = await h.signUp();
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  assert.equal((await h.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }), 'after logout');
});

test('a token signed off the event loop is a plain RS256 JWS: header alg, typ, kid; verifies with jose against the JWKS', async () => {
  const user = await h.signUp();
  const header = decodeJwtHeader(user.accessToken);
  assert.deepEqual(header, { alg: 'RS256', typ: 'at+jwt', kid: header.kid });
  const jwks = (await h.get('/auth/.well-known/jwks.json')).body.keys as Array<{ kid: string }>;
  const jwk = jwks.find((key) => key.kid === header.kid)!;
  const { payload } = await jwtVerify(user.accessToken, await importJWK(jwk, 'RS256'), { issuer: 'https://id.example.test', typ: 'at+jwt', currentDate: new Date(h.clock.now()) });
  assert.equal(payload.sub, user.userId);
  // The same key through node:crypto, as a resource server without jose would hold it.
  assert.equal(createPublicKey({ key: jwk, format: 'jwk' }).asymmetricKeyType, 'rsa');
});
