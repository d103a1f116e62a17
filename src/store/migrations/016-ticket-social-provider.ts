import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * An MFA ticket after a social sign-in remembers the provider that passed the first factor:
 * `user.logged_in` carries `method: 'social'` and that `provider` after the gate too
 * (docs/social-login.md), as it does without a gate.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.mfaTickets, (t) => {
      t.string('social_provider', 32).nullable();
    });
  };
}
