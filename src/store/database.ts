import knexFactory, { type Knex } from 'knex';
import type { Logger } from '../adapters/types.js';
import { IdentityConfigError } from '../config/schema.js';
import type { DatabaseConfig } from '../config/types.js';

export type Dialect = 'sqlite' | 'pg';

export interface OpenedDatabase {
  knex: Knex;
  dialect: Dialect;
  /** True when the router created the pool and so must destroy it on close. */
  owned: boolean;
}

function isKnexInstance(database: DatabaseConfig): database is Knex {
  return typeof database === 'function';
}

export function dialectOf(knex: Knex): Dialect {
  const client = String(knex.client.config.client ?? knex.client.dialect ?? '');
  if (/sqlite/i.test(client)) return 'sqlite';
  if (/^(pg|postgres|postgresql)$/i.test(client) || /postgres/i.test(client)) return 'pg';
  throw new Error(`identity-router supports better-sqlite3 and pg; got client "${client}"`);
}

interface SqliteStatement {
  reader: boolean;
  all(...values: unknown[]): unknown[];
  run(...values: unknown[]): unknown;
}

interface SqliteConnection {
  pragma(statement: string): unknown;
  prepare(sql: string): SqliteStatement;
}

/** Distinct statements kept per connection; the router has a few hundred, so this only bounds a runaway. */
const PREPARED_STATEMENT_LIMIT = 1000;

/** Knex writes a query's LIMIT last, as a placeholder: `.first()` is `... limit ?`. */
const TRAILING_LIMIT_PLACEHOLDER = / limit \?$/;

/**
 * Knex's better-sqlite3 client prepares every query anew, which costs about as much as
 * running it. Each SQL text is prepared once per connection and its statement reused (a
 * better-sqlite3 statement is reusable and runs synchronously, so reuse is safe; SQLite
 * re-prepares it by itself after a schema change).
 */
function reusePreparedStatements(connection: SqliteConnection): void {
  const prepare = connection.prepare.bind(connection);
  const statements = new Map<string, SqliteStatement>();
  const prepared = (sql: string): SqliteStatement => {
    let statement = statements.get(sql);
    if (statement === undefined) {
      statement = TRAILING_LIMIT_PLACEHOLDER.test(sql) ? limitWrittenIn(sql, prepared, prepare(sql)) : prepare(sql);
      if (statements.size >= PREPARED_STATEMENT_LIMIT) statements.delete(statements.keys().next().value!);
      statements.set(sql, statement);
    }
    return statement;
  };
  connection.prepare = prepared;
}

/**
 * The SQLite that better-sqlite3 builds plans a LIMIT with its bound value, so a statement
 * whose LIMIT is a placeholder is compiled again on every run: a refresh's one-row lookup took
 * 40 µs so, and 12 µs with the value in its text (docs/performance.md). Such a statement runs as
 * the text with the limit written in, one statement per value. The value is an integer Knex has
 * already parsed, and anything else is bound as before.
 */
function limitWrittenIn(sql: string, prepared: (sql: string) => SqliteStatement, asBound: SqliteStatement): SqliteStatement {
  const withoutLimit = sql.slice(0, -1);
  const choose = (args: unknown[]): [SqliteStatement, unknown[]] => {
    // Knex passes its values as one array; the hot statements pass them as arguments.
    const values = args.length === 1 && Array.isArray(args[0]) ? (args[0] as unknown[]) : args;
    const limit = values[values.length - 1];
    return Number.isSafeInteger(limit) && (limit as number) >= 0 ? [prepared(`${withoutLimit}${limit}`), values.slice(0, -1)] : [asBound, values];
  };
  const via =
    (method: 'all' | 'run') =>
    (...args: unknown[]) => {
      const [statement, values] = choose(args);
      return statement[method](...values);
    };
  return { reader: asBound.reader, all: via('all') as SqliteStatement['all'], run: via('run') };
}

export function openDatabase(database: DatabaseConfig, logger: Logger): OpenedDatabase {
  if (isKnexInstance(database)) return { knex: database, dialect: dialectOf(database), owned: false };

  const { tablePrefix: _ignored, ...knexConfig } = database;
  const client = String(knexConfig.client);
  const isSqlite = /sqlite/i.test(client);
  // Knex loads the driver here; when it is not installed Knex logs the load error with its stack
  // and throws. The host gets a config error naming the package to install instead.
  let loadingDriver = true;
  const knex = openKnex(client, () => knexFactory({
    // A database that cannot be reached answers 503 within 5 s instead of hanging (docs/getting-started.md).
    acquireConnectionTimeout: 5000,
    // Knex's own warnings go through the host's logger, not straight to the console.
    log: {
      warn: (message: unknown) => logger.warn(`knex: ${String(message)}`),
      error: (message: unknown) => {
        if (!loadingDriver) logger.error(`knex: ${String(message)}`);
      },
      deprecate: (method: string, alternative: string) => logger.warn(`knex: ${method} is deprecated; use ${alternative}`),
      debug: (message: unknown) => logger.debug?.(`knex: ${String(message)}`),
    },
    ...(isSqlite ? { useNullAsDefault: true } : {}),
    ...knexConfig,
    // Knex otherwise inlines the bound values (password hashes, e-mails, token hashes) into the
    // message of a failed query, and messages reach logs. Not overridable.
    compileSqlOnError: false,
    pool: {
      ...(isSqlite
        ? {
            afterCreate: (connection: SqliteConnection, done: (error: Error | null, connection: unknown) => void) => {
              // Foreign keys are off by default in SQLite; WAL lets readers proceed during a write.
              connection.pragma('foreign_keys = ON');
              connection.pragma('journal_mode = WAL');
              connection.pragma('busy_timeout = 5000');
              reusePreparedStatements(connection);
              done(null, connection);
            },
          }
        : {}),
      ...knexConfig.pool,
    },
  }));
  loadingDriver = false;
  return { knex, dialect: dialectOf(knex), owned: true };
}

/** Runs Knex's constructor; a driver it cannot load is a config error (docs/configuration.md). */
function openKnex(client: string, open: () => Knex): Knex {
  try {
    return open();
  } catch (error) {
    if (error instanceof Error && error.message.startsWith('Knex: run')) {
      // Knex's message: "Knex: run", "$ npm install <driver> --save", then the load error's message.
      const cause = error.message.split('\n')[2] ?? '';
      throw new IdentityConfigError([`"database.client" is "${client}", but its driver could not be loaded (${cause}): install it in the host app, npm install ${/sqlite/i.test(client) ? 'better-sqlite3' : 'pg'}`]);
    }
    throw error;
  }
}

/** pg returns bigint columns as strings and SQLite returns booleans as 0/1; rows are mapped through these. */
export const toNumber = (value: unknown): number => (typeof value === 'number' ? value : Number(value));
export const toNullableNumber = (value: unknown): number | null => (value === null || value === undefined ? null : toNumber(value));
export const toBoolean = (value: unknown): boolean => value === true || value === 1 || value === '1' || value === 't';

