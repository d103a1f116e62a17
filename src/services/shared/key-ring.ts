import { createHash, createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import type { Clock } from '../../adapters/types.js';
import { isUniqueViolation } from '../../database-errors.js';
import type { InstanceNotifications } from '../../store/instance-notifications.js';
import type { SigningKeyRecord } from '../../store/signing-key-repository.js';
import type { Store } from '../../store/store.js';
import { decrypt, encrypt } from '../../crypto/aead.js';

const generateRsaKeyPair = promisify(generateKeyPair);
const ALG = 'RS256';
/** The instance-notification topic a rotation publishes on. */
export const SIGNING_KEYS_TOPIC = 'signing-keys';
/**
 * How long this instance trusts its view of the key table (process time, not the injected
 * clock: this is about propagation between instances). While notifications from other
 * instances arrive (PostgreSQL LISTEN), a rotation reaches this instance at once and the
 * expiry is only the backstop; without them the view is re-read every second, so every
 * instance signs with a newly active key within about a second (docs/multiple-instances.md).
 */
const FRESH_MS_LIVE = 30_000;
const FRESH_MS_POLLING = 1_000;
/** A token with an unknown kid re-reads the table at most this often, whatever the kid (negative cache). */
const UNKNOWN_KID_RELOAD_MS = 1_000;
/**
 * A retiring key stays published this long beyond one access-token lifetime: an instance that
 * has not heard of the rotation yet keeps signing with it for up to its backstop expiry, and
 * those tokens must verify until they expire too.
 */
export const RETIRE_GRACE_SECONDS = 60;

export interface PublicJwk {
  kty: 'RSA';
  use: 'sig';
  alg: string;
  kid: string;
  n: string;
  e: string;
}

interface LoadedKey {
  kid: string;
  state: SigningKeyRecord['state'];
  publishedUntil: number | null;
  publicKey: KeyObject;
  privateKey: KeyObject | undefined;
  jwk: PublicJwk;
}

type GeneratedKey = { kid: string; alg: string; publicKeyPem: string; privateKeySealed: string; now: number };

/** RFC 7638 thumbprint: a kid every instance derives identically from the key itself. */
function thumbprint(jwk: { e: string; n: string }): string {
  return createHash('sha256').update(JSON.stringify({ e: jwk.e, kty: 'RSA', n: jwk.n })).digest('base64url');
}

/**
 * The RSA signing keys, shared by every instance through the database. Private halves are
 * stored AES-256-GCM-sealed under a key derived from `config.secret`.
 *
 * Three kinds of key are published in the JWKS: the active key (signs), the next key (will
 * sign after the next rotation; published ahead so verifiers that cache the JWKS already hold
 * it), and retiring keys (until the last token they signed has expired).
 */
export class KeyRing {
  private keys: LoadedKey[] = [];
  /** process time (performance.now) of the last completed read of the key table */
  private loadedAt = Number.NEGATIVE_INFINITY;
  /**
   * Whether notifications arrived when that read began. One begun before the listening
   * connection came up (at start-up, or before a first connect that failed and retried) may
   * predate a rotation no notification will report, so it is trusted only as long as a poll.
   */
  private loadedWhileLive = false;
  private lastUnknownKidReload = Number.NEGATIVE_INFINITY;
  private loading: Promise<void> | undefined;
  private unsubscribe: Array<() => void> = [];

  constructor(
    private readonly store: Store,
    private readonly encryptionKey: Buffer,
    private readonly clock: Clock,
    private readonly accessTtlSeconds: number,
    private readonly notifications: InstanceNotifications,
  ) {
    // A re-read already under way may have started before the change committed: read again after it.
    const reloadSoon = () => void (this.loading ?? Promise.resolve()).catch(() => undefined).then(() => this.reload()).catch(() => undefined);
    this.unsubscribe = [notifications.subscribe(SIGNING_KEYS_TOPIC, reloadSoon), notifications.onResync(reloadSoon)];
  }

  /**
   * Makes sure an active and a next key exist (generating them on a new database) and loads
   * the ring. On PostgreSQL this runs under the start-up lock; the unique slots make it safe
   * without one too: an instance that loses the race uses the winner's key.
   */
  async initialise(): Promise<void> {
    const repo = this.store.repos.signingKeys;
    if (!(await repo.findBySlot('active'))) await this.insertIgnoringRace(() => this.generate().then((key) => repo.insert(key, 'active')));
    if (!(await repo.findBySlot('next'))) await this.insertIgnoringRace(() => this.generate().then((key) => repo.insert(key, 'next')));
    await this.reload();
  }

  /**
   * The next key becomes active, a fresh next key is published, and the retiring key stays
   * published until the last token it can have signed has expired. Every instance hears of
   * it through the database (a notification, else its short re-read interval).
   */
  async rotate(): Promise<{ kid: string }> {
    const fresh = await this.generate();
    const now = this.clock.now();
    const activeKid = await this.store.transaction(async (repos, trx) => {
      // Two rotations at once (two instances) take turns, each promoting the key the other published.
      await repos.signingKeys.lockForRotation();
      let next = await repos.signingKeys.findBySlot('next');
      // A process whose secret differs (a job with a mis-set secret) would make a key the others
      // cannot open the next to sign: it may rotate only keys it can open itself.
      const promoted = next ?? (await repos.signingKeys.findBySlot('active'));
      if (promoted) this.openPrivateKey(promoted);
      if (!next) {
        // A database from before next keys were published ahead: the fresh key signs at once.
        await repos.signingKeys.insert(await this.generate(), 'next');
        next = await repos.signingKeys.findBySlot('next');
      }
      await repos.signingKeys.retireActive(now, now + (this.accessTtlSeconds + RETIRE_GRACE_SECONDS) * 1000);
      await repos.signingKeys.promoteNext();
      await repos.signingKeys.insert({ ...fresh, now }, 'next');
      await this.notifications.publish(SIGNING_KEYS_TOPIC, next!.kid, trx);
      return next!.kid;
    });
    // A re-read started before the commit would still see the old key; wait it out, then read again.
    await this.loading?.catch(() => undefined);
    await this.reload();
    return { kid: activeKid };
  }

  async signingKey(): Promise<{ kid: string; privateKey: KeyObject }> {
    // Tokens are signed inside transactions, and a SQLite pool has one connection: waiting
    // here for a re-read of the key table would deadlock. A stale view is refreshed in the
    // background instead and the cached active key signs meanwhile.
    if (this.isStale()) this.reload().catch(() => undefined);
    let active = this.keys.find((key) => key.state === 'active');
    if (!active?.privateKey) {
      await this.reload();
      active = this.keys.find((key) => key.state === 'active');
    }
    if (!active?.privateKey) throw new Error('No active signing key');
    return { kid: active.kid, privateKey: active.privateKey };
  }

  /**
   * Public key for a kid that is still published. A kid this instance has not seen re-reads
   * the table, but at most once per interval whatever the kid: a stream of forged kids costs
   * one small query a second, not one per request.
   */
  async verificationKey(kid: string): Promise<KeyObject | undefined> {
    await this.refreshIfStale();
    let key = this.findPublished(kid);
    if (!key && !this.keys.some((candidate) => candidate.kid === kid) && performance.now() - this.lastUnknownKidReload >= UNKNOWN_KID_RELOAD_MS) {
      this.lastUnknownKidReload = performance.now();
      await this.reload();
      key = this.findPublished(kid);
    }
    return key?.publicKey;
  }

  loadedVerificationKey(kid: string): KeyObject | undefined {
    return this.isStale() ? undefined : this.findPublished(kid)?.publicKey;
  }

  async jwks(): Promise<{ keys: PublicJwk[] }> {
    await this.refreshIfStale();
    const now = this.clock.now();
    // Active first, then the next key, then retiring keys.
    const order = { active: 0, next: 1, retired: 2 } as const;
    const published = this.keys.filter((key) => this.isPublished(key, now)).sort((a, b) => order[a.state] - order[b.state]);
    return { keys: published.map((key) => key.jwk) };
  }

  /** Stops listening for other instances' rotations. */
  close(): void {
    for (const stop of this.unsubscribe) stop();
    this.unsubscribe = [];
  }

  private isPublished(key: LoadedKey, now: number): boolean {
    return key.state !== 'retired' || (key.publishedUntil ?? 0) > now;
  }

  private findPublished(kid: string): LoadedKey | undefined {
    const now = this.clock.now();
    return this.keys.find((key) => key.kid === kid && this.isPublished(key, now));
  }

  private isStale(): boolean {
    return performance.now() - this.loadedAt > (this.notifications.live && this.loadedWhileLive ? FRESH_MS_LIVE : FRESH_MS_POLLING);
  }

  private async refreshIfStale(): Promise<void> {
    if (this.isStale()) await this.reload();
  }

  private async insertIgnoringRace(insert: () => Promise<void>): Promise<void> {
    try {
      await insert();
    } catch (error) {
      // Another instance created the key at the same moment: use theirs.
      if (!isUniqueViolation(error)) throw error;
    }
  }

  private reload(): Promise<void> {
    this.loading ??= (async () => {
      try {
        const startedAt = performance.now();
        const live = this.notifications.live;
        const records = await this.store.repos.signingKeys.listPublished(this.clock.now());
        const known = new Map(this.keys.map((key) => [key.kid, key]));
        this.keys = records.map((record) => this.load(record, known.get(record.kid)));
        this.loadedAt = startedAt;
        this.loadedWhileLive = live;
      } finally {
        this.loading = undefined;
      }
    })();
    return this.loading;
  }

  /** Keys already parsed are reused, so a re-read costs one small query and no decryption. */
  private load(record: SigningKeyRecord, known: LoadedKey | undefined): LoadedKey {
    const publicKey = known?.publicKey ?? createPublicKey(record.publicKeyPem);
    const jwk = known?.jwk ?? toJwk(record, publicKey);
    // Only the active key signs, so only its private half is decrypted.
    const privateKey = record.state === 'active'
      ? known?.privateKey ?? this.openPrivateKey(record)
      : undefined;
    return { kid: record.kid, state: record.state, publishedUntil: record.publishedUntil, publicKey, privateKey, jwk };
  }

  /** The private half of a stored key; one sealed under another `config.secret` is named as such (docs/security.md "The secret"). */
  private openPrivateKey(record: SigningKeyRecord): KeyObject {
    let pem: string;
    try {
      pem = decrypt(this.encryptionKey, record.privateKeySealed, `signing-key:${record.kid}`).toString('utf8');
    } catch {
      throw new Error(`The signing key ${record.kid} does not open under this config.secret: the database's keys were sealed under another secret, which cannot be changed in place (docs/security.md "The secret")`);
    }
    return createPrivateKey(pem);
  }

  private async generate(): Promise<GeneratedKey> {
    const { publicKey, privateKey } = await generateRsaKeyPair('rsa', { modulusLength: 2048 });
    const jwk = publicKey.export({ format: 'jwk' }) as { n: string; e: string };
    const kid = thumbprint(jwk);
    const privateKeyPem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    return {
      kid,
      alg: ALG,
      publicKeyPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
      privateKeySealed: encrypt(this.encryptionKey, privateKeyPem, `signing-key:${kid}`),
      now: this.clock.now(),
    };
  }
}

function toJwk(record: SigningKeyRecord, publicKey: KeyObject): PublicJwk {
  const jwk = publicKey.export({ format: 'jwk' }) as { n: string; e: string };
  return { kty: 'RSA', use: 'sig', alg: record.alg, kid: record.kid, n: jwk.n, e: jwk.e };
}
