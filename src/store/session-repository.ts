import type { Knex } from 'knex';
import { toBoolean, toNullableNumber, toNumber } from './database.js';
import type { StandIns } from './hot-statements.js';
import { confirmedFactorsOf } from './mfa-repository.js';
import { insertWhere, type Recording, valuesWithRecording, writeRecording } from './recorded-write.js';
import { Repository } from './repository.js';
import { completeSignInWrite, mapUser, signingInAccount, USER_COLUMNS, type UserRecord } from './user-repository.js';

export interface SessionRecord {
  id: string;
  userId: string;
  organizationId: string | null;
  mfa: boolean;
  amr: string[];
  /** epoch ms of the last strong authentication */
  authTime: number;
  ip: string | null;
  userAgent: string | null;
  createdAt: number;
  lastUsedAt: number;
  expiresAt: number;
  revokedAt: number | null;
  /** The generation its current refresh token names (src/crypto/refresh-token.ts). */
  refreshGeneration: number;
}

export interface NewSession {
  id: string;
  userId: string;
  organizationId: string | null;
  mfa: boolean;
  amr: string[];
  authTime: number;
  ip: string | null;
  userAgent: string | null;
  createdAt: number;
  expiresAt: number;
}

/**
 * A live session: not revoked, and before the end of its refresh lifetime. This is the one
 * definition, in its two forms side by side: `isLiveSession` for a row in hand, `whereLive`
 * for a query.
 */
export function isLiveSession(session: Pick<SessionRecord, 'revokedAt' | 'expiresAt'>, now: number): boolean {
  return session.revokedAt === null && session.expiresAt > now;
}

function whereLive<Q extends Knex.QueryBuilder>(query: Q, now: number): Q {
  return query.whereNull('revoked_at').andWhere('expires_at', '>', now) as Q;
}

export type SessionRevocationReason =
  | 'logout'
  | 'logout_all'
  | 'revoked_by_user'
  | 'password_reset'
  | 'password_changed'
  | 'refresh_reuse'
  | 'user_disabled'
  | 'user_deleted'
  | 'member_suspended'
  | 'member_removed'
  | 'org_deleted'
  | 'email_proven';

/** The columns mapSession reads, named: a hot statement never selects `*` (see hot-statements.ts). */
export const SESSION_COLUMNS = ['id', 'user_id', 'organization_id', 'mfa', 'amr', 'auth_time', 'ip', 'user_agent', 'created_at', 'last_used_at', 'expires_at', 'revoked_at', 'refresh_generation'] as const;

export function mapSession(row: Record<string, unknown>): SessionRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    organizationId: (row.organization_id as string | null) ?? null,
    mfa: toBoolean(row.mfa),
    amr: JSON.parse(String(row.amr)) as string[],
    authTime: toNumber(row.auth_time),
    ip: (row.ip as string | null) ?? null,
    userAgent: (row.user_agent as string | null) ?? null,
    createdAt: toNumber(row.created_at),
    lastUsedAt: toNumber(row.last_used_at),
    expiresAt: toNumber(row.expires_at),
    revokedAt: toNullableNumber(row.revoked_at),
    refreshGeneration: toNumber(row.refresh_generation),
  };
}

/** A session's user in a query joined to it: its columns as `user_<column>`, and the mapping back. */
const JOINED_USER_COLUMNS = USER_COLUMNS.map((column) => `u.${column} as user_${column}`);
const mapJoinedUser = (row: Record<string, unknown>): UserRecord => mapUser(Object.fromEntries(USER_COLUMNS.map((column) => [column, row[`user_${column}`]])));

