import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, decodeJwt } from './helpers/harness.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('register, verify, login, me, refresh', async () => {
  const user = await h.signUp();
  const claims = decodeJwt(user.accessToken);
  assert.equal(claims.sub, user.userId);
  const me = await h.get('/auth/me', { token: user.accessToken });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.body.data.email, user.email);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  const replay = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(replay.status, 401);
  assert.equal(replay.body.error, 'invalid_grant');
  const jwks = await h.get('/auth/.well-known/jwks.json');
  assert.equal(jwks.body.keys.length, 1);
});
