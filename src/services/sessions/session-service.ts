import type { SignInRules } from '../access/sign-in-rules.js';
import { randomUUID } from 'node:crypto';
import { errors } from '../../errors.js';
import { keyedHash } from '../../crypto/keyed-hash.js';
import { isStoredRefreshToken, issueRefreshToken, readRefreshToken } from '../../crypto/refresh-token.js';
import type { AccessTokenSubject } from '../../crypto/jwt.js';
import type { EventInput } from '../../events.js';
import type { HeldProof } from './sign-in-result.js';
import { isLiveSession, type SessionRecord } from '../../store/session-repository.js';
import type { Repositories } from '../../store/store.js';
import type { UserRecord } from '../../store/user-repository.js';
import { type AccessGrant, type AccessPolicy, mayAuthenticate, organizationOf } from '../access/access-policy.js';
import { resolveAuthority, type ResolvedAuthority } from '../access/authority.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import type { PermissionCatalog } from '../access/permission-catalog.js';
import type { Principal } from '../access/principal.js';
import { decodeCursor, keysetPage } from '../shared/pagination.js';
import { commitRecordedWrite, describeError, runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { iso } from '../shared/iso-time.js';
import { ENDED_ROW_RETENTION_MS, Occasional, PRUNE_EVERY_MS } from '../shared/occasional.js';

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
}

export interface AccessTokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

export interface SessionView {
  id: string;
  current: boolean;
  ip: string | null;
  user_agent: string | null;
  created_at: string;
  last_used_at: string;
}

/** A session opened inside a transaction, its access token not yet signed. */
export interface OpenedSession {
  session: SessionRecord;
  user: UserRecord;
  refreshToken: string;
}

export interface StrongAuthentication {
  mfa: boolean;
  amr: string[];
  /** epoch ms */
  authTime: number;
}

const USER_AGENT_MAX = 512;
/**
 * The session and user behind a presented refresh token; the generation the refresh moves the
 * session on from; and the stored token's row and lifetime if it is one from before MACs.
 */
interface PresentedRefreshToken {
  session: SessionRecord;
  user: UserRecord;
  generation: number;
  storedId: string | undefined;
  expiresAt: number;
}

/** Sessions are refresh-token families: opening, rotating, re-scoping and revoking them. */
export class SessionService {
  private readonly endedPruning = new Occasional(PRUNE_EVERY_MS);

  constructor(
    private readonly context: ServiceContext,
    private readonly catalog: PermissionCatalog,
    private readonly policy: AccessPolicy,
    private readonly signInRules: SignInRules,
  ) {}

  /**
   * Opens a session (one refresh-token family) inside the caller's unit of work. The access
   * token is signed only after commit (`signOpened`): no token exists for a session that
   * rolled back, and no transaction waits on an RSA signature.
   */
  async open(uow: UnitOfWork, user: UserRecord, authentication: StrongAuthentication, meta: RequestMeta): Promise<OpenedSession> {
    const session = this.newSession(user, authentication, meta, uow.now);
    // Refused only if the account was disabled or deleted since the caller read it.
    if (!(await uow.repos.sessions.insert(session))) throw await this.signInRules.refusalOfRefusedWrite(uow.repos, user.id);
    uow.afterCommit(() => this.pruneEndedOccasionally(uow.now));
    return this.opened(session, user);
  }

  /**
   * `open`, for a sign-in the MFA gate asked nothing of: nothing is written, and it answers
   * undefined, if the user has a confirmed factor by now (`MfaService.throughLoginGate`). It
   * throws the sign-in's refusal if the account was disabled or deleted since it was read.
   */
  async openPastGate(uow: UnitOfWork, user: UserRecord, authentication: StrongAuthentication, meta: RequestMeta, held?: HeldProof): Promise<OpenedSession | undefined> {
    const session = this.newSession(user, authentication, meta, uow.now);
    if (await uow.repos.sessions.insert(session, { completesAttempt: false, unlessConfirmedFactor: true, ...heldConditions(held) })) {
      uow.afterCommit(() => this.pruneEndedOccasionally(uow.now));
      return this.opened(session, user);
    }
    await this.throwIfAccountChanged(uow.repos, user.id, held);
    return undefined;
  }