export class SessionRepository extends Repository {
  /**
   * A new session. `signIn` writes what opens it along with it: the account's counted attempt
   * completed (`completeSignInWrite`, for a first factor that held a lockout slot), and, with a
   * recording, the event: then all of it is one statement (`writeRecording`, PostgreSQL only).
   * Without a recording the writes are statements of the caller's transaction.
   * Every session is a sign-in's, written only beside an account that may still sign in
   * (`signingInAccount`): active, not deleted and, with `comparedPasswordHash`, still holding the
   * password hash the sign-in's proof rests on (null: still no password), and with
   * `unprovenAddress` an address still unproven (`HeldProof`). `unlessConfirmedFactor`: the session of a sign-in that
   * asked for no second factor is written only if the user still has no confirmed factor.
   * Answers whether it was written.
   */
  async insert(
    session: NewSession,
    signIn: { completesAttempt: boolean; recording?: Recording; unlessConfirmedFactor?: boolean; comparedPasswordHash?: string | null | undefined; unprovenAddress?: boolean | undefined } = { completesAttempt: false },
  ): Promise<boolean> {
    // Named apart from the audit row's values (userId, organizationId, ip), bound beside them.
    const row = {
      id: session.id,
      user: session.userId,
      organization: session.organizationId,
      mfa: session.mfa,
      amr: JSON.stringify(session.amr),
      authTime: session.authTime,
      clientIp: session.ip,
      userAgent: session.userAgent,
      now: session.createdAt,
      expiresAt: session.expiresAt,
      ...(typeof signIn.comparedPasswordHash === 'string' ? { comparedPasswordHash: signIn.comparedPasswordHash } : {}),
    };
    const { completesAttempt, recording, unlessConfirmedFactor = false } = signIn;
    const withPassword = typeof signIn.comparedPasswordHash === 'string';
    const withoutPassword = signIn.comparedPasswordHash === null;
    const unproven = signIn.unprovenAddress === true;
    const columns = (values: StandIns<typeof row>) => ({
      id: values.id,
      user_id: values.user,
      organization_id: values.organization,
      mfa: values.mfa,
      amr: values.amr,
      auth_time: values.authTime,
      ip: values.clientIp,
      user_agent: values.userAgent,
      created_at: values.now,
      last_used_at: values.now,
      expires_at: values.expiresAt,
    });
    const insertRow = (values: StandIns<typeof row>) =>
      insertWhere(
        this.db,
        this.table.sessions,
        columns(values),
        signingInAccount(this.db, this.table, this.dialect, values.user, withPassword ? values.comparedPasswordHash : withoutPassword ? null : undefined, unproven),
        unlessConfirmedFactor ? confirmedFactorsOf(this.db, this.table, values.user).select('id') : undefined,
      );
    // One hot statement per shape of the conditions.
    const conditions = `${unlessConfirmedFactor ? 'UnlessConfirmedFactor' : ''}${withPassword ? 'WithComparedPassword' : ''}${withoutPassword ? 'WithNoPassword' : ''}${unproven ? 'WhileUnproven' : ''}`;
    if (!recording) {
      // Statements of the caller's transaction: the attempt ends only with the session it opened.
      if ((await this.hot.run(this.db, `sessions.insert${conditions}`, insertRow, row)) !== 1) return false;
      if (completesAttempt) await this.hot.run(this.db, 'users.completeSignIn', (values) => completeSignInWrite(this.db, this.table, values.id), { id: session.userId });
      return true;
    }
    const { shape, values } = valuesWithRecording(row, recording);
    const name = `sessions.${completesAttempt ? 'insertCompletingAttempt' : 'insert'}${conditions}.${shape}`;
    const changed = await this.hot.run(
      this.db,
      name,
      (standIns) => writeRecording(this.db, this.table, this.dialect, insertRow(standIns), standIns, completesAttempt ? completeSignInWrite(this.db, this.table, standIns.user) : undefined),
      values,
    );
    return changed === 1;
  }

  async findById(id: string): Promise<SessionRecord | undefined> {
    const row = await this.db(this.table.sessions).where({ id }).first();
    return row ? mapSession(row) : undefined;
  }

  /**
   * The session if it is still live, its row locked for the caller's transaction (on
   * PostgreSQL): a revocation committed first is seen, one that comes later waits for the commit.
   */
  async lockLive(id: string, now: number): Promise<SessionRecord | undefined> {
    const row = await this.lockForUpdate(whereLive(this.db(this.table.sessions).where({ id }), now)).first();
    return row ? mapSession(row) : undefined;
  }

