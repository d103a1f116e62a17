import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * A session's refresh generation (src/crypto/refresh-token.ts): a refresh token names its
 * session and generation under a MAC, and a rotation moves the session to the next generation
 * in one conditional update. Tokens from before stay in the refresh-token table and keep working
 * until they are used or expire; the first refresh with one moves its session to generation 1.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    await knex.schema.alterTable(table.sessions, (t) => {
      t.integer('refresh_generation').notNullable().defaultTo(0);
    });
  };
}
