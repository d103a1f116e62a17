import type { Knex } from 'knex';
import type { Dialect } from './database.js';
import type { HotStatements } from './hot-statements.js';
import type { TableNames } from './table-names.js';
import type { Db } from './transaction.js';

/** What every repository is built from: a connection (the root pool or a transaction), the table names, the dialect and the hot statements (one set per store). */
export interface RepositoryContext {
  db: Db;
  table: TableNames;
  dialect: Dialect;
  hot: HotStatements;
}

/** Rows a prune deletes per statement, and statements per run (`Repository.deleteInBatches`). */
export const PRUNE_BATCH = 1000;
const PRUNE_MAX_BATCHES = 100;

export abstract class Repository {
  protected readonly db: Db;
  protected readonly table: TableNames;
  protected readonly dialect: Dialect;
  protected readonly hot: HotStatements;

  constructor(context: RepositoryContext) {
    this.db = context.db;
    this.table = context.table;
    this.dialect = context.dialect;
    this.hot = context.hot;
  }

  /**
   * Deletes the rows `match` selects, `PRUNE_BATCH` at a time, each batch its own statement
   * (a prune runs outside any request's transaction): no statement holds the locks of more than
   * one batch, however much has piled up. Stops after `PRUNE_MAX_BATCHES`; the next run goes on.
   * `match` must be served by an index (docs/database.md). Answers how many went.
   */
  protected async deleteInBatches(tableName: string, key: string, match: (query: Knex.QueryBuilder) => void): Promise<number> {
    let deleted = 0;
    for (let batch = 0; batch < PRUNE_MAX_BATCHES; batch += 1) {
      const chosen = this.db(tableName).select(key).limit(PRUNE_BATCH);
      match(chosen);
      // `match` again on the DELETE itself: PostgreSQL re-checks only the DELETE's own condition
      // on a row a concurrent transaction changed meanwhile (a counter's window restarted, a dead
      // delivery replayed), not the subquery's, which would delete a row that no longer matches.
      const deleting = this.db(tableName).whereIn(key, chosen);
      match(deleting);
      const count = await deleting.delete();
      deleted += count;
      if (count < PRUNE_BATCH) break;
    }
    return deleted;
  }

  /** Row lock on PostgreSQL; SQLite serialises writers already and Knex would warn about FOR UPDATE. */
  protected lockForUpdate<T extends Knex.QueryBuilder>(query: T): T {
    return (this.dialect === 'pg' ? query.forUpdate() : query) as T;
  }
}
