import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Several instances on one database (docs/multiple-instances.md):
 * - the next signing key is published ahead of its use, so verifiers that cache the JWKS
 *   already hold it when a rotation makes it active. `next_slot` is 1 for the one next key;
 *   its unique index lets exactly one exist, like `active_slot` for the active key.
 * - the built-in database rate-limit store (`auth.rateLimitStore: 'database'`) keeps one fixed
 *   window counter per key.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.signingKeys, (t) => {
      t.integer('next_slot').nullable().unique();
    });

    await knex.schema.createTable(table.rateLimitCounters, (t) => {
      // express-rate-limit's client key (an IP or a user id), prefixed with its group.
      t.string('key', 255).primary();
      t.integer('hits').notNullable();
      // Epoch milliseconds by the process clock, like express-rate-limit's own windows.
      t.bigInteger('reset_at').notNullable().index();
    });
  };
}