  /** A session that is neither revoked nor past its refresh lifetime. */
  async findLive(id: string, now: number): Promise<SessionRecord | undefined> {
    const row = await whereLive(this.db(this.table.sessions).where({ id }), now).first();
    return row ? mapSession(row) : undefined;
  }

  /** A live session and its user in one query: what every authenticated request needs. */
  async findLiveWithUser(id: string, now: number): Promise<{ session: SessionRecord; user: UserRecord } | undefined> {
    const found = await this.findWithUser(id);
    return found && isLiveSession(found.session, now) ? found : undefined;
  }

  async listLiveForUser(userId: string, now: number, page: { limit: number; afterCreatedAt?: number; afterId?: string }): Promise<SessionRecord[]> {
    const query = whereLive(this.db(this.table.sessions).where({ user_id: userId }), now)
      .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }])
      .limit(page.limit);
    if (page.afterCreatedAt !== undefined && page.afterId !== undefined) {
      const { afterCreatedAt, afterId } = page;
      query.andWhere((q) => q.where('created_at', '<', afterCreatedAt).orWhere((q2) => q2.where('created_at', '=', afterCreatedAt).andWhere('id', '<', afterId)));
    }
    return (await query).map(mapSession);
  }

  async touch(id: string, now: number, expiresAt: number): Promise<void> {
    await this.db(this.table.sessions).where({ id }).update({ last_used_at: now, expires_at: expiresAt });
  }

  /**
   * A refresh: the session moves from `generation` to `next` (the same with rotation off) and its
   * lifetime slides, if it is not revoked and still at `generation`. Exactly one of concurrent
   * refreshes with one token gets `true`; false also when it was revoked in the meantime.
   * With `recording`, what the refresh records is written in the same statement, and only if
   * the session moved (`writeRecording`: PostgreSQL only).
   */
  async rotate(id: string, generation: number, next: number, now: number, expiresAt: number, recording?: Recording): Promise<boolean> {
    const rotation = { id, generation, next, now, expiresAt };
    const update = (values: StandIns<typeof rotation>) =>
      this.db(this.table.sessions)
        .where({ id: values.id, refresh_generation: values.generation })
        .whereNull('revoked_at')
        .update({ refresh_generation: values.next, last_used_at: values.now, expires_at: values.expiresAt });
    if (!recording) return (await this.hot.run(this.db, 'sessions.rotate', update, rotation)) === 1;
    const { shape, values } = valuesWithRecording(rotation, recording);
    return (await this.hot.run(this.db, `sessions.rotate.${shape}`, (standIns) => writeRecording(this.db, this.table, this.dialect, update(standIns), standIns), values)) === 1;
  }

  /** A session, ended or not, with its user: what a refresh needs, in one query. */
  async findWithUser(id: string): Promise<{ session: SessionRecord; user: UserRecord } | undefined> {
    const row = await this.hot.first(
      this.db,
      'sessions.findWithUser',
      (values) =>
        this.db(`${this.table.sessions} as s`)
          .join(`${this.table.users} as u`, 'u.id', 's.user_id')
          .where('s.id', values.id)
          .first([...SESSION_COLUMNS.map((column) => `s.${column}`), ...JOINED_USER_COLUMNS]),
      { id },
    );
    if (!row) return undefined;
    return { session: mapSession(row), user: mapJoinedUser(row) };
  }

  async setOrganization(id: string, organizationId: string | null): Promise<boolean> {
    return (await this.db(this.table.sessions).where({ id }).whereNull('revoked_at').update({ organization_id: organizationId })) === 1;
  }

  async recordStrongAuthentication(id: string, authTime: number, amr: string[]): Promise<void> {
    await this.db(this.table.sessions).where({ id }).update({ auth_time: authTime, mfa: true, amr: JSON.stringify(amr) });
  }

  /**
   * Drops, in batches, the sessions revoked before `revokedBefore` and those created before
   * `createdBefore` (past their absolute lifetime, so ended whatever their refreshes did); their
   * stored refresh tokens go with them (ON DELETE CASCADE). An ended session's refresh tokens
   * answer invalid_grant without reading it, and its access tokens outlive it by at most
   * `accessTtl`. Neither column is one a refresh writes (migration 017).
   */
  async pruneEnded(revokedBefore: number, createdBefore: number): Promise<void> {
    await this.deleteInBatches(this.table.sessions, 'id', (query) => query.where('revoked_at', '<=', revokedBefore));
    await this.deleteInBatches(this.table.sessions, 'id', (query) => query.where('created_at', '<=', createdBefore));
  }

  /** Answers whether this call revoked it (false when already revoked or not found). */
  async revoke(id: string, now: number, reason: SessionRevocationReason): Promise<boolean> {
    return (await this.db(this.table.sessions).where({ id }).whereNull('revoked_at').update({ revoked_at: now, revoked_reason: reason })) === 1;
  }

  async revokeOwned(id: string, userId: string, now: number, reason: SessionRevocationReason): Promise<boolean> {
    return (
      (await this.db(this.table.sessions).where({ id, user_id: userId }).whereNull('revoked_at').update({ revoked_at: now, revoked_reason: reason })) === 1
    );
  }

  /**
   * Revokes every session of a user not yet revoked, optionally sparing one; answers how many
   * live ones it revoked. Those past their idle end are revoked too: a refresh that found one
   * live a moment before its end may still be on its way to the update that moves it on
   * (`rotate`, which asks only that it is not revoked), and must not bring it back.
   */
  async revokeAllForUser(userId: string, now: number, reason: SessionRevocationReason, exceptSessionId?: string): Promise<number> {
    const unrevoked = () => {
      const query = this.db(this.table.sessions).where({ user_id: userId }).whereNull('revoked_at');
      if (exceptSessionId) query.whereNot({ id: exceptSessionId });
      return query;
    };
    const live = await whereLive(unrevoked(), now).update({ revoked_at: now, revoked_reason: reason });
    await unrevoked().update({ revoked_at: now, revoked_reason: reason });
    return live;
  }

  /** A deleted account's sessions keep their ids and times but no longer say where from. */
  async eraseClientDetails(userId: string): Promise<void> {
    await this.db(this.table.sessions).where({ user_id: userId }).update({ ip: null, user_agent: null });
  }

  async revokeAllForOrganization(organizationId: string, now: number, reason: SessionRevocationReason, userId?: string): Promise<number> {
    const query = this.db(this.table.sessions).where({ organization_id: organizationId }).whereNull('revoked_at');
    if (userId) query.andWhere({ user_id: userId });
    return query.update({ revoked_at: now, revoked_reason: reason });
  }

  /** Points a user's unrevoked sessions that are in an organization the user is no active member of at no organization. */
  async leaveOrganizationsNotMemberOf(userId: string): Promise<number> {
    const joined = this.db(this.table.memberships).where({ user_id: userId, status: 'active' }).select('organization_id');
    return this.db(this.table.sessions).where({ user_id: userId }).whereNull('revoked_at').whereNotNull('organization_id').whereNotIn('organization_id', joined).update({ organization_id: null });
  }
}

