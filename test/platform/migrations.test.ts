import assert from 'node:assert/strict';
import { test } from 'node:test';
import { migrateIdentityDatabase } from '../../src/index.js';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';

test('migrateIdentityDatabase applies the schema for a router started with migrate: false', async () => {
  const first = await Harness.start();
  try {
    // A second prefix on the same database, migrated by the host's own step.
    const tablePrefix = `m${first.tablePrefix}`;
    await migrateIdentityDatabase(first.knex, { tablePrefix });
    await migrateIdentityDatabase(first.knex, { tablePrefix }); // idempotent
    assert.ok(await first.knex.schema.hasTable(`${tablePrefix}users`));
    const second = await Harness.start({ shareDatabaseWith: first, config: { tablePrefix, migrate: false } });
    try {
      const email = uniqueEmail();
      assert.equal((await second.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
      assert.equal((await first.post('/auth/login', { email, password: STRONG_PASSWORD })).status, 401, 'the prefixes are separate');
    } finally {
      await second.close();
      if (process.env.IDENTITY_TEST_DB === 'pg') {
        const { rows } = await first.knex.raw<{ rows: Array<{ tablename: string }> }>(`select tablename from pg_tables where schemaname = current_schema() and tablename like ?`, [`${tablePrefix}%`]);
        if (rows.length) await first.knex.raw(`drop table ${rows.map((r) => `"${r.tablename}"`).join(', ')} cascade`);
      }
    }
  } finally {
    await first.close();
  }
});
