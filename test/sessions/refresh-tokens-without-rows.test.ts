import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { keyedHash, randomToken } from '../../src/crypto/keyed-hash.js';
import { assertError } from '../helpers/account.js';
import { Harness, decodeJwt } from '../helpers/harness.js';

// docs/security.md, "Refresh tokens and sessions": a refresh token names its session and the
// session's refresh generation under a MAC, and nothing of it is stored; tokens issued before
// (random values stored as keyed hashes) keep working until used or expired.

const SECRET = 'test-secret-that-is-at-least-32-characters-long';
const TOKEN_SHAPE = /^rt1\.([0-9a-f-]{36})\.(\d+)\.([A-Za-z0-9_-]{43})$/;

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const generationOf = async (sessionId: string) => Number((await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first()).refresh_generation);
const refresh = (refreshToken: string) => h.post('/auth/token/refresh', { refresh_token: refreshToken });
/** The token with one of its three parts replaced. */
const withPart = (token: string, index: 1 | 2 | 3, value: string) => token.split('.').map((part, at) => (at === index ? value : part)).join('.');

describe('a refresh token names its session and generation under a MAC', () => {
  test('login and each rotation answer the session and the next generation; no token, hash or row is stored', async () => {
    const user = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    assert.deepEqual(TOKEN_SHAPE.exec(user.refreshToken)?.slice(1, 3), [sessionId, '0']);
    let token = user.refreshToken;
    for (const generation of [1, 2, 3]) {
      const response = await refresh(token);
      assert.equal(response.status, 200, response.text);
      token = response.body.data.refresh_token;
      assert.deepEqual(TOKEN_SHAPE.exec(token)?.slice(1, 3), [sessionId, String(generation)]);
      assert.equal(await generationOf(sessionId), generation);
    }
    assert.equal((await h.knex(`${h.tablePrefix}refresh_tokens`).where({ session_id: sessionId })).length, 0);
    const row = JSON.stringify(await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first());
    assert.ok(!row.includes(token.split('.')[3]!), 'the MAC is not stored');
  });

  // Threat: a client edits its own token to reach another session, to step back to a generation
  // it never held (which would revoke the rightful family), or forward past the current one.
  test('a token with its session, generation or MAC changed is 401 invalid_grant and changes nothing', async () => {
    const user = await h.signUp();
    const victim = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const rotated = (await refresh(user.refreshToken)).body.data.refresh_token as string;
    const mac = rotated.split('.')[3]!;
    const forged = [
      withPart(rotated, 1, decodeJwt(victim.accessToken).sid as string),
      withPart(rotated, 2, '0'),
      withPart(rotated, 2, '2'),
      withPart(rotated, 2, '01'),
      withPart(rotated, 3, `${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`),
      withPart(rotated, 3, randomToken()),
      `rt2.${rotated.slice(4)}`,
      `${rotated}.`,
    ];
    for (const token of forged) assertError(await refresh(token), 401, 'invalid_grant', token);
    assert.equal(h.eventsOfType('auth.refresh_reuse_detected').length, 0);
    assert.equal(await generationOf(sessionId), 1);
    assert.equal((await refresh(rotated)).status, 200, 'the rightful token still works');
    assert.equal((await refresh(victim.refreshToken)).status, 200, "the other session's too");
  });

  test('a token made with another secret is 401 invalid_grant', async () => {
    const other = await Harness.start({ config: { secret: 'another-secret-that-is-at-least-32-characters' } });
    try {
      const stranger = await other.signUp();
      assertError(await refresh(stranger.refreshToken), 401, 'invalid_grant');
    } finally {
      await other.close();
    }
  });

  // Threat: a stolen refresh token used after its rightful client rotated it (or before).
  test('an older generation presented again revokes the session: auth.refresh_reuse_detected, and the current token dies too', async () => {
    const user = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const first = (await refresh(user.refreshToken)).body.data.refresh_token as string;
    const second = (await refresh(first)).body.data.refresh_token as string;
    assertError(await refresh(first), 401, 'invalid_grant');
    const detected = h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId);
    assert.equal(detected.length, 1);
    assertError(await refresh(second), 401, 'invalid_grant');
    assertError(await refresh(user.refreshToken), 401, 'invalid_grant');
    assert.equal(h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId).length, 1, 'reported once');
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 401);
  });
});

