import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Social login (docs/social-login.md). Times are epoch milliseconds from the injected clock.
 * `state` and exchange codes are stored only as keyed hashes; the PKCE verifier and the
 * nonce only as one AES-256-GCM ciphertext bound to the flow id.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const ms = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name);

    await knex.schema.createTable(table.socialIdentities, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('provider', 32).notNullable();
      t.string('issuer', 2048).notNullable();
      t.string('subject', 255).notNullable();
      t.string('email', 320).nullable();
      t.boolean('email_verified').notNullable().defaultTo(false);
      ms(t, 'created_at').notNullable();
      ms(t, 'last_login_at').nullable();
      // The subject is the only link key: one provider account belongs to at most one user...
      t.unique(['provider', 'subject']);
      // ...and a user holds at most one identity per provider.
      t.unique(['user_id', 'provider']);
      t.index(['user_id']);
    });

    await knex.schema.createTable(table.socialFlows, (t) => {
      t.string('id', 36).primary();
      t.string('state_hash', 64).notNullable().unique();
      t.string('provider', 32).notNullable();
      t.string('purpose', 8).notNullable();
      t.string('user_id', 36).nullable();
      t.string('session_id', 36).nullable();
      t.text('secrets_enc').notNullable();
      t.string('return_to', 2048).notNullable();
      t.string('handoff_challenge', 128).notNullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'consumed_at').nullable();
      t.string('exchange_hash', 64).nullable().unique();
      ms(t, 'exchange_expires_at').nullable();
      ms(t, 'exchange_consumed_at').nullable();
      t.text('outcome').nullable();
      t.index(['created_at']);
    });

    // The MFA ticket remembers the first factor, so the gate after a social sign-in gives amr ['fed', 'otp'] (docs/social-login.md).
    await knex.schema.alterTable(table.mfaTickets, (t) => {
      t.string('first_factor', 8).nullable();
    });
  };
}
