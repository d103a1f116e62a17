import type { Clock } from '../../adapters/types.js';
import type { ApiKeyForUse } from '../../store/api-key-repository.js';
import type { MemberRow, OrganizationRecord, MembershipAuthorityRow } from '../../store/organization-repository.js';
import { isLiveSession, type SessionRecord } from '../../store/session-repository.js';
import type { Repositories } from '../../store/store.js';
import type { UserRecord } from '../../store/user-repository.js';
import { type AccessCache, dependsOnOrganization, dependsOnSession, dependsOnUser, type ReadStart } from '../shared/access-cache.js';
import { authorityFrom, resolveAuthority, type ResolvedAuthority } from './authority.js';
import { type Answer, decide, read, type Steps } from './decision-steps.js';
import type { PermissionCatalog } from './permission-catalog.js';

/**
 * What the access policy reads to decide; cached for request gates, straight from a
 * transaction's repositories otherwise. A cached read answers at once when its entry is kept.
 */
export interface GateReads {
  isSuperadmin(userId: string): Answer<boolean>;
  activeOrganization(organizationId: string): Answer<OrganizationRecord | undefined>;
  authority(catalog: PermissionCatalog, userId: string, organizationId: string | null, knownSuperadmin?: boolean): Answer<ResolvedAuthority>;
  belongsToMfaRequiringOrganization(userId: string): Answer<boolean>;
  hasConfirmedFactor(userId: string): Answer<boolean>;
}

/** The same reads without the cache: for decisions that guard a write in the transaction of `repos`. */
export function uncachedReads(repos: Repositories): GateReads {
  return {
    isSuperadmin: (userId) => repos.roles.isSuperadmin(userId),
    activeOrganization: (organizationId) => repos.organizations.findActive(organizationId),
    authority: (catalog, userId, organizationId, knownSuperadmin) => resolveAuthority(repos, catalog, userId, organizationId, knownSuperadmin),
    belongsToMfaRequiringOrganization: (userId) => repos.organizations.userBelongsToMfaRequiringOrganization(userId),
    hasConfirmedFactor: (userId) => repos.mfaFactors.hasConfirmed(userId),
  };
}

const sessionKey = (sessionId: string) => `session:${sessionId}`;
const superadminKey = (userId: string) => `superadmin:${userId}`;

/**
 * The reads that decide whether a request may proceed (authentication and authority), through
 * the access cache. Only the request gates use these: a service that decides inside a
 * transaction reads the database itself.
 */
export class AccessReads implements GateReads {
  constructor(
    private readonly repos: Repositories,
    private readonly cache: AccessCache,
    private readonly clock: Clock,
  ) {}

  /** A session that is neither revoked nor past its lifetime, with its user. */
  liveSession(sessionId: string): Answer<{ session: SessionRecord; user: UserRecord } | undefined> {
    return decide(this.liveSessionSteps(sessionId));
  }

  private *liveSessionSteps(sessionId: string): Steps<{ session: SessionRecord; user: UserRecord } | undefined> {
    const found = yield* read(
      this.cache.readNow(
        sessionKey(sessionId),
        () => this.repos.sessions.findLiveWithUser(sessionId, this.clock.now()),
        (value) => (value ? [dependsOnSession(sessionId), dependsOnUser(value.user.id)] : undefined),
      ),
    );
    // The clock moves on while an entry is kept: its lifetime is checked on every read, and a
    // refresh may have extended it since (refreshes do not invalidate), so the database decides.
    if (!found || isLiveSession(found.session, this.clock.now())) return found;
    return yield* read(this.repos.sessions.findLiveWithUser(sessionId, this.clock.now()));
  }

  /** The live session and its user as kept now, or undefined; nothing is loaded. */
  keptSession(sessionId: string): { session: SessionRecord; user: UserRecord } | undefined {
    return this.cache.peek(sessionKey(sessionId));
  }

  /**
   * An API key by its keyed digest, with its owner's gate facts (docs/api-keys.md). Revocation,
   * the owner's changes and the organization's emit events that drop the entry; expiry is
   * checked by the caller on every read. Unknown digests are not kept, so guessing fills nothing.
   */
  apiKeyForUse(digest: string): Answer<ApiKeyForUse | undefined> {
    return this.cache.readNow(
      `api_key:${digest}`,
      () => this.repos.apiKeys.findForUse(digest),
      (value) => (value ? [dependsOnUser(value.key.userId), dependsOnOrganization(value.key.organizationId)] : undefined),
    );
  }

  isSuperadmin(userId: string): Answer<boolean> {
    return this.cache.readNow(superadminKey(userId), () => this.repos.roles.isSuperadmin(userId), () => [dependsOnUser(userId)]);
  }

