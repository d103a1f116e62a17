import type { Knex } from 'knex';
import type { Dialect } from './database.js';
import { preparedOn } from './sqlite-statements.js';

/**
 * What a repository runs its statements on: the pool (the root Knex instance), or the
 * connection of one transaction (`runTransaction`). Repositories use no more of Knex than this,
 * so a transaction needs no Knex instance of its own.
 */
export interface Db {
  // biome-ignore lint/suspicious/noExplicitAny: rows are typed by each repository's mapper, as with Knex's own default
  (tableName: string): Knex.QueryBuilder<any, any[]>;
  raw: Knex['raw'];
  client: Knex['client'];
  /** The transaction's connection; absent on the pool, where each statement takes one of its own. */
  pinnedConnection?: object;
  /** Whether the transaction has committed or rolled back: its connection may be someone else's now. */
  isCompleted?(): boolean;
}

interface SqliteControl {
  prepare(sql: string): { run(): unknown };
  readonly inTransaction: boolean;
}
interface PgControl {
  query(sql: string): Promise<unknown>;
}

/**
 * Runs `work` as one transaction on one connection of the pool: BEGIN, the work, then COMMIT,
 * or ROLLBACK if the work or the commit fails.
 *
 * Knex's own `transaction()` builds a new Knex instance for every call (about a hundred
 * closures, an event emitter and its listeners), which was a seventh of a token refresh's CPU
 * (docs/performance.md). Here the statements are Knex's builders as everywhere else, pinned to
 * the transaction's connection with `.connection()`; only BEGIN, COMMIT and ROLLBACK go
 * straight to the driver.
 */
export async function runTransaction<T>(knex: Knex, dialect: Dialect, work: (db: Db) => Promise<T>): Promise<T> {
  const connection = (await knex.client.acquireConnection()) as object;
  let completed = false;
  const assertOpen = () => {
    // A statement started after the end (a missing await) would run on a connection back in the pool.
    if (completed) throw new Error('Transaction already completed: a statement ran after its commit or rollback');
  };
  const db = ((tableName: string) => {
    assertOpen();
    return knex(tableName).connection(connection);
  }) as Db;
  db.raw = ((sql: string, bindings?: Knex.RawBinding[] | Knex.ValueDict) => {
    assertOpen();
    return (bindings === undefined ? knex.raw(sql) : knex.raw(sql, bindings)).connection(connection);
  }) as Knex['raw'];
  db.client = knex.client;
  db.pinnedConnection = connection;
  db.isCompleted = () => completed;

  let reusable = true;
  try {
    await control(dialect, connection, 'BEGIN');
    let result: T;
    try {
      result = await work(db);
    } catch (error) {
      // Closed before ROLLBACK, as Knex does: a statement that a still-running part of the work
      // starts now would otherwise run after it, outside any transaction.
      completed = true;
      reusable = await rolledBack(dialect, connection);
      throw error;
    }
    completed = true;
    try {
      await control(dialect, connection, 'COMMIT');
    } catch (error) {
      reusable = await rolledBack(dialect, connection);
      throw error;
    }
    return result;
  } finally {
    completed = true;
    if (!reusable) discard(connection);
    await knex.client.releaseConnection(connection);
  }
}

/** The statements that begin and end a transaction, and the savepoint of one member of a group commit (`GroupCommit`). */
export type ControlStatement = 'BEGIN' | 'COMMIT' | 'ROLLBACK' | 'SAVEPOINT group_member' | 'RELEASE group_member' | 'ROLLBACK TO group_member';

/** Runs a control statement straight on the driver, outside Knex. */
export async function control(dialect: Dialect, connection: object, statement: ControlStatement): Promise<void> {
  if (dialect === 'pg') {
    await (connection as PgControl).query(statement);
    return;
  }
  preparedOn(connection as SqliteControl, statement).run();
}

/**
 * Ends a failed transaction. A failed COMMIT ends it on PostgreSQL but not always on SQLite
 * (a busy database leaves it open), so ROLLBACK runs either way; on SQLite it is skipped when
 * nothing is open, where it would fail. Whether the connection is fit to go back to the pool.
 */
async function rolledBack(dialect: Dialect, connection: object): Promise<boolean> {
  try {
    if (dialect === 'sqlite' && !(connection as SqliteControl).inTransaction) return true;
    await control(dialect, connection, 'ROLLBACK');
    return true;
  } catch {
    return false;
  }
}

/**
 * A connection whose transaction could not be ended must not serve anyone else: Knex's pool
 * destroys, rather than hands out again, a connection marked as disposed.
 */
function discard(connection: object): void {
  (connection as { __knex__disposed?: unknown }).__knex__disposed = 'the transaction on it could not be rolled back';
}
