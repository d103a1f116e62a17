import assert from 'node:assert/strict';
import { test } from 'node:test';
import { migrateIdentityDatabase } from '../../src/index.js';
import { up as eventsAndWebhooks } from '../../src/store/migrations/010-events-and-webhooks.js';
import { tableNames } from '../../src/store/table-names.js';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { createOrg } from '../helpers/orgs.js';

// Migration 015 (src/store/migrations/015-outbox-pages.ts): fewer pages written per outbox
// row. On SQLite the outbox is rebuilt WITHOUT ROWID; on both, the (webhook_id, created_at)
// index holds webhook rows only. A database the release before left with rows in its outbox
// keeps every one of them, and its cascade.

test('migration 015 keeps every outbox row and its cascade, and indexes webhook rows only by webhook', async () => {
  const older = await Harness.start();
  try {
    const org = await createOrg(older);
    const table = tableNames(older.tablePrefix);
    const db = older.knex;
    // The outbox as migration 010 made it, holding a row of each target.
    await db.schema.dropTable(table.eventDeliveries);
    await db.schema.dropTable(table.webhooks);
    await eventsAndWebhooks(table)(db);
    const now = 1_790_000_000_000;
    await db(table.webhooks).insert({ id: 'webhook-1', organization_id: org.id, url: 'https://example.com/hook', events: '["*"]', status: 'active', secret_enc: 'sealed', created_at: now, updated_at: now });
    const row = (id: string, target: string, webhookId: string | null, status: string) => ({
      id,
      event_id: `event-${id}`,
      event_type: 'member.added',
      organization_id: org.id,
      target,
      webhook_id: webhookId,
      status,
      attempts: status === 'pending' ? 0 : 1,
      next_attempt_at: status === 'pending' ? now + 5000 : null,
      locked_until: null,
      lease_owner: null,
      last_status: status === 'pending' ? null : 200,
      last_error: null,
      delivered_at: status === 'pending' ? null : now + 100,
      created_at: now,
      updated_at: now + 100,
    });
    const rows = [row('a-listener', 'listener', null, 'delivered'), row('b-webhook', 'webhook', 'webhook-1', 'pending'), row('c-webhook', 'webhook', 'webhook-1', 'delivered')];
    await db(table.eventDeliveries).insert(rows);

    await db(`${older.tablePrefix}migrations`).where({ name: '015-outbox-pages' }).delete();
    await migrateIdentityDatabase(db, { tablePrefix: older.tablePrefix });

    const kept = (await db(table.eventDeliveries).orderBy('id')).map((found: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(found).map(([column, value]) => [column, typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value])),
    );
    assert.deepEqual(kept, rows);

    const webhookIndex = `${table.eventDeliveries}_webhook_id_created_at_index`;
    if (TEST_DB === 'pg') {
      const indexes = (await db.raw('select indexname, indexdef from pg_indexes where tablename = ?', [table.eventDeliveries])).rows as Array<{ indexname: string; indexdef: string }>;
      assert.match(indexes.find((index) => index.indexname === webhookIndex)?.indexdef ?? '', /\(webhook_id, created_at\) WHERE \(webhook_id IS NOT NULL\)$/);
      assert.ok(indexes.some((index) => /\(status, next_attempt_at\)$/.test(index.indexdef)), 'the claim index stays');
    } else {
      const { sql } = await db('sqlite_master').where({ type: 'table', name: table.eventDeliveries }).first('sql');
      assert.match(sql, /\) WITHOUT ROWID$/);
      assert.match(sql, /primary key \(`id`\)/);
      const indexes = (await db('sqlite_master').where({ type: 'index', tbl_name: table.eventDeliveries }).select('name', 'sql')) as Array<{ name: string; sql: string | null }>;
      assert.deepEqual(indexes.map((index) => index.name).sort(), [`${table.eventDeliveries}_status_next_attempt_at_index`, webhookIndex]);
      assert.match(indexes.find((index) => index.name === webhookIndex)!.sql!, /where `webhook_id` is not null$/);
      const plan = (await db.raw(`explain query plan select id from ?? where webhook_id = ? order by created_at desc`, [table.eventDeliveries, 'webhook-1'])) as Array<{ detail: string }>;
      assert.match(plan.map((step) => step.detail).join('; '), new RegExp(`USING (COVERING )?INDEX ${webhookIndex}`), 'a webhook\'s deliveries are still found by the index');
    }

    // A row's id is its key: a second row with it is refused.
    await assert.rejects(db(table.eventDeliveries).insert(row('a-listener', 'listener', null, 'pending')));
    // Deleting the webhook still deletes its rows, and leaves the listener's.
    await db(table.webhooks).where({ id: 'webhook-1' }).delete();
    assert.deepEqual((await db(table.eventDeliveries).select('id')).map((found: { id: string }) => found.id), ['a-listener']);
  } finally {
    await older.close();
  }
});

test('new outbox rows are keyed by time-ordered ids (UUID version 7 at the injected clock), so each lands after the last', async () => {
  const h = await Harness.start();
  try {
    const table = tableNames(h.tablePrefix);
    const before = Number((await h.knex(table.eventDeliveries).count({ n: '*' }).first())?.n ?? 0);
    for (let i = 0; i < 3; i += 1) {
      await createOrg(h);
      h.clock.advance(61);
    }
    const rows = (await h.knex(table.eventDeliveries).select('id', 'created_at').orderBy([{ column: 'created_at' }, { column: 'id' }])) as Array<{ id: string; created_at: number | string }>;
    assert.ok(rows.length > before + 3, 'the listener wrote a row for each event');
    for (const { id, created_at } of rows) {
      assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.equal(Number.parseInt(id.replace('-', '').slice(0, 12), 16), Number(created_at), 'its first 48 bits are its creation time');
    }
    assert.deepEqual([...rows].sort((a, b) => (a.id < b.id ? -1 : 1)).map((row) => row.id), rows.map((row) => row.id), 'ordered by id as by time');
  } finally {
    await h.close();
  }
});
