import type { IdentityEvent, IdentityEventType } from '../../events.js';

/**
 * What an invalidation names: one session, everything about one user, everything about one
 * organization, or everything.
 */
export type AccessScope = { session: string } | { user: string } | { organization: string } | 'all';

/** Carries invalidations to the other instances on the same database (PostgreSQL LISTEN/NOTIFY). */
export interface InvalidationCarrier {
  /** Sends scopes to the other instances; failures are the carrier's to log. */
  publish(scopes: AccessScope[]): void;
  /** False while the carrier cannot hear other instances: the cache then serves nothing. */
  readonly listening: boolean;
  close(): Promise<void>;
}

interface Entry {
  value: unknown;
  /** The invalidation counter when the load started: an invalidation after it makes the entry stale. */
  stamp: number;
  /** performance.now() after which the entry is not served whatever was heard. */
  expiresAt: number;
  dependsOn: string[];
  /** Its share of `maxEntries`: one, or one per row for a page of rows. */
  weight: number;
}

/** When a read began (`AccessCache.startRead`): what it read is stale after any invalidation of its scopes since. */
export interface ReadStart {
  readonly stamp: number;
  /** performance.now() then: the entry expires `ttlMs` after it. */
  readonly at: number;
  /** False when the carrier was not listening: an invalidation may have been missed, so nothing is kept. */
  readonly keepable: boolean;
}

export interface AccessCacheOptions {
  /**
   * The backstop: how long an entry may be served, in milliseconds, if an invalidation from
   * another instance was lost on the way.
   */
  ttlMs: number;
  /** The bound on what is held: an entry counts one, a cached page of rows one per row. */
  maxEntries: number;
}

/**
 * One second: the bound of docs/multiple-instances.md holds even for a lost notification, or for processes
 * on one SQLite file, which have no carrier. At any real request rate a hot session is still
 * read from the database about once a second per instance.
 */
export const DEFAULT_ACCESS_CACHE: AccessCacheOptions = { ttlMs: 1_000, maxEntries: 20_000 };

/**
 * Events that change nothing the cache holds (sessions, authority, member pages). Every other committed
 * event invalidates its user, its organization and its session (STYLE 18: the cache names
 * the events that end it, and errs on the side of forgetting).
 */
const EVENTS_THAT_KEEP_ACCESS: ReadonlySet<IdentityEventType> = new Set<IdentityEventType>([
  'auth.token_refreshed',
  'user.logged_in',
  'user.login_failed',
  'user.password_reset_requested',
  'mfa.verify_failed',
  'mfa.verified',
]);

/**
 * What a value computed from kept entries was computed from (`AccessCache.beginDerivation`):
 * the scopes it depends on and the first moment one of those entries expires.
 */
export interface Derivation {
  /** The invalidation counter when it began: a later invalidation of one of its scopes makes what it kept stale. */
  readonly stamp: number;
  expiresAt: number;
  readonly dependsOn: Set<string>;
  /** False once a read could not be answered from a fresh entry: nothing derived is then kept. */
  fromKeptOnly: boolean;
}

/** Organization-wide changes that reach members through other organizations' rules (require_mfa) or end the organization. */
const EVENTS_THAT_CHANGE_EVERYONE: ReadonlySet<IdentityEventType> = new Set<IdentityEventType>(['org.updated', 'org.deleted']);

export function scopesOfEvent(event: IdentityEvent): AccessScope[] {
  if (EVENTS_THAT_KEEP_ACCESS.has(event.type)) return [];
  if (EVENTS_THAT_CHANGE_EVERYONE.has(event.type)) return ['all'];
  const scopes: AccessScope[] = [];
  if (event.user_id) scopes.push({ user: event.user_id });
  if (event.organization_id) scopes.push({ organization: event.organization_id });
  const sessionId = (event.data as { session_id?: unknown }).session_id;
  if (typeof sessionId === 'string') scopes.push({ session: sessionId });
  return scopes;
}

/** The wire and index form of a scope (`s:`, `u:`, `o:` and the id); `invalidation-carrier.ts` decodes it. */
export const keyOfScope = (scope: Exclude<AccessScope, 'all'>): string =>
  'session' in scope ? `s:${scope.session}` : 'user' in scope ? `u:${scope.user}` : `o:${scope.organization}`;