  /**
   * Opens the session of a completed first-factor sign-in that the MFA gate asked nothing of,
   * and commits it on its own with the sign-in's event and, for an attempt that held a lockout
   * slot, the attempt's completion (`FailedAttemptSlot`): one statement on PostgreSQL while no
   * webhook needs a read (`commitRecordedWrite`), else one transaction. Authenticated at the
   * moment it commits. Nothing is written, and it answers undefined, if the user has a
   * confirmed factor by then: the gate's answer no longer holds. Nothing is written either, and
   * it throws the sign-in's refusal, if the account was disabled or deleted since it was read, or
   * its password changed since the first factor's proof was made (`held`, `HeldProof`).
   */
  async openSignedIn(
    user: UserRecord,
    amr: string[],
    signedIn: EventInput,
    completesAttempt: boolean,
    meta: RequestMeta,
    held?: HeldProof,
  ): Promise<OpenedSession | undefined> {
    let session: SessionRecord | undefined;
    const written = await commitRecordedWrite(this.context, meta, signedIn, (repos, now, recording) => {
      session = this.newSession(user, { mfa: false, amr, authTime: now }, meta, now);
      return repos.sessions.insert(session, { completesAttempt, recording, unlessConfirmedFactor: true, ...heldConditions(held) });
    });
    if (written) {
      this.pruneEndedOccasionally(session!.createdAt);
      return this.opened(session!, user);
    }
    await this.throwIfAccountChanged(this.context.store.repos, user.id, held);
    return undefined;
  }

  /** After a refused session write: the sign-in's refusal if the account changed since it was read (`SignInRules.refusalSinceRead`). */
  private async throwIfAccountChanged(repos: Repositories, userId: string, held?: HeldProof): Promise<void> {
    const refusal = await this.signInRules.refusalSinceRead(repos, userId, held);
    if (refusal) throw refusal;
  }

  /**
   * Every sign-in writes a session, and no request deletes one: a day after its end nothing reads
   * it (its refresh tokens answer invalid_grant without it, its access tokens lasted at most a
   * day), so about once a minute a sign-in also deletes the sessions revoked a day ago and those
   * a day past their absolute lifetime (`sessionMaxAge`); one that lapsed unrefreshed goes then
   * too (docs/database.md). Not awaited: the sign-in answers without waiting for the delete.
   */
  private pruneEndedOccasionally(now: number): void {
    if (!this.endedPruning.due(now)) return;
    const endedBefore = now - ENDED_ROW_RETENTION_MS;
    this.context.store.repos.sessions
      .pruneEnded(endedBefore, endedBefore - this.context.config.tokens.sessionMaxAge * 1000)
      .catch((error: unknown) => this.context.logger.warn('identity-router: pruning ended sessions failed; a later sign-in tries again', { error: describeError(error) }));
  }

  private newSession(user: UserRecord, authentication: StrongAuthentication, meta: RequestMeta, now: number): SessionRecord {
    return {
      id: randomUUID(),
      userId: user.id,
      organizationId: null,
      mfa: authentication.mfa,
      amr: authentication.amr,
      authTime: authentication.authTime,
      ip: meta.ip,
      userAgent: meta.userAgent?.slice(0, USER_AGENT_MAX) ?? null,
      createdAt: now,
      lastUsedAt: now,
      expiresAt: this.slidingExpiry({ createdAt: now }, now),
      revokedAt: null,
      refreshGeneration: 0,
    };
  }

  private opened(session: SessionRecord, user: UserRecord): OpenedSession {
    return { session, user, refreshToken: issueRefreshToken(this.context.keys.refreshTokenMac, session.id, 0) };
  }

  /**
   * After commit: the tokens of an opened session. Its authority (a new session is in no
   * organization: the user's global grants) comes through the access cache, as a refresh's
   * does, and is as current as the database: every change to it invalidates the cache.
   */
  async signOpened(opened: OpenedSession): Promise<TokenResponse> {
    const authority = await this.policy.authorityIn(opened.user.id, opened.session.organizationId);
    return this.tokens(this.subjectOf(opened.session, opened.user, authority), opened.refreshToken);
  }

  /** After commit: an access token for claims resolved inside the transaction. */
  async sign(subject: AccessTokenSubject): Promise<AccessTokenResponse> {
    const { token } = await this.context.jwt.signAccessToken(subject);
    return { access_token: token, token_type: 'Bearer', expires_in: this.context.config.tokens.accessTtl };
  }

