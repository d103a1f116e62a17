import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * API keys (docs/api-keys.md). The key itself is never stored: `key_hash` is an HMAC of it under
 * a sub-key of the secret, unique so a presented key is found by one indexed lookup.
 * `start` (8 characters after the prefix) lets a list tell keys apart without revealing them.
 * Times are epoch milliseconds from the injected clock, like every other table.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.createTable(table.apiKeys, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('organization_id', 36).notNullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('name', 120).notNullable();
      t.string('key_hash', 64).notNullable().unique();
      t.string('start', 16).notNullable();
      // JSON array of catalog keys; the live authority is intersected with it on every use.
      t.text('permission_keys').notNullable();
      t.bigInteger('created_at').notNullable();
      t.bigInteger('expires_at').notNullable();
      t.bigInteger('last_used_at').nullable();
      t.bigInteger('revoked_at').nullable();
      t.string('revoked_reason', 40).nullable();
      t.index(['organization_id', 'user_id']);
      t.index(['user_id']);
    });
  };
}
