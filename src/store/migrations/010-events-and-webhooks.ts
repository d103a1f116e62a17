import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Durable events and webhooks (docs/webhooks.md). `event_deliveries` is the outbox: one row per
 * target of an event, written in the change's transaction next to the audit row, claimed by a
 * worker under a lease (`locked_until`, `lease_owner`). A webhook's signing secret is stored
 * only encrypted (AES-GCM, bound to the webhook id). The new organization permission
 * `webhooks.manage` is added to every existing owner and admin role.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const ms = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name);

    await knex.schema.createTable(table.webhooks, (t) => {
      t.string('id', 36).primary();
      t.string('organization_id', 36).notNullable().references('id').inTable(table.organizations).onDelete('CASCADE');
      t.text('url').notNullable();
      // JSON array of event types, or ["*"].
      t.text('events').notNullable();
      t.string('status', 16).notNullable();
      t.string('disabled_reason', 16).nullable();
      t.text('secret_enc').notNullable();
      t.text('previous_secret_enc').nullable();
      ms(t, 'previous_expires_at').nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      t.index(['organization_id', 'status']);
    });

    await knex.schema.createTable(table.eventDeliveries, (t) => {
      t.string('id', 36).primary();
      // The audit row's id: the event is read back from there for every attempt.
      t.string('event_id', 36).notNullable();
      t.string('event_type', 64).notNullable();
      t.string('organization_id', 36).nullable();
      t.string('target', 16).notNullable();
      t.string('webhook_id', 36).nullable().references('id').inTable(table.webhooks).onDelete('CASCADE');
      t.string('status', 16).notNullable();
      t.integer('attempts').notNullable().defaultTo(0);
      ms(t, 'next_attempt_at').nullable();
      ms(t, 'locked_until').nullable();
      t.string('lease_owner', 36).nullable();
      t.integer('last_status').nullable();
      t.string('last_error', 32).nullable();
      ms(t, 'delivered_at').nullable();
      ms(t, 'created_at').notNullable();
      ms(t, 'updated_at').notNullable();
      t.index(['status', 'next_attempt_at']);
      t.index(['webhook_id', 'created_at']);
    });

    const roles: Array<{ id: string; is_system: unknown; permission_keys: string }> = await knex(table.roles)
      .whereNotNull('organization_id')
      .whereIn('slug', ['owner', 'admin'])
      .select('id', 'is_system', 'permission_keys');
    for (const role of roles) {
      if (!(role.is_system === true || role.is_system === 1 || role.is_system === '1')) continue;
      const keys = JSON.parse(role.permission_keys) as string[];
      if (!keys.includes('webhooks.manage')) await knex(table.roles).where({ id: role.id }).update({ permission_keys: JSON.stringify([...keys, 'webhooks.manage']) });
    }
  };
}