  /**
   * After commit: an access token for the claims, beside the session's refresh token. Added to
   * `sign`'s answer in place: a spread followed by more properties is slow on Node 20
   * (docs/performance.md).
   */
  private async tokens(subject: AccessTokenSubject, refreshToken: string): Promise<TokenResponse> {
    return Object.assign(await this.sign(subject), { refresh_token: refreshToken });
  }

  /** The claims of a new access token for a session, with roles and scope re-resolved from the database. */
  async accessSubjectFor(repos: Repositories, session: SessionRecord, user: UserRecord): Promise<AccessTokenSubject> {
    return this.subjectOf(session, user, await resolveAuthority(repos, this.catalog, user.id, session.organizationId));
  }

  private subjectOf(session: SessionRecord, user: UserRecord, authority: ResolvedAuthority): AccessTokenSubject {
    const organizationId = authority.member || authority.superadmin ? session.organizationId : null;
    return {
      sub: user.id,
      sid: session.id,
      org: organizationId,
      roles: authority.roles,
      scope: [...authority.permissions].sort(),
      email_verified: user.emailVerified,
      mfa: session.mfa,
      amr: session.amr,
      auth_time: Math.floor(session.authTime / 1000),
    };
  }

  /**
   * Rotation (docs/security.md): a refresh token names its session and generation under a MAC
   * (src/crypto/refresh-token.ts), and the refresh moves the session to the next generation in
   * one conditional update. Presenting an older generation again (a replay, or the loser of a
   * concurrent race) revokes the family. A token from before MACs is found by its keyed hash and
   * consumed, as it was; its session then moves on to MAC'd tokens.
   *
   * The session and user are read as every request gate reads them, through the access cache;
   * the conditional update decides whether the token's generation is still the session's. It
   * commits with the audit event and nothing else: as one statement on PostgreSQL while no
   * listener or webhook waits for events (`commitRecordedWrite`), else as one transaction. The
   * access token is signed after commit, so the write lock is never held while signing.
   * Nothing written is read back.
   */
  async refresh(refreshToken: string, meta: RequestMeta): Promise<TokenResponse> {
    const presented = isStoredRefreshToken(refreshToken) ? await this.presentedStored(refreshToken, meta) : await this.presentedGeneration(refreshToken, meta);
    const { session, user, storedId } = presented;
    if (!mayAuthenticate(user)) throw errors.invalidGrant();
    // Require SSO (docs/sso.md): sessions from before enforcement end at their next refresh.
    await this.signInRules.assertSessionAllowed(user, session.id, 401);

    const rotation = this.context.config.tokens.refreshRotation;
    const { generation } = presented;
    const next = rotation ? generation + 1 : generation;
    const expiresAt = (now: number) => (rotation ? this.slidingExpiry(session, now) : Math.min(Math.max(session.expiresAt, presented.expiresAt), this.absoluteExpiry(session)));
    const refreshed: EventInput = { type: 'auth.token_refreshed', userId: user.id, organizationId: session.organizationId, data: { session_id: session.id } };
    if (storedId === undefined) {
      const rotated = await commitRecordedWrite(this.context, meta, refreshed, (repos, now, recording) => repos.sessions.rotate(session.id, generation, next, now, expiresAt(now), recording));
      if (!rotated) await this.refusedRotation(session, generation, meta);
    } else {
      await runUnitOfWork(this.context, meta, async (uow) => {
        if (rotation && !(await uow.repos.refreshTokens.consume(storedId, uow.now))) {
          // Lost a race for this token (or it expired just now): a second use revokes the family.
          if (presented.expiresAt > uow.now) await this.recordReuse(uow, session);
          return uow.failAfterCommit(errors.invalidGrant());
        }
        // Revoked since it was read: nothing of this refresh may commit.
        if (!(await uow.repos.sessions.rotate(session.id, generation, next, uow.now, expiresAt(uow.now)))) throw errors.invalidGrant();
        await uow.emit(refreshed);
      });
    }
    // Live authority through the access cache: as current as the database, since every change to it invalidates the cache.
    const authority = await this.policy.authorityIn(user.id, session.organizationId);
    // With rotation off a stored token is returned as it came; a MAC'd one names the same generation again.
    const nextRefreshToken = storedId !== undefined && !rotation ? refreshToken : issueRefreshToken(this.context.keys.refreshTokenMac, session.id, next);
    return this.tokens(this.subjectOf(session, user, authority), nextRefreshToken);
  }