export const dependsOnSession = (id: string) => `s:${id}`;
export const dependsOnUser = (id: string) => `u:${id}`;
export const dependsOnOrganization = (id: string) => `o:${id}`;

/**
 * In-process cache of the reads every authenticated request makes (the session and its
 * user, the superadmin flag, authority in an organization, the organization, the MFA
 * enforcement inputs), with the revocation guarantees of docs/multiple-instances.md:
 *
 * - on this instance an invalidation is in force at once: it is applied after the commit
 *   of the change and before the response that reports it;
 * - other instances hear of it through the carrier (PostgreSQL LISTEN/NOTIFY) within
 *   milliseconds; while the carrier is not listening nothing is served from the cache, and
 *   an entry is never served past `ttlMs`, which bounds the damage of a lost notification.
 *
 * Invalidation is by stamps, not by deleting entries: an entry records the counter value
 * when its load began, and is stale if any scope it depends on was invalidated since. A
 * load that raced with a change therefore never outlives it.
 */
export class AccessCache {
  private readonly entries = new Map<string, Entry>();
  /** The sum of the entries' weights, held within `maxEntries`. */
  private weight = 0;
  private readonly invalidated = new Map<string, { stamp: number; at: number }>();
  private everythingInvalidatedAt = 0;
  private counter = 0;
  private carrier: InvalidationCarrier | undefined;
  private peers = new Set<AccessCache>([this]);
  /** The derivation under way, if any: every read notes what answered it. */
  private derivation: Derivation | undefined;

  constructor(private readonly options: AccessCacheOptions = DEFAULT_ACCESS_CACHE) {}

  /** Other instances on the same database. */
  attachCarrier(carrier: InvalidationCarrier): void {
    this.carrier = carrier;
  }

  /** Caches of routers in this process that share one database handle hear each other at once. */
  joinPeers(peers: Set<AccessCache>): void {
    peers.add(this);
    this.peers = peers;
  }

  leavePeers(): void {
    this.peers.delete(this);
  }

  /**
   * The cached value of `key`, or `load()`'s, kept when `dependsOn(value)` names its scopes.
   * `undefined` from `dependsOn` means "do not keep" (a miss such as an ended session).
   * `weightOf` gives a value holding many rows its share of the bound.
   */
  async read<T>(key: string, load: () => Promise<T>, dependsOn: (value: T) => string[] | undefined, weightOf?: (value: T) => number): Promise<T> {
    // Answered later, or by a load: what a derivation under way computes is not kept.
    if (this.derivation) this.derivation.fromKeptOnly = false;
    if (this.carrier && !this.carrier.listening) return load();
    const kept = this.servable(key);
    if (kept) return kept.value as T;
    const start = this.startRead();
    const value = await load();
    this.keepRead(key, value, start, dependsOn(value), weightOf ? Math.max(1, weightOf(value)) : 1);
    return value;
  }

  /**
   * Marks the start of a read made outside `read`: a statement that reads an entry's value
   * beside other work (the password login's account read, docs/performance.md). Taken before
   * the statement is sent, so an invalidation that lands while it runs makes what it read stale.
   */
  startRead(): ReadStart {
    return { stamp: this.counter, at: performance.now(), keepable: !(this.carrier && !this.carrier.listening) };
  }

  /** Keeps a value read since `start` as `read` keeps its loads; `undefined` scopes keep nothing. */
  keepRead(key: string, value: unknown, start: ReadStart, dependsOn: string[] | undefined, weight = 1): void {
    if (!start.keepable || !dependsOn || weight > this.options.maxEntries) return;
    this.store(key, { value, stamp: start.stamp, expiresAt: start.at + this.options.ttlMs, dependsOn, weight });
  }

  /**
   * `read`, answered at once when a fresh entry is kept: the access policy decides within the
   * request's own event when every read it needs is here (services/access/decision-steps.ts).
   */
  readNow<T>(key: string, load: () => Promise<T>, dependsOn: (value: T) => string[] | undefined): T | Promise<T> {
    const kept = this.servable(key);
    if (!kept) return this.read(key, load, dependsOn);
    if (this.derivation) noteSource(this.derivation, kept);
    return kept.value as T;
  }

  /** A fresh entry's value, or undefined; nothing is loaded. */
  peek<T>(key: string): T | undefined {
    return this.servable(key)?.value as T | undefined;
  }

