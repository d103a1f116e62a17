import { createHash, createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import type { Clock } from '../adapters/types.js';
import { isUniqueViolation } from '../database-errors.js';
import type { Store } from '../store/store.js';
import { decrypt, encrypt } from '../crypto/aead.js';

const generateRsaKeyPair = promisify(generateKeyPair);
const ALG = 'RS256';
/** How long this instance trusts its cached view of the key table before re-reading it. */
const CACHE_MS = 60_000;

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
  active: boolean;
  publishedUntil: number | null;
  publicKey: KeyObject;
  privateKey: KeyObject | undefined;
  jwk: PublicJwk;
}

/** RFC 7638 thumbprint: a kid every instance derives identically from the key itself. */
function thumbprint(jwk: { e: string; n: string }): string {
  return createHash('sha256').update(JSON.stringify({ e: jwk.e, kty: 'RSA', n: jwk.n })).digest('base64url');
}

/**
 * The RSA signing keys, shared by every instance through the database. Private halves are
 * stored AES-256-GCM-sealed under a key derived from `config.secret`.
 */
export class KeyRing {
  private keys: LoadedKey[] = [];
  private loadedAt = Number.NEGATIVE_INFINITY;
  private loading: Promise<void> | undefined;

  constructor(
    private readonly store: Store,
    private readonly encryptionKey: Buffer,
    private readonly clock: Clock,
    private readonly accessTtlSeconds: number,
  ) {}

  /** Makes sure an active key exists (generating the first one) and loads the ring. */
  async initialise(): Promise<void> {
    if (!(await this.store.repos.signingKeys.findActive())) {
      try {
        await this.store.repos.signingKeys.insertActive(await this.generate());
      } catch (error) {
        // Another instance created the first key at the same moment: use theirs.
        if (!isUniqueViolation(error)) throw error;
      }
    }
    await this.reload();
  }

  /** New active key; the retiring one stays published for one access-token lifetime. */
  async rotate(): Promise<{ kid: string }> {
    const fresh = await this.generate();
    const now = this.clock.now();
    await this.store.transaction(async (repos) => {
      await repos.signingKeys.retireActive(now, now + this.accessTtlSeconds * 1000);
      await repos.signingKeys.insertActive(fresh);
    });
    // A re-read started before the commit would still see the old key; wait it out, then read again.
    await this.loading?.catch(() => undefined);
    await this.reload();
    return { kid: fresh.kid };
  }

  async signingKey(): Promise<{ kid: string; privateKey: KeyObject }> {
    // Tokens are signed inside transactions, and a SQLite pool has one connection: waiting
    // here for a re-read of the key table would deadlock. A stale view is refreshed in the
    // background instead and the cached active key signs meanwhile.
    if (this.isStale()) this.reload().catch(() => undefined);
    let active = this.keys.find((key) => key.active);
    if (!active?.privateKey) {
      await this.reload();
      active = this.keys.find((key) => key.active);
    }
    if (!active?.privateKey) throw new Error('No active signing key');
    return { kid: active.kid, privateKey: active.privateKey };
  }

  /** Public key for a kid that is still published; re-reads the table once for a kid it has not seen (another instance rotated). */
  async verificationKey(kid: string): Promise<KeyObject | undefined> {
    await this.refreshIfStale();
    let key = this.findPublished(kid);
    if (!key && !this.keys.some((candidate) => candidate.kid === kid)) {
      await this.reload();
      key = this.findPublished(kid);
    }
    return key?.publicKey;
  }

  async jwks(): Promise<{ keys: PublicJwk[] }> {
    await this.refreshIfStale();
    const now = this.clock.now();
    return { keys: this.keys.filter((key) => key.active || (key.publishedUntil ?? 0) > now).map((key) => key.jwk) };
  }

  private findPublished(kid: string): LoadedKey | undefined {
    const now = this.clock.now();
    return this.keys.find((key) => key.kid === kid && (key.active || (key.publishedUntil ?? 0) > now));
  }

  private isStale(): boolean {
    return this.clock.now() - this.loadedAt > CACHE_MS || this.clock.now() < this.loadedAt;
  }

  private async refreshIfStale(): Promise<void> {
    if (this.isStale()) await this.reload();
  }

  private reload(): Promise<void> {
    this.loading ??= (async () => {
      try {
        const now = this.clock.now();
        const records = await this.store.repos.signingKeys.listPublished(now);
        this.keys = records.map((record) => {
          const publicKey = createPublicKey(record.publicKeyPem);
          const jwk = publicKey.export({ format: 'jwk' }) as { n: string; e: string };
          return {
            kid: record.kid,
            active: record.active,
            publishedUntil: record.publishedUntil,
            publicKey,
            // Only the active key signs, so only its private half is decrypted.
            privateKey: record.active ? createPrivateKey(decrypt(this.encryptionKey, record.privateKeySealed, `signing-key:${record.kid}`).toString('utf8')) : undefined,
            jwk: { kty: 'RSA', use: 'sig', alg: record.alg, kid: record.kid, n: jwk.n, e: jwk.e },
          };
        });
        this.loadedAt = now;
      } finally {
        this.loading = undefined;
      }
    })();
    return this.loading;
  }

  private async generate(): Promise<{ kid: string; alg: string; publicKeyPem: string; privateKeySealed: string; now: number }> {
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
