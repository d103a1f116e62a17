import { errors } from '../../errors.js';
import type { MemberRow, MembershipRecord, RoleRecord } from '../../store/organization-repository.js';
import { type AccessGrant, isOwnerEquivalent, isOwnerRole, mayActOnOwner, organizationOf, type AccessPolicy } from '../access/access-policy.js';
import { revokeKeysOfMember } from '../api-keys/api-key-service.js';
import type { ResolvedAuthority } from '../access/authority.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import type { PermissionCatalog } from '../access/permission-catalog.js';
import { decodeCursor, keysetPage } from '../shared/pagination.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { revokeInvitesSentBy } from './invite-service.js';
import { mailboxSpellings } from '../shared/identity-rules.js';

/** docs/database.md. */
export interface MemberView {
  user_id: string;
  email: string | null;
  display_name: string | null;
  status: 'active' | 'invited' | 'suspended';
  roles: string[];
}

/** docs/database.md: invited and suspended members' e-mails only for holders of members.invite. */
export function memberView(member: MemberRow, viewer: ResolvedAuthority): MemberView {
  const showEmail = member.status === 'active' || viewer.permissions.has('members.invite');
  // An invited entry says only that an address was invited: its account's display name would tell
  // an inviter which addresses have accounts.
  const displayName = member.status === 'invited' ? null : member.displayName;
  return { user_id: member.userId, email: showEmail ? member.email : null, display_name: displayName, status: member.status, roles: member.roleSlugs };
}

interface MemberMutationTarget {
  actor: ResolvedAuthority;
  membership: MembershipRecord;
  roles: RoleRecord[];
  isOwner: boolean;
}

