import type { Knex } from 'knex';
import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { insertWhere } from './recorded-write.js';
import { Repository } from './repository.js';
import type { TableNames } from './table-names.js';
import type { Db } from './transaction.js';
import { signingInAccount } from './user-repository.js';

export type FactorType = 'totp' | 'sms' | 'email' | 'webauthn';
export type OtpPurpose = 'enroll' | 'login_mfa' | 'step_up';
export type OtpChannel = 'sms' | 'email';

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

/** The columns mapFactor reads, named: a hot statement never selects `*` (see hot-statements.ts). */
const FACTOR_COLUMNS = ['id', 'user_id', 'type', 'label', 'destination', 'secret_sealed', 'is_default', 'last_used_step', 'confirmed_at', 'created_at'] as const;

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

const FACTOR_ORDER = [{ column: 'created_at', order: 'asc' as const }, { column: 'id', order: 'asc' as const }];

/**
 * A user's confirmed factors, the rows that make a sign-in ask for a second factor (docs/mfa.md):
 * read by the MFA gate, by the password login's account statement (PostgreSQL), and by the
 * write of a session the gate asked nothing of (`SessionRepository.insert`).
 */
export function confirmedFactorsOf(db: Db, table: TableNames, userId: Knex.Value): Knex.QueryBuilder {
  return db(table.mfaFactors).where('user_id', userId).whereNotNull('confirmed_at');
}

export class MfaFactorRepository extends Repository {
  async listConfirmed(userId: string): Promise<MfaFactorRecord[]> {
    // Every login reads it (the MFA gate): a hot statement.
    const rows = await this.hot.all(
      this.db,
      'mfaFactors.listConfirmed',
      (values) => confirmedFactorsOf(this.db, this.table, values.userId).orderBy(FACTOR_ORDER).select(FACTOR_COLUMNS),
      { userId },
    );
    return rows.map(mapFactor);
  }

  async hasConfirmed(userId: string): Promise<boolean> {
    return (await confirmedFactorsOf(this.db, this.table, userId).first('id')) !== undefined;
  }

  /** Confirmed and pending factors of every type, passkeys included (the quota of docs/security.md; read under the account's lock). */
  async countForUser(userId: string): Promise<number> {
    const row = await this.db(this.table.mfaFactors).where({ user_id: userId }).count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  /** Confirmed and pending factors, oldest first. */
  async listForUser(userId: string): Promise<MfaFactorRecord[]> {
    return (await this.db(this.table.mfaFactors).where({ user_id: userId }).orderBy(FACTOR_ORDER)).map(mapFactor);
  }

  /** The factor when it belongs to the user; a foreign factor reads as absent. */
  async findOwned(id: string, userId: string): Promise<MfaFactorRecord | undefined> {
    const row = await this.db(this.table.mfaFactors).where({ id, user_id: userId }).first();
    return row ? mapFactor(row) : undefined;
  }

  /** Row lock on PostgreSQL: serialises sends for one factor so the resend cooldown holds under concurrency. */
  async findOwnedForUpdate(id: string, userId: string): Promise<MfaFactorRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.mfaFactors).where({ id, user_id: userId })).first();
    return row ? mapFactor(row) : undefined;
  }

  async findByDestination(userId: string, type: FactorType, destination: string): Promise<MfaFactorRecord[]> {
    return (await this.db(this.table.mfaFactors).where({ user_id: userId, type, destination }).orderBy(FACTOR_ORDER)).map(mapFactor);
  }

  async insert(factor: { id: string; userId: string; type: FactorType; destination: string | null; secretSealed: string | null; now: number }): Promise<void> {
    await this.db(this.table.mfaFactors).insert({
      id: factor.id,
      user_id: factor.userId,
      type: factor.type,
      label: null,
      destination: factor.destination,
      secret_sealed: factor.secretSealed,
      is_default: false,
      last_used_step: null,
      confirmed_at: null,
      created_at: factor.now,
    });
  }

  /** A user's unconfirmed factors of one type (a new TOTP enrollment replaces the pending one). */
  async deleteUnconfirmed(userId: string, type: FactorType): Promise<number> {
    return this.db(this.table.mfaFactors).where({ user_id: userId, type }).whereNull('confirmed_at').delete();
  }

  /** docs/database.md: a factor never confirmed is pruned (here: once it is older than `createdBefore`). */
  async pruneUnconfirmed(userId: string, createdBefore: number): Promise<number> {
    return this.db(this.table.mfaFactors).where({ user_id: userId }).whereNull('confirmed_at').andWhere('created_at', '<=', createdBefore).delete();
  }

  /**
   * Remembers the accepted TOTP time-step. Conditional, so of two concurrent uses of one
   * code only one moves the step forward; a code at or before the stored step is a replay.
   */
  async advanceTotpStep(id: string, step: number): Promise<boolean> {
    const changed = await this.db(this.table.mfaFactors)
      .where({ id })
      .andWhere((query) => query.whereNull('last_used_step').orWhere('last_used_step', '<', step))
      .update({ last_used_step: step });
    return changed === 1;
  }

  async markConfirmed(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.mfaFactors).where({ id }).whereNull('confirmed_at').update({ confirmed_at: now })) === 1;
  }

  async hasDefault(userId: string): Promise<boolean> {
    return (await this.db(this.table.mfaFactors).where({ user_id: userId, is_default: true }).whereNotNull('confirmed_at').first('id')) !== undefined;
  }

  /** One default at a time: clears every other flag of the user in the same statement pair. */
  async makeDefault(userId: string, id: string): Promise<void> {
    await this.db(this.table.mfaFactors).where({ user_id: userId, is_default: true }).whereNot({ id }).update({ is_default: false });
    await this.db(this.table.mfaFactors).where({ id, user_id: userId }).whereNotNull('confirmed_at').update({ is_default: true });
  }

  async clearDefault(id: string): Promise<void> {
    await this.db(this.table.mfaFactors).where({ id }).update({ is_default: false });
  }

  async setLabel(id: string, label: string | null): Promise<void> {
    await this.db(this.table.mfaFactors).where({ id }).update({ label });
  }

  async deleteOwned(id: string, userId: string): Promise<boolean> {
    return (await this.db(this.table.mfaFactors).where({ id, user_id: userId }).delete()) === 1;
  }
}

