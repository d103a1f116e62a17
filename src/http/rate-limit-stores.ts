import { createHash } from 'node:crypto';
import type { ClientRateLimitInfo, IncrementResponse, Options, Store as RateLimitStore } from 'express-rate-limit';
import type { RateLimitGroup } from '../config/types.js';
import { errors } from '../errors.js';
import { Occasional, PRUNE_EVERY_MS } from '../services/shared/occasional.js';
import { settleWithin } from '../services/shared/settle-within.js';

/** A store that does not answer within this long counts as down (docs/getting-started.md: never a hang). */
const STORE_TIMEOUT_MS = 5000;
/** Ended windows are deleted at most this often per instance. */
/** Longer client keys are hashed to fit the key column. */
const MAX_KEY_LENGTH = 200;

/** The counters the database store keeps (the store layer's rate-limit counter repository). */
export interface RateLimitCounters {
  increment(key: string, now: number, windowMs: number): Promise<{ hits: number; resetAt: number }>;
  decrement(key: string, now: number): Promise<void>;
  get(key: string, now: number): Promise<{ hits: number; resetAt: number } | undefined>;
  reset(key: string): Promise<void>;
  pruneEnded(now: number): Promise<void>;
}

/**
 * `auth.rateLimitStore: 'database'`: express-rate-limit counters in the router's own database,
 * shared by every instance that uses it, for hosts without Redis. One upsert per counted
 * request; Redis remains the better choice under heavy traffic.
 */
export class DatabaseRateLimitStore implements RateLimitStore {
  readonly localKeys = false;
  readonly prefix: string;
  private windowMs = 60_000;
  private readonly pruning = new Occasional(PRUNE_EVERY_MS, Date.now());

  constructor(
    private readonly counters: RateLimitCounters,
    group: RateLimitGroup,
  ) {
    this.prefix = `${group}:`;
  }

  init(options: Options): void {
    this.windowMs = options.windowMs;
  }

  async increment(key: string): Promise<IncrementResponse> {
    // express-rate-limit's windows and Retry-After run on the process clock, so these do too.
    const now = Date.now();
    this.pruneOccasionally(now);
    const { hits, resetAt } = await this.counters.increment(this.keyOf(key), now, this.windowMs);
    return { totalHits: hits, resetTime: new Date(resetAt) };
  }

  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const count = await this.counters.get(this.keyOf(key), Date.now());
    return count ? { totalHits: count.hits, resetTime: new Date(count.resetAt) } : undefined;
  }

  async decrement(key: string): Promise<void> {
    await this.counters.decrement(this.keyOf(key), Date.now());
  }

  async resetKey(key: string): Promise<void> {
    await this.counters.reset(this.keyOf(key));
  }

  private keyOf(key: string): string {
    const full = `${this.prefix}${key}`;
    return full.length <= MAX_KEY_LENGTH ? full : `${this.prefix}sha256:${createHash('sha256').update(key).digest('base64url')}`;
  }

  private pruneOccasionally(now: number): void {
    if (!this.pruning.due(now)) return;
    this.counters.pruneEnded(now).catch(() => undefined);
  }
}

function withTimeout<T>(work: Promise<T> | T): Promise<T> {
  return settleWithin(work, STORE_TIMEOUT_MS, `rate-limit store did not answer within ${STORE_TIMEOUT_MS} ms`);
}

/**
 * Wraps a store so that an outage (an error or no answer within 5 s) surfaces as 503
 * `unavailable`, never 500. With the group's `passOnStoreError`, express-rate-limit lets the
 * request through instead (fail open) and logs the outage through the host's logger.
 *
 * express-rate-limit runs a store's `init` once, when the router is created. A store whose
 * init failed (its backend unreachable at start-up: rate-limit-redis keeps the failed script
 * load and rethrows it on every count) is initialised again before its next use, until once
 * succeeds, so the group recovers when the backend does instead of answering 503 for the life
 * of the process.
 */
export function guardStore(inner: RateLimitStore): RateLimitStore {
  let initOptions: Options | undefined;
  let initFailed = false;
  let reinitialising: Promise<void> | undefined;
  const initialise = async (options: Options): Promise<void> => {
    initOptions = options;
    try {
      await inner.init!(options);
      initFailed = false;
    } catch (error) {
      initFailed = true;
      throw error;
    }
  };
  const initialiseAgain = (): Promise<void> => {
    reinitialising ??= initialise(initOptions!).finally(() => {
      reinitialising = undefined;
    });
    return reinitialising;
  };
  const guard = async <T>(call: () => Promise<T> | T): Promise<T> => {
    try {
      return await withTimeout(initFailed ? initialiseAgain().then(call) : call());
    } catch (error) {
      throw errors.unavailable(error);
    }
  };
  return {
    localKeys: inner.localKeys,
    prefix: inner.prefix,
    init: inner.init ? (options) => initialise(options) : undefined,
    increment: (key) => guard(() => inner.increment(key)),
    decrement: (key) => guard(() => inner.decrement(key)),
    resetKey: (key) => guard(() => inner.resetKey(key)),
    get: inner.get ? (key) => guard(() => inner.get!(key)) : undefined,
    resetAll: inner.resetAll ? () => guard(() => inner.resetAll!()) : undefined,
    shutdown: inner.shutdown ? () => inner.shutdown!() : undefined,
  };
}
