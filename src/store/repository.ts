import type { Knex } from 'knex';
import type { Dialect } from './database.js';
import type { TableNames } from './table-names.js';

/** What every repository is built from: a connection (the root pool or a transaction), the table names and the dialect. */
export interface RepositoryContext {
  db: Knex | Knex.Transaction;
  table: TableNames;
  dialect: Dialect;
}

export abstract class Repository {
  protected readonly db: Knex | Knex.Transaction;
  protected readonly table: TableNames;
  protected readonly dialect: Dialect;

  constructor(context: RepositoryContext) {
    this.db = context.db;
    this.table = context.table;
    this.dialect = context.dialect;
  }

  /** Row lock on PostgreSQL; SQLite serialises writers already and Knex would warn about FOR UPDATE. */
  protected lockForUpdate<T extends Knex.QueryBuilder>(query: T): T {
    return (this.dialect === 'pg' ? query.forUpdate() : query) as T;
  }
}
