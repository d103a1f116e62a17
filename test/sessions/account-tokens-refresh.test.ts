import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, decodeJwt } from '../helpers/harness.js';
import { assertError, assertUnauthorized, assertValidationErrors } from '../helpers/account.js';

// docs/security.md POST /auth/token/refresh, docs/security.md session and refresh token, docs/events.md auth.token_refreshed / auth.refresh_reuse_detected.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('refresh rotates: a new access token and a new refresh token; the old one is consumed', async () => {
  const user = await h.signUp();
  h.clock.advance(60);
  const response = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(response.status, 200, response.text);
  const data = response.body.data;
  assert.deepEqual(Object.keys(data).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type']);
  assert.equal(data.token_type, 'Bearer');
  assert.equal(data.expires_in, 900);
  assert.notEqual(data.refresh_token, user.refreshToken);
  assert.notEqual(data.access_token, user.accessToken);
  const before = decodeJwt(user.accessToken);
  const claims = decodeJwt(data.access_token);
  assert.equal(claims.sid, before.sid, 'same session');
  assert.equal(claims.sub, user.userId);
  assert.equal(claims.iat, before.iat + 60);
  // mfa, amr and auth_time survive refresh (docs/database.md).
  assert.equal(claims.mfa, before.mfa);
  assert.deepEqual(claims.amr, before.amr);
  assert.equal(claims.auth_time, before.auth_time);
  assert.equal((await h.get('/auth/me', { token: data.access_token })).status, 200);
  const refreshed = h.eventsOfType('auth.token_refreshed').filter((event) => event.user_id === user.userId);
  assert.equal(refreshed.length, 1);
  // The new refresh token works in turn.
  const next = await h.post('/auth/token/refresh', { refresh_token: data.refresh_token });
  assert.equal(next.status, 200, next.text);
});

// Threat: a stolen refresh token used after the legitimate client rotated it (RFC 6819 5.2.2.3).
test('replay of a rotated refresh token revokes the whole family', async () => {
  const user = await h.signUp();
  const rotated = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(rotated.status, 200);
  const reuseBefore = h.eventsOfType('auth.refresh_reuse_detected').length;
  const replay = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assertError(replay, 401, 'invalid_grant');
  const reuse = h.eventsOfType('auth.refresh_reuse_detected').slice(reuseBefore);
  assert.equal(reuse.length, 1);
  assert.equal(reuse[0]!.user_id, user.userId);
  // The family is dead: the newest refresh token and the session's access tokens are refused.
  assertError(await h.post('/auth/token/refresh', { refresh_token: rotated.body.data.refresh_token }), 401, 'invalid_grant');
  assertUnauthorized(await h.get('/auth/me', { token: rotated.body.data.access_token }));
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
  // Another session of the same user is untouched.
  const other = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal((await h.get('/auth/me', { token: other.body.data.access_token })).status, 200);
});

test('unknown, expired and malformed refresh tokens are 401 invalid_grant or 422', async () => {
  assertError(await h.post('/auth/token/refresh', { refresh_token: 'not-a-token-we-issued' }), 401, 'invalid_grant');
  assertValidationErrors(await h.post('/auth/token/refresh', {}), /"refresh_token" is required/);
  assertValidationErrors(await h.post('/auth/token/refresh', { refresh_token: 12 }), /"refresh_token"/);
  const user = await h.signUp();
  h.clock.advance(30 * 24 * 3600 + 1); // tokens.refreshTtl default 30 days
  assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
});

test('refresh is sliding: each rotation issues a token valid a full refreshTtl', async () => {
  const user = await h.signUp();
  h.clock.advance(20 * 24 * 3600);
  const first = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(first.status, 200);
  h.clock.advance(20 * 24 * 3600);
  const second = await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token });
  assert.equal(second.status, 200, second.text);
});

test('a refresh for a disabled account is refused', async () => {
  const user = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ status: 'disabled' });
  assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
});

