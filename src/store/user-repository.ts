import type { Knex } from 'knex';
import { type Dialect, toBoolean, toNullableNumber, toNumber } from './database.js';
import { confirmedFactorsOf } from './mfa-repository.js';
import { superadminGrantOf } from './organization-repository.js';
import { Repository } from './repository.js';
import type { TableNames } from './table-names.js';
import type { Db } from './transaction.js';

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

/** A lock that has run out, or a failed-attempt window that has lapsed (bound: now, then the window's oldest start still open). */
const FRESH_FAILED_ATTEMPT_WINDOW =
  '((locked_until is not null and locked_until <= ?) or (locked_until is null and (failed_login_window_start is null or failed_login_window_start <= ?)))';

/**
 * Slots held by attempts still being compared. A count whose last slot was taken before the
 * window's start (bound: the window's oldest start still open) is left by an instance that died
 * mid-comparison, and counts as none.
 */
const LIVE_ATTEMPTS_IN_FLIGHT = '(case when attempts_in_flight_at > ? then attempts_in_flight else 0 end)';

type UserRow = Record<string, unknown>;

/** What the password login's account statement reads beside the account, for its sign-in. */
export interface ReadBesideAccount {
  superadmin: boolean;
  hasConfirmedFactor: boolean;
}

/** Every column of the users table, for queries that select a user beside another row. */
export const USER_COLUMNS = [
  'id',
  'email',
  'email_verified',
  'display_name',
  'status',
  'password_hash',
  'mfa_enforced',
  'failed_login_count',
  'failed_login_window_start',
  'locked_until',
  'deleted_at',
  'created_at',
  'updated_at',
] as const;

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

/** First half of the two-key advisory lock of a mailbox's sign-ups (see startup-lock.ts for the start-up lock's). */
const MAILBOX_LOCK_CLASS = 0x1d3e7003;

/**
 * The address typed and its mailbox's other spellings (`mailboxSpellings`: at most two more) as
 * three values, the last repeated, so a mailbox's statements keep one shape.
 */
function spellingValues(typed: string, spellings: readonly string[]): { typed: string; second: string; third: string } {
  const [second = typed, third = second] = spellings.filter((spelling) => spelling !== typed);
  return { typed, second, third };
}

