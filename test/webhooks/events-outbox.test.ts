import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { IdentityEvent } from '../../src/index.js';
import { runUnitOfWork } from '../../src/services/shared/unit-of-work.js';
import { countRows } from '../helpers/account.js';
import { Harness, STRONG_PASSWORD, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { createOrg } from '../helpers/orgs.js';
import { servicesOf } from '../../src/create-identity-router.js';
import { eventually } from '../helpers/eventually.js';

/*
 * docs/events.md, the outbox. Threats: an event lost between commit and delivery (a crash, a
 * listener that throws, an instance closed too early); an event sent for a change that rolled
 * back; two instances making one attempt twice. The clock is the harness's frozen clock: due
 * times and leases follow it, and `deliverDueEvents` steps the worker. The poller is set to
 * an hour so that only the steps the tests take attempt anything.
 */

const DELIVERY = { pollMs: 3_600_000, schedule: [0, 5, 60], jitter: 0, maxAttempts: 3, leaseSec: 60 };
const config = (delivery: Record<string, unknown> = {}) => ({ events: { delivery: { ...DELIVERY, ...delivery } } });

type DeliveryRow = { id: string; event_id: string; target: string; status: string; attempts: number | string; next_attempt_at: unknown; lease_owner: string | null };

async function deliveriesOf(h: Harness, eventId: string): Promise<DeliveryRow[]> {
  return h.knex(`${h.tablePrefix}event_deliveries`).where({ event_id: eventId });
}

const eventOf = (h: Harness, type: IdentityEvent['type']) => {
  const event = h.eventsOfType(type).at(-1);
  assert.ok(event, `no ${type} event`);
  return event;
};

test('a committed change writes one listener row beside its audit row, delivered at once', async () => {
  const h = await Harness.start({ config: config() });
  try {
    const org = await createOrg(h);
    const created = eventOf(h, 'org.created');
    assert.equal(created.organization_id, org.id);
    await eventually(async () => (await deliveriesOf(h, created.id))[0]?.status === 'delivered', 'the listener row is delivered');
    const [row] = await deliveriesOf(h, created.id);
    assert.equal(row!.target, 'listener');
    assert.equal(Number(row!.attempts), 1);
    assert.equal(row!.lease_owner, null);
    assert.equal(await countRows(h, 'audit_events', { id: created.id }), 1);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
    assert.equal(h.eventsOfType('org.created').length, 1, 'delivered once');
  } finally {
    await h.close();
  }
});

test('a rollback writes no delivery row and calls no listener', async () => {
  const h = await Harness.start({ config: config() });
  try {
    const context = servicesOf(h.identity).context;
    const before = await countRows(h, 'event_deliveries');
    let emitted: string | undefined;
    await assert.rejects(
      runUnitOfWork(context, { ip: null, userAgent: null }, async (uow) => {
        await uow.emit({ type: 'org.updated', organizationId: null, data: { probe: true } });
        emitted = uow.outboxEntries[0]!.event.id;
        throw new Error('the change fails after its event');
      }),
      /the change fails after its event/,
    );
    assert.ok(emitted, 'an event was emitted');
    assert.equal(await countRows(h, 'event_deliveries'), before);
    assert.equal(await countRows(h, 'audit_events', { id: emitted }), 0);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
    assert.equal(h.events.filter((event) => event.id === emitted).length, 0);
  } finally {
    await h.close();
  }
});

test('a delivery row that cannot be written fails the change (500) and rolls it back', async () => {
  const h = await Harness.start({ config: config() });
  const deliveries = `${h.tablePrefix}event_deliveries`;
  try {
    await h.knex.schema.renameTable(deliveries, `${deliveries}_away`);
    const email = uniqueEmail('nooutbox');
    const response = await h.post('/auth/register', { email, password: STRONG_PASSWORD });
    assert.equal(response.status, 500, response.text);
    assert.equal(response.body.error, 'internal_error');
    assert.equal(await countRows(h, 'users', { email }), 0, 'the change rolled back');
    assert.equal(h.eventsOfType('user.registered').length, 0);
  } finally {
    await h.knex.schema.renameTable(`${deliveries}_away`, deliveries).catch(() => undefined);
    await h.close();
  }
});

test('a listener that throws is called again on the schedule with the same event, and the row ends dead after maxAttempts', async () => {
  const seen: IdentityEvent[] = [];
  const h = await Harness.start({
    config: config(),
    onEvent: (event) => {
      if (event.type !== 'org.created') return;
      seen.push(structuredClone(event));
      throw new Error('listener down');
    },
  });
  try {
    await createOrg(h);
    const created = eventOf(h, 'org.created');
    await eventually(async () => Number((await deliveriesOf(h, created.id))[0]?.attempts) === 1, 'attempt 1 is recorded');
    assert.equal((await deliveriesOf(h, created.id))[0]!.status, 'pending');
    assert.ok(h.logs.some((line) => line.level === 'error' && /onEvent listener failed for org\.created/.test(line.msg)), 'the failure is logged');

    // Attempt 2 is due schedule[1] = 5 s after attempt 1 failed, not before.
    h.clock.advance(4);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
    h.clock.advance(1);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 0, failed: 1 });
    // Attempt 3 after schedule[2] = 60 s; it is the last (maxAttempts 3).
    h.clock.advance(60);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 0, failed: 1 });
    const [row] = await deliveriesOf(h, created.id);
    assert.equal(row!.status, 'dead');
    assert.equal(Number(row!.attempts), 3);
    assert.equal(row!.next_attempt_at, null);
    h.clock.advance(3600);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });

    assert.equal(seen.length, 3);
    for (const event of seen) assert.deepEqual(event, seen[0], 'the same id, occurred_at and data every time');
    assert.equal(seen[0]!.id, created.id);
  } finally {
    await h.close();
  }
});

