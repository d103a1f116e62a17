import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * The whole schema of the spec in one migration. Times are epoch milliseconds (bigint) taken
 * from the injected clock, so expiry never depends on the database server's clock.
 * Secrets are never stored in plain text: tokens and codes as HMAC digests, TOTP secrets and
 * private keys as AES-256-GCM ciphertexts.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const ms = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name);

    await knex.schema.createTable(table.users, (t) => {
      t.string('id', 36).primary();
      // Trimmed and lower-cased: the single unique index makes A@x.io and a@x.io one account.
      t.string('email', 320).notNullable().unique();
      t.boolean('email_verified').notNullable().defaultTo(false);
      t.string('display_name', 120).nullable();
      t.string('status', 16).notNullable().defaultTo('active');
      t.string('password_hash', 100).nullable();
      t.boolean('mfa_enforced').notNullable().defaultTo(false);
      t.integer('failed_login_count').notNullable().defaultTo(0);
      ms(t, 'failed_login_window_start').nullable();
      ms(t, 'locked_until').nullable();
      ms(t, 'deleted_at').nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
    });

    // One session is one refresh-token family (docs/database.md: sid equals the family).
    await knex.schema.createTable(table.sessions, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('organization_id', 36).nullable();
      t.boolean('mfa').notNullable().defaultTo(false);
      t.string('amr', 200).notNullable().defaultTo('["pwd"]');
      ms(t, 'auth_time').notNullable();
      t.string('ip', 64).nullable();
      t.string('user_agent', 512).nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'last_used_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'revoked_at').nullable();
      t.string('revoked_reason', 40).nullable();
      t.index(['user_id', 'revoked_at']);
      t.index(['organization_id']);
    });

    await knex.schema.createTable(table.refreshTokens, (t) => {
      t.string('id', 36).primary();
      t.string('session_id', 36).notNullable().references('id').inTable(table.sessions).onDelete('CASCADE');
      t.string('token_hash', 64).notNullable().unique();
      ms(t, 'created_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'consumed_at').nullable();
      t.index(['session_id']);
    });

    // E-mail verification and password reset tokens.
    await knex.schema.createTable(table.oneTimeTokens, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('purpose', 32).notNullable();
      t.string('token_hash', 64).notNullable().unique();
      ms(t, 'created_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'consumed_at').nullable();
      t.index(['user_id', 'purpose']);
    });

    await knex.schema.createTable(table.signingKeys, (t) => {
      t.string('kid', 64).primary();
      t.string('alg', 10).notNullable();
      t.text('public_key_pem').notNullable();
      t.text('private_key_sealed').notNullable();
      // 1 for the one active key, NULL once retired: the unique index lets exactly one key be active.
      t.integer('active_slot').nullable().unique();
      ms(t, 'created_at').notNullable();
      ms(t, 'retired_at').nullable();
      // When a retired key leaves the JWKS (retired_at + one access-token lifetime).
      ms(t, 'published_until').nullable();
    });

    await knex.schema.createTable(table.auditEvents, (t) => {
      // A monotonically increasing sequence gives a stable cursor for the audit-log pages.
      t.bigIncrements('seq');
      t.string('id', 36).notNullable().unique();
      t.string('type', 64).notNullable();
      ms(t, 'occurred_at').notNullable();
      t.string('actor_id', 36).nullable();
      t.string('user_id', 36).nullable();
      t.string('organization_id', 36).nullable();
      t.string('ip', 64).nullable();
      t.text('data').notNullable();
      t.index(['organization_id', 'seq']);
      t.index(['user_id']);
    });

    await knex.schema.createTable(table.mfaFactors, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('type', 8).notNullable();
      t.string('label', 100).nullable();
      t.string('destination', 320).nullable();
      t.text('secret_sealed').nullable();
      t.boolean('is_default').notNullable().defaultTo(false);
      // Last accepted TOTP time-step: a code at or before it is a replay.
      t.bigInteger('last_used_step').nullable();
      ms(t, 'confirmed_at').nullable();
      ms(t, 'created_at').notNullable();
      t.index(['user_id']);
    });

    await knex.schema.createTable(table.otpChallenges, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('factor_id', 36).notNullable().references('id').inTable(table.mfaFactors).onDelete('CASCADE');
      t.string('purpose', 16).notNullable();
      t.string('channel', 8).notNullable();
      t.string('code_hash', 64).notNullable();
      // The MFA ticket (login) or session (step-up) the challenge belongs to.
      t.string('bound_to', 36).nullable();
      t.integer('attempts').notNullable().defaultTo(0);
      ms(t, 'created_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'consumed_at').nullable();
      t.index(['factor_id', 'created_at']);
      t.index(['user_id']);
    });

    // Login MFA tickets: single use, with a failure counter shared by every code kind.
    await knex.schema.createTable(table.mfaTickets, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.integer('failed_attempts').notNullable().defaultTo(0);
      ms(t, 'created_at').notNullable();
      ms(t, 'expires_at').notNullable();
      ms(t, 'consumed_at').nullable();
      t.string('ip', 64).nullable();
      t.string('user_agent', 512).nullable();
    });

    await knex.schema.createTable(table.recoveryCodes, (t) => {
      t.string('id', 36).primary();
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('batch_id', 36).notNullable();
      t.string('code_hash', 64).notNullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'used_at').nullable();
      ms(t, 'retired_at').nullable();
      t.index(['user_id', 'code_hash']);
    });

    // Sliding-window counters kept in the database so several instances share them
    // (OTP send budgets, the per-account verify window). Keys are keyed hashes, not addresses.
    await knex.schema.createTable(table.rateEvents, (t) => {
      t.bigIncrements('id');
      t.string('bucket', 100).notNullable();
      ms(t, 'occurred_at').notNullable();
      t.index(['bucket', 'occurred_at']);
    });

    await knex.schema.createTable(table.organizations, (t) => {
      t.string('id', 36).primary();
      t.string('name', 160).notNullable();
      t.string('slug', 160).notNullable().unique();
      t.string('status', 16).notNullable().defaultTo('active');
      t.boolean('require_mfa').notNullable().defaultTo(false);
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      ms(t, 'deleted_at').nullable();
    });

    // organization_id NULL is the global scope (the superadmin role).
    await knex.schema.createTable(table.roles, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).nullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('slug', 160).notNullable();
      t.string('name', 160).notNullable();
      t.string('description', 500).nullable();
      t.boolean('is_system').notNullable().defaultTo(false);
      t.text('permission_keys').notNullable().defaultTo('[]');
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      t.unique(['organization_id', 'slug']);
    });

    await knex.schema.createTable(table.memberships, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).notNullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('status', 16).notNullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      t.unique(['organization_id', 'user_id']);
      t.index(['user_id']);
    });

    await knex.schema.createTable(table.memberRoles, (t) => {
      t.string('membership_id', 36).notNullable().references('id').inTable(table.memberships).onDelete('CASCADE');
      t.string('role_id', 36).notNullable().references('id').inTable(table.roles).onDelete('CASCADE');
      t.primary(['membership_id', 'role_id']);
      t.index(['role_id']);
    });

    // Global role grants (superadmin), outside any organization.
    await knex.schema.createTable(table.globalRoleGrants, (t) => {
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('role_id', 36).notNullable().references('id').inTable(table.roles).onDelete('CASCADE');
      ms(t, 'created_at').notNullable();
      t.primary(['user_id', 'role_id']);
    });

    await knex.schema.createTable(table.invites, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).notNullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('email', 320).notNullable();
      t.text('role_slugs').notNullable();
      t.string('token_hash', 64).notNullable().unique();
      t.string('invited_by', 36).nullable();
      t.string('status', 16).notNullable();
      // Equals email while pending and NULL afterwards: one pending invite per address per organization.
      t.string('pending_email', 320).nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      ms(t, 'expires_at').notNullable();
      t.unique(['organization_id', 'pending_email']);
      t.index(['organization_id', 'status']);
    });
  };
}