/** The accounts of a mailbox's spellings, the typed spelling's first (then by address, so the choice is stable). */
function mailboxAccount<V extends { typed: unknown; second: unknown; third: unknown }>(users: Knex.QueryBuilder, values: V): Knex.QueryBuilder {
  return users
    .whereIn('email', [values.typed, values.second, values.third] as string[])
    .orderByRaw('case when email = ? then 0 else 1 end', [values.typed as string])
    .orderBy('email');
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

  /**
   * The account at `email` (normalised), its row locked. On PostgreSQL a statement that waited
   * for the lock reads the row again and answers nothing if the address left it meanwhile (an
   * account deleted and given its tombstone).
   */
  async findByEmailForUpdate(email: string, spellings: readonly string[] = [email]): Promise<UserRecord | undefined> {
    const row = await this.lockForUpdate(mailboxAccount(this.db(this.table.users), spellingValues(email, spellings))).first();
    return row ? mapUser(row) : undefined;
  }

  /**
   * `email` must already be normalised (trimmed, lower-cased). With `spellings` (its mailbox's,
   * `mailboxSpellings`), the account of the mailbox under any of them, in one indexed statement:
   * the typed spelling's own account first, should two exist from before one mailbox had one
   * account (docs/security.md "One mailbox, one account").
   */
  async findByEmail(email: string, spellings?: readonly string[]): Promise<UserRecord | undefined> {
    if (spellings && spellings.some((spelling) => spelling !== email)) {
      const found = await this.hot.first(this.db, 'users.findByMailbox', (values) => mailboxAccount(this.db(this.table.users), values).first(USER_COLUMNS), spellingValues(email, spellings));
      return found ? mapUser(found) : undefined;
    }
    const row = await this.hot.first(this.db, 'users.findByEmail', (values) => this.db(this.table.users).where({ email: values.email }).first(USER_COLUMNS), { email });
    return row ? mapUser(row) : undefined;
  }

  /**
   * The account at `email` and, on PostgreSQL in the same statement, a first try at one of its
   * failed-attempt slots (`reserveFailedAttempt`'s rule, for an account that has a password and
   * is not deleted) and what its sign-in will need: its superadmin grant (for the token) and
   * whether it has a confirmed factor (for the MFA gate): up to three round trips fewer for a
   * password sign-in. `reserved` and `read` are undefined where nothing was read beside the
   * account (SQLite, whose statements cost no round trip).
   */
  async findByEmailReservingAttempt(
    email: string,
    now: number,
    lockout: { threshold: number; windowMs: number },
    spellings: readonly string[] = [email],
  ): Promise<{ user: UserRecord; reserved: boolean | undefined; read: ReadBesideAccount | undefined } | undefined> {
    if (this.dialect !== 'pg') {
      const user = await this.findByEmail(email, spellings);
      return user && { user, reserved: undefined, read: undefined };
    }
    const row = await this.hot.first(
      this.db,
      'users.findByMailboxReservingAttempt',
      (values) => {
        const account = mailboxAccount(this.db(this.table.users), values).select(USER_COLUMNS).limit(1);
        const accountId = this.db.raw('??', ['account.id']);
        const slot = reserveAttemptWrite(this.db, this.table, this.db('account').select('id'), values).whereNull('deleted_at').whereNotNull('password_hash').whereNot('password_hash', '').returning('id');
        return this.db.client
          .queryBuilder()
          .with('account', account)
          .with('slot', slot)
          .from('account')
          .first([
            ...USER_COLUMNS.map((column) => `account.${column}`),
            this.db.raw('exists (select 1 from ??) as ??', ['slot', 'reserved']),
            this.db.raw('exists ? as ??', [superadminGrantOf(this.db, this.table, accountId).select('user_id'), 'superadmin']),
            this.db.raw('exists ? as ??', [confirmedFactorsOf(this.db, this.table, accountId).select('id'), 'confirmed_factor']),
          ]);
      },
      attemptValues(now, lockout, spellingValues(email, spellings)),
    );
    return row && { user: mapUser(row), reserved: toBoolean(row.reserved), read: { superadmin: toBoolean(row.superadmin), hasConfirmedFactor: toBoolean(row.confirmed_factor) } };
  }

  /**
   * Inserts unless the address is taken; answers whether this call created the account. A
   * social sign-up (docs/social-login.md rule 4) has no password and takes the provider's verification.
   */
  async insertIfEmailFree(
    user: { id: string; email: string; displayName: string | null; passwordHash: string | null; emailVerified?: boolean; now: number },
    mailbox?: { form: string; spellings: readonly string[] },
  ): Promise<boolean> {
    if (mailbox) {
      // One mailbox, one account: two sign-ups of two spellings at once take turns on PostgreSQL
      // (a transaction-scoped advisory lock keyed by the mailbox form; SQLite serialises writers),
      // and the later sees the former's account. Call inside the transaction.
      if (this.dialect === 'pg') await this.db.raw('select pg_advisory_xact_lock(?, hashtext(?))', [MAILBOX_LOCK_CLASS, `${this.table.users}:${mailbox.form}`]);
      if (await this.mailboxTaken(user.email, mailbox.spellings)) return false;
    }
    const inserted = await this.db(this.table.users)
      .insert({
        id: user.id,
        email: user.email,
        email_verified: user.emailVerified ?? false,
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

  /** Whether an account is stored under `email` or any of its mailbox's other `spellings`. */
  async mailboxTaken(email: string, spellings: readonly string[]): Promise<boolean> {
    return (await mailboxAccount(this.db(this.table.users), spellingValues(email, spellings)).first('id')) !== undefined;
  }

  async markEmailVerified(id: string, now: number): Promise<boolean> {
    const changed = await this.db(this.table.users).where({ id, email_verified: false }).update({ email_verified: true, updated_at: now });
    return changed === 1;
  }

  /**
   * `expectedHash`: only if the account still holds the hash its current password was compared
   * with (a password change); a reset that committed during that comparison wins. Answers
   * whether it was written.
   */
  async setPasswordHash(id: string, passwordHash: string, now: number, expectedHash?: string): Promise<boolean> {
    const account = this.db(this.table.users).where({ id });
    if (expectedHash !== undefined) account.where('password_hash', expectedHash);
    return (await account.update({ password_hash: passwordHash, updated_at: now })) === 1;
  }

  /** The account signs in without a password from now on (a passwordless first proof, docs/passwordless.md); answers whether it had one. */
  async removePassword(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.users).where({ id }).whereNotNull('password_hash').update({ password_hash: null, updated_at: now })) === 1;
  }

  /** Replaces the hash only if it is still the one that was verified, so a concurrent password change wins. */
  async replacePasswordHash(id: string, expectedHash: string, passwordHash: string): Promise<boolean> {
    return (await this.db(this.table.users).where({ id, password_hash: expectedHash }).update({ password_hash: passwordHash })) === 1;
  }

  async setDisplayName(id: string, displayName: string | null, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ display_name: displayName, updated_at: now });
  }

  /** Answers whether the flag changed (false: it already had that value). */
  async setMfaEnforced(id: string, enforced: boolean, now: number): Promise<boolean> {
    return (await this.db(this.table.users).where({ id, mfa_enforced: !enforced }).update({ mfa_enforced: enforced, updated_at: now })) === 1;
  }

  async setStatus(id: string, status: StoredUserStatus, now: number): Promise<void> {
    await this.db(this.table.users).where({ id }).update({ status, updated_at: now });
  }

  /**
   * Takes one failed-attempt slot before a password or code is compared (parallel
   * guesses cannot beat the cap). One conditional update, so of any number of concurrent
   * attempts at most `threshold` minus the failures already in the window hold a slot at once.
   * Answers false when the account is locked or every free slot is held: `attemptState` tells
   * the two apart.
   */
  async reserveFailedAttempt(id: string, now: number, lockout: { threshold: number; windowMs: number }): Promise<boolean> {
    const reserved = await this.hot.run(this.db, 'users.reserveFailedAttempt', (values) => reserveAttemptWrite(this.db, this.table, values.id, values), attemptValues(now, lockout, { id }));
    return reserved === 1;
  }

  /** What refused a reservation: a lock (or the window's failures used up), or only slots held by attempts in flight. */
  async attemptState(id: string, now: number, lockout: { threshold: number; windowMs: number }): Promise<'locked' | 'busy'> {
    const row = await this.db(this.table.users).where({ id }).first('failed_login_count', 'failed_login_window_start', 'locked_until');
    if (!row) return 'locked';
    const lockedUntil = toNullableNumber(row.locked_until);
    if (lockedUntil !== null) return lockedUntil > now ? 'locked' : 'busy';
    const windowStart = toNullableNumber(row.failed_login_window_start);
    const windowOpen = windowStart !== null && windowStart > now - lockout.windowMs;
    return windowOpen && toNumber(row.failed_login_count) >= lockout.threshold ? 'locked' : 'busy';
  }

  /** Gives back a slot whose attempt did not fail: it is no failure, and earlier failures still count. */
  async releaseFailedAttempt(id: string): Promise<void> {
    await this.hot.run(
      this.db,
      'users.releaseFailedAttempt',
      (values) => this.db(this.table.users).where({ id: values.id }).andWhere('attempts_in_flight', '>', 0).update({ attempts_in_flight: this.db.raw('?? - 1', ['attempts_in_flight']) }),
      { id },
    );
  }

  /** A failed attempt turns its slot into a failure of the window. */
  async recordFailedAttempt(id: string): Promise<void> {
    await this.db(this.table.users)
      .where({ id })
      .update({
        failed_login_count: this.db.raw('?? + 1', ['failed_login_count']),
        attempts_in_flight: this.db.raw('case when ?? > 0 then ?? - 1 else 0 end', ['attempts_in_flight', 'attempts_in_flight']),
      });
  }

  /** After a failure was recorded: locks the account when the window holds `threshold` failures. Answers whether this call locked it. */
  async lockIfThresholdReached(id: string, now: number, lockout: { threshold: number; durationMs: number }): Promise<boolean> {
    const locked = await this.db(this.table.users)
      .where({ id })
      .andWhere('failed_login_count', '>=', lockout.threshold)
      .andWhere((query) => query.whereNull('locked_until').orWhere('locked_until', '<=', now))
      .update({ locked_until: now + lockout.durationMs });
    return locked === 1;
  }

  /** Ends the failures and any lock; slots held by attempts still in flight stay theirs. */
  async clearFailedLogins(id: string): Promise<void> {
    await this.hot.run(
      this.db,
      'users.clearFailedLogins',
      (values) => this.db(this.table.users).where({ id: values.id }).update({ failed_login_count: 0, failed_login_window_start: null, locked_until: null }),
      { id },
    );
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

  /** The organizations `userId` has a membership row in, whatever its status, in id order. */
  async memberOrganizationIds(userId: string): Promise<string[]> {
    const rows = await this.db(this.table.memberships).where({ user_id: userId }).orderBy('organization_id').select('organization_id');
    return rows.map((row: Record<string, unknown>) => String(row.organization_id));
  }

  /**
   * Organizations in which `userId` is the only active owner (docs/organizations.md invariant 3: the
   * account cannot go while an organization would be left without one). Read once the caller
   * holds the rows of every organization the account belongs to (`OrganizationRepository.lockAll`),
   * as every owner change locks its organization: two owners of one organization deleting their
   * accounts at once are serialised, and a promotion to owner (after which the other owner
   * could step down) either comes before the ownerships are read or waits for the deletion.
   */
  async organizationsWhereLastActiveOwner(userId: string): Promise<string[]> {
    const owned = await this.activeOwnerships()
      .where({ 'm.user_id': userId })
      .distinct('m.organization_id as organization_id');
    const organizationIds = owned.map((row: Record<string, unknown>) => String(row.organization_id)).sort();
    if (organizationIds.length === 0) return [];
    const counts = await this.activeOwnerships()
      .whereIn('m.organization_id', organizationIds)
      .groupBy('m.organization_id')
      .select('m.organization_id as organization_id')
      .countDistinct({ owners: 'm.user_id' });
    const ownersByOrganization = new Map(counts.map((row: Record<string, unknown>) => [String(row.organization_id), toNumber(row.owners)]));
    return organizationIds.filter((id) => (ownersByOrganization.get(id) ?? 0) <= 1);
  }

  /** Active memberships holding the organization's owner role, in active organizations. */
  private activeOwnerships() {
    return this.db(`${this.table.memberships} as m`)
      .join(`${this.table.organizations} as o`, 'o.id', 'm.organization_id')
      .join(`${this.table.memberRoles} as mr`, 'mr.membership_id', 'm.id')
      .join(`${this.table.roles} as r`, 'r.id', 'mr.role_id')
      .where({ 'm.status': 'active', 'o.status': 'active', 'r.slug': 'owner' })
      .whereRaw('?? = ??', ['r.organization_id', 'm.organization_id']);
  }

  /** Every second-factor secret of a user: challenges, login tickets, recovery codes, factors (passkeys among them). */
  async deleteSecondFactorData(userId: string): Promise<void> {
    await this.db(this.table.otpChallenges).where({ user_id: userId }).delete();
    await this.db(this.table.webauthnChallenges).where({ user_id: userId }).delete();
    await this.db(this.table.mfaTickets).where({ user_id: userId }).delete();
    await this.db(this.table.recoveryCodes).where({ user_id: userId }).delete();
    await this.db(this.table.mfaFactors).where({ user_id: userId }).delete();
  }

  /**
   * Ends every membership (with its role assignments) and every global role grant of a
   * user; answers the organizations the user was a member of.
   */
  async endMemberships(userId: string): Promise<Array<{ organizationId: string; status: string }>> {
    const memberships = await this.db(this.table.memberships).where({ user_id: userId }).select('organization_id', 'status').orderBy('organization_id');
    await this.db(this.table.memberRoles)
      .whereIn('membership_id', this.db(this.table.memberships).where({ user_id: userId }).select('id'))
      .delete();
    await this.db(this.table.memberships).where({ user_id: userId }).delete();
    await this.db(this.table.globalRoleGrants).where({ user_id: userId }).delete();
    return memberships.map((row: Record<string, unknown>) => ({ organizationId: String(row.organization_id), status: String(row.status) }));
  }

  /** Pending invitations addressed to `email` die with the account; answers how many. */
  /**
   * Revokes the pending invites to a deleted account's address and replaces the address on
   * every invite row (pending or not) with the tombstone, so no copy of it is left behind.
   * Answers how many pending invites were revoked.
   */
  async revokeAndAnonymizeInvitesTo(email: string, tombstoneEmail: string, now: number): Promise<number> {
    const revoked = await this.db(this.table.invites)
      .where({ email, status: 'pending' })
      .update({ status: 'revoked', pending_email: null, updated_at: now });
    await this.db(this.table.invites).where({ email }).update({ email: tombstoneEmail, updated_at: now });
    return revoked;
  }
}

