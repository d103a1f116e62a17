import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * The once-a-minute prunes (docs/database.md) delete by age across all rows: without an index
 * on the age they read the whole table each time (on PostgreSQL a sequential scan of every
 * ticket, passwordless challenge, budget event, finished delivery or session ever kept).
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.mfaTickets, (t) => {
      t.index(['expires_at']);
    });
    await knex.schema.alterTable(table.passwordlessChallenges, (t) => {
      t.index(['expires_at']);
    });
    await knex.schema.alterTable(table.rateEvents, (t) => {
      t.index(['occurred_at']);
    });
    await knex.schema.alterTable(table.eventDeliveries, (t) => {
      t.index(['status', 'updated_at']);
    });
    // Ended sessions go a day after their end. Neither index is written by a refresh, which moves
    // `expires_at` on every call: an index on it would cost every refresh an index write (and on
    // PostgreSQL its heap-only update). A session past its absolute lifetime is found by
    // `created_at`, written once; a revoked one by a partial index that only a revocation writes.
    await knex.schema.alterTable(table.sessions, (t) => {
      t.index(['created_at']);
      t.index(['revoked_at'], `${table.sessions}_revoked_at_index`, { predicate: knex.whereNotNull('revoked_at') });
    });
  };
}
