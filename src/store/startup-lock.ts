import type { Knex } from 'knex';
import type { Dialect } from './database.js';

/** Raw pg client, as knex's PostgreSQL dialect hands it out. */
interface PgClient {
  query(sql: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

interface RawConnectionClient {
  acquireRawConnection(): Promise<PgClient>;
  destroyRawConnection(connection: PgClient): Promise<void>;
}

/** First half of the two-key advisory lock: identifies identity-router start-up among other users of pg_advisory_lock. */
const STARTUP_LOCK_CLASS = 0x1d3e7001;
/** How long an instance waits for another's start-up before giving up (the router's readiness retries later). */
const STARTUP_LOCK_TIMEOUT_MS = 120_000;

/**
 * Runs start-up work (migrations, the first signing keys) while holding a PostgreSQL
 * session-level advisory lock, so instances started together on an empty database take turns
 * instead of racing Knex's migration tables and lock row (docs/multiple-instances.md). The lock is taken on a
 * connection of its own, outside the pool, so the work keeps every pooled connection; if the
 * holder dies, PostgreSQL ends its session and the lock with it, so a loser never waits on a
 * corpse. SQLite runs the work as it is: one file is served by one process's migrations
 * (its writers are serialised by the file lock anyway).
 */
export async function withStartupLock<T>(knex: Knex, dialect: Dialect, tablePrefix: string, work: () => Promise<T>): Promise<T> {
  if (dialect !== 'pg') return work();
  const client = knex.client as unknown as RawConnectionClient;
  const connection = await client.acquireRawConnection();
  try {
    await connection.query(`SET lock_timeout = ${STARTUP_LOCK_TIMEOUT_MS}`);
    // One lock per table prefix: routers with different prefixes on one database do not wait for each other.
    await connection.query('SELECT pg_advisory_lock($1, hashtext($2))', [STARTUP_LOCK_CLASS, tablePrefix]);
    try {
      await releaseAbandonedMigrationLock(knex, `${tablePrefix}migrations_lock`);
      return await work();
    } finally {
      await connection.query('SELECT pg_advisory_unlock($1, hashtext($2))', [STARTUP_LOCK_CLASS, tablePrefix]).catch(() => undefined);
    }
  } finally {
    await client.destroyRawConnection(connection).catch(() => undefined);
  }
}

/**
 * Knex's own migration lock is a row flag. A process killed between setting and clearing it,
 * or two processes creating the lock table at once (before this advisory lock existed), leave
 * it set or duplicated, and every later start-up fails with `MigrationLocked`. Holding the
 * advisory lock, no other identity-router start-up is migrating, so such a row is abandoned:
 * reset it to the single unlocked row Knex expects.
 */
async function releaseAbandonedMigrationLock(knex: Knex, lockTable: string): Promise<void> {
  if (!(await knex.schema.hasTable(lockTable))) return;
  const rows = await knex(lockTable).select('index', 'is_locked').orderBy('index');
  if (rows.length === 1 && Number(rows[0].is_locked) === 0) return;
  await knex.transaction(async (trx) => {
    await trx(lockTable).del();
    await trx(lockTable).insert({ is_locked: 0 });
  });
}
