import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { Harness, decodeJwt } from '../helpers/harness.js';

// A session is live until the millisecond its refresh lifetime ends, and every route agrees on
// that millisecond: the access check (through the access cache), the session list, switching
// organization and refresh. The rule has one definition in two forms, one for a row in hand and
// one for a query (src/store/session-repository.ts); this holds them to each other.

const REFRESH_TTL_SECONDS = 600;

let h: Harness;
before(async () => {
  // Access tokens outlive the session here, so the session's own end is what each route meets.
  h = await Harness.start({ config: { tokens: { accessTtl: 3600, refreshTtl: REFRESH_TTL_SECONDS } } });
});
after(async () => {
  await h.close();
});

const expiresAtOf = async (sessionId: string) => Number((await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first()).expires_at);

async function twoSessions() {
  const ending = await h.signUp();
  const endingSid = decodeJwt(ending.accessToken).sid as string;
  h.clock.advance(60);
  const login = await h.post('/auth/login', { email: ending.email, password: ending.password });
  assert.equal(login.status, 200, login.text);
  const other = { accessToken: login.body.data.access_token as string, sid: decodeJwt(login.body.data.access_token).sid as string };
  const end = await expiresAtOf(endingSid);
  return { ending, endingSid, other, end };
}

const listedIds = async (token: string) => {
  const response = await h.get('/auth/sessions', { token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.sessions.map((session: { id: string }) => session.id).sort();
};

test('one millisecond before its end a session is live on every route', async () => {
  const { ending, endingSid, other, end } = await twoSessions();
  // The access cache holds the session from here on: its kept copy is checked against the clock too.
  assert.equal((await h.get('/auth/me', { token: ending.accessToken })).status, 200);
  h.clock.set(end - 1);
  const me = await h.get('/auth/me', { token: ending.accessToken });
  assert.equal(me.status, 200, me.text);
  assert.deepEqual(await listedIds(other.accessToken), [endingSid, other.sid].sort());
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: ending.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
});

test('at the millisecond of its end a session has ended on every route', async () => {
  const { ending, endingSid, other, end } = await twoSessions();
  assert.equal((await h.get('/auth/me', { token: ending.accessToken })).status, 200);
  h.clock.set(end);
  const me = await h.get('/auth/me', { token: ending.accessToken });
  assertError(me, 401, 'unauthorized');
  assert.match(me.body.message, /session behind this token has ended/);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: ending.refreshToken });
  assertError(refreshed, 401, 'invalid_grant');
  assert.deepEqual(await listedIds(other.accessToken), [other.sid]);
  assert.ok(!(await listedIds(other.accessToken)).includes(endingSid));
  const createOrg = await h.post('/orgs', { name: 'Ended' }, { token: ending.accessToken });
  assertError(createOrg, 401, 'unauthorized');
  assert.match(createOrg.body.message, /session behind this token has ended/);
});
