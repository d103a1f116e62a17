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

  /** Row lock on PostgreSQL; SQLite serialises writers already and Knex would warn about FOR UPDATE. */
  protected lockForUpdate<T extends Knex.QueryBuilder>(query: T): T {
    return (this.dialect === 'pg' ? query.forUpdate() : query) as T;
  }
}
