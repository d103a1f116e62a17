import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Passwordless sign-in by e-mail (docs/passwordless.md). A challenge belongs to an address, with or
 * without an account, so it has a table of its own beside the factor-bound OTP challenges.
 * The address is kept as a keyed hash (the throttling key and the supersede key); only a
 * challenge for an address with no account (sign-up) also keeps it sealed with AES-GCM, so that
 * its verify can create the account, and no row holds such an address in plain text. The code
 * and the link token are stored as keyed hashes. A challenge whose `code_hash` is null was
 * answered like any other but mailed nothing: no code or link opens it.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.createTable(table.passwordlessChallenges, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).nullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('address_hash', 64).notNullable();
      t.text('address_sealed').nullable();
      t.string('code_hash', 64).nullable();
      t.string('link_hash', 64).nullable().unique();
      t.integer('attempts').notNullable().defaultTo(0);
      t.bigInteger('created_at').notNullable();
      t.bigInteger('expires_at').notNullable();
      t.bigInteger('consumed_at').nullable();
      t.index(['address_hash', 'created_at']);
      t.index(['user_id']);
    });
    // An MFA ticket after a passwordless first factor remembers whether a code or a link passed it:
    // `user.logged_in` carries that method after the gate too.
    await knex.schema.alterTable(table.mfaTickets, (t) => {
      t.string('sign_in_method', 16).nullable();
    });
  };
}
