import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { Harness, decodeJwt } from '../helpers/harness.js';
import { assertError, assertUnauthorized, assertValidationErrors } from '../helpers/account.js';

// docs/security.md logout, logout-all, sessions, switch-org and GET /auth/me; docs/events.md auth.sessions_revoked.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function loginAgain(user: { email: string; password: string }, userAgent = 'test-agent'): Promise<{ accessToken: string; refreshToken: string; sid: string }> {
  const response = await h.post('/auth/login', { email: user.email, password: user.password }, { headers: { 'user-agent': userAgent } });
  assert.equal(response.status, 200, response.text);
  return { accessToken: response.body.data.access_token, refreshToken: response.body.data.refresh_token, sid: decodeJwt(response.body.data.access_token).sid };
}

test('logout revokes the current session only', async () => {
  const user = await h.signUp();
  const other = await loginAgain(user);
  const response = await h.post('/auth/logout', undefined, { token: user.accessToken });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body, { data: { status: 'logged_out' } });
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
  assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
  assert.equal((await h.get('/auth/me', { token: other.accessToken })).status, 200);
  assertUnauthorized(await h.post('/auth/logout', {}, { token: user.accessToken }), 'a second logout');
});

test('logout-all revokes every session and emits auth.sessions_revoked with the count', async () => {
  const user = await h.signUp();
  const second = await loginAgain(user);
  const third = await loginAgain(user);
  const bystander = await h.signUp();
  const response = await h.post('/auth/logout-all', {}, { token: user.accessToken });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body, { data: { status: 'logged_out_all' } });
  for (const token of [user.accessToken, second.accessToken, third.accessToken]) assertUnauthorized(await h.get('/auth/me', { token }));
  for (const refreshToken of [user.refreshToken, second.refreshToken, third.refreshToken]) {
    assertError(await h.post('/auth/token/refresh', { refresh_token: refreshToken }), 401, 'invalid_grant');
  }
  const [event] = h.eventsOfType('auth.sessions_revoked').filter((candidate) => candidate.user_id === user.userId);
  assert.ok(event);
  assert.equal(event.data.count, 3);
  assert.equal((await h.get('/auth/me', { token: bystander.accessToken })).status, 200);
});

test('GET /auth/sessions lists live sessions with the current one flagged', async () => {
  const user = await h.signUp();
  h.clock.advance(5);
  const second = await loginAgain(user, 'second-agent/1.0');
  const response = await h.get('/auth/sessions', { token: second.accessToken });
  assert.equal(response.status, 200, response.text);
  const sessions = response.body.data.sessions;
  assert.equal(sessions.length, 2);
  for (const session of sessions) {
    assert.deepEqual(Object.keys(session).sort(), ['created_at', 'current', 'id', 'ip', 'last_used_at', 'user_agent']);
    assert.equal(typeof session.ip, 'string');
    assert.ok(!Number.isNaN(Date.parse(session.created_at)));
    assert.ok(!Number.isNaN(Date.parse(session.last_used_at)));
  }
  const current = sessions.filter((session: { current: boolean }) => session.current);
  assert.equal(current.length, 1);
  assert.equal(current[0].id, second.sid);
  assert.equal(current[0].user_agent, 'second-agent/1.0');
  assert.equal(current[0].created_at, new Date(h.clock.now()).toISOString());
  // A revoked session leaves the list.
  await h.post('/auth/logout', {}, { token: user.accessToken });
  const after = await h.get('/auth/sessions', { token: second.accessToken });
  assert.deepEqual(after.body.data.sessions.map((session: { id: string }) => session.id), [second.sid]);
});

test('GET /auth/sessions paginates with limit and X-Next-Cursor', async () => {
  const user = await h.signUp();
  const ids = new Set([decodeJwt(user.accessToken).sid]);
  for (let index = 0; index < 4; index += 1) ids.add((await loginAgain(user)).sid);
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const query: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2';
    const page = await h.get(`/auth/sessions${query}`, { token: user.accessToken });
    assert.equal(page.status, 200, page.text);
    assert.ok(page.body.data.sessions.length <= 2);
    seen.push(...page.body.data.sessions.map((session: { id: string }) => session.id));
    cursor = page.headers.get('x-next-cursor');
    pages += 1;
  } while (cursor && pages < 10);
  assert.equal(pages, 3);
  assert.deepEqual(new Set(seen), ids);
  assert.equal(seen.length, 5, 'no session listed twice');
  assertValidationErrors(await h.get('/auth/sessions?limit=0', { token: user.accessToken }), /"limit"/);
  assertValidationErrors(await h.get('/auth/sessions?limit=abc', { token: user.accessToken }), /"limit"/);
  assertValidationErrors(await h.get('/auth/sessions?cursor=%%%garbage', { token: user.accessToken }), /cursor/);
  // A cursor of the right shape but with values we never issue is a validation failure, not a 500.
  for (const forged of [[1.5, 'x'], [1e400, 'x'], [Date.now(), 'a\u0000b'], ['1', 2]]) {
    const encoded = Buffer.from(JSON.stringify(forged).replace('Infinity', '1e400'), 'utf8').toString('base64url');
    const response = await h.get(`/auth/sessions?cursor=${encoded}`, { token: user.accessToken });
    assertValidationErrors(response, /cursor/, JSON.stringify(forged));
  }
});

test('DELETE /auth/sessions/:id revokes an owned session; 404 for unknown or foreign ones', async () => {
  const user = await h.signUp();
  const second = await loginAgain(user);
  const response = await h.delete(`/auth/sessions/${second.sid}`, { token: user.accessToken });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body, { data: { status: 'revoked' } });
  assertUnauthorized(await h.get('/auth/me', { token: second.accessToken }));
  assertError(await h.delete(`/auth/sessions/${second.sid}`, { token: user.accessToken }), 404, 'not_found');
  assertError(await h.delete(`/auth/sessions/${randomUUID()}`, { token: user.accessToken }), 404, 'not_found');
  // Threat: revoking someone else's session by guessing or learning its id.
  const stranger = await h.signUp();
  const strangerSid = decodeJwt(stranger.accessToken).sid;
  const foreign = await h.delete(`/auth/sessions/${strangerSid}`, { token: user.accessToken });
  assertError(foreign, 404, 'not_found');
  assert.equal((await h.get('/auth/me', { token: stranger.accessToken })).status, 200);
  // Revoking the current session ends it.
  const own = await h.delete(`/auth/sessions/${decodeJwt(user.accessToken).sid}`, { token: user.accessToken });
  assert.equal(own.status, 200);
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
});

test('GET /auth/me answers the identity', async () => {
  const user = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ display_name: 'Grace' });
  const response = await h.get('/auth/me', { token: user.accessToken });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body.data, {
    id: user.userId,
    email: user.email,
    email_verified: true,
    display_name: 'Grace',
    status: 'active',
    mfa_enforced: false,
    orgs: [],
    roles: [],
    recovery_codes_remaining: 0,
  });
  assertUnauthorized(await h.get('/auth/me'));
});

test('switch-org: 404 for an unknown organization, 422 without one', async () => {
  const user = await h.signUp();
  assertError(await h.post('/auth/switch-org', { organization_id: randomUUID() }, { token: user.accessToken }), 404, 'not_found');
  assertValidationErrors(await h.post('/auth/switch-org', {}, { token: user.accessToken }), /"organization_id" is required/);
  assertUnauthorized(await h.post('/auth/switch-org', { organization_id: randomUUID() }));
});
