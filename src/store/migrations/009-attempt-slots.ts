import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Issue 22: the attempts being compared right now are counted apart from the failures. A
 * failed-attempt slot is still taken before a password or code is compared, but an attempt
 * that finds every slot held can now tell "others are being compared" (it waits for one) from
 * "the failures are used up" (the account is locked), and an attempt in flight no longer
 * counts as a failure when another attempt's failure is weighed against the threshold.
 * - `attempts_in_flight`: slots held by attempts still being compared;
 * - `attempts_in_flight_at`: when the last of them was taken (injected clock, epoch ms). A
 *   count older than the lockout window is stale (an instance that died mid-comparison) and
 *   is forgotten by the next reservation.
 * `failed_login_count` keeps only failures from now on.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.users, (t) => {
      t.integer('attempts_in_flight').notNullable().defaultTo(0);
      t.bigInteger('attempts_in_flight_at').nullable();
    });
  };
}
