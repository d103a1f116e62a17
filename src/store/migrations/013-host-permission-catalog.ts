import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * The host permission keys the organizations' system roles were last synchronised with
 * (docs/organizations.md, "Host permissions"). Start-up compares `config.permissions` with
 * these rows: a key that is new here is granted once to every owner and admin role, a key
 * that is gone is taken out of the system roles. An empty table on a database from before
 * this migration makes every configured key new, which mends organizations created before
 * the key was added.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.createTable(table.hostPermissions, (t) => {
      t.string('key', 100).primary();
      t.bigInteger('added_at').notNullable();
    });
  };
}