/** The values of a slot's reservation, beside `key` (the account's id or address). */
function attemptValues<K extends Record<string, string>>(now: number, lockout: { threshold: number; windowMs: number }, key: K) {
  return { ...key, now, windowStartedBy: now - lockout.windowMs, threshold: lockout.threshold };
}

/**
 * Takes one failed-attempt slot of the account `id`, unless it is locked or every slot the
 * window leaves is held. One statement, so one write and commit per attempt: a fresh window
 * when the previous one has lapsed or a lock has run out, the slot counted among those in
 * flight. Every SET expression reads the row as it was, on SQLite and PostgreSQL alike.
 */
function reserveAttemptWrite(db: Db, table: TableNames, id: Knex.Value | Knex.QueryBuilder, values: { now: Knex.Value; windowStartedBy: Knex.Value; threshold: Knex.Value }): Knex.QueryBuilder {
  const fresh = [values.now, values.windowStartedBy];
  const failures = db.raw(`case when ${FRESH_FAILED_ATTEMPT_WINDOW} then 0 else failed_login_count end`, fresh);
  const inFlight = db.raw(LIVE_ATTEMPTS_IN_FLIGHT, [values.windowStartedBy]);
  return db(table.users)
    .where('id', id)
    .andWhere((unlocked) => unlocked.whereNull('locked_until').orWhere('locked_until', '<=', values.now))
    .andWhereRaw('? + ? < ?', [failures, inFlight, values.threshold])
    .update({
      failed_login_count: failures,
      failed_login_window_start: db.raw(`case when ${FRESH_FAILED_ATTEMPT_WINDOW} then ? else failed_login_window_start end`, [...fresh, values.now]),
      locked_until: null,
      attempts_in_flight: db.raw(`${LIVE_ATTEMPTS_IN_FLIGHT} + 1`, [values.windowStartedBy]),
      attempts_in_flight_at: values.now,
    });
}