  /** Marks the start of a statement that reads a grant beside other work (`keepSuperadmin`). */
  startRead(): ReadStart {
    return this.cache.startRead();
  }

  /** The superadmin grant a statement begun at `start` read, kept as `isSuperadmin` keeps its own. */
  keepSuperadmin(userId: string, superadmin: boolean, start: ReadStart): void {
    this.cache.keepRead(superadminKey(userId), superadmin, start, [dependsOnUser(userId)]);
  }

  membershipAuthority(userId: string, organizationId: string): Answer<MembershipAuthorityRow | undefined> {
    return this.cache.readNow(
      `membership:${userId}:${organizationId}`,
      () => this.repos.roles.resolveMembershipAuthority(userId, organizationId),
      () => [dependsOnUser(userId), dependsOnOrganization(organizationId)],
    );
  }

  /**
   * What the user may do in an organization (`null`: none active), kept whole so a request
   * does not rebuild the permission set. It depends on the user and the organization, like
   * the parts it is made of; an entry older than their invalidations is never served.
   */
  authority(catalog: PermissionCatalog, userId: string, organizationId: string | null, knownSuperadmin?: boolean): Answer<ResolvedAuthority> {
    return decide(this.authoritySteps(catalog, userId, organizationId, knownSuperadmin));
  }

  private *authoritySteps(catalog: PermissionCatalog, userId: string, organizationId: string | null, knownSuperadmin: boolean | undefined): Steps<ResolvedAuthority> {
    const authority = yield* read(
      this.cache.readNow(
        `authority:${userId}:${organizationId ?? ''}`,
        async () => {
          const [superadmin, membership] = await Promise.all([this.isSuperadmin(userId), organizationId ? this.membershipAuthority(userId, organizationId) : undefined]);
          return authorityFrom(catalog, superadmin, membership);
        },
        () => (organizationId ? [dependsOnUser(userId), dependsOnOrganization(organizationId)] : [dependsOnUser(userId)]),
      ),
    );
    // The caller read the flag a moment ago and an invalidation fell in between: its reading wins.
    if (knownSuperadmin !== undefined && knownSuperadmin !== authority.superadmin) {
      return authorityFrom(catalog, knownSuperadmin, organizationId ? yield* read(this.membershipAuthority(userId, organizationId)) : undefined);
    }
    return authority;
  }

  activeOrganization(organizationId: string): Answer<OrganizationRecord | undefined> {
    return this.cache.readNow(`organization:${organizationId}`, () => this.repos.organizations.findActive(organizationId), () => [dependsOnOrganization(organizationId)]);
  }

  /** Whether an active membership puts the user under an organization's `require_mfa` (an organization change invalidates every entry). */
  belongsToMfaRequiringOrganization(userId: string): Answer<boolean> {
    return this.cache.readNow(`mfa-organization:${userId}`, () => this.repos.organizations.userBelongsToMfaRequiringOrganization(userId), () => [dependsOnUser(userId)]);
  }

  /** The user's active memberships of active organizations, with role slugs (GET /auth/me, GET /orgs). */
  activeMemberships(userId: string): Promise<Array<{ organization: OrganizationRecord; roleSlugs: string[] }>> {
    return this.cache.read(
      `memberships:${userId}`,
      () => this.repos.organizations.listActiveMembershipsOfUser(userId),
      (memberships) => [dependsOnUser(userId), ...memberships.map(({ organization }) => dependsOnOrganization(organization.id))],
    );
  }

  /**
   * The first page of an organization's members (GET /orgs/{orgId}/members without a cursor).
   * It changes only through events of the organization (joins, roles, status, invites) and of
   * its members' users (profile, deletion), so it depends on those. A page showing an invited
   * entry is not kept: the entry leaves the page when its invite expires, which no event marks.
   */
  firstMemberPage(organizationId: string, limit: number): Promise<MemberRow[]> {
    return this.cache.read(
      `member-page:${organizationId}:${limit}`,
      () => this.repos.memberships.listPage(organizationId, { limit, now: this.clock.now() }),
      (rows) => (rows.some((row) => row.status === 'invited') ? undefined : [dependsOnOrganization(organizationId), ...rows.map((row) => dependsOnUser(row.userId))]),
      (rows) => rows.length,
    );
  }

  recoveryCodesRemaining(userId: string): Promise<number> {
    return this.cache.read(`recovery-codes:${userId}`, () => this.repos.recoveryCodes.countUnused(userId), () => [dependsOnUser(userId)]);
  }

  hasConfirmedFactor(userId: string): Answer<boolean> {
    return this.cache.readNow(`confirmed-factor:${userId}`, () => this.repos.mfaFactors.hasConfirmed(userId), () => [dependsOnUser(userId)]);
  }
}