test('a listener that recovers gets the event on a retry, and the row is delivered', async () => {
  let failures = 0;
  const h = await Harness.start({
    config: config(),
    onEvent: (event) => {
      if (event.type === 'org.created' && failures < 1) {
        failures += 1;
        throw new Error('listener down once');
      }
    },
  });
  try {
    await createOrg(h);
    const created = eventOf(h, 'org.created');
    await eventually(async () => Number((await deliveriesOf(h, created.id))[0]?.attempts) === 1, 'attempt 1 is recorded');
    h.clock.advance(5);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 1, failed: 0 });
    const [row] = await deliveriesOf(h, created.id);
    assert.equal(row!.status, 'delivered');
    assert.equal(Number(row!.attempts), 2);
    assert.equal(h.eventsOfType('org.created').length, 2, 'at least once: the failed call and the retry');
  } finally {
    await h.close();
  }
});

test('an instance closed between commit and delivery: a fresh instance delivers the event', async () => {
  // The database outlives both instances, as a host's does.
  const database = await Harness.start({ noListener: true, config: config() });
  try {
    // worker: false writes the rows and never attempts them on its own.
    const first = await Harness.start({ shareDatabaseWith: database, ownConnection: true, config: config({ worker: false }) });
    const email = uniqueEmail('crash');
    assert.equal((await first.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    const [audit] = await database.knex(`${database.tablePrefix}audit_events`).where({ type: 'user.registered' });
    assert.ok(audit, 'the change is audited');
    assert.equal(first.events.length, 0, 'the first instance never called its listener');
    await first.close();

    const fresh = await Harness.start({ shareDatabaseWith: database, ownConnection: true, config: config() });
    try {
      assert.deepEqual(await fresh.identity.service.deliverDueEvents(), { attempted: 1, delivered: 1, failed: 0 });
      const delivered = fresh.eventsOfType('user.registered');
      assert.equal(delivered.length, 1);
      assert.equal(delivered[0]!.id, audit.id);
      assert.equal((await deliveriesOf(database, audit.id))[0]!.status, 'delivered');
    } finally {
      await fresh.close();
    }
  } finally {
    await database.close();
  }
});

test('an attempt in flight keeps its lease; once the lease runs out another instance delivers, and the first cannot record over it', async () => {
  const database = await Harness.start({ noListener: true, config: config() });
  let release: () => void = () => undefined;
  try {
    const stuck = await Harness.start({
      shareDatabaseWith: database,
      ownConnection: true,
      config: config(),
      onEvent: (event) => (event.type === 'user.registered' ? new Promise<void>((resolve) => (release = resolve)) : undefined),
    });
    const other = await Harness.start({ shareDatabaseWith: database, ownConnection: true, config: config() });
    try {
      assert.equal((await stuck.post('/auth/register', { email: uniqueEmail('lease'), password: STRONG_PASSWORD })).status, 202);
      const event = eventOf(stuck, 'user.registered');
      // Leased by the instance that wrote it: nobody else attempts it.
      assert.deepEqual(await other.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
      stuck.clock.advance(DELIVERY.leaseSec);
      assert.deepEqual(await other.identity.service.deliverDueEvents(), { attempted: 1, delivered: 1, failed: 0 });
      assert.equal(other.eventsOfType('user.registered')[0]!.id, event.id);
      release();
      await stuck.close();
      const [row] = await deliveriesOf(database, event.id);
      assert.equal(row!.status, 'delivered');
      assert.equal(Number(row!.attempts), 1, "the first instance's late success was not recorded over the second's");
    } finally {
      release();
      await other.close();
      await stuck.close().catch(() => undefined);
    }
  } finally {
    await database.close();
  }
});

test('an instance without a listener writes and claims no listener rows; without listener or webhooks the outbox costs nothing', async () => {
  const h = await Harness.start({ noListener: true, config: config() });
  try {
    await createOrg(h);
    assert.equal(await countRows(h, 'event_deliveries'), 0);
    assert.ok((await countRows(h, 'audit_events')) > 0, 'the events are audited');
    const withListener = await Harness.start({ shareDatabaseWith: h, config: config({ worker: false }) });
    try {
      await createOrg(withListener);
      const rows = await countRows(h, 'event_deliveries', { target: 'listener' });
      assert.ok(rows > 0, 'listener rows written');
      // The instance without a listener never takes them.
      assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
      assert.equal(await countRows(h, 'event_deliveries', { status: 'pending' }), rows);
    } finally {
      await withListener.close();
    }
  } finally {
    await h.close();
  }
});

test('delivered and dead rows are pruned after retentionDays; pending ones stay', async () => {
  const h = await Harness.start({ config: config({ retentionDays: 1 }) });
  try {
    await createOrg(h);
    const created = eventOf(h, 'org.created');
    await eventually(async () => (await deliveriesOf(h, created.id))[0]?.status === 'delivered', 'delivered');
    const deliveries = servicesOf(h.identity).context.store.repos.eventDeliveries;
    assert.equal(await deliveries.pruneFinishedBefore(h.clock.now() - 24 * 3600 * 1000), 0);
    h.clock.advance(24 * 3600 + 1);
    assert.ok((await deliveries.pruneFinishedBefore(h.clock.now() - 24 * 3600 * 1000)) >= 1, 'pruned');
    assert.equal((await deliveriesOf(h, created.id)).length, 0);
  } finally {
    await h.close();
  }
});

test("with worker: false the host's deliverDueEvents() prunes too: a delivered row goes after retentionDays", async () => {
  const h = await Harness.start({ config: config({ retentionDays: 1, worker: false }) });
  try {
    await createOrg(h);
    assert.ok((await h.identity.service.deliverDueEvents()).delivered >= 1);
    const created = eventOf(h, 'org.created');
    assert.equal((await deliveriesOf(h, created.id))[0]?.status, 'delivered');
    h.clock.advance(24 * 3600 + 1);
    await h.identity.service.deliverDueEvents();
    assert.deepEqual(await deliveriesOf(h, created.id), [], 'pruned by the pass the host ran');
  } finally {
    await h.close();
  }
});

// A pass of the worker (`deliverDueEvents`) records the listener's queued successes first. A
// batch the 20 ms timer had already started was not waited for: the pass could end, and a
// caller read the row, while that batch was still being written (the row still pending). Here
// the batch is held on a row lock: the pass must not end before it is written.
test(
  'a pass of the worker ends only after a batch of successes already on its way is written',
  { skip: TEST_DB !== 'pg' && 'holds the batch on a PostgreSQL row lock; the PostgreSQL run covers it' },
  async () => {
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    const h = await Harness.start({ config: config(), onEvent: (event) => (event.type === 'org.created' ? gate : undefined) });
    const holder = await h.knex.transaction();
    try {
      await createOrg(h);
      const created = eventOf(h, 'org.created');
      // The listener has not returned yet, so its success is not queued: lock the row first.
      await holder(`${h.tablePrefix}event_deliveries`).where({ event_id: created.id }).forUpdate().select('id');
      openGate();
      const waitingUpdates = async () =>
        Number(
          (await h.knex.raw("select count(*) as waiting from pg_stat_activity where wait_event_type = 'Lock' and query ilike 'update%event_deliveries%'")).rows[0]
            .waiting,
        );
      await eventually(async () => (await waitingUpdates()) === 1, 'the batch of successes waits on the row lock');

      let passEnded = false;
      const pass = h.identity.service.deliverDueEvents().then((totals) => {
        passEnded = true;
        return totals;
      });
      // Bounded, not a timing assumption: without the wait the pass ends within milliseconds.
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(passEnded, false, 'the pass waits for the batch on its way');
      await holder.commit();
      assert.deepEqual(await pass, { attempted: 0, delivered: 0, failed: 0 });
      const [row] = await deliveriesOf(h, created.id);
      assert.equal(row!.status, 'delivered', 'written when the pass ends');
      assert.equal(h.eventsOfType('org.created').length, 1, 'delivered once');
    } finally {
      if (!holder.isCompleted()) await holder.rollback();
      await h.close();
    }
  },
);
