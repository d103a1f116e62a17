import { toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export interface SigningKeyRecord {
  kid: string;
  alg: string;
  publicKeyPem: string;
  privateKeySealed: string;
  active: boolean;
  createdAt: number;
  retiredAt: number | null;
  publishedUntil: number | null;
}

function mapKey(row: Record<string, unknown>): SigningKeyRecord {
  return {
    kid: String(row.kid),
    alg: String(row.alg),
    publicKeyPem: String(row.public_key_pem),
    privateKeySealed: String(row.private_key_sealed),
    active: row.active_slot !== null && row.active_slot !== undefined,
    createdAt: toNumber(row.created_at),
    retiredAt: toNullableNumber(row.retired_at),
    publishedUntil: toNullableNumber(row.published_until),
  };
}

export class SigningKeyRepository extends Repository {
  /** The active key plus retired keys still published at `now`. */
  async listPublished(now: number): Promise<SigningKeyRecord[]> {
    const rows = await this.db(this.table.signingKeys)
      .whereNotNull('active_slot')
      .orWhere('published_until', '>', now)
      .orderBy('created_at', 'desc');
    return rows.map(mapKey);
  }

  async findActive(): Promise<SigningKeyRecord | undefined> {
    const row = await this.db(this.table.signingKeys).where({ active_slot: 1 }).first();
    return row ? mapKey(row) : undefined;
  }

  async retireActive(now: number, publishedUntil: number): Promise<void> {
    await this.db(this.table.signingKeys).where({ active_slot: 1 }).update({ active_slot: null, retired_at: now, published_until: publishedUntil });
  }

  /** Inserts the new active key; throws a unique violation when another instance made one first. */
  async insertActive(key: { kid: string; alg: string; publicKeyPem: string; privateKeySealed: string; now: number }): Promise<void> {
    await this.db(this.table.signingKeys).insert({
      kid: key.kid,
      alg: key.alg,
      public_key_pem: key.publicKeyPem,
      private_key_sealed: key.privateKeySealed,
      active_slot: 1,
      created_at: key.now,
    });
  }
}
