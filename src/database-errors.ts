/*
 * Classifying driver errors is shared by every layer (the HTTP error handler answers 503
 * for an absent database, the key ring and services retry on a unique violation), so it
 * lives here rather than in the store: the HTTP layer and crypto never import the store.
 */

/** Unique-constraint violation on either database. */
export function isUniqueViolation(error: unknown): boolean {
  const candidate = error as { code?: string; message?: string } | undefined;
  return candidate?.code === '23505' || candidate?.code === 'SQLITE_CONSTRAINT_UNIQUE' || candidate?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/**
 * PostgreSQL broke a deadlock by rolling this transaction back (40P01). Nothing of it was
 * written, and the other transaction goes on: running it again gives a serial outcome.
 */
export function isDeadlock(error: unknown): boolean {
  return (error as { code?: string } | undefined)?.code === '40P01';
}

/**
 * Errors that mean "the database is not there right now" rather than a bug. pg answers a query
 * on a client whose connection broke (a backend terminated mid-transaction) with "... is not
 * queryable", which has no code.
 */
export function isConnectionError(error: unknown): boolean {
  const candidate = error as { code?: string; name?: string; message?: string } | undefined;
  if (!candidate) return false;
  if (candidate.name === 'KnexTimeoutError') return true;
  const code = candidate.code ?? '';
  return ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', '57P01', '57P02', '57P03', '08000', '08001', '08003', '08006', 'SQLITE_BUSY', 'SQLITE_CANTOPEN'].includes(code)
    || /Connection terminated|connect ECONNREFUSED|timeout acquiring a connection|is not queryable/i.test(candidate.message ?? '');
}

/**
 * An error raised by the database driver (pg's DatabaseError, better-sqlite3's SqliteError),
 * possibly rewritten by Knex. Its message can quote bound values or row contents (pg's
 * "invalid input syntax ...: \"value\"", Knex's inlined SQL on a host-supplied instance).
 */
export function isDatabaseError(error: unknown): error is Error & { code?: string } {
  if (!(error instanceof Error)) return false;
  const candidate = error as Error & { code?: unknown; severity?: unknown; routine?: unknown };
  if (candidate.name === 'DatabaseError' || candidate.name === 'SqliteError') return true;
  if (typeof candidate.severity === 'string' && typeof candidate.routine === 'string') return true;
  return typeof candidate.code === 'string' && /^(SQLITE_[A-Z_]+|[0-9A-Z]{5})$/.test(candidate.code);
}
