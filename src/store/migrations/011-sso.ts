import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Single sign-on per organization (docs/sso.md). Times are epoch milliseconds from the
 * injected clock. A domain is unique among verified rows only: several organizations may
 * hold it pending, each with its own TXT token. The client secret is stored AES-256-GCM
 * sealed. SSO identities are keyed by (connection, subject), never by an issuer alone.
 * Flows and exchange codes are section 9's, with the connection they were issued for.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const ms = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name);

    await knex.schema.createTable(table.orgDomains, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).notNullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('domain', 253).notNullable();
      t.string('status', 16).notNullable();
      t.string('txt_value', 64).notNullable().unique();
      // Set only while verified: the unique index then holds one verified owner per domain.
      t.string('verified_domain', 253).nullable().unique();
      ms(t, 'verified_at').nullable();
      ms(t, 'created_at').notNullable();
      t.unique(['organization_id', 'domain']);
      t.index(['domain']);
    });

    await knex.schema.createTable(table.ssoConnections, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).notNullable().unique().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.string('issuer', 2048).notNullable();
      t.string('client_id', 255).notNullable();
      t.text('client_secret_enc').notNullable();
      t.text('scopes').notNullable();
      t.string('token_endpoint_auth_method', 32).notNullable();
      t.boolean('enabled').notNullable();
      t.boolean('jit').notNullable();
      t.string('default_role', 64).notNullable();
      t.boolean('enforce').notNullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
    });

    await knex.schema.createTable(table.ssoIdentities, (t) => {
      t.string('id', 36).primary();
      t.string('connection_id', 36).notNullable().references('id').inTable(table.ssoConnections).onDelete('CASCADE');
      t.string('user_id', 36).notNullable().references('id').inTable(table.users).onDelete('CASCADE');
      t.string('issuer', 2048).notNullable();
      t.string('subject', 255).notNullable();
      t.string('email', 320).nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'last_login_at').nullable();
      t.unique(['connection_id', 'subject']);
      t.unique(['connection_id', 'user_id']);
      t.index(['user_id']);
    });

    await knex.schema.alterTable(table.socialFlows, (t) => {
      t.string('connection_id', 36).nullable();
    });
    // An MFA gate after single sign-on remembers the connection, so the session it opens counts as opened through it.
    await knex.schema.alterTable(table.mfaTickets, (t) => {
      t.string('sso_connection_id', 36).nullable();
    });
    // A session opened through a connection survives that connection's enforcement (docs/sso.md).
    await knex.schema.alterTable(table.sessions, (t) => {
      t.string('sso_connection_id', 36).nullable();
    });
  };
}