  /**
   * The update refused a MAC'd token's generation: another refresh moved the session past it
   * first (a second use of a generation revokes the family), the session was revoked since it
   * was read (nothing is left to revoke), or the database is behind the token (a restore lost
   * the refresh that issued it; not a replay). The database says which.
   */
  private async refusedRotation(session: SessionRecord, generation: number, meta: RequestMeta): Promise<never> {
    const current = await this.context.store.repos.sessions.findById(session.id);
    if (current && current.revokedAt === null && current.refreshGeneration > generation) await this.revokeForReuse(current, meta);
    throw errors.invalidGrant();
  }

  /**
   * A MAC'd token: its live session. A generation older than one the session has reached is a
   * replay. With rotation on, the session comes through the access cache: a kept entry may be
   * behind the database (a refresh does not invalidate it), so the token's generation is the one
   * the update asks for, and the update decides. With rotation off the refresh writes the
   * session's lifetime back as it finds it, so it finds the database's.
   */
  private async presentedGeneration(refreshToken: string, meta: RequestMeta): Promise<PresentedRefreshToken> {
    const named = readRefreshToken(this.context.keys.refreshTokenMac, refreshToken);
    if (!named) throw errors.invalidGrant();
    const found = this.context.config.tokens.refreshRotation
      ? await this.policy.liveSession(named.sessionId)
      : await this.context.store.repos.sessions.findLiveWithUser(named.sessionId, this.context.clock.now());
    if (!found) throw errors.invalidGrant();
    if (named.generation < found.session.refreshGeneration) await this.revokeForReuse(found.session, meta);
    return { session: found.session, user: found.user, generation: named.generation, storedId: undefined, expiresAt: found.session.expiresAt };
  }

  /** A token from before MACs, by its keyed hash: live, unused and unexpired. A used one is a replay. */
  private async presentedStored(refreshToken: string, meta: RequestMeta): Promise<PresentedRefreshToken> {
    const found = await this.context.store.repos.refreshTokens.findForRefresh(keyedHash(this.context.keys.tokenHash, refreshToken));
    if (!found || !isLiveSession(found.session, this.context.clock.now())) throw errors.invalidGrant();
    if (found.token.consumedAt !== null) await this.revokeForReuse(found.session, meta);
    if (found.token.expiresAt <= this.context.clock.now()) throw errors.invalidGrant();
    return { session: found.session, user: found.user, generation: found.session.refreshGeneration, storedId: found.token.id, expiresAt: found.token.expiresAt };
  }

  /** A replay: the family is revoked in its own transaction, and the refresh answers invalid_grant. */
  private async revokeForReuse(session: SessionRecord, meta: RequestMeta): Promise<never> {
    await runUnitOfWork(this.context, meta, async (uow) => {
      await this.recordReuse(uow, session);
      return uow.failAfterCommit(errors.invalidGrant());
    });
    throw errors.invalidGrant();
  }

  /** A session's refresh lifetime slides with each rotation but never past its absolute end (`tokens.sessionMaxAge`). */
  private slidingExpiry(session: Pick<SessionRecord, 'createdAt'>, now: number): number {
    return Math.min(now + this.context.config.tokens.refreshTtl * 1000, this.absoluteExpiry(session));
  }

  private absoluteExpiry(session: Pick<SessionRecord, 'createdAt'>): number {
    return session.createdAt + this.context.config.tokens.sessionMaxAge * 1000;
  }

  private async recordReuse(uow: UnitOfWork, session: SessionRecord): Promise<void> {
    // A family already revoked (by the other replay of a race) is not reported twice.
    if (!(await uow.repos.sessions.revoke(session.id, uow.now, 'refresh_reuse'))) return;
    await uow.emit({ type: 'auth.refresh_reuse_detected', userId: session.userId, organizationId: session.organizationId, data: { session_id: session.id } });
  }

  async logout(principal: Principal, meta: RequestMeta): Promise<void> {
    await runUnitOfWork(this.context, meta, async (uow) => {
      await uow.repos.sessions.revoke(principal.sessionId, uow.now, 'logout');
      uow.invalidates({ session: principal.sessionId });
    });
  }