export interface OtpChallengeRecord {
  id: string;
  userId: string;
  factorId: string;
  purpose: OtpPurpose;
  channel: OtpChannel;
  codeHash: string;
  boundTo: string | null;
  attempts: number;
  createdAt: number;
  expiresAt: number;
  consumedAt: number | null;
}

function mapChallenge(row: Record<string, unknown>): OtpChallengeRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    factorId: String(row.factor_id),
    purpose: row.purpose as OtpPurpose,
    channel: row.channel as OtpChannel,
    codeHash: String(row.code_hash),
    boundTo: (row.bound_to as string | null) ?? null,
    attempts: toNumber(row.attempts),
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
    consumedAt: toNullableNumber(row.consumed_at),
  };
}

export class OtpChallengeRepository extends Repository {
  async insert(challenge: Omit<OtpChallengeRecord, 'attempts' | 'consumedAt' | 'createdAt'> & { now: number }): Promise<void> {
    await this.db(this.table.otpChallenges).insert({
      id: challenge.id,
      user_id: challenge.userId,
      factor_id: challenge.factorId,
      purpose: challenge.purpose,
      channel: challenge.channel,
      code_hash: challenge.codeHash,
      bound_to: challenge.boundTo,
      attempts: 0,
      created_at: challenge.now,
      expires_at: challenge.expiresAt,
      consumed_at: null,
    });
  }

  /**
   * When the factor last had a code sent (the resend cooldown, docs/mfa.md: per factor).
   * `exceptPurpose` leaves out one kind of send (a confirmed factor's enrollment code).
   */
  async lastSentAt(factorId: string, exceptPurpose?: OtpPurpose): Promise<number | undefined> {
    const query = this.db(this.table.otpChallenges).where({ factor_id: factorId });
    if (exceptPurpose !== undefined) query.whereNot({ purpose: exceptPurpose });
    const row = await query.max({ latest: 'created_at' }).first();
    return row?.latest === null || row?.latest === undefined ? undefined : toNumber(row.latest);
  }

  /**
   * Drops the factor's challenges that expired (or were replaced) before `before`: they open
   * nothing, and the factor's cooldown reads only its newest send. Served by the
   * `(factor_id, created_at)` index, so it touches one factor's rows.
   */
  async pruneEndedOfFactor(factorId: string, before: number): Promise<void> {
    await this.db(this.table.otpChallenges).where({ factor_id: factorId }).andWhere('expires_at', '<=', before).delete();
  }

