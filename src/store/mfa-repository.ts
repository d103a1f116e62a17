import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export type FactorType = 'totp' | 'sms' | 'email';

export interface MfaFactorRecord {
  id: string;
  userId: string;
  type: FactorType;
  label: string | null;
  destination: string | null;
  secretSealed: string | null;
  isDefault: boolean;
  lastUsedStep: number | null;
  confirmedAt: number | null;
  createdAt: number;
}

export function mapFactor(row: Record<string, unknown>): MfaFactorRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    type: row.type as FactorType,
    label: (row.label as string | null) ?? null,
    destination: (row.destination as string | null) ?? null,
    secretSealed: (row.secret_sealed as string | null) ?? null,
    isDefault: toBoolean(row.is_default),
    lastUsedStep: toNullableNumber(row.last_used_step),
    confirmedAt: toNullableNumber(row.confirmed_at),
    createdAt: toNumber(row.created_at),
  };
}

export class MfaFactorRepository extends Repository {
  async listConfirmed(userId: string): Promise<MfaFactorRecord[]> {
    const rows = await this.db(this.table.mfaFactors).where({ user_id: userId }).whereNotNull('confirmed_at').orderBy([{ column: 'created_at', order: 'asc' }, { column: 'id', order: 'asc' }]);
    return rows.map(mapFactor);
  }

  async hasConfirmed(userId: string): Promise<boolean> {
    return (await this.db(this.table.mfaFactors).where({ user_id: userId }).whereNotNull('confirmed_at').first('id')) !== undefined;
  }
}

export class OtpChallengeRepository extends Repository {}
export class MfaTicketRepository extends Repository {}

export class RecoveryCodeRepository extends Repository {
  async countUnused(userId: string): Promise<number> {
    const row = await this.db(this.table.recoveryCodes).where({ user_id: userId }).whereNull('used_at').whereNull('retired_at').count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }
}
