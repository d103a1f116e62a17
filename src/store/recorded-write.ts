import type { Knex } from 'knex';
import { AUDIT_ROW, type AuditEventRecord, type AuditRowValues, auditRowValues } from './audit-repository.js';
import type { Dialect } from './database.js';
import { deliveryColumns, deliveryValues, type NewDelivery } from './event-delivery-repository.js';
import type { StandIns } from './hot-statements.js';
import type { TableNames } from './table-names.js';
import type { Db } from './transaction.js';

/** What a conditional write records: its event's audit row and, if the event has a target that needs no read, its outbox row. */
export interface Recording {
  event: Omit<AuditEventRecord, 'seq'>;
  delivery: NewDelivery | undefined;
}

/** Whether a write and its recording can be one statement: PostgreSQL's WITH can hold a write, SQLite's cannot. */
export const recordsInOneStatement = (dialect: Dialect): boolean => dialect === 'pg';

type DeliveryValues = ReturnType<typeof deliveryValues>;
/** The outbox row's values under names of their own, beside the audit row's in one statement. */
type DeliveryRowValues = { [K in keyof DeliveryValues as `delivery.${K}`]: DeliveryValues[K] };

const DELIVERY_PREFIX = 'delivery.';

/**
 * A write's values with its recording's, for one hot statement, and the name that tells the
 * statement's shape (with or without the outbox row). A name in both would bind one value in
 * two places, so it throws.
 *
 * Built with `Object.assign` and object literals, not `{ ...write, ...recorded }`: on Node 20 a
 * spread followed by more properties costs microseconds where this costs a fraction of one, and
 * this runs on every refresh (docs/performance.md, `npx tsx bench/object-spread.ts`).
 */
export function valuesWithRecording<V extends Record<string, unknown>>(
  write: V,
  recording: Recording,
): { shape: 'recorded' | 'recordedWithDelivery'; values: V & (AuditRowValues | (AuditRowValues & DeliveryRowValues)) } {
  const audit = auditRowValues(recording.event);
  const delivery = recording.delivery ? deliveryRowValues(deliveryValues(recording.delivery)) : undefined;
  const values = Object.assign({}, write, audit, delivery);
  const named = Object.keys(write).length + AUDIT_ROW.length + (delivery ? Object.keys(delivery).length : 0);
  if (Object.keys(values).length !== named) {
    const recorded = Object.keys(Object.assign({}, audit, delivery));
    throw new Error(`A write and its recording both name a value ${recorded.find((key) => key in write)}`);
  }
  return { shape: delivery ? 'recordedWithDelivery' : 'recorded', values };
}

/** The outbox row's values under their prefixed names. */
function deliveryRowValues(delivery: DeliveryValues): DeliveryRowValues {
  return {
    'delivery.id': delivery.id,
    'delivery.eventId': delivery.eventId,
    'delivery.eventType': delivery.eventType,
    'delivery.organizationId': delivery.organizationId,
    'delivery.target': delivery.target,
    'delivery.webhookId': delivery.webhookId,
    'delivery.nextAttemptAt': delivery.nextAttemptAt,
    'delivery.lockedUntil': delivery.lockedUntil,
    'delivery.leaseOwner': delivery.leaseOwner,
    'delivery.now': delivery.now,
  };
}

/**
 * A conditional write (an update, a delete or an insert) and what it records, as one statement:
 * the audit row is inserted only if the write changed a row, and the outbox row only if the
 * audit row was (data-modifying WITHs, `recordsInOneStatement`). `alongside` is another write of
 * the same change, made in the same statement only if the write changed a row. The values are
 * a hot statement's stand-ins, from `valuesWithRecording`; the statement answers one row
 * changed exactly when the write changed one.
 */
export function writeRecording(
  db: Db,
  table: TableNames,
  dialect: Dialect,
  write: Knex.QueryBuilder,
  values: StandIns<AuditRowValues> | StandIns<AuditRowValues & DeliveryRowValues>,
  alongside?: Knex.QueryBuilder,
): Knex.QueryBuilder {
  if (!recordsInOneStatement(dialect)) throw new Error(`A write and its audit row cannot be one statement on ${dialect}`);
  const auditRow: Record<string, Knex.Value> = Object.fromEntries(AUDIT_ROW.map(([column, value]) => [column, values[value]]));
  const written = db.client.queryBuilder().with('changed', write.returning('id'));
  // PostgreSQL runs every WITH that writes, read or not: the condition is the alongside's own.
  const statement = alongside ? written.with('alongside', alongside.whereExists(db.client.queryBuilder().from('changed').select('id'))) : written;
  if (!(`${DELIVERY_PREFIX}id` in values)) return insertFrom(db, statement, table.auditEvents, auditRow, 'changed');
  const delivery = Object.fromEntries(Object.entries(values).flatMap(([key, value]) => (key.startsWith(DELIVERY_PREFIX) ? [[key.slice(DELIVERY_PREFIX.length), value]] : []))) as StandIns<DeliveryValues>;
  const deliveryRow = deliveryColumns(delivery) as Record<string, Knex.Value>;
  const recorded = insertFrom(db, db.client.queryBuilder(), table.auditEvents, auditRow, 'changed').returning('id');
  return insertFrom(db, statement.with('recorded', recorded), table.eventDeliveries, deliveryRow, 'recorded');
}

/** `insert into <table> (<columns>) select <values> from <source>`: one row for each row of `source`. */
function insertFrom(db: Db, builder: Knex.QueryBuilder, tableName: string, row: Record<string, Knex.Value>, source: string): Knex.QueryBuilder {
  return insertSelecting(db, builder, tableName, row, 'from ??', [source]);
}

/** `insert into <table> (<columns>) select <values> where exists (<requirement>) [and not exists (<blocker>)]`: the row, if `requirement` finds one and `blocker` none. */
export function insertWhere(db: Db, tableName: string, row: Record<string, Knex.Value>, requirement: Knex.QueryBuilder, blocker?: Knex.QueryBuilder): Knex.QueryBuilder {
  return blocker
    ? insertSelecting(db, db.client.queryBuilder(), tableName, row, 'where exists ? and not exists ?', [requirement, blocker])
    : insertSelecting(db, db.client.queryBuilder(), tableName, row, 'where exists ?', [requirement]);
}

function insertSelecting(db: Db, builder: Knex.QueryBuilder, tableName: string, row: Record<string, Knex.Value>, tail: string, tailBindings: readonly Knex.RawBinding[]): Knex.QueryBuilder {
  const columns = Object.keys(row);
  return builder
    .into(db.raw(`?? (${columns.map(() => '??').join(', ')})`, [tableName, ...columns]))
    .insert(db.raw(`select ${columns.map(() => '?').join(', ')} ${tail}`, [...Object.values(row), ...tailBindings]));
}
