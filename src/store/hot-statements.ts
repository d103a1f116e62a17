import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Dialect } from './database.js';
import { preparedOn } from './sqlite-statements.js';
import type { Db } from './transaction.js';

/**
 * The statements every request of the hot path runs, shaped once and then run
 * straight on the driver.
 *
 * Knex builds, compiles and wraps every query anew, which costs more CPU than a bare Express
 * request. A hot statement is written with the Knex builder like any other, but built once:
 * its values are stand-ins the first time, so the compiled SQL and the order of its
 * placeholders are learnt and kept. Each later run binds the real values and executes on the
 * connection Knex hands out (the pool's, or the transaction's): a better-sqlite3 statement
 * prepared once per connection, or a named (prepared) PostgreSQL statement.
 *
 * Only a statement's values change between runs. A statement whose shape depends on its input
 * (an optional filter, say) is two hot statements with two names. A value compared in a where
 * clause is never null: Knex writes `is null` for a null it sees, a stand-in always compiles
 * to `= ?`. Columns are selected by name, never `*`: on PostgreSQL a prepared statement whose
 * result columns change under it (a newer instance's migration adding one, during a rolling
 * upgrade) fails with "cached plan must not change result type".
 */

type Values = Record<string, unknown>;
/** Stand-ins for a statement's values while it is built the once. */
export type StandIns<V extends Values> = { readonly [K in keyof V]: number };

interface Shape {
  sql: string;
  /** For each placeholder, in order: the name of the value it takes, or the constant the builder wrote. */
  slots: Array<{ value: string } | { constant: unknown }>;
  /** The PostgreSQL prepared-statement name: from the SQL, so one text always has one name. */
  pgName: string;
}

interface SqliteStatement {
  reader: boolean;
  all(...values: unknown[]): unknown[];
  run(...values: unknown[]): { changes: number };
}
interface SqliteConnection {
  prepare(sql: string): SqliteStatement;
}
interface PgConnection {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/** Numbers at the top of the safe-integer range: no statement writes one as a constant. */
const FIRST_STAND_IN = Number.MAX_SAFE_INTEGER - 1_000_000;

export class HotStatements {
  private readonly shapes = new Map<string, Shape>();

  constructor(private readonly dialect: Dialect) {}

  /** Rows of a select. */
  async all<V extends Values>(db: Db, name: string, build: (values: StandIns<V>) => Knex.QueryBuilder, values: V): Promise<Record<string, unknown>[]> {
    return (await this.execute(db, name, build, values)).rows as Record<string, unknown>[];
  }

  /** The first row of a select (write `.first()` or `.limit(1)` in the builder). */
  async first<V extends Values>(db: Db, name: string, build: (values: StandIns<V>) => Knex.QueryBuilder, values: V): Promise<Record<string, unknown> | undefined> {
    return (await this.all(db, name, build, values))[0];
  }

  /** Rows an insert, update or delete changed. */
  async run<V extends Values>(db: Db, name: string, build: (values: StandIns<V>) => Knex.QueryBuilder, values: V): Promise<number> {
    return (await this.execute(db, name, build, values)).changed;
  }

  private async execute<V extends Values>(db: Db, name: string, build: (values: StandIns<V>) => Knex.QueryBuilder, values: V): Promise<{ rows: unknown[]; changed: number }> {
    const shape = this.shapes.get(name) ?? this.learn(name, build, values);
    // Knex leaves an undefined column out of an insert; a shape has every column, so undefined is NULL.
    const bound = shape.slots.map((slot) => ('value' in slot ? (values[slot.value] ?? null) : slot.constant));
    if (db.pinnedConnection) {
      if (db.isCompleted?.()) throw new Error(`Transaction already completed before hot statement ${name}`);
      return this.executeOn(db.pinnedConnection, shape, bound);
    }
    const connection = (await db.client.acquireConnection()) as object;
    try {
      return await this.executeOn(connection, shape, bound);
    } finally {
      await db.client.releaseConnection(connection);
    }
  }

  private async executeOn(connection: object, shape: Shape, bound: unknown[]): Promise<{ rows: unknown[]; changed: number }> {
    if (this.dialect === 'pg') {
      const result = await (connection as PgConnection).query({ name: shape.pgName, text: shape.sql, values: bound });
      return { rows: result.rows, changed: result.rowCount ?? 0 };
    }
    const statement = preparedOn(connection as SqliteConnection, shape.sql);
    const driverValues = bound.map(toSqliteValue);
    if (statement.reader) return { rows: statement.all(...driverValues), changed: 0 };
    return { rows: [], changed: statement.run(...driverValues).changes };
  }

  private learn<V extends Values>(name: string, build: (values: StandIns<V>) => Knex.QueryBuilder, values: V): Shape {
    const names = Object.keys(values);
    const standIns = Object.fromEntries(names.map((key, index) => [key, FIRST_STAND_IN + index])) as StandIns<V>;
    const compiled = build(standIns).toSQL().toNative();
    if (/\bselect\s+\*|\.\*/i.test(compiled.sql)) throw new Error(`Hot statement ${name} selects *; name its columns`);
    const slots: Shape['slots'] = compiled.bindings.map((binding) =>
      typeof binding === 'number' && binding >= FIRST_STAND_IN ? { value: names[binding - FIRST_STAND_IN]! } : { constant: binding },
    );
    const used = new Set(slots.flatMap((slot) => ('value' in slot ? [slot.value] : [])));
    const unused = names.filter((key) => !used.has(key));
    // A value the builder swallowed (or turned into something else) would be bound to nothing.
    if (unused.length > 0) throw new Error(`Hot statement ${name} does not bind ${unused.join(', ')}`);
    const shape = { sql: compiled.sql, slots, pgName: `identity_${createHash('sha256').update(compiled.sql).digest('hex').slice(0, 24)}` };
    this.shapes.set(name, shape);
    return shape;
  }
}

/** What Knex's better-sqlite3 client does to values: booleans as 0/1, dates as epoch milliseconds. */
function toSqliteValue(value: unknown): unknown {
  if (typeof value === 'boolean') return Number(value);
  if (value instanceof Date) return value.valueOf();
  return value;
}