export interface RefreshTokenRecord {
  id: string;
  sessionId: string;
  expiresAt: number;
  consumedAt: number | null;
}

/** Refresh tokens issued before they carried a MAC (src/crypto/refresh-token.ts): read and consumed until they are used or expire. */
export class RefreshTokenRepository extends Repository {
  /**
   * What a refresh needs, in one query: the presented token, its session and the session's
   * user. The caller decides on liveness, reuse and expiry.
   */
  async findForRefresh(tokenHash: string): Promise<{ token: RefreshTokenRecord; session: SessionRecord; user: UserRecord } | undefined> {
    const row = await this.hot.first(
      this.db,
      'refreshTokens.findForRefresh',
      (values) =>
        this.db(`${this.table.refreshTokens} as t`)
          .join(`${this.table.sessions} as s`, 's.id', 't.session_id')
          .join(`${this.table.users} as u`, 'u.id', 's.user_id')
          .where('t.token_hash', values.tokenHash)
          .first([
            't.id as token_id',
            't.expires_at as token_expires_at',
            't.consumed_at as token_consumed_at',
            ...SESSION_COLUMNS.map((column) => `s.${column}`),
            ...JOINED_USER_COLUMNS,
          ]),
      { tokenHash },
    );
    if (!row) return undefined;
    return {
      token: { id: String(row.token_id), sessionId: String(row.id), expiresAt: toNumber(row.token_expires_at), consumedAt: toNullableNumber(row.token_consumed_at) },
      session: mapSession(row),
      user: mapJoinedUser(row),
    };
  }

