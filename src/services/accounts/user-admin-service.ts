import { keyedHash } from '../../crypto/keyed-hash.js';
import { errors } from '../../errors.js';
import type { UserRecord } from '../../store/user-repository.js';
import { mailboxSpellings, normaliseDisplayName } from '../shared/identity-rules.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { userStatus } from './me-service.js';
import type { PermissionCatalog } from '../access/permission-catalog.js';
import type { AccessGrant } from '../access/access-policy.js';
import { deleteLinksOfDeletedUser } from './social-links.js';
import { revokeInvitesSentBy } from '../orgs/invite-service.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';

/** docs/security.md: the user body. */
export interface UserView {
  id: string;
  email: string;
  display_name: string | null;
  status: 'active' | 'disabled' | 'locked';
}

export interface UserProfileChanges {
  /** `null` (or an empty string) clears it. */
  displayName?: string | null | undefined;
  /** users.manage only (docs/security.md). */
  mfaEnforced?: boolean | undefined;
}

/** The reserved domain of tombstone addresses (RFC 2606 `.invalid` never resolves). */
export const TOMBSTONE_EMAIL_DOMAIN = 'deleted.invalid';


/** Changes made by the host's own code through `identity.service`: no request, no address. */
const HOST_CODE: RequestMeta = { ip: null, userAgent: null };

