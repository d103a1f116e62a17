import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * The social callback changes nothing any more (docs/social-login.md): it stores the provider's
 * validated claims on the flow, and the exchange, once the browser that started the flow has
 * proven itself, resolves the account or makes the link. The claims (subject, e-mail, name)
 * are sealed with AES-GCM under a sub-key of the secret, bound to the flow's id.
 * `outcome`, which held the callback's decision, is no longer written.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.socialFlows, (t) => {
      t.text('claims_enc').nullable();
    });
  };
}
