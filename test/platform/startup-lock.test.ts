import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import knexFactory, { type Knex } from 'knex';
import { createIdentityRouter, migrateIdentityDatabase } from '../../src/index.js';

// docs/multiple-instances.md start-up on PostgreSQL. Threat: a start-up that crashed between setting and
// clearing Knex's migration lock, or two start-ups that both created the lock row, leaving every
// later start-up failing with MigrationLocked (a bricked database after a rolling deploy).
// The several-instances test races real processes; this one plants the broken states directly.

const SKIP = process.env.IDENTITY_TEST_DB === 'pg' && process.env.IDENTITY_TEST_PG_URL ? false : 'the start-up lock is PostgreSQL-only: it runs in the PostgreSQL phase';
const quiet = { info() {}, warn() {}, error() {} };
let knex: Knex;
const prefixes: string[] = [];

before(() => {
  if (!SKIP) knex = knexFactory({ client: 'pg', connection: process.env.IDENTITY_TEST_PG_URL, pool: { min: 0, max: 4 } });
});
after(async () => {
  if (!knex) return;
  for (const prefix of prefixes) {
    const { rows } = await knex.raw<{ rows: Array<{ tablename: string }> }>('select tablename from pg_tables where schemaname = current_schema() and tablename like ?', [`${prefix}%`]);
    if (rows.length > 0) await knex.raw(`drop table if exists ${rows.map((row) => `"${row.tablename}"`).join(', ')} cascade`);
  }
  await knex.destroy();
});

async function startRouter(prefix: string): Promise<void> {
  const identity = createIdentityRouter(
    { database: knex, tablePrefix: prefix, secret: 'startup-lock-secret-at-least-32-characters', issuer: 'https://id.example.test', password: { bcryptCost: 4 } },
    { logger: quiet },
  );
  try {
    await identity.ready;
  } finally {
    await identity.close();
  }
}

for (const [label, plant] of [
  ['left locked by a crashed start-up', async (lockTable: string) => void (await knex(lockTable).update({ is_locked: 1 }))],
  ['duplicated by two start-ups that both created it', async (lockTable: string) => void (await knex(lockTable).insert({ is_locked: 0 }))],
] as const) {
  test(`a Knex migration lock row ${label} is reset by the next start-up`, { skip: SKIP }, async () => {
    const prefix = `l${randomBytes(4).toString('hex')}_`;
    prefixes.push(prefix);
    await migrateIdentityDatabase(knex, { tablePrefix: prefix });
    await plant(`${prefix}migrations_lock`);
    await startRouter(prefix);
    assert.deepEqual((await knex(`${prefix}migrations_lock`).select('is_locked')).map((row) => Number(row.is_locked)), [0]);
    const keys = await knex(`${prefix}signing_keys`).select('active_slot', 'next_slot');
    assert.equal(keys.filter((key) => key.active_slot !== null).length, 1);
    assert.equal(keys.filter((key) => key.next_slot !== null).length, 1);
  });
}

test('concurrent migrateIdentityDatabase calls and start-ups on one empty schema all succeed', { skip: SKIP }, async () => {
  const prefix = `l${randomBytes(4).toString('hex')}_`;
  prefixes.push(prefix);
  await Promise.all([migrateIdentityDatabase(knex, { tablePrefix: prefix }), migrateIdentityDatabase(knex, { tablePrefix: prefix }), startRouter(prefix), startRouter(prefix)]);
  const applied = await knex(`${prefix}migrations`).select('name');
  assert.equal(applied.length, new Set(applied.map((row) => row.name)).size);
  assert.equal((await knex(`${prefix}signing_keys`).whereNotNull('active_slot')).length, 1);
});