test('with tokens.refreshRotation false the same refresh token keeps working', async () => {
  const noRotation = await Harness.start({ config: { tokens: { refreshRotation: false } } });
  try {
    const user = await noRotation.signUp();
    for (let round = 0; round < 3; round += 1) {
      noRotation.clock.advance(10);
      const response = await noRotation.post('/auth/token/refresh', { refresh_token: user.refreshToken });
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.data.refresh_token, user.refreshToken);
      assert.equal(decodeJwt(response.body.data.access_token).sid, decodeJwt(user.accessToken).sid);
    }
    assert.equal(noRotation.eventsOfType('auth.refresh_reuse_detected').length, 0);
  } finally {
    await noRotation.close();
  }
});

// Threat: two parallel refreshes both winning would fork the family (single-use primitive, STYLE 4).
// On SQLite the twenty can share one group commit (src/store/group-commit.ts): the first moves the session, the rest find it moved.
test('twenty concurrent refreshes with one token give exactly one 200', async () => {
  const user = await h.signUp();
  const responses = await Promise.all(Array.from({ length: 20 }, () => h.post('/auth/token/refresh', { refresh_token: user.refreshToken })));
  const statuses = responses.map((response) => response.status);
  assert.equal(statuses.filter((status) => status === 200).length, 1, statuses.join(','));
  for (const response of responses) if (response.status !== 200) assertError(response, 401, 'invalid_grant');
  // Exactly one rotation committed: the session moved from generation 0 to 1, once.
  const session = await h.knex(`${h.tablePrefix}sessions`).where({ id: decodeJwt(user.accessToken).sid }).first();
  assert.equal(Number(session.refresh_generation), 1);
});

test('sequential double use on any database: one 200, then invalid_grant', async () => {
  const user = await h.signUp();
  const first = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  const second = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(first.status, 200);
  assertError(second, 401, 'invalid_grant');
});

// Threat: a stolen refresh token kept alive forever by sliding refresh. The
// session has an absolute lifetime from login that no rotation extends.
test('tokens.sessionMaxAge ends the session however often it is refreshed', async () => {
  const DAY = 24 * 3600;
  const capped = await Harness.start({ config: { tokens: { refreshTtl: 4 * DAY, sessionMaxAge: 10 * DAY } } });
  try {
    const user = await capped.signUp();
    const loggedInAt = capped.clock.now();
    let refreshToken = user.refreshToken;
    let accessToken = user.accessToken;
    // Rotations at days 3, 6, 9 and 10 minus a minute all succeed; none reaches past day 10.
    for (const day of [3, 6, 9, 10 - 60 / DAY]) {
      capped.clock.set(loggedInAt + day * DAY * 1000);
      const response = await capped.post('/auth/token/refresh', { refresh_token: refreshToken });
      assert.equal(response.status, 200, `day ${day}: ${response.text}`);
      refreshToken = response.body.data.refresh_token;
      accessToken = response.body.data.access_token;
    }
    const session = await capped.knex(`${capped.tablePrefix}sessions`).where({ id: decodeJwt(accessToken).sid }).first();
    assert.equal(Number(session.expires_at), loggedInAt + 10 * DAY * 1000);
    assert.equal((await capped.get('/auth/me', { token: accessToken })).status, 200);

    // Two minutes later the session is over: the refresh token and the unexpired access token both fail.
    capped.clock.advance(120);
    assertError(await capped.post('/auth/token/refresh', { refresh_token: refreshToken }), 401, 'invalid_grant');
    assertUnauthorized(await capped.get('/auth/me', { token: accessToken }));
  } finally {
    await capped.close();
  }
});

test('tokens.sessionMaxAge defaults to 90 days', async () => {
  const user = await h.signUp();
  const session = await h.knex(`${h.tablePrefix}sessions`).where({ id: decodeJwt(user.accessToken).sid }).first();
  // The default refreshTtl (30 days) is shorter: a fresh session is capped by it, not by the 90 days.
  assert.equal(Number(session.expires_at) - Number(session.created_at), 30 * 24 * 3600 * 1000);
  let refreshToken = user.refreshToken;
  for (let round = 0; round < 4; round += 1) {
    h.clock.advance(25 * 24 * 3600);
    const response = await h.post('/auth/token/refresh', { refresh_token: refreshToken });
    if (round < 3) {
      assert.equal(response.status, 200, `round ${round}: ${response.text}`);
      refreshToken = response.body.data.refresh_token;
    } else {
      // Day 100 is past day 90: refused although the last rotation (day 75) promised 30 more days.
      assertError(response, 401, 'invalid_grant');
    }
  }
});
