import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { IdentityEventType } from '../../src/events.js';
import { assertError } from '../helpers/account.js';
import { Harness, TEST_DB, decodeJwt, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';

// A refresh's write is the session's move and what it records: its audit event and, with an
// `onEvent` listener, the listener's outbox row. On PostgreSQL, while no webhooks are on, they
// are one statement with no transaction around it (commitRecordedWrite); on SQLite a
// transaction shared with the refreshes in flight beside it (a group commit); with webhooks, a
// transaction of their own. Each test runs without a listener and with one.

for (const listener of [false, true]) {
  describe(`a refresh ${listener ? 'with' : 'without'} an onEvent listener (${TEST_DB})`, () => {
    let h: Harness;
    before(async () => {
      h = await Harness.start(listener ? {} : { noListener: true });
    });
    after(async () => {
      await h.close();
    });

    const refresh = (refreshToken: string) => h.post('/auth/token/refresh', { refresh_token: refreshToken });
    const sessionIdOf = (user: SignedUpUser) => decodeJwt(user.accessToken).sid as string;
    const generationOf = async (sessionId: string) => Number((await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first()).refresh_generation);
    /** The audit rows of one type about one session, oldest first. */
    async function auditRows(type: string, sessionId: string): Promise<Array<Record<string, unknown>>> {
      const rows = await h.knex(`${h.tablePrefix}audit_events`).where({ type }).orderBy('seq', 'asc');
      return rows.filter((row) => (JSON.parse(String(row.data)) as { session_id?: string }).session_id === sessionId);
    }
    /** The outbox rows of these events. */
    const deliveriesOf = (rows: Array<Record<string, unknown>>) => h.knex(`${h.tablePrefix}event_deliveries`).whereIn('event_id', rows.map((row) => String(row.id)));
    /** What the listener received about one session. */
    const heard = (type: IdentityEventType, sessionId: string) => h.eventsOfType(type).filter((event) => (event.data as { session_id?: string }).session_id === sessionId);
    test('moves the session on and writes its audit row, column by column', async () => {
      const user = await h.signUp(uniqueEmail('recorded'));
      const sessionId = sessionIdOf(user);
      const refreshed = await refresh(user.refreshToken);
      assert.equal(refreshed.status, 200, refreshed.text);
      assert.equal(await generationOf(sessionId), 1);
      const rows = await auditRows('auth.token_refreshed', sessionId);
      assert.equal(rows.length, 1);
      const row = rows[0]!;
      assert.match(String(row.id), /^[0-9a-f-]{36}$/);
      assert.equal(Number(row.occurred_at), h.clock.now());
      assert.equal(row.actor_id, null);
      assert.equal(row.user_id, user.userId);
      assert.equal(row.organization_id, null);
      assert.equal(typeof row.ip, 'string');
      assert.deepEqual(JSON.parse(String(row.data)), { session_id: sessionId });
      // Successes are recorded in batches; a pass of the worker writes the batch first, and
      // finds nothing left to attempt.
      assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
      const deliveries = await deliveriesOf(rows);
      if (listener) {
        assert.deepEqual(
          deliveries.map((delivery) => [delivery.target, delivery.event_type, delivery.organization_id, delivery.status, delivery.webhook_id]),
          [['listener', 'auth.token_refreshed', null, 'delivered', null]],
          'one outbox row, for the listener, delivered',
        );
        assert.deepEqual(heard('auth.token_refreshed', sessionId).map((event) => event.id), [row.id], 'the listener heard the event as recorded, before the response');
      } else {
        assert.equal(deliveries.length, 0, 'no outbox row without a target');
      }
      const again = await refresh(refreshed.body.data.refresh_token);
      assert.equal(again.status, 200, again.text);
      assert.equal((await auditRows('auth.token_refreshed', sessionId)).length, 2);
    });

    // Threat: the audit row written although the session did not move (a revoked session, or a
    // race lost), which would record a refresh that never happened.
    test('a session revoked behind the cache does not move, and no refresh is recorded', async () => {
      const user = await h.signUp(uniqueEmail('recorded-revoked'));
      const sessionId = sessionIdOf(user);
      assert.equal((await h.get('/auth/sessions', { token: user.accessToken })).status, 200, 'the session is kept');
      await h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).update({ revoked_at: h.clock.now() });
      assertError(await refresh(user.refreshToken), 401, 'invalid_grant');
      assert.equal(await generationOf(sessionId), 0);
      assert.equal((await auditRows('auth.token_refreshed', sessionId)).length, 0);
      assert.equal(heard('auth.token_refreshed', sessionId).length, 0);
    });

    // On SQLite refreshes in flight together commit together (src/store/group-commit.ts):
    // each still moves its own session once and is recorded once.
    test('twenty sessions refreshed at once: each moves once, and each refresh is recorded once', async () => {
      const users = await Promise.all(Array.from({ length: 20 }, (_, index) => h.signUp(uniqueEmail(`recorded-many-${index}`))));
      const answers = await Promise.all(users.map((user) => refresh(user.refreshToken)));
      for (const answer of answers) assert.equal(answer.status, 200, answer.text);
      for (const user of users) {
        const sessionId = sessionIdOf(user);
        assert.equal(await generationOf(sessionId), 1);
        const recorded = await auditRows('auth.token_refreshed', sessionId);
        assert.equal(recorded.length, 1);
        assert.equal((await deliveriesOf(recorded)).length, listener ? 1 : 0);
        if (listener) assert.deepEqual(heard('auth.token_refreshed', sessionId).map((event) => event.id), [recorded[0]!.id]);
      }
      const again = await Promise.all(answers.map((answer) => refresh(answer.body.data.refresh_token)));
      for (const answer of again) assert.equal(answer.status, 200, answer.text);
    });

    test('one token sent 12 times at once: one refresh, recorded once; the others revoke the family, reported once', async () => {
      const user = await h.signUp(uniqueEmail('recorded-race'));
      const sessionId = sessionIdOf(user);
      // Every request finds the session kept, so all of them reach the conditional update.
      assert.equal((await h.get('/auth/sessions', { token: user.accessToken })).status, 200);
      const answers = await Promise.all(Array.from({ length: 12 }, () => refresh(user.refreshToken)));
      const statuses = answers.map((answer) => answer.status).sort();
      assert.equal(statuses.filter((status) => status === 200).length, 1, statuses.join(' '));
      assert.deepEqual(statuses.filter((status) => status !== 200), Array.from({ length: 11 }, () => 401));
      assert.equal(await generationOf(sessionId), 1);
      const recorded = await auditRows('auth.token_refreshed', sessionId);
      assert.equal(recorded.length, 1);
      assert.equal((await auditRows('auth.refresh_reuse_detected', sessionId)).length, 1);
      assert.equal((await deliveriesOf(recorded)).length, listener ? 1 : 0);
      if (listener) assert.equal(heard('auth.token_refreshed', sessionId).length, 1);
      const winner = answers.find((answer) => answer.status === 200)!;
      assertError(await refresh(winner.body.data.refresh_token), 401, 'invalid_grant', 'the family is revoked');
    });
  });
}
