import { toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

/** `active` signs; `next` is published ahead and becomes active at the next rotation; `retired` stays published until `publishedUntil`. */
export type SigningKeyState = 'active' | 'next' | 'retired';

export interface SigningKeyRecord {
  kid: string;
  alg: string;
  publicKeyPem: string;
  privateKeySealed: string;
  state: SigningKeyState;
  createdAt: number;
  retiredAt: number | null;
  publishedUntil: number | null;
}

export interface NewSigningKey {
  kid: string;
  alg: string;
  publicKeyPem: string;
  privateKeySealed: string;
  now: number;
}

const present = (value: unknown) => value !== null && value !== undefined;

function mapKey(row: Record<string, unknown>): SigningKeyRecord {
  return {
    kid: String(row.kid),
    alg: String(row.alg),
    publicKeyPem: String(row.public_key_pem),
    privateKeySealed: String(row.private_key_sealed),
    state: present(row.active_slot) ? 'active' : present(row.next_slot) ? 'next' : 'retired',
    createdAt: toNumber(row.created_at),
    retiredAt: toNullableNumber(row.retired_at),
    publishedUntil: toNullableNumber(row.published_until),
  };
}

/** Second key of the transaction-level advisory lock that serialises rotations (PostgreSQL). */
const ROTATION_LOCK_CLASS = 0x1d3e7002;

export class SigningKeyRepository extends Repository {
  /** The active and next keys plus retired keys still published at `now`. */
  async listPublished(now: number): Promise<SigningKeyRecord[]> {
    const rows = await this.db(this.table.signingKeys)
      .whereNotNull('active_slot')
      .orWhereNotNull('next_slot')
      .orWhere('published_until', '>', now)
      .orderBy('created_at', 'desc');
    return rows.map(mapKey);
  }

  async findBySlot(slot: 'active' | 'next'): Promise<SigningKeyRecord | undefined> {
    const row = await this.db(this.table.signingKeys).where({ [`${slot}_slot`]: 1 }).first();
    return row ? mapKey(row) : undefined;
  }

  /** Inside a transaction: concurrent rotations on PostgreSQL wait for each other here (SQLite serialises writers already). */
  async lockForRotation(): Promise<void> {
    if (this.dialect === 'pg') await this.db.raw('SELECT pg_advisory_xact_lock(?, hashtext(?))', [ROTATION_LOCK_CLASS, this.table.signingKeys]);
  }

  async retireActive(now: number, publishedUntil: number): Promise<void> {
    await this.db(this.table.signingKeys).where({ active_slot: 1 }).update({ active_slot: null, retired_at: now, published_until: publishedUntil });
  }

  /** The next key becomes the active one (after `retireActive` freed the slot). */
  async promoteNext(): Promise<void> {
    await this.db(this.table.signingKeys).where({ next_slot: 1 }).update({ active_slot: 1, next_slot: null });
  }

  /** Inserts a key into the active or next slot; throws a unique violation when another instance filled it first. */
  async insert(key: NewSigningKey, slot: 'active' | 'next'): Promise<void> {
    await this.db(this.table.signingKeys).insert({
      kid: key.kid,
      alg: key.alg,
      public_key_pem: key.publicKeyPem,
      private_key_sealed: key.privateKeySealed,
      active_slot: slot === 'active' ? 1 : null,
      next_slot: slot === 'next' ? 1 : null,
      created_at: key.now,
    });
  }
}