  /** A new code replaces the factor's outstanding ones. */
  async expireOutstanding(factorId: string, now: number): Promise<void> {
    await this.db(this.table.otpChallenges).where({ factor_id: factorId }).whereNull('consumed_at').andWhere('expires_at', '>', now).update({ expires_at: now });
  }

  /** The newest unconsumed, unexpired challenge of a factor for this purpose and binding. */
  async findLive(factorId: string, purpose: OtpPurpose, boundTo: string | null, now: number): Promise<OtpChallengeRecord | undefined> {
    const query = this.db(this.table.otpChallenges).where({ factor_id: factorId, purpose }).whereNull('consumed_at').andWhere('expires_at', '>', now);
    if (boundTo === null) query.whereNull('bound_to');
    else query.andWhere({ bound_to: boundTo });
    const row = await query.orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).first();
    return row ? mapChallenge(row) : undefined;
  }

  /**
   * Takes one attempt before the code is compared. The guard in the WHERE means that of
   * any number of concurrent guesses at most `maxAttempts` get an attempt, and only a
   * caller that got one may compare.
   */
  async claimAttempt(id: string, maxAttempts: number, now: number): Promise<boolean> {
    const changed = await this.db(this.table.otpChallenges)
      .where({ id })
      .whereNull('consumed_at')
      .andWhere('expires_at', '>', now)
      .andWhere('attempts', '<', maxAttempts)
      .increment('attempts', 1);
    return changed === 1;
  }

  async consume(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.otpChallenges).where({ id }).whereNull('consumed_at').update({ consumed_at: now })) === 1;
  }
}

export interface MfaTicketRecord {
  id: string;
  userId: string;
  failedAttempts: number;
  createdAt: number;
  expiresAt: number;
  consumedAt: number | null;
  /** How the first factor was passed: `fed` after a social sign-in (migration 006), `email` after a passwordless one (migration 012), else a password. */
  firstFactor: 'pwd' | 'fed' | 'email';
  /** The single sign-on connection of the first factor, if any (migration 011). */
  ssoConnectionId: string | null;
  /** The social provider of the first factor, if any (migration 016). */
  socialProvider: string | null;
  /** After a passwordless first factor: `email_code` or `email_link` (migration 012). */
  signInMethod: 'email_code' | 'email_link' | undefined;
}

function mapTicket(row: Record<string, unknown>): MfaTicketRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    failedAttempts: toNumber(row.failed_attempts),
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
    consumedAt: toNullableNumber(row.consumed_at),
    firstFactor: row.first_factor === 'fed' || row.first_factor === 'email' ? row.first_factor : 'pwd',
    ssoConnectionId: (row.sso_connection_id as string | null | undefined) ?? null,
    socialProvider: (row.social_provider as string | null | undefined) ?? null,
    signInMethod: row.sign_in_method === 'email_code' || row.sign_in_method === 'email_link' ? row.sign_in_method : undefined,
  };
}

export class MfaTicketRepository extends Repository {
  /**
   * A sign-in's ticket, written like its session would be (`SessionRepository.insert`): only
   * beside an account that may still sign in and, with `comparedPasswordHash`, still holds the
   * password hash the first factor's proof rests on (null: still no password) and, with
   * `unprovenAddress`, an address still unproven (`HeldProof`), so a password
   * changed between the proof and the ticket ends this ticket too. Answers whether it was written.
   */
  async insert(
    ticket: {
      id: string;
      userId: string;
      now: number;
      expiresAt: number;
      ip: string | null;
      userAgent: string | null;
      firstFactor?: 'pwd' | 'fed' | 'email';
      ssoConnectionId?: string | undefined;
      socialProvider?: string | undefined;
      signInMethod?: 'email_code' | 'email_link' | undefined;
    },
    comparedPasswordHash?: string | null,
    unprovenAddress = false,
  ): Promise<boolean> {
    const row = {
      id: ticket.id,
      user: ticket.userId,
      now: ticket.now,
      expiresAt: ticket.expiresAt,
      ip: ticket.ip,
      userAgent: ticket.userAgent?.slice(0, 512) ?? null,
      firstFactor: ticket.firstFactor === 'fed' || ticket.firstFactor === 'email' ? ticket.firstFactor : null,
      ssoConnectionId: ticket.ssoConnectionId ?? null,
      socialProvider: ticket.socialProvider ?? null,
      signInMethod: ticket.signInMethod ?? null,
      ...(typeof comparedPasswordHash === 'string' ? { comparedPasswordHash } : {}),
    };
    const withPassword = typeof comparedPasswordHash === 'string';
    const withoutPassword = comparedPasswordHash === null;
    const written = await this.hot.run(
      this.db,
      `mfaTickets.insert${withPassword ? 'WithComparedPassword' : ''}${withoutPassword ? 'WithNoPassword' : ''}${unprovenAddress ? 'WhileUnproven' : ''}`,
      (values) =>
        insertWhere(
          this.db,
          this.table.mfaTickets,
          {
            id: values.id,
            user_id: values.user,
            failed_attempts: 0,
            created_at: values.now,
            expires_at: values.expiresAt,
            consumed_at: null,
            ip: values.ip,
            user_agent: values.userAgent,
            first_factor: values.firstFactor,
            sso_connection_id: values.ssoConnectionId,
            social_provider: values.socialProvider,
            sign_in_method: values.signInMethod,
          },
          signingInAccount(this.db, this.table, this.dialect, values.user, withPassword ? values.comparedPasswordHash : withoutPassword ? null : undefined, unprovenAddress),
        ),
      row,
    );
    return written === 1;
  }

