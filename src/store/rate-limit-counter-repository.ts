import { toNumber } from './database.js';
import { Repository } from './repository.js';

export interface RateLimitCount {
  hits: number;
  resetAt: number;
}

/**
 * Fixed-window counters of the database rate-limit store. Each increment is one upsert that
 * starts a new window when the old one has ended, so instances counting the same key at the
 * same moment never lose a hit (PostgreSQL and SQLite 3.35+ share this syntax).
 */
export class RateLimitCounterRepository extends Repository {
  async increment(key: string, now: number, windowMs: number): Promise<RateLimitCount> {
    const table = this.table.rateLimitCounters;
    const result: unknown = await this.db.raw(
      `INSERT INTO ?? (key, hits, reset_at) VALUES (?, 1, ?)
       ON CONFLICT (key) DO UPDATE SET
         hits = CASE WHEN ??.reset_at <= ? THEN 1 ELSE ??.hits + 1 END,
         reset_at = CASE WHEN ??.reset_at <= ? THEN excluded.reset_at ELSE ??.reset_at END
       RETURNING hits, reset_at`,
      [table, key, now + windowMs, table, now, table, table, now, table],
    );
    const rows = (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as Array<Record<string, unknown>>;
    const row = rows[0]!;
    return { hits: toNumber(row.hits), resetAt: toNumber(row.reset_at) };
  }

  async decrement(key: string, now: number): Promise<void> {
    await this.db(this.table.rateLimitCounters).where({ key }).andWhere('reset_at', '>', now).andWhere('hits', '>', 0).decrement('hits', 1);
  }

  async get(key: string, now: number): Promise<RateLimitCount | undefined> {
    const row = await this.db(this.table.rateLimitCounters).where({ key }).andWhere('reset_at', '>', now).first();
    return row ? { hits: toNumber(row.hits), resetAt: toNumber(row.reset_at) } : undefined;
  }

  async reset(key: string): Promise<void> {
    await this.db(this.table.rateLimitCounters).where({ key }).del();
  }

  /** Windows that ended: their rows would only be overwritten by the next hit. */
  async pruneEnded(now: number): Promise<void> {
    await this.deleteInBatches(this.table.rateLimitCounters, 'key', (query) => query.where('reset_at', '<=', now));
  }
}
