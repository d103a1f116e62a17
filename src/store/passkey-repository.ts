import { toNullableNumber, toNumber } from './database.js';
import { mapFactor, type MfaFactorRecord } from './mfa-repository.js';
import { Repository } from './repository.js';

/** A passkey: a `webauthn` factor row with its public credential. */
export interface PasskeyRecord extends MfaFactorRecord {
  credentialId: string;
  /** The COSE public key, base64url. */
  publicKey: string;
  signCount: number;
  transports: string[];
  userHandle: string;
}

function mapPasskey(row: Record<string, unknown>): PasskeyRecord {
  return {
    ...mapFactor(row),
    credentialId: String(row.credential_id),
    publicKey: String(row.credential_public_key),
    signCount: toNumber(row.sign_count ?? 0),
    transports: parseTransports(row.transports),
    userHandle: String(row.user_handle),
  };
}

function parseTransports(value: unknown): string[] {
  if (typeof value !== 'string' || value === '') return [];
  try {
    const parsed: unknown = JSON.parse(value);
    return Array.isArray(parsed) ? parsed.filter((entry): entry is string => typeof entry === 'string') : [];
  } catch {
    return [];
  }
}

export type PasskeyChallengePurpose = 'register' | 'login' | 'login_mfa' | 'step_up';

export interface PasskeyChallengeRecord {
  id: string;
  purpose: PasskeyChallengePurpose;
  userId: string | null;
  boundTo: string | null;
  userHandle: string | null;
  expiresAt: number;
  consumedAt: number | null;
}

/** PostgreSQL 23505, SQLite SQLITE_CONSTRAINT_UNIQUE. */
function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE';
}

/** Rows this much past their expiry are pruned when new challenges are issued. */
const CHALLENGE_RETENTION_MS = 24 * 60 * 60 * 1000;

export class PasskeyRepository extends Repository {
  /** Confirmed passkeys of a user, oldest first. */
  async listForUser(userId: string): Promise<PasskeyRecord[]> {
    const rows = await this.db(this.table.mfaFactors)
      .where({ user_id: userId, type: 'webauthn' })
      .whereNotNull('confirmed_at')
      .orderBy([{ column: 'created_at', order: 'asc' }, { column: 'id', order: 'asc' }]);
    return rows.map(mapPasskey);
  }

  async findOwned(factorId: string, userId: string): Promise<PasskeyRecord | undefined> {
    const row = await this.db(this.table.mfaFactors).where({ id: factorId, user_id: userId, type: 'webauthn' }).whereNotNull('confirmed_at').first();
    return row ? mapPasskey(row) : undefined;
  }

  /** Credential ids are unique across users, so this finds at most one passkey. */
  async findByCredentialId(credentialId: string): Promise<PasskeyRecord | undefined> {
    const row = await this.db(this.table.mfaFactors).where({ credential_id: credentialId, type: 'webauthn' }).whereNotNull('confirmed_at').first();
    return row ? mapPasskey(row) : undefined;
  }

  async credentialIdTaken(credentialId: string): Promise<boolean> {
    return (await this.db(this.table.mfaFactors).where({ credential_id: credentialId }).first('id')) !== undefined;
  }

  /**
   * A passkey is confirmed the moment its attestation verifies; there is no pending state.
   * False when the credential id is already registered (the unique index decides a race).
   */
  async insert(passkey: {
    id: string;
    userId: string;
    label: string | null;
    credentialId: string;
    publicKey: string;
    signCount: number;
    transports: string[];
    userHandle: string;
    now: number;
  }): Promise<boolean> {
    try {
      await this.insertRow(passkey);
      return true;
    } catch (error) {
      if (isUniqueViolation(error)) return false;
      throw error;
    }
  }

  private async insertRow(passkey: Parameters<PasskeyRepository['insert']>[0]): Promise<void> {
    await this.db(this.table.mfaFactors).insert({
      id: passkey.id,
      user_id: passkey.userId,
      type: 'webauthn',
      label: passkey.label,
      destination: null,
      secret_sealed: null,
      is_default: false,
      last_used_step: null,
      confirmed_at: passkey.now,
      created_at: passkey.now,
      credential_id: passkey.credentialId,
      credential_public_key: passkey.publicKey,
      sign_count: passkey.signCount,
      transports: JSON.stringify(passkey.transports),
      user_handle: passkey.userHandle,
    });
  }

  /**
   * Moves the signature counter forward. Conditional on the value the assertion was checked
   * against, so of two assertions checked against one stored counter only one is accepted.
   */
  async advanceSignCount(factorId: string, expected: number, next: number): Promise<boolean> {
    const changed = await this.db(this.table.mfaFactors).where({ id: factorId, sign_count: expected }).update({ sign_count: next });
    return changed === 1;
  }

  async insertChallenge(challenge: {
    id: string;
    challengeHash: string;
    purpose: PasskeyChallengePurpose;
    userId: string | null;
    boundTo: string | null;
    userHandle: string | null;
    now: number;
    expiresAt: number;
  }): Promise<void> {
    await this.db(this.table.webauthnChallenges).where('expires_at', '<', challenge.now - CHALLENGE_RETENTION_MS).delete();
    await this.db(this.table.webauthnChallenges).insert({
      id: challenge.id,
      challenge_hash: challenge.challengeHash,
      purpose: challenge.purpose,
      user_id: challenge.userId,
      bound_to: challenge.boundTo,
      user_handle: challenge.userHandle,
      created_at: challenge.now,
      expires_at: challenge.expiresAt,
      consumed_at: null,
    });
  }

  /**
   * Single use: one conditional update takes the challenge, and only while it is alive and
   * was issued for this purpose (and, when given, this id, user and session or ticket).
   * Answers the consumed row, or undefined for whoever did not get it.
   */
  async consumeChallenge(
    match: { challengeHash: string; purpose: PasskeyChallengePurpose; id?: string; userId?: string; boundTo?: string },
    now: number,
  ): Promise<PasskeyChallengeRecord | undefined> {
    const where: Record<string, string> = { challenge_hash: match.challengeHash, purpose: match.purpose };
    if (match.id !== undefined) where.id = match.id;
    if (match.userId !== undefined) where.user_id = match.userId;
    if (match.boundTo !== undefined) where.bound_to = match.boundTo;
    const changed = await this.db(this.table.webauthnChallenges).where(where).whereNull('consumed_at').andWhere('expires_at', '>', now).update({ consumed_at: now });
    if (changed !== 1) return undefined;
    const row = await this.db(this.table.webauthnChallenges).where({ challenge_hash: match.challengeHash }).first();
    if (!row) return undefined;
    return {
      id: String(row.id),
      purpose: row.purpose as PasskeyChallengePurpose,
      userId: (row.user_id as string | null) ?? null,
      boundTo: (row.bound_to as string | null) ?? null,
      userHandle: (row.user_handle as string | null) ?? null,
      expiresAt: toNumber(row.expires_at),
      consumedAt: toNullableNumber(row.consumed_at),
    };
  }
}