  async logoutAll(principal: Principal, meta: RequestMeta): Promise<number> {
    return runUnitOfWork(this.context, meta, async (uow) => {
      const count = await uow.repos.sessions.revokeAllForUser(principal.userId, uow.now, 'logout_all');
      await uow.emit({ type: 'auth.sessions_revoked', actorId: principal.userId, userId: principal.userId, data: { count, reason: 'logout_all' } });
      return count;
    });
  }

  async list(principal: Principal, page: { limit: number; cursor?: string }): Promise<{ sessions: SessionView[]; nextCursor: string | null }> {
    const after = decodeCursor(page.cursor, ['integer', 'id']);
    const rows = await this.context.store.repos.sessions.listLiveForUser(principal.userId, this.context.clock.now(), {
      limit: page.limit + 1,
      ...(after ? { afterCreatedAt: after[0], afterId: after[1] } : {}),
    });
    const { items, nextCursor } = keysetPage(rows, page.limit, (session) => [session.createdAt, session.id]);
    return {
      sessions: items.map((session) => ({
        id: session.id,
        current: session.id === principal.sessionId,
        ip: session.ip,
        user_agent: session.userAgent,
        created_at: iso(session.createdAt),
        last_used_at: iso(session.lastUsedAt),
      })),
      nextCursor,
    };
  }

  async revokeOwned(principal: Principal, sessionId: string, meta: RequestMeta): Promise<void> {
    const revoked = await runUnitOfWork(this.context, meta, (uow) => {
      uow.invalidates({ session: sessionId });
      return uow.repos.sessions.revokeOwned(sessionId, principal.userId, uow.now, 'revoked_by_user');
    });
    if (!revoked) throw errors.notFound('Session');
  }

  /** Whether a token is genuine but its session has ended (revoked or expired): docs/openapi.yaml's `session_ended`. */
  async isEndedSession(token: string): Promise<boolean> {
    const claims = await this.context.jwt.verifyAccessToken(token);
    if (!claims) return false;
    const session = await this.context.store.repos.sessions.findById(claims.sid);
    if (!session || session.userId !== claims.sub) return false;
    return (await this.context.store.repos.sessions.findLive(session.id, this.context.clock.now())) === undefined;
  }

  /** Re-points the live session at another organization and mints a token scoped to it. */
  async switchOrganization(grant: AccessGrant, meta: RequestMeta): Promise<AccessTokenResponse> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    // Require SSO (docs/sso.md): a session from before enforcement ends at its next refresh. A
    // switch signs a fresh access token too, so it is no way to keep such a session alive.
    await this.signInRules.assertSessionAllowed(principal.user, principal.sessionId, 401);
    const subject = await runUnitOfWork(this.context, meta, async (uow) => {
      const session = await uow.repos.sessions.findLive(principal.sessionId, uow.now);
      if (!session) throw errors.sessionEnded();
      // Locked, as a member's removal and the organization's deletion lock it before they revoke
      // the sessions in it: one that comes meanwhile waits, and then revokes this one too.
      const organization = await uow.repos.organizations.lockActive(organizationId);
      if (!organization) throw errors.notFound('Organization');
      // Membership and the organization's MFA policy, as admitted, once more in this transaction.
      await grant.recheck(uow.repos);
      if (!(await uow.repos.sessions.setOrganization(session.id, organizationId))) throw errors.sessionEnded();
      const user = await uow.repos.users.findById(principal.userId);
      // The asking token's strong authentication, not the session's: a switch lifts no stale token past step-up.
      const subject = await this.accessSubjectFor(uow.repos, { ...session, organizationId, mfa: principal.mfa, authTime: principal.authTime }, user!);
      await uow.emit({
        type: 'auth.org_switched',
        actorId: principal.userId,
        userId: principal.userId,
        organizationId,
        data: { session_id: session.id, from_organization_id: session.organizationId },
      });
      return subject;
    });
    return this.sign(subject);
  }
}

/** What a sign-in's session is written against (`SessionRepository.insert`), whichever way it opens: all of its `HeldProof`. */
function heldConditions(held: HeldProof | undefined): { comparedPasswordHash?: string | null | undefined; unprovenAddress?: boolean | undefined } {
  return { comparedPasswordHash: held?.passwordHash, unprovenAddress: held?.unprovenAddress };
}
