import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Passkeys (docs/mfa.md). A passkey is an MFA factor of type `webauthn`, so it lives in the
 * factor table and is listed, renamed, made default and deleted like any other factor. Only
 * public data is stored: the credential id, the COSE public key and the signature counter.
 * Challenges are stored as keyed hashes with an expiry and consumed once.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.mfaFactors, (t) => {
      // base64url of at most 1023 bytes (WebAuthn's limit) is 1364 characters.
      t.string('credential_id', 1400).nullable();
      t.text('credential_public_key').nullable();
      t.bigInteger('sign_count').nullable();
      t.string('transports', 200).nullable();
      // The WebAuthn user handle the credential was created with (random, never the user id).
      t.string('user_handle', 100).nullable();
      // One credential belongs to one user: a second registration of it, by anyone, is refused.
      t.unique(['credential_id']);
    });

    await knex.schema.createTable(table.webauthnChallenges, (t) => {
      t.string('id', 36).primary();
      t.string('challenge_hash', 64).notNullable().unique();
      // register, login, login_mfa or step_up
      t.string('purpose', 16).notNullable();
      t.string('user_id', 36).nullable().references('id').inTable(table.users).onDelete('CASCADE');
      // The session (register, step-up) or MFA ticket (login gate) the challenge was issued to.
      t.string('bound_to', 36).nullable();
      t.string('user_handle', 100).nullable();
      t.bigInteger('created_at').notNullable();
      t.bigInteger('expires_at').notNullable();
      t.bigInteger('consumed_at').nullable();
      t.index(['expires_at']);
    });
  };
}
