import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SessionRepository } from '../../src/store/session-repository.js';
import { assertError, assertUnauthorized } from '../helpers/account.js';
import { decodeJwt, Harness, TEST_DB, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { InstancePair } from '../helpers/instance-pair.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { enrollSms, lastMailCode, lastSmsCode, loginForTicket, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, roleIdOf, superadmin, switchOrg } from '../helpers/orgs.js';
import { rawHttp } from '../helpers/raw-request.js';

/*
 * Attacks on the self-service views of sessions and identity (SPEC 2.5, 2.6, 4.1 GET /auth/me,
 * GET /auth/sessions, DELETE /auth/sessions/{id}, 4.2 factor management): what a session list
 * shows and whose sessions it shows, revoking a session by id that is not one's own, what
 * GET /auth/me lists for a user in several organizations (and on another instance right after a
 * change), whether any answer gives back a factor's full phone number, the session's user agent
 * taken from a hostile header, and a revocation by id or logout-all inside a refresh's window on
 * PostgreSQL.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const SESSION_FIELDS = ['created_at', 'current', 'id', 'ip', 'last_used_at', 'user_agent'];

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } } } });
});
after(() => h.close());

async function loginAgain(user: SignedUpUser, headers: Record<string, string> = {}): Promise<{ accessToken: string; refreshToken: string; sid: string }> {
  const login = await h.post('/auth/login', { email: user.email, password: user.password }, { headers });
  assert.equal(login.status, 200, login.text);
  return { accessToken: login.body.data.access_token, refreshToken: login.body.data.refresh_token, sid: decodeJwt(login.body.data.access_token).sid as string };
}

async function sessionsOf(token: string): Promise<any[]> {
  const list = await h.get('/auth/sessions?limit=100', { token });
  assert.equal(list.status, 200, list.text);
  return list.body.data.sessions as any[];
}

const reuseEventsOf = (sessionId: string) => h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId);
const sessionRow = (sessionId: string) => h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first();

describe('the user agent a session keeps comes from a header anyone writes', () => {
  test('a sign-in whose User-Agent carries a tab and C1 controls (8-bit CSI, NEL): the session list shows it without control characters', async () => {
    const user = await h.signUp();
    // Node's parser refuses ESC and the other C0 controls in a header but passes a tab and every
    // byte 0x80-0xFF, which it reads as Latin-1: 0x9b is U+009B (CSI), 0x85 is U+0085 (NEL).
    const agent = Buffer.from('Thief/1.0\t\x9b2K\x9b1A\x85Firefox on Linux', 'latin1').toString('latin1');
    const login = await rawHttp(h.baseUrl, 'POST', '/auth/login', { 'content-type': 'application/json', 'user-agent': agent }, JSON.stringify({ email: user.email, password: user.password }));
    assert.equal(login.status, 200, login.text);
    const sid = decodeJwt(login.body.data.access_token).sid as string;
    const listed = (await sessionsOf(user.accessToken)).find((session) => session.id === sid);
    assert.ok(listed, 'the thief\'s session is listed to its owner');
    assert.equal(typeof listed.user_agent, 'string');
    assert.doesNotMatch(listed.user_agent, CONTROL, `control characters listed: ${JSON.stringify(listed.user_agent)}`);
    assert.match(listed.user_agent, /^Thief\/1\.0.*2K.*1A.*Firefox on Linux$/);
    assert.doesNotMatch(String((await sessionRow(sid)).user_agent), CONTROL, 'nor stored');
  });

  test('an MFA ticket keeps no control characters from the User-Agent either', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    await enrollSms(h, user.accessToken, phone);
    const before = new Set((await h.knex(`${h.tablePrefix}mfa_tickets`).where({ user_id: user.userId }).select('id')).map((row: { id: string }) => row.id));
    const login = await rawHttp(h.baseUrl, 'POST', '/auth/login', { 'content-type': 'application/json', 'user-agent': 'Agent\t\u0085x' }, JSON.stringify({ email: user.email, password: user.password }));
    assert.equal(login.status, 200, login.text);
    assert.equal(login.body.data.mfa_required, true);
    const rows = (await h.knex(`${h.tablePrefix}mfa_tickets`).where({ user_id: user.userId })).filter((row: { id: string }) => !before.has(row.id));
    assert.equal(rows.length, 1);
    assert.doesNotMatch(String(rows[0].user_agent), CONTROL, JSON.stringify(rows[0].user_agent));
    assert.match(String(rows[0].user_agent), /^Agent.*x$/);
  });

  test('an oversized User-Agent (8 kB) is cut at 512 characters, on PostgreSQL too; one of control characters alone is none', async () => {
    const user = await h.signUp();
    const second = await loginAgain(user, { 'user-agent': `A${'b'.repeat(8_000)}` });
    const third = await loginAgain(user, { 'user-agent': '\t\t' });
    const sessions = await sessionsOf(user.accessToken);
    assert.equal(sessions.find((session) => session.id === second.sid).user_agent, `A${'b'.repeat(511)}`);
    assert.equal(sessions.find((session) => session.id === third.sid).user_agent, null);
  });
});

describe('the session list and revocation by id', () => {
  test('lists the caller\'s sessions only (in every organization context), with the spec\'s fields and nothing of another user', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    const plain = await loginAgain(member, { 'user-agent': 'second browser' });
    const stranger = await h.signUp();
    const sessions = await sessionsOf(plain.accessToken);
    // The member's one session switched into the organization and the plain one: both listed.
    assert.deepEqual(new Set(sessions.map((session) => session.id)), new Set([decodeJwt(member.token).sid, plain.sid]));
    for (const session of sessions) assert.deepEqual(Object.keys(session).sort(), SESSION_FIELDS, 'no organization, user, refresh or revocation field');
    assert.deepEqual(sessions.filter((session) => session.current).map((session) => session.id), [plain.sid]);
    assert.ok(!sessions.some((session) => session.id === decodeJwt(org.owner.token).sid || session.id === decodeJwt(stranger.accessToken).sid));
    // The owner's list, though the owner administers the member: the owner's own session only.
    assert.deepEqual((await sessionsOf(org.owner.token)).map((session) => session.id), [decodeJwt(org.owner.token).sid]);
  });

  test('DELETE /auth/sessions/{id} of another user\'s session: 404 for an owner of the same organization and for a superadmin, and the session lives', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['admin']);
    const root = await superadmin(h);
    const memberSid = decodeJwt(member.token).sid as string;
    for (const [who, token] of [['owner', org.owner.token], ['superadmin', root.accessToken]] as const) {
      assertError(await h.delete(`/auth/sessions/${memberSid}`, { token }), 404, 'not_found', who);
    }
    assert.equal((await h.get('/auth/me', { token: member.token })).status, 200);
    assert.equal((await sessionRow(memberSid)).revoked_at, null);
  });

  test('a logged-out session\'s id and a deleted user\'s: 404, never a second revocation', async () => {
    const user = await h.signUp();
    const other = await loginAgain(user);
    assert.equal((await h.post('/auth/logout', {}, { token: other.accessToken })).status, 200);
    assertError(await h.delete(`/auth/sessions/${other.sid}`, { token: user.accessToken }), 404, 'not_found');
    assert.equal((await sessionRow(other.sid)).revoked_reason, 'logout', 'the logout stays the reason');
    const gone = await h.signUp();
    const goneSid = decodeJwt(gone.accessToken).sid as string;
    assert.equal((await h.delete(`/users/${gone.userId}`, { token: gone.accessToken })).status, 200);
    assertError(await h.delete(`/auth/sessions/${goneSid}`, { token: user.accessToken }), 404, 'not_found');
  });

  test('revoking one\'s current session by id ends it as logout does: access and refresh token refused, the other session untouched', async () => {
    const user = await h.signUp();
    const other = await loginAgain(user);
    const sid = decodeJwt(user.accessToken).sid as string;
    assert.equal((await h.delete(`/auth/sessions/${sid}`, { token: user.accessToken })).status, 200);
    assertUnauthorized(await h.get('/auth/sessions', { token: user.accessToken }));
    assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
    assert.equal(reuseEventsOf(sid).length, 0);
    assert.deepEqual((await sessionsOf(other.accessToken)).map((session) => session.id), [other.sid]);
  });
});

describe('GET /auth/me for a user in several organizations', () => {
  test('lists active memberships of active organizations only: not one suspended from, invited to, or deleted; no other member\'s data', async () => {
    const user = await h.signUp(uniqueEmail('several'));
    const joined = await createOrg(h, { name: 'Joined Org' });
    await addMember(h, joined, joined.owner.token, ['member'], user);
    const suspendedFrom = await createOrg(h, { name: 'Suspended Org' });
    await addMember(h, suspendedFrom, suspendedFrom.owner.token, ['admin'], user);
    assert.equal((await h.patch(`/orgs/${suspendedFrom.id}/members/${user.userId}`, { status: 'suspended' }, { token: suspendedFrom.owner.token })).status, 200);
    const invitedTo = await createOrg(h, { name: 'Invited Org' });
    assert.equal((await h.post(`/orgs/${invitedTo.id}/invites`, { email: user.email, role_slugs: ['admin'] }, { token: invitedTo.owner.token })).status, 201);
    const deleted = await createOrg(h, { name: 'Deleted Org' });
    const fresh = await loginAgain(user);
    await addMember(h, deleted, deleted.owner.token, ['admin'], { ...user, accessToken: fresh.accessToken });
    assert.equal((await h.delete(`/orgs/${deleted.id}`, { token: deleted.owner.token })).status, 200);

    const session = await loginAgain(user);
    const me = await h.get('/auth/me', { token: session.accessToken });
    assert.equal(me.status, 200, me.text);
    assert.deepEqual(me.body.data.orgs, [{ id: joined.id, name: 'Joined Org', slug: joined.slug, roles: ['member'] }]);
    assert.deepEqual(me.body.data.roles, [], 'a session in no organization holds no organization role');
    assert.ok(!me.text.includes(joined.owner.email) && !me.text.includes(joined.owner.userId), 'nothing of another member');
    // Switched into the organization: its roles, and still nothing of the others.
    const switched = await switchOrg(h, session.accessToken, joined.id);
    const scoped = await h.get('/auth/me', { token: switched });
    assert.deepEqual(scoped.body.data.roles, ['member']);
    assert.equal(scoped.body.data.orgs.length, 1);
  });

  test('a superadmin switched into an organization it never joined: the organization is not listed as a membership, roles name superadmin alone', async () => {
    const org = await createOrg(h);
    const root = await superadmin(h);
    const token = await switchOrg(h, root.accessToken, org.id);
    const me = await h.get('/auth/me', { token });
    assert.equal(me.status, 200, me.text);
    assert.deepEqual(me.body.data.orgs, []);
    assert.deepEqual(me.body.data.roles, ['superadmin']);
    await h.identity.service.revokeSuperadmin(root.userId);
    const after = await h.get('/auth/me', { token });
    assert.deepEqual(after.body.data.roles, [], 'the revocation is read at once, not from the cache');
  });
});

describe('GET /auth/me on another instance right after a change (access cache)', () => {
  let pair: InstancePair;
  before(async () => {
    pair = await InstancePair.start();
  });
  after(() => pair.close());

  test('a role change, then a suspension, on A: B\'s /auth/me (cached before) shows the new roles, then no such organization', async () => {
    const { a } = pair;
    const org = await createOrg(a.h);
    const member = await addMember(a.h, org, org.owner.token, ['admin']);
    const plain = await a.h.post('/auth/login', { email: member.email, password: member.password });
    const plainToken = plain.body.data.access_token as string;
    const meOn = (token: string) => async (on: typeof a) => {
      const me = await on.h.get('/auth/me', { token });
      return me.status === 200 ? { orgs: me.body.data.orgs.map((entry: { id: string; roles: string[] }) => [entry.id, entry.roles]), roles: me.body.data.roles } : me.status;
    };
    for (const on of [pair.a, pair.b]) {
      assert.deepEqual(await meOn(plainToken)(on), { orgs: [[org.id, ['admin']]], roles: [] });
      assert.deepEqual(await meOn(member.token)(on), { orgs: [[org.id, ['admin']]], roles: ['admin'] });
    }
    const memberRole = await roleIdOf(a.h, org.id, org.owner.token, 'member');
    assert.ok(memberRole);
    assert.equal((await a.h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token })).status, 200);
    assert.deepEqual(await meOn(member.token)(pair.a), { orgs: [[org.id, ['member']]], roles: ['member'] });
    assert.deepEqual(await pair.onOtherInstance(meOn(member.token), { orgs: [[org.id, ['member']]], roles: ['member'] }), { orgs: [[org.id, ['member']]], roles: ['member'] });
    assert.deepEqual(await pair.onOtherInstance(meOn(plainToken), { orgs: [[org.id, ['member']]], roles: [] }), { orgs: [[org.id, ['member']]], roles: [] });
    assert.equal((await a.h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
    assert.deepEqual(await meOn(plainToken)(pair.a), { orgs: [], roles: [] });
    assert.deepEqual(await pair.onOtherInstance(meOn(plainToken), { orgs: [], roles: [] }), { orgs: [], roles: [] });
    assert.equal(await pair.onOtherInstance(meOn(member.token), 401), 401, 'the session scoped to the organization ended with the suspension');
  });

  test('a superadmin revoked on A: B\'s /auth/me (cached before) drops superadmin from roles', async () => {
    const { a } = pair;
    const org = await createOrg(a.h);
    const root = await superadmin(a.h);
    const token = await switchOrg(a.h, root.accessToken, org.id);
    const rolesOn = async (on: typeof a) => {
      const me = await on.h.get('/auth/me', { token });
      return me.status === 200 ? me.body.data.roles : me.status;
    };
    for (const on of [pair.a, pair.b]) assert.deepEqual(await rolesOn(on), ['superadmin']);
    await a.h.identity.service.revokeSuperadmin(root.userId);
    assert.deepEqual(await rolesOn(pair.a), []);
    assert.deepEqual(await pair.onOtherInstance(rolesOn, []), []);
  });
});

describe('a factor\'s phone number never comes back whole', () => {
  test('enrollment, confirmation, factor list, login gate, challenge and step-up answers, and the events: the last four digits at most', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const digits = phone.slice(1);
    const hidden = digits.slice(0, -4);
    const answers: string[] = [];
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    answers.push(enrolled.text);
    const confirmed = await h.post('/auth/mfa/sms/confirm', { factor_id: enrolled.body.data.factor_id, code: lastSmsCode(h, phone) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    answers.push(confirmed.text);
    answers.push((await h.get('/auth/mfa/factors', { token: user.accessToken })).text);
    answers.push((await h.get('/auth/me', { token: user.accessToken })).text);
    answers.push((await h.get('/auth/sessions', { token: user.accessToken })).text);
    const { ticket, factors } = await loginForTicket(h, user);
    answers.push(JSON.stringify(factors));
    answers.push((await h.post('/auth/mfa/challenge', { factor_id: enrolled.body.data.factor_id }, { token: ticket })).text);
    answers.push((await h.post('/auth/mfa/step-up/challenge', { factor_id: enrolled.body.data.factor_id }, { token: user.accessToken })).text);
    answers.push((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken })).text);
    answers.push(JSON.stringify(h.events.filter((event) => event.user_id === user.userId)));
    for (const text of answers) {
      assert.ok(!text.includes(digits) && !text.includes(hidden), `a full or partial number in ${text.slice(0, 300)}`);
    }
    assert.match(answers[2]!, new RegExp(`"\\+\\*{${hidden.length}}${digits.slice(-4)}"`));
  });
});

describe('a factor\'s address is masked to whole characters', () => {
  test('an e-mail factor whose address starts with an astral character (two UTF-16 units): every masked destination is well-formed text', async () => {
    const user = await h.signUp();
    const address = `\u{1F600}${uniqueEmail('astral')}`;
    const enrolled = await h.post('/auth/mfa/email/enroll', { email: address }, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const masked = `\u{1F600}***@${address.split('@')[1]}`;
    const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: enrolled.body.data.factor_id, code: lastMailCode(h, address) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    const listed = (await h.get('/auth/mfa/factors', { token: user.accessToken })).body.data.factors[0].destination;
    const { factors } = await loginForTicket(h, user);
    // Half of a surrogate pair is no character: serde_json, for one, refuses the whole answer.
    for (const [where, destination] of [['enrollment', enrolled.body.data.destination], ['factor list', listed], ['login gate', factors[0].destination]]) {
      assert.equal(destination, masked, where);
      assert.doesNotMatch(destination as string, LONE_SURROGATE, `${where}: ${JSON.stringify(destination)}`);
    }
  });
});

describe('refresh racing a revocation by id or logout-all (PostgreSQL)', () => {
  for (const [name, revoke, reason] of [
    ['DELETE /auth/sessions/{id} from another session', (sid: string, other: string) => h.delete(`/auth/sessions/${sid}`, { token: other }), 'revoked_by_user'],
    ['logout-all from another session', (_sid: string, other: string) => h.post('/auth/logout-all', {}, { token: other }), 'logout_all'],
  ] as const) {
    test(`${name} committed between a refresh's read and its rotation: 401 invalid_grant, no reuse reported, nothing moved on`, PG_ONLY, async () => {
      const user = await h.signUp();
      const sid = decodeJwt(user.accessToken).sid as string;
      const other = await loginAgain(user);
      assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
      const { outer: refreshed, inner: revoked } = await withRequestInTheWindow(
        h,
        { prototype: SessionRepository.prototype, method: 'rotate', when: (id) => id === sid, at: 'before' },
        () => revoke(sid, other.accessToken),
        () => h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
      );
      assert.equal(revoked?.status, 200, revoked?.text);
      assertError(refreshed, 401, 'invalid_grant');
      assert.equal(reuseEventsOf(sid).length, 0, 'a revocation is no replay');
      const row = await sessionRow(sid);
      assert.equal(row.revoked_reason, reason);
      assert.equal(Number(row.refresh_generation), 0);
      assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
    });

    test(`${name} committed right after a refresh's rotation: the new tokens die with the session`, PG_ONLY, async () => {
      const user = await h.signUp();
      const sid = decodeJwt(user.accessToken).sid as string;
      const other = await loginAgain(user);
      const { outer: refreshed, inner: revoked } = await withRequestInTheWindow(
        h,
        { prototype: SessionRepository.prototype, method: 'rotate', when: (id) => id === sid, at: 'after' },
        () => revoke(sid, other.accessToken),
        () => h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
      );
      assert.equal(revoked?.status, 200, revoked?.text);
      if (refreshed.status === 200) {
        assertUnauthorized(await h.get('/auth/me', { token: refreshed.body.data.access_token }), 'the refreshed access token outlived the revocation');
        assertError(await h.post('/auth/token/refresh', { refresh_token: refreshed.body.data.refresh_token }), 401, 'invalid_grant');
      } else {
        assertError(refreshed, 401, 'invalid_grant');
      }
      assert.equal((await sessionRow(sid)).revoked_reason, reason);
      assert.equal(reuseEventsOf(sid).length, 0);
    });
  }

  test('a replay and a revocation by id at once: the session ends once, reported at most once', PG_ONLY, async () => {
    const user = await h.signUp();
    const sid = decodeJwt(user.accessToken).sid as string;
    const other = await loginAgain(user);
    const first = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    assert.equal(first.status, 200, first.text);
    const [replayed, revoked] = await Promise.all([
      h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
      h.delete(`/auth/sessions/${sid}`, { token: other.accessToken }),
    ]);
    assertError(replayed, 401, 'invalid_grant');
    assert.ok([200, 404].includes(revoked.status), revoked.text);
    const row = await sessionRow(sid);
    assert.ok(row.revoked_at !== null);
    assert.equal(reuseEventsOf(sid).length, row.revoked_reason === 'refresh_reuse' ? 1 : 0);
    assert.equal(revoked.status === 200, row.revoked_reason === 'revoked_by_user');
    assertError(await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token }), 401, 'invalid_grant');
  });
});
