import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runUnitOfWork } from '../../src/services/shared/unit-of-work.js';
import { Harness, PG_URL } from '../helpers/harness.js';
import { createOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { servicesOf } from '../../src/create-identity-router.js';

/*
 * docs/events.md on several instances. Threat: two workers claiming the same due row at the
 * same moment and both sending it (a duplicate the receiver cannot tell from a retry), or a
 * row that no worker ever takes. Three instances with their own connection pools share one
 * PostgreSQL database and step their workers at once, round after round, while the receiver
 * fails 30% of the attempts. Every event must end delivered, and the receiver must see exactly
 * the attempts the rows record: no attempt made twice.
 */

const SKIP = process.env.IDENTITY_TEST_DB !== 'pg' || !PG_URL ? 'the claim race runs on PostgreSQL (SQLite has one writer): it runs in the PostgreSQL phase' : false;
const EVENTS = 1000;
const INSTANCES = 3;
const FAILURE_RATE = 0.3;

test(`${EVENTS} events, ${INSTANCES} instances, a receiver failing ${FAILURE_RATE * 100}% of attempts: every event delivered, no attempt made twice`, { skip: SKIP }, async (t) => {
  const receiver = await WebhookReceiver.start(() => ({ status: Math.random() < FAILURE_RATE ? 500 : 200 }));
  const config = {
    webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true },
    // worker: false: every attempt is made by the steps below, so each round ends before the clock moves.
    events: { delivery: { worker: false, pollMs: 3_600_000, schedule: [0, 1], jitter: 0, maxAttempts: 25 } },
  };
  const database = await Harness.start({ noListener: true, config });
  const instances: Harness[] = [];
  try {
    for (let index = 0; index < INSTANCES; index += 1) instances.push(await Harness.start({ shareDatabaseWith: database, ownConnection: true, noListener: true, config }));
    const org = await createOrg(database);
    const created = await database.post(`/orgs/${org.id}/webhooks`, { url: receiver.url(), events: ['org.updated'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);

    // The events, written through the unit of work on every instance at once (50 per change).
    const perChange = 50;
    await Promise.all(
      Array.from({ length: EVENTS / perChange }, (_, change) =>
        runUnitOfWork(servicesOf(instances[change % INSTANCES]!.identity).context, { ip: null, userAgent: null }, async (uow) => {
          for (let index = 0; index < perChange; index += 1) await uow.emit({ type: 'org.updated', organizationId: org.id, data: { change, index } });
        }),
      ),
    );
    const deliveries = () => database.knex(`${database.tablePrefix}event_deliveries`).where({ webhook_id: created.body.data.id });
    assert.equal((await deliveries()).length, EVENTS);

    const started = Date.now();
    let rounds = 0;
    let attemptedBySteps = 0;
    for (;;) {
      const results = await Promise.all(instances.map((instance) => instance.identity.service.deliverDueEvents()));
      attemptedBySteps += results.reduce((sum, result) => sum + result.attempted, 0);
      rounds += 1;
      const pending = await deliveries().andWhere({ status: 'pending' }).count({ count: '*' }).first();
      if (Number(pending?.count) === 0) break;
      assert.ok(rounds < 60, 'drains');
      database.clock.advance(1);
    }
    const drainMs = Date.now() - started;

    const rows = await deliveries();
    assert.ok(rows.every((row) => row.status === 'delivered'), 'every event delivered');
    const recordedAttempts = rows.reduce((sum, row) => sum + Number(row.attempts), 0);
    const duplicates = receiver.requests.length - recordedAttempts;
    assert.equal(receiver.requests.length, attemptedBySteps, 'every attempt a step counted reached the receiver once');
    assert.equal(duplicates, 0, 'no attempt was made twice');
    const perEvent = new Map<string, number>();
    for (const request of receiver.requests) perEvent.set(String(request.headers['webhook-id']), (perEvent.get(String(request.headers['webhook-id'])) ?? 0) + 1);
    assert.equal(perEvent.size, EVENTS);
    for (const row of rows) assert.equal(perEvent.get(row.event_id), Number(row.attempts), `event ${row.event_id}: requests = recorded attempts`);
    t.diagnostic(`events ${EVENTS}, attempts ${receiver.requests.length}, duplicates ${duplicates}, rounds ${rounds}, drained in ${drainMs} ms`);
  } finally {
    for (const instance of instances) await instance.close();
    await database.close();
    await receiver.close();
  }
});