// A database restored to a moment before a refresh (a failover to a replica that had not got
// it, a backup) is behind the tokens its clients hold. That is not a replay: the newest token is
// refused, and the session and its older token live on.
test('a token ahead of the database is 401 invalid_grant and revokes nothing', async () => {
  const user = await h.signUp();
  const sessionId = decodeJwt(user.accessToken).sid as string;
  const ahead = (await refresh(user.refreshToken)).body.data.refresh_token as string;
  await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).update({ refresh_generation: 0 });
  assertError(await refresh(ahead), 401, 'invalid_grant');
  assert.equal(h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId).length, 0);
  assert.equal((await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first()).revoked_at, null);
  assert.equal((await refresh(user.refreshToken)).status, 200, 'the token of the generation the database has');
});

describe('refresh tokens stored before (a keyed hash in the refresh-token table)', () => {
  /** A token as the router stored them before: 256 random bits, kept as their keyed hash. */
  async function storedToken(harness: Harness, sessionId: string, expiresAt = harness.clock.now() + 30 * 24 * 3600 * 1000): Promise<string> {
    const token = randomToken();
    await harness.knex(`${harness.tablePrefix}refresh_tokens`).insert({
      id: randomUUID(),
      session_id: sessionId,
      token_hash: keyedHash(deriveKeys(SECRET).tokenHash, token),
      created_at: harness.clock.now(),
      expires_at: expiresAt,
    });
    return token;
  }
  const storedHash = (token: string) => keyedHash(deriveKeys(SECRET).tokenHash, token);

  test('one refreshes once into a MAC-named token; used again it revokes the session', async () => {
    const user = await h.signUp();
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const stored = await storedToken(h, sessionId);
    const response = await refresh(stored);
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(TOKEN_SHAPE.exec(response.body.data.refresh_token)?.slice(1, 3), [sessionId, '1']);
    assert.notEqual((await h.knex(`${h.tablePrefix}refresh_tokens`).where({ session_id: sessionId }).first()).consumed_at, null);
    assertError(await refresh(stored), 401, 'invalid_grant');
    assert.equal(h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId).length, 1);
    assertError(await refresh(response.body.data.refresh_token), 401, 'invalid_grant');
  });

  test('an expired one is 401 invalid_grant', async () => {
    const user = await h.signUp();
    const stored = await storedToken(h, decodeJwt(user.accessToken).sid as string);
    h.clock.advance(30 * 24 * 3600 + 1);
    assertError(await refresh(stored), 401, 'invalid_grant');
  });

  // No new token is stored, so the table only shrinks: at each start the rows nobody can use go.
  test('at start-up the stored tokens nobody can use are deleted; a used one of a live session stays and still revokes on replay', async () => {
    const sessionOf = (user: { accessToken: string }) => decodeJwt(user.accessToken).sid as string;
    const live = await h.signUp();
    const used = await storedToken(h, sessionOf(live));
    assert.equal((await refresh(used)).status, 200);
    const unused = await storedToken(h, sessionOf(live));
    const lapsed = await storedToken(h, sessionOf(live), h.clock.now() - 1);
    const loggedOut = await h.signUp();
    const ofLoggedOut = await storedToken(h, sessionOf(loggedOut));
    assert.equal((await h.post('/auth/logout', undefined, { token: loggedOut.accessToken })).status, 200);
    const expired = await h.signUp();
    const ofExpired = await storedToken(h, sessionOf(expired));
    await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionOf(expired) }).update({ expires_at: h.clock.now() - 1 });

    const stored = async () => new Set(await h.knex(`${h.tablePrefix}refresh_tokens`).whereIn('token_hash', [used, unused, lapsed, ofLoggedOut, ofExpired].map(storedHash)).pluck('token_hash'));
    assert.equal((await stored()).size, 5);
    const restarted = await Harness.start({ shareDatabaseWith: h });
    await restarted.close();
    assert.deepEqual(await stored(), new Set([used, unused].map(storedHash)));

    assertError(await refresh(used), 401, 'invalid_grant');
    assert.equal(h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionOf(live)).length, 1, 'the replay was still detected');
  });

  test('with tokens.refreshRotation false it is answered back as it came, and keeps working', async () => {
    const noRotation = await Harness.start({ config: { tokens: { refreshRotation: false } } });
    try {
      const user = await noRotation.signUp();
      const stored = await storedToken(noRotation, decodeJwt(user.accessToken).sid as string);
      for (let round = 0; round < 2; round += 1) {
        const response = await noRotation.post('/auth/token/refresh', { refresh_token: stored });
        assert.equal(response.status, 200, response.text);
        assert.equal(response.body.data.refresh_token, stored);
      }
    } finally {
      await noRotation.close();
    }
  });
});
