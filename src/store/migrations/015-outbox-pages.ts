import type { Knex } from 'knex';
import { dialectOf } from '../database.js';
import type { TableNames } from '../table-names.js';

/*
 * Fewer pages written per outbox row (docs/performance.md). Every change with a listener
 * inserts a `listener` row, whose `webhook_id` is null: the (`webhook_id`, `created_at`) index
 * now holds webhook rows only, which are the only ones it is read for (`webhook_id = ?`). On
 * SQLite the table is rebuilt WITHOUT ROWID, keyed by its id alone: a rowid table keeps its
 * text primary key in a second b-tree, one more page for every commit to write. New ids are
 * time-ordered (`timeOrderedUuid`), so a new row lands on the last page, not a random one.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const webhookIndex = `${table.eventDeliveries}_webhook_id_created_at_index`;
    if (dialectOf(knex) === 'sqlite') {
      const rebuilt = `${table.eventDeliveries}_rebuilt`;
      // The same columns and constraints, as SQLite keeps the table's definition.
      const { sql } = (await knex('sqlite_master').where({ type: 'table', name: table.eventDeliveries }).first('sql')) as { sql: string };
      const columns = /^CREATE TABLE\s+\S+\s*(\(.*\))\s*$/is.exec(sql)?.[1];
      if (!columns) throw new Error(`unexpected definition of ${table.eventDeliveries}`);
      await knex.raw(`CREATE TABLE ?? ${columns} WITHOUT ROWID`, [rebuilt]);
      await knex.raw('INSERT INTO ?? SELECT * FROM ??', [rebuilt, table.eventDeliveries]);
      await knex.schema.dropTable(table.eventDeliveries);
      await knex.schema.renameTable(rebuilt, table.eventDeliveries);
      await knex.schema.alterTable(table.eventDeliveries, (t) => {
        t.index(['status', 'next_attempt_at']);
      });
    } else {
      await knex.schema.alterTable(table.eventDeliveries, (t) => {
        t.dropIndex(['webhook_id', 'created_at'], webhookIndex);
      });
    }
    await knex.schema.alterTable(table.eventDeliveries, (t) => {
      t.index(['webhook_id', 'created_at'], webhookIndex, { predicate: knex.whereNotNull('webhook_id') });
    });
  };
}