  async findById(id: string): Promise<MfaTicketRecord | undefined> {
    const row = await this.db(this.table.mfaTickets).where({ id }).first();
    return row ? mapTicket(row) : undefined;
  }

  async recordFailure(id: string): Promise<void> {
    await this.db(this.table.mfaTickets).where({ id }).increment('failed_attempts', 1);
  }

  /** Single use: one conditional update, and only while the ticket is alive. */
  async consume(id: string, now: number, maxAttempts: number): Promise<boolean> {
    const changed = await this.db(this.table.mfaTickets)
      .where({ id })
      .whereNull('consumed_at')
      .andWhere('expires_at', '>', now)
      .andWhere('failed_attempts', '<', maxAttempts)
      .update({ consumed_at: now });
    return changed === 1;
  }

  /** Drops every ticket that ended before `before`: past its expiry it opens nothing, and no later login replaces it. */
  async pruneEndedBefore(before: number): Promise<void> {
    await this.deleteInBatches(this.table.mfaTickets, 'id', (query) => query.where('expires_at', '<=', before));
  }

  /** Ends every open ticket of a user (a password change or reset: a ticket won with the old password must not finish the login). */
  async endAllForUser(userId: string, now: number): Promise<void> {
    await this.db(this.table.mfaTickets).where({ user_id: userId }).whereNull('consumed_at').update({ consumed_at: now });
  }
}

export class RecoveryCodeRepository extends Repository {
  /** Unused codes of the current batch (older batches are retired when a new one is issued). */
  async countUnused(userId: string): Promise<number> {
    const row = await this.db(this.table.recoveryCodes).where({ user_id: userId }).whereNull('used_at').whereNull('retired_at').count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  /**
   * Ends every code of the user. Codes of batches retired earlier are deleted, not kept: nothing
   * reads them, and a regeneration loop (step-up once, then the `authenticated` budget) left ten
   * rows a call for ever (docs/security.md, "Quotas"). At most the live batch and the one it
   * replaces remain.
   */
  async retireAll(userId: string, now: number): Promise<void> {
    await this.db(this.table.recoveryCodes).where({ user_id: userId }).whereNotNull('retired_at').delete();
    await this.db(this.table.recoveryCodes).where({ user_id: userId }).whereNull('retired_at').update({ retired_at: now });
  }

  async insertBatch(batch: { userId: string; batchId: string; codes: Array<{ id: string; codeHash: string }>; now: number }): Promise<void> {
    await this.db(this.table.recoveryCodes).insert(
      batch.codes.map((code) => ({ id: code.id, user_id: batch.userId, batch_id: batch.batchId, code_hash: code.codeHash, created_at: batch.now, used_at: null, retired_at: null })),
    );
  }

  /** Single use: one conditional update; false when the code is unknown, used or retired. */
  async consume(userId: string, codeHash: string, now: number): Promise<boolean> {
    const changed = await this.db(this.table.recoveryCodes).where({ user_id: userId, code_hash: codeHash }).whereNull('used_at').whereNull('retired_at').update({ used_at: now });
    return changed >= 1;
  }
}
