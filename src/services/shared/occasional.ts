/**
 * A chore run at most once per interval of one router's clock: pruning rows that no request will
 * read again (ended challenges, tickets, budget events, finished deliveries, rate-limit counters),
 * which no request of their own ever deletes. `due` answers whether to run it now, and counts an
 * answer of true as the run.
 */
export class Occasional {
  private lastAt: number | undefined;

  constructor(
    private readonly everyMs: number,
    /** The first run's time: undefined lets the first call run; a start time waits a whole interval from it. */
    startAt?: number,
  ) {
    this.lastAt = startAt;
  }

  due(now: number): boolean {
    if (this.lastAt !== undefined && now - this.lastAt < this.everyMs) return false;
    this.lastAt = now;
    return true;
  }
}

/** How often each router prunes what it prunes (docs/database.md): once a minute. */
export const PRUNE_EVERY_MS = 60_000;

/**
 * How long a row is kept after its end (expiry, use, revocation) before a prune deletes it
 * (docs/database.md "Retention"): past the longest access token (`accessTtl`, at most a day), so
 * nothing that names a pruned row is still accepted, and a day of support questions about it
 * ("my link said expired") can still be answered from the row.
 */
export const ENDED_ROW_RETENTION_MS = 24 * 60 * 60 * 1000;