/** User administration and the account lifecycle (docs/security.md user status). */
export class UserAdminService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
  ) {}

  async read(userId: string): Promise<UserView> {
    const user = await this.context.store.repos.users.findById(userId);
    if (!user) throw errors.notFound('User');
    return this.view(user, this.context.clock.now());
  }

  async updateProfile(grant: AccessGrant, userId: string, changes: UserProfileChanges, meta: RequestMeta): Promise<UserView> {
    const { principal } = grant;
    const displayName = changes.displayName === undefined ? undefined : normaliseDisplayName(changes.displayName);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockLiveUser(uow, userId, grant);
      uow.invalidates({ user: user.id });
      if (displayName !== undefined) await uow.repos.users.setDisplayName(user.id, displayName, uow.now);
      if (changes.mfaEnforced !== undefined) await this.changeMfaEnforcement(uow, user.id, changes.mfaEnforced, principal.userId);
      return this.view((await uow.repos.users.findById(user.id))!, uow.now);
    });
  }

  // ---------------------------------------------------------------- privilege changes (identity.service)

  /**
   * Grants the global superadmin role (every permission in every organization). Idempotent;
   * the grant, like every privilege change, leaves an audit row and an event (`actor_id` null:
   * it is made by the host's code, never through HTTP).
   */
  async grantSuperadmin(userId: string): Promise<void> {
    await runUnitOfWork(this.context, HOST_CODE, async (uow) => {
      // Locked, as a deletion locks it: a grant never lands on an account deleted meanwhile.
      const user = await uow.repos.users.findByIdForUpdate(userId);
      if (!user || user.deletedAt !== null) throw errors.notFound('User');
      uow.invalidates({ user: userId });
      if (await uow.repos.roles.grantSuperadmin(userId, uow.now)) await uow.emit({ type: 'user.superadmin_granted', userId });
    });
  }

  /** Revokes the global superadmin role; idempotent (an event only when it was held). */
  async revokeSuperadmin(userId: string): Promise<void> {
    await runUnitOfWork(this.context, HOST_CODE, async (uow) => {
      uow.invalidates({ user: userId });
      if (!(await uow.repos.roles.revokeSuperadmin(userId))) return;
      // A session switched into an organization the user entered as a superadmin alone leaves it,
      // as a member's removal ends the sessions in the organization: its refreshes are no longer
      // that organization's events (its webhooks, its audit log), and its tokens already name none.
      await uow.repos.sessions.leaveOrganizationsNotMemberOf(userId);
      await uow.emit({ type: 'user.superadmin_revoked', userId });
    });
  }

  /** The per-user MFA enforcement flag (docs/security.md: `service.setMfaEnforced`). */
  async setMfaEnforced(userId: string, on: boolean): Promise<void> {
    await runUnitOfWork(this.context, HOST_CODE, async (uow) => {
      const user = await uow.repos.users.findByIdForUpdate(userId);
      // A tombstone changes no more, as grantSuperadmin and PATCH /users/{id} answer it.
      if (!user || user.deletedAt !== null) throw errors.notFound('User');
      uow.invalidates({ user: userId });
      await this.changeMfaEnforcement(uow, userId, on, null);
    });
  }

  /** The flag and its trace, wherever it is set (PATCH /users/{id} or the service). */
  private async changeMfaEnforcement(uow: UnitOfWork, userId: string, on: boolean, actorId: string | null): Promise<void> {
    if (await uow.repos.users.setMfaEnforced(userId, on, uow.now)) await uow.emit({ type: 'user.mfa_enforcement_changed', actorId, userId, data: { mfa_enforced: on } });
  }

  /** active (or locked) → disabled: every session ends and login answers account_disabled. */
  async disable(grant: AccessGrant, userId: string, meta: RequestMeta): Promise<UserView> {
    const { principal } = grant;
    // An administrator who locks themselves out leaves nobody to undo it.
    if (userId === principal.userId) throw errors.conflict('You cannot disable your own account.');
    return runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockLiveUser(uow, userId, grant);
      if (user.status !== 'disabled') {
        await uow.repos.users.setStatus(user.id, 'disabled', uow.now);
        const revoked = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'user_disabled');
        await uow.emit({ type: 'user.disabled', actorId: principal.userId, userId: user.id, data: { sessions_revoked: revoked } });
      }
      return this.view((await uow.repos.users.findById(user.id))!, uow.now);
    });
  }

  /** disabled or locked → active, with the lockout counters cleared; a tombstone stays one (409). */
  async enable(grant: AccessGrant, userId: string, meta: RequestMeta): Promise<UserView> {
    const { principal } = grant;
    return runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockUser(uow, userId, grant);
      if (user.deletedAt !== null) throw errors.conflict('A deleted account cannot be enabled.');
      const previousStatus = userStatus(user, uow.now);
      if (user.status !== 'active') await uow.repos.users.setStatus(user.id, 'active', uow.now);
      await uow.repos.users.clearFailedLogins(user.id);
      if (previousStatus !== 'active') {
        await uow.emit({ type: 'user.enabled', actorId: principal.userId, userId: user.id, data: { previous_status: previousStatus } });
      }
      return this.view((await uow.repos.users.findById(user.id))!, uow.now);
    });
  }

  /**
   * Any state → disabled tombstone. The row stays (audit events keep resolving to an id) but
   * nothing in it identifies the person: the address becomes a keyed hash at a reserved
   * domain, so the address itself is free to register again.
   */
  async deleteAccount(grant: AccessGrant, userId: string, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    await runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockForDeletion(uow, userId, grant);
      // Already a tombstone: nothing is left to remove.
      if (user.deletedAt !== null) return;
      const ownerless = await uow.repos.users.organizationsWhereLastActiveOwner(user.id);
      if (ownerless.length > 0) {
        throw errors.conflict('This account is the last active owner of an organization; transfer ownership first.');
      }
      const tombstoneEmail = this.tombstoneEmail(user.id);
      await uow.repos.users.anonymize(user.id, tombstoneEmail, uow.now);
      await uow.repos.users.deleteSecondFactorData(user.id);
      await uow.repos.oneTimeTokens.deleteAllForUser(user.id);
      await uow.repos.passwordlessChallenges.deleteAllForUser(user.id);
      await deleteLinksOfDeletedUser(uow, user.id, principal.userId);
      const revoked = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'user_deleted');
      // API keys go with the user (docs/api-keys.md); the row stays a tombstone, so the cascade would not fire.
      await uow.repos.apiKeys.deleteAllForUser(user.id);
      const endedMemberships = await uow.repos.users.endMemberships(user.id);
      // Every spelling of the mailbox (`mailboxSpellings`): an invitation to `ada@bücher.example` holds the address of `ada@xn--bcher-kva.example`.
      let invitesRevoked = 0;
      for (const spelling of mailboxSpellings(user.email)) invitesRevoked += await uow.repos.users.revokeAndAnonymizeInvitesTo(spelling, tombstoneEmail, uow.now);
      const sentInvitesRevoked = await revokeInvitesSentBy(uow, user.id);
      // Each organization's own audit trail learns that the member left.
      for (const membership of endedMemberships) {
        await uow.emit({
          type: 'member.removed',
          actorId: principal.userId,
          userId: user.id,
          organizationId: membership.organizationId,
          data: { reason: 'user_deleted', previous_status: membership.status },
        });
      }
      await uow.emit({
        type: 'user.deleted',
        actorId: principal.userId,
        userId: user.id,
        data: { self: principal.userId === user.id, sessions_revoked: revoked, memberships_ended: endedMemberships.length, invites_revoked: invitesRevoked, sent_invites_revoked: sentInvitesRevoked },
      });
      // Erasure, after the events above: where the person connected from goes with them (the
      // audit rows themselves stay).
      await uow.repos.sessions.eraseClientDetails(user.id);
      await uow.repos.audit.eraseIpOf(user.id);
    });
  }

  /**
   * The target row, locked, then the route's rule again under that lock (`grant.recheck`): a
   * superadmin role revoked, or the caller's session ended, since the request was admitted
   * changes no account (docs/security.md).
   */
  private async lockUser(uow: UnitOfWork, userId: string, grant: AccessGrant): Promise<UserRecord> {
    const user = await this.lockTargetAndCaller(uow, userId, grant);
    if (!user) throw errors.notFound('User');
    await grant.recheck(uow.repos);
    return user;
  }

  /**
   * The target's account and, when someone else acts on it, the caller's, in id order, before
   * the caller's session (`grant.recheck`). Revoking the caller's sessions (an administrator
   * disabling or deleting the caller at that moment) locks the caller's account first, so two
   * administrators acting on each other run one after the other, the second finding its own
   * session ended (401), instead of each holding its own session while waiting on the other's:
   * a deadlock, paid with deadlock_timeout, and a 500 when the rerun met the other again.
   */
  private async lockTargetAndCaller(uow: UnitOfWork, userId: string, grant: AccessGrant): Promise<UserRecord | undefined> {
    let target: UserRecord | undefined;
    for (const id of [...new Set([userId, grant.principal.userId])].sort()) {
      const locked = await uow.repos.users.findByIdForUpdate(id);
      if (id === userId) target = locked;
    }
    return target;
  }

  /**
   * `lockUser` for a deletion, in every decision's order (docs/database.md): the organizations
   * the account belongs to (their owners are counted under these locks), then the account (with
   * the caller's, `lockTargetAndCaller`), then the caller's session (`grant.recheck`). Taking the
   * account first would wait, holding it, on an organization whose holder waits for the account
   * or the session: a deadlock, paid with PostgreSQL's deadlock_timeout and a rerun.
   *
   * The memberships are read before the account is locked, so they are read again under that
   * lock. A membership made in between (an invitation accepted, an organization created) took
   * the account's key lock, so it committed before this lock was granted, and none can be made
   * while it is held: the second read is final. Its organization is locked then, out of order,
   * but before the owners are counted; that rare race is left to the deadlock retry.
   */
  private async lockForDeletion(uow: UnitOfWork, userId: string, grant: AccessGrant): Promise<UserRecord> {
    const locked = new Set<string>();
    const lockMemberOrganizations = async () => {
      const unlocked = (await uow.repos.users.memberOrganizationIds(userId)).filter((id) => !locked.has(id));
      await uow.repos.organizations.lockAll(unlocked);
      for (const id of unlocked) locked.add(id);
    };
    await lockMemberOrganizations();
    const user = await this.lockTargetAndCaller(uow, userId, grant);
    if (!user) throw errors.notFound('User');
    await lockMemberOrganizations();
    await grant.recheck(uow.repos);
    return user;
  }

  /** `lockUser`, and a tombstone cannot be changed any more (409). */
  private async lockLiveUser(uow: UnitOfWork, userId: string, grant: AccessGrant): Promise<UserRecord> {
    const user = await this.lockUser(uow, userId, grant);
    if (user.deletedAt !== null) throw errors.conflict('The account has been deleted.');
    return user;
  }

  private tombstoneEmail(userId: string): string {
    return `${keyedHash(this.context.keys.identifierHash, userId)}@${TOMBSTONE_EMAIL_DOMAIN}`;
  }

  private view(user: UserRecord, now: number): UserView {
    return { id: user.id, email: user.email, display_name: user.displayName, status: userStatus(user, now) };
  }
}