/**
 * The account a sign-in's session is written beside (`SessionRepository.insert`): one that may
 * still authenticate (active, not deleted: `mayAuthenticate`) and, with `comparedPasswordHash`,
 * still has the password hash its first factor's proof rests on (`HeldProof`: a password's
 * compared hash, or what a passwordless code found, null for none) and, with `unprovenAddress`, an
 * address still unproven (`HeldProof`). A disable, a deletion, a new password or a first proof that
 * commits while the sign-in compares or decides leaves no session behind. On PostgreSQL the row
 * is locked: such a change, which locks the account before it revokes sessions, either waits
 * for the session (and then revokes it) or is seen by it. The lock is FOR NO KEY UPDATE, not
 * FOR SHARE: the same statement may end the attempt with an update of the row, and two
 * sign-ins holding it shared would each wait for the other to upgrade (a deadlock).
 */
export function signingInAccount(db: Db, table: TableNames, dialect: Dialect, id: Knex.Value, comparedPasswordHash?: Knex.Value | null, unprovenAddress = false): Knex.QueryBuilder {
  const account = db(table.users).select('id').where({ id, status: 'active' }).whereNull('deleted_at');
  // A provider's sign-in resolved on an unproven address: not once its first proof has run.
  if (unprovenAddress) account.where('email_verified', false);
  // A hot statement's stand-in always compiles to `= ?`: an account with no password is its own shape.
  if (comparedPasswordHash === null) account.whereNull('password_hash');
  else if (comparedPasswordHash !== undefined) account.where('password_hash', comparedPasswordHash);
  return dialect === 'pg' ? account.forNoKeyUpdate() : account;
}

/**
 * A completed sign-in's write to its account: the attempt's slot goes back and the failures of
 * the window, and any lock, end. Written with the session the sign-in opens
 * (`SessionRepository.insert`), in its statement on PostgreSQL.
 */
export function completeSignInWrite(db: Db, table: TableNames, id: Knex.Value): Knex.QueryBuilder {
  return db(table.users)
    .where({ id })
    .update({
      failed_login_count: 0,
      failed_login_window_start: null,
      locked_until: null,
      attempts_in_flight: db.raw('case when ?? > 0 then ?? - 1 else 0 end', ['attempts_in_flight', 'attempts_in_flight']),
    });
}