  /**
   * Notes the entries that answer `readNow` from here until `endDerivation`, so that a value
   * computed from them within one event can be kept with `keepDerived` (the host middleware's
   * admissions, docs/performance.md).
   */
  beginDerivation(): Derivation {
    const derivation: Derivation = { stamp: this.counter, expiresAt: Number.POSITIVE_INFINITY, dependsOn: new Set(), fromKeptOnly: true };
    if (this.derivation) this.derivation.fromKeptOnly = false;
    this.derivation = derivation;
    return derivation;
  }

  endDerivation(derivation: Derivation): void {
    if (this.derivation === derivation) this.derivation = undefined;
  }

  /**
   * Keeps a value computed from fresh entries alone under the union of their scopes, until
   * the first of them expires: it is stale exactly when one of them would be. A derivation
   * that read anything else, or none, keeps nothing.
   */
  keepDerived(key: string, value: unknown, derivation: Derivation): void {
    if (!derivation.fromKeptOnly || derivation.dependsOn.size === 0 || this.derivation === derivation) return;
    if (this.carrier && !this.carrier.listening) return;
    this.store(key, { value, stamp: derivation.stamp, expiresAt: derivation.expiresAt, dependsOn: [...derivation.dependsOn], weight: 1 });
  }

  /** Applies here and in this process's peers at once, and tells other instances. */
  invalidate(scopes: AccessScope[]): void {
    if (scopes.length === 0) return;
    for (const peer of this.peers) peer.apply(scopes);
    this.carrier?.publish(scopes);
  }

  invalidateForEvents(events: IdentityEvent[]): void {
    this.invalidate(events.flatMap(scopesOfEvent));
  }

  /** What the carrier heard from another instance (or: everything, after it was deaf for a while). */
  apply(scopes: AccessScope[]): void {
    const stamp = ++this.counter;
    const at = performance.now();
    for (const scope of scopes) {
      if (scope === 'all') {
        this.everythingInvalidatedAt = stamp;
        this.entries.clear();
        this.weight = 0;
        this.invalidated.clear();
        return;
      }
      this.invalidated.set(keyOfScope(scope), { stamp, at });
    }
    if (this.invalidated.size > this.options.maxEntries) this.forgetOldInvalidations(at);
  }

  clear(): void {
    this.apply(['all']);
  }

  /** @internal What the cache holds against its bound (the bench's soak reports it, docs/performance.md). */
  sizes(): { entries: number; weight: number; invalidations: number; maxEntries: number } {
    return { entries: this.entries.size, weight: this.weight, invalidations: this.invalidated.size, maxEntries: this.options.maxEntries };
  }

  /** The entry that may be served now: fresh, while the carrier (if any) is listening. */
  private servable(key: string): Entry | undefined {
    if (this.carrier && !this.carrier.listening) return undefined;
    const entry = this.entries.get(key);
    return entry && this.isFresh(entry, performance.now()) ? entry : undefined;
  }

  /** Keeps an entry within `maxEntries`, the oldest going first. */
  private store(key: string, entry: Entry): void {
    this.remove(key);
    while (this.weight + entry.weight > this.options.maxEntries) this.remove(this.entries.keys().next().value!);
    this.entries.set(key, entry);
    this.weight += entry.weight;
  }

  private isFresh(entry: Entry, now: number): boolean {
    if (now >= entry.expiresAt || entry.stamp < this.everythingInvalidatedAt) return false;
    for (const scope of entry.dependsOn) {
      const invalidation = this.invalidated.get(scope);
      if (invalidation && invalidation.stamp > entry.stamp) return false;
    }
    return true;
  }

  private remove(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.weight -= entry.weight;
  }

  // An invalidation older than the TTL can no longer make any entry stale: every entry loaded before it has expired.
  private forgetOldInvalidations(now: number): void {
    for (const [scope, { at }] of this.invalidated) {
      if (now - at > this.options.ttlMs) this.invalidated.delete(scope);
    }
  }
}

function noteSource(derivation: Derivation, entry: Entry): void {
  derivation.expiresAt = Math.min(derivation.expiresAt, entry.expiresAt);
  for (const scope of entry.dependsOn) derivation.dependsOn.add(scope);
}
