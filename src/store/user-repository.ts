import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export type StoredUserStatus = 'active' | 'disabled';

export interface UserRecord {
  id: string;
  email: string;
  emailVerified: boolean;
  displayName: string | null;
  status: StoredUserStatus;
  passwordHash: string | null;
  mfaEnforced: boolean;
  failedLoginCount: number;
  failedLoginWindowStart: number | null;
  lockedUntil: number | null;
  deletedAt: number | null;
  createdAt: number;
  updatedAt: number;
}

type UserRow = Record<string, unknown>;

export function mapUser(row: UserRow): UserRecord {
  return {
    id: String(row.id),
    email: String(row.email),
    emailVerified: toBoolean(row.email_verified),
    displayName: (row.display_name as string | null) ?? null,
    status: row.status as StoredUserStatus,
    passwordHash: (row.password_hash as string | null) ?? null,
    mfaEnforced: toBoolean(row.mfa_enforced),
    failedLoginCount: toNumber(row.failed_login_count),
    failedLoginWindowStart: toNullableNumber(row.failed_login_window_start),
    lockedUntil: toNullableNumber(row.locked_until),
    deletedAt: toNullableNumber(row.deleted_at),
    createdAt: toNumber(row.created_at),
    updatedAt: toNumber(row.updated_at),
  };
}

export class UserRepository extends Repository {
  async findById(id: string): Promise<UserRecord | undefined> {
    const row = await this.db(this.table.users).where({ id }).first();
    return row ? mapUser(row) : undefined;
  }

  async findByIdForUpdate(id: string): Promise<UserRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.users).where({ id })).first();
    return row ? mapUser(row) : undefined;
  }

  /** `email` must already be normalised (trimmed, lower-cased). */
  async findByEmail(email: string): Promise<UserRecord | undefined> {
    const row = await this.db(this.table.users).where({ email }).first();
    return row ? mapUser(row) : undefined;
  }

  /** Inserts unless the address is taken; answers whether this call created the account. */
  async insertIfEmailFree(user: { id: string; email: string; displayName: string | null; passwordHash: string; now: number }): Promise<boolean> {
    const inserted = await this.db(this.table.users)
      .insert({
        id: user.id,
        email: user.email,
        email_verified: false,
        display_name: user.displayName,
        status: 'active',
        password_hash: user.passwordHash,
        mfa_enforced: false,
        failed_login_count: 0,
        created_at: user.now,
        updated_at: user.now,
      })
      .onConflict('email')
      .ignore()
      .returning('id');
    return inserted.length === 1;
  }

  async markEmailVerified(id: string, now: number): Promise<boolean> {
    const changed = await this.db(this.table.users).where({ id, email_verified: false }).update({ email_verified: true, updated_at: now });
    return changed === 1;
  }

  async setPasswordHash(id: string, passwordHash: string, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ password_hash: passwordHash, updated_at: now });
  }

  async setDisplayName(id: string, displayName: string | null, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ display_name: displayName, updated_at: now });
  }

  async setMfaEnforced(id: string, enforced: boolean, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ mfa_enforced: enforced, updated_at: now });
  }

  async setStatus(id: string, status: StoredUserStatus, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ status, updated_at: now });
  }

  /**
   * Counts one failed login inside the lockout window and locks the account when the
   * threshold is reached. One statement per step so concurrent failures all count.
   * Answers whether this failure locked the account.
   */
  async recordFailedLogin(id: string, now: number, lockout: { threshold: number; windowMs: number; durationMs: number }): Promise<boolean> {
    const windowOpenedAfter = now - lockout.windowMs;
    // Restart the window when the previous one has lapsed.
    await this.db(this.table.users)
      .where({ id })
      .andWhere((query) => query.whereNull('failed_login_window_start').orWhere('failed_login_window_start', '<=', windowOpenedAfter))
      .update({ failed_login_count: 0, failed_login_window_start: now });
    await this.db(this.table.users).where({ id }).increment('failed_login_count', 1);
    const locked = await this.db(this.table.users)
      .where({ id })
      .andWhere('failed_login_count', '>=', lockout.threshold)
      .andWhere((query) => query.whereNull('locked_until').orWhere('locked_until', '<=', now))
      .update({ locked_until: now + lockout.durationMs, failed_login_count: 0, failed_login_window_start: null });
    return locked === 1;
  }

  async clearFailedLogins(id: string): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ failed_login_count: 0, failed_login_window_start: null, locked_until: null });
  }

  /** Replaces the identifying fields with a tombstone; the row stays so ids in the audit log still resolve. */
  async anonymize(id: string, tombstoneEmail: string, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({
      email: tombstoneEmail,
      display_name: null,
      password_hash: null,
      status: 'disabled',
      mfa_enforced: false,
      failed_login_count: 0,
      failed_login_window_start: null,
      locked_until: null,
      deleted_at: now,
      updated_at: now,
    });
  }
}
