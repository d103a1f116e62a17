import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB, decodeJwt, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';

// A password sign-in's write is the new session, the end of the attempt it completed (the
// lockout slot given back, earlier failures cleared) and what it records: its `user.logged_in`
// audit row and, with an `onEvent` listener, the listener's outbox row. On PostgreSQL, while
// no webhooks are on, all of it is one statement with no transaction around it
// (`SessionService.openSignedIn`); on SQLite a group commit. Each test runs without a listener
// and with one.

const THRESHOLD = 5;
const REFUSED_AGENT = 'refused-by-a-test-trigger';

for (const listener of [false, true]) {
  describe(`a password sign-in ${listener ? 'with' : 'without'} an onEvent listener (${TEST_DB})`, () => {
    let h: Harness;
    before(async () => {
      h = await Harness.start({ ...(listener ? {} : { noListener: true }), config: { auth: { lockout: { threshold: THRESHOLD, window: 600, duration: 900 } } } });
    });
    after(async () => {
      await h.close();
    });

    const table = (name: string) => h.knex(`${h.tablePrefix}${name}`);
    const login = (user: SignedUpUser, password = user.password, headers: Record<string, string> = {}) => h.post('/auth/login', { email: user.email, password }, { headers });
    const userRow = (user: SignedUpUser) => table('users').where({ id: user.userId }).first();
    const loggedInRows = (user: SignedUpUser) => table('audit_events').where({ type: 'user.logged_in', user_id: user.userId }).orderBy('seq', 'asc');
    const sessionsOf = (user: SignedUpUser) => table('sessions').where({ user_id: user.userId });

    test('opens the session, ends the earlier failures and writes its audit row, column by column', async () => {
      const user = await h.signUp(uniqueEmail('signin'));
      for (let attempt = 0; attempt < 2; attempt++) assert.equal((await login(user, `wrong password ${attempt}`)).status, 401);
      assert.equal(Number((await userRow(user)).failed_login_count), 2);

      const answer = await login(user, user.password, { 'user-agent': 'sign-in test agent' });
      assert.equal(answer.status, 200, answer.text);
      const sessionId = decodeJwt(answer.body.data.access_token).sid as string;

      const account = await userRow(user);
      assert.equal(Number(account.failed_login_count), 0, 'earlier failures end with the sign-in');
      assert.equal(account.failed_login_window_start, null);
      assert.equal(account.locked_until, null);
      assert.equal(Number(account.attempts_in_flight), 0, 'the slot is given back');

      const session = await table('sessions').where({ id: sessionId }).first();
      assert.equal(session.user_id, user.userId);
      assert.equal(session.organization_id, null);
      assert.equal(Boolean(session.mfa), false);
      assert.deepEqual(JSON.parse(String(session.amr)), ['pwd']);
      assert.equal(Number(session.auth_time), h.clock.now());
      assert.equal(Number(session.created_at), h.clock.now());
      assert.equal(Number(session.last_used_at), h.clock.now());
      assert.ok(Number(session.expires_at) > h.clock.now());
      assert.equal(session.user_agent, 'sign-in test agent');
      assert.equal(typeof session.ip, 'string');
      assert.equal(session.revoked_at, null);

      const rows = await loggedInRows(user);
      assert.equal(rows.length, 2, 'the sign-up and this sign-in');
      const row = rows[1]!;
      assert.match(String(row.id), /^[0-9a-f-]{36}$/);
      assert.equal(Number(row.occurred_at), h.clock.now());
      assert.equal(row.actor_id, user.userId);
      assert.equal(row.organization_id, null);
      assert.equal(row.ip, session.ip);
      assert.deepEqual(JSON.parse(String(row.data)), { mfa: false, amr: ['pwd'], method: 'password' });

      assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
      const deliveries = await table('event_deliveries').where({ event_id: String(row.id) });
      if (listener) {
        assert.deepEqual(
          deliveries.map((delivery) => [delivery.target, delivery.event_type, delivery.status]),
          [['listener', 'user.logged_in', 'delivered']],
          'one outbox row, for the listener, delivered',
        );
        assert.equal(h.eventsOfType('user.logged_in').filter((event) => event.id === row.id).length, 1, 'the listener heard it once');
      } else {
        assert.equal(deliveries.length, 0, 'no outbox row without a listener');
      }
    });

    test('twelve right passwords at once: twelve sessions, each recorded once, and every slot given back', async () => {
      const user = await h.signUp(uniqueEmail('signin-race'));
      const answers = await Promise.all(Array.from({ length: 12 }, () => login(user)));
      assert.deepEqual(
        answers.map((answer) => answer.status),
        Array.from({ length: 12 }, () => 200),
        'more right passwords than slots still all sign in',
      );
      const sessionIds = answers.map((answer) => decodeJwt(answer.body.data.access_token).sid as string);
      assert.equal(new Set(sessionIds).size, 12);
      assert.equal((await sessionsOf(user)).length, 13, 'the sign-up session and twelve more');
      assert.equal((await loggedInRows(user)).length, 13);
      const account = await userRow(user);
      assert.equal(Number(account.attempts_in_flight), 0);
      assert.equal(Number(account.failed_login_count), 0);
    });

    test('a sign-in whose write fails leaves nothing behind: no session, no event, the failures and the slot as they were', async () => {
      const user = await h.signUp(uniqueEmail('signin-refused'));
      assert.equal((await login(user, 'wrong password once')).status, 401);
      const sessionsBefore = (await sessionsOf(user)).length;
      const eventsBefore = h.eventsOfType('user.logged_in').length;
      await refuseSessionsFor(h, REFUSED_AGENT);
      try {
        const logged = h.logs.length;
        const refused = await login(user, user.password, { 'user-agent': REFUSED_AGENT });
        assert.equal(refused.status, 500, refused.text);
        assert.deepEqual(refused.body, { error: 'internal_error', message: 'Internal error' });
        const lines = JSON.stringify(h.logs.slice(logged));
        assert.match(lines, /message withheld/, 'the database error is logged by its code');
        assert.doesNotMatch(lines, /refused|insert into|REFUSED/, 'neither the statement nor its values reach the log');
      } finally {
        await allowSessions(h);
      }
      assert.equal((await sessionsOf(user)).length, sessionsBefore);
      assert.equal((await loggedInRows(user)).length, 1, 'only the sign-up');
      assert.equal(h.eventsOfType('user.logged_in').length, eventsBefore);
      const account = await userRow(user);
      assert.equal(Number(account.failed_login_count), 1, 'the earlier failure still counts');
      assert.equal(Number(account.attempts_in_flight), 0, 'the slot went back');

      const retried = await login(user);
      assert.equal(retried.status, 200, retried.text);
      assert.equal(Number((await userRow(user)).failed_login_count), 0);
    });
  });
}

/** A trigger that refuses any session inserted with this user agent, as a failing database would. */
async function refuseSessionsFor(h: Harness, userAgent: string): Promise<void> {
  const sessions = `${h.tablePrefix}sessions`;
  if (TEST_DB === 'pg') {
    await h.knex.raw(`create function ${h.tablePrefix}refuse_session() returns trigger language plpgsql as $$ begin if new.user_agent = '${userAgent}' then raise exception 'refused'; end if; return new; end $$`);
    await h.knex.raw(`create trigger ${h.tablePrefix}refuse_session before insert on ${sessions} for each row execute function ${h.tablePrefix}refuse_session()`);
  } else {
    await h.knex.raw(`create trigger ${h.tablePrefix}refuse_session before insert on ${sessions} when new.user_agent = '${userAgent}' begin select raise(abort, 'refused'); end`);
  }
}

async function allowSessions(h: Harness): Promise<void> {
  await h.knex.raw(`drop trigger ${h.tablePrefix}refuse_session${TEST_DB === 'pg' ? ` on ${h.tablePrefix}sessions` : ''}`);
  if (TEST_DB === 'pg') await h.knex.raw(`drop function ${h.tablePrefix}refuse_session()`);
}