/** Members of an organization (docs/organizations.md) and the owner invariants. */
export class MemberService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
    private readonly policy: AccessPolicy,
  ) {}

  /** One page, keyset by user id; `nextCursor` goes to the X-Next-Cursor header. */
  async list(grant: AccessGrant, page: { limit: number; cursor?: string }): Promise<{ members: MemberView[]; nextCursor: string | null }> {
    const organizationId = organizationOf(grant);
    const repos = this.context.store.repos;
    const after = decodeCursor(page.cursor, ['id']);
    const viewer = grant.authority!;
    const rows = after
      ? await repos.memberships.listPage(organizationId, { limit: page.limit + 1, now: this.context.clock.now(), afterUserId: after[0] })
      : await this.context.access.firstMemberPage(organizationId, page.limit + 1);
    const { items, nextCursor } = keysetPage(rows, page.limit, (row) => [row.userId]);
    return { members: items.map((row) => memberView(row, viewer)), nextCursor };
  }

  /**
   * PATCH members/{userId}/roles: replaces the member's roles. Granting an owner-equivalent
   * role needs step-up (docs/organizations.md: ownership transfer), decided inside the transaction;
   * added roles must be within the actor's own permissions; the last active owner keeps
   * the owner role.
   */
  async changeRoles(grant: AccessGrant, userId: string, roleSlugs: string[], meta: RequestMeta): Promise<MemberView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const wantedSlugs = [...new Set(roleSlugs)];
    return runUnitOfWork(this.context, meta, async (uow) => {
      const target = await this.lockTarget(uow, grant, userId);
      if (target.membership.status === 'invited') throw errors.conflict('The member has not accepted the invitation yet; re-invite with the roles instead.');
      const wanted = await uow.repos.roles.findBySlugs(organizationId, wantedSlugs);
      const unknown = wantedSlugs.filter((slug) => !wanted.some((role) => role.slug === slug));
      if (unknown.length > 0) throw errors.validation(unknown.map((slug) => `"role_slugs" contains an unknown role "${slug}"`));
      const currentIds = new Set(target.roles.map((role) => role.id));
      const added = wanted.filter((role) => !currentIds.has(role.id));
      await this.policy.assertMayGrantRoles(uow.repos, principal, target.actor, added);
      // The roles the member already holds, exactly: nothing changes, so nothing is written or
      // emitted (docs/events.md), as a repeated status change does.
      if (added.length === 0 && wanted.length === currentIds.size) return this.view(uow, organizationId, userId, target.actor);
      if (target.isOwner && !wanted.some(isOwnerRole)) await assertNotLastOwner(uow, organizationId, target.membership, target.roles);
      await uow.repos.memberships.replaceRoles(target.membership.id, wanted.map((role) => role.id));
      await uow.emit({
        type: 'member.roles_changed',
        actorId: principal.userId,
        userId,
        organizationId,
        data: { from: target.roles.map((role) => role.slug).sort(), to: wanted.map((role) => role.slug).sort() },
      });
      return this.view(uow, organizationId, userId, target.actor);
    });
  }

  /** PATCH members/{userId}: suspend or reactivate (docs/organizations.md, member status). */
  async changeStatus(grant: AccessGrant, userId: string, status: 'active' | 'suspended', meta: RequestMeta): Promise<MemberView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const target = await this.lockTarget(uow, grant, userId);
      const from = target.membership.status;
      if (from === 'invited') throw errors.conflict('An invited member cannot be suspended or activated; revoke the invitation instead.');
      if (from !== status) {
        if (status === 'suspended') {
          if (target.isOwner) await assertNotLastOwner(uow, organizationId, target.membership, target.roles);
          await uow.repos.sessions.revokeAllForOrganization(organizationId, uow.now, 'member_suspended', userId);
        } else {
          // Reactivation hands the member's roles back. An owner-equivalent one comes back as it is
          // granted (its keys held, step-up); the others with no guard (SPEC 3, member status).
          await this.policy.assertMayGrantRoles(uow.repos, principal, target.actor, target.roles.filter(isOwnerEquivalent));
        }
        await uow.repos.memberships.setStatus(target.membership.id, status, uow.now);
        await uow.emit({ type: 'member.status_changed', actorId: principal.userId, userId, organizationId, data: { from, to: status } });
      }
      return this.view(uow, organizationId, userId, target.actor);
    });
  }

  /** DELETE members/{userId}: the membership row goes; an invited member's pending invite is revoked with it. */
  async remove(grant: AccessGrant, userId: string, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const target = await this.lockTarget(uow, grant, userId);
      if (target.isOwner) await assertNotLastOwner(uow, organizationId, target.membership, target.roles);
      await uow.repos.memberships.delete(target.membership.id);
      const user = await uow.repos.users.findById(userId);
      // Every spelling of the mailbox: an invitation to any of them is the member's to accept (`mailboxForm`).
      for (const spelling of user ? mailboxSpellings(user.email) : []) await uow.repos.invites.revokePendingForEmail(organizationId, spelling, uow.now);
      await uow.repos.sessions.revokeAllForOrganization(organizationId, uow.now, 'member_removed', userId);
      await revokeKeysOfMember(uow, organizationId, userId, principal.userId, 'member_removed');
      const sentInvitesRevoked = await revokeInvitesSentBy(uow, userId, organizationId);
      await uow.emit({
        type: 'member.removed',
        actorId: principal.userId,
        userId,
        organizationId,
        data: { from: target.membership.status, roles: target.roles.map((role) => role.slug).sort(), sent_invites_revoked: sentInvitesRevoked },
      });
    });
  }

  /**
   * Locks the organization row first, so owner counts read afterwards in this transaction
   * cannot be invalidated by a concurrent demotion (two owners demoting each other), then
   * re-resolves the actor's authority from the database under that lock.
   */
  private async lockTarget(uow: UnitOfWork, grant: AccessGrant, userId: string): Promise<MemberMutationTarget> {
    const organizationId = organizationOf(grant);
    const organization = await uow.repos.organizations.lockActive(organizationId);
    if (!organization) throw errors.notFound('Organization');
    const actor = await grant.recheck(uow.repos);
    const membership = await uow.repos.memberships.find(organizationId, userId);
    if (!membership) throw errors.notFound('Member');
    const roles = await uow.repos.memberships.rolesOf(membership.id);
    const isOwner = roles.some(isOwnerRole);
    if (isOwner && !mayActOnOwner(actor)) throw errors.forbidden('Only an owner can change, suspend or remove an owner.');
    return { actor, membership, roles, isOwner };
  }

  private async view(uow: UnitOfWork, organizationId: string, userId: string, viewer: ResolvedAuthority): Promise<MemberView> {
    const member = await uow.repos.memberships.findMember(organizationId, userId);
    if (!member) throw errors.notFound('Member');
    return memberView(member, viewer);
  }
}

/**
 * Last-owner protection (docs/organizations.md invariant 3), even for a superadmin: an active
 * member loses the owner role only while another active owner stays. `roles` are the member's
 * now. The caller holds the organization's row, as every owner change does before counting.
 */
export async function assertNotLastOwner(
  uow: UnitOfWork,
  organizationId: string,
  membership: Pick<MembershipRecord, 'status'>,
  roles: RoleRecord[],
  refusal = 'The last active owner cannot be demoted, suspended or removed.',
): Promise<void> {
  if (membership.status !== 'active') return;
  const ownerRole = roles.find(isOwnerRole);
  if (!ownerRole) return;
  if ((await uow.repos.memberships.countActiveHolders(organizationId, ownerRole.id)) <= 1) throw errors.conflict(refusal);
}