  /**
   * Forgets the stored tokens nobody can use any more: those of sessions that have ended, and
   * unused ones past their expiry. A used token of a live session stays: presented again, it is
   * a replay that revokes the session. Answers how many went.
   */
  async deleteUnusable(now: number): Promise<number> {
    const { sessions, refreshTokens } = this.table;
    const liveSession = whereLive(this.db(sessions).select('id').whereRaw('?? = ??', [`${sessions}.id`, `${refreshTokens}.session_id`]), now);
    return this.db(refreshTokens)
      .where((unusable) => unusable.whereNotExists(liveSession).orWhere((lapsed) => lapsed.whereNull('consumed_at').andWhere('expires_at', '<=', now)))
      .delete();
  }

  /** The single-use primitive: exactly one concurrent caller gets `true`. */
  async consume(id: string, now: number): Promise<boolean> {
    const changed = await this.hot.run(
      this.db,
      'refreshTokens.consume',
      (values) => this.db(this.table.refreshTokens).where({ id: values.id }).whereNull('consumed_at').andWhere('expires_at', '>', values.now).update({ consumed_at: values.now }),
      { id, now },
    );
    return changed === 1;
  }
}

export type OneTimeTokenPurpose = 'verify_email' | 'password_reset';

export interface OneTimeTokenRecord {
  id: string;
  userId: string;
  purpose: OneTimeTokenPurpose;
  expiresAt: number;
  consumedAt: number | null;
}

export class OneTimeTokenRepository extends Repository {
  async insert(token: { id: string; userId: string; purpose: OneTimeTokenPurpose; tokenHash: string; now: number; expiresAt: number }): Promise<void> {
    await this.db(this.table.oneTimeTokens).insert({
      id: token.id,
      user_id: token.userId,
      purpose: token.purpose,
      token_hash: token.tokenHash,
      created_at: token.now,
      expires_at: token.expiresAt,
    });
  }

  async findByHash(tokenHash: string, purpose: OneTimeTokenPurpose): Promise<OneTimeTokenRecord | undefined> {
    const row = await this.db(this.table.oneTimeTokens).where({ token_hash: tokenHash, purpose }).first();
    if (!row) return undefined;
    return {
      id: String(row.id),
      userId: String(row.user_id),
      purpose: row.purpose as OneTimeTokenPurpose,
      expiresAt: toNumber(row.expires_at),
      consumedAt: toNullableNumber(row.consumed_at),
    };
  }

  async consume(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.oneTimeTokens).where({ id }).whereNull('consumed_at').andWhere('expires_at', '>', now).update({ consumed_at: now })) === 1;
  }

  /**
   * Drops the account's links that expired before `before` (used or not): past its expiry a link
   * answers as an unknown one. Served by the `(user_id, purpose)` index: one account's rows.
   */
  async pruneExpiredOfUser(userId: string, before: number): Promise<void> {
    await this.db(this.table.oneTimeTokens).where({ user_id: userId }).andWhere('expires_at', '<=', before).delete();
  }

  /** A new reset link makes the older ones useless. */
  async expireOutstanding(userId: string, purpose: OneTimeTokenPurpose, now: number): Promise<void> {
    await this.db(this.table.oneTimeTokens).where({ user_id: userId, purpose }).whereNull('consumed_at').update({ consumed_at: now });
  }

  async deleteAllForUser(userId: string): Promise<void> {
    await this.db(this.table.oneTimeTokens).where({ user_id: userId }).delete();
  }
}
