import type { Clock } from '../adapters/types.js';
import type { OrganizationRecord, MembershipAuthorityRow } from '../store/organization-repository.js';
import type { SessionRecord } from '../store/session-repository.js';
import type { Repositories } from '../store/store.js';
import type { UserRecord } from '../store/user-repository.js';
import { type AccessCache, dependsOnOrganization, dependsOnSession, dependsOnUser } from './access-cache.js';

/**
 * The reads that decide whether a request may proceed (authentication and authority), through
 * the access cache. Only the request gates use these: a service that decides inside a
 * transaction reads the database itself.
 */
export class AccessReads {
  constructor(
    private readonly repos: Repositories,
    private readonly cache: AccessCache,
    private readonly clock: Clock,
  ) {}

  /** A session that is neither revoked nor past its lifetime, with its user. */
  async liveSession(sessionId: string): Promise<{ session: SessionRecord; user: UserRecord } | undefined> {
    const found = await this.cache.read(
      `session:${sessionId}`,
      () => this.repos.sessions.findLiveWithUser(sessionId, this.clock.now()),
      (value) => (value ? [dependsOnSession(sessionId), dependsOnUser(value.user.id)] : undefined),
    );
    // The clock moves on while an entry is kept: its lifetime is checked on every read.
    return found && found.session.expiresAt > this.clock.now() ? found : undefined;
  }

  isSuperadmin(userId: string): Promise<boolean> {
    return this.cache.read(`superadmin:${userId}`, () => this.repos.roles.isSuperadmin(userId), () => [dependsOnUser(userId)]);
  }

  membershipAuthority(userId: string, organizationId: string): Promise<MembershipAuthorityRow | undefined> {
    return this.cache.read(
      `membership:${userId}:${organizationId}`,
      () => this.repos.roles.resolveMembershipAuthority(userId, organizationId),
      () => [dependsOnUser(userId), dependsOnOrganization(organizationId)],
    );
  }

  activeOrganization(organizationId: string): Promise<OrganizationRecord | undefined> {
    return this.cache.read(`organization:${organizationId}`, () => this.repos.organizations.findActive(organizationId), () => [dependsOnOrganization(organizationId)]);
  }

  /** Whether an active membership puts the user under an organization's `require_mfa` (an organization change invalidates every entry). */
  belongsToMfaRequiringOrganization(userId: string): Promise<boolean> {
    return this.cache.read(`mfa-organization:${userId}`, () => this.repos.organizations.userBelongsToMfaRequiringOrganization(userId), () => [dependsOnUser(userId)]);
  }

  hasConfirmedFactor(userId: string): Promise<boolean> {
    return this.cache.read(`confirmed-factor:${userId}`, () => this.repos.mfaFactors.hasConfirmed(userId), () => [dependsOnUser(userId)]);
  }
}
