import { randomUUID } from 'node:crypto';
import { keyedHash, randomToken } from '../../crypto/keyed-hash.js';
import { errors } from '../../errors.js';
import { isUniqueViolation } from '../../database-errors.js';
import type { InviteRecord } from '../../store/organization-repository.js';
import { type AccessGrant, isOwnerRole, organizationOf, type AccessPolicy } from '../access/access-policy.js';
import { assertNotLastOwner } from './member-service.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { mailboxForm, mailboxSpellings, normaliseEmail } from '../shared/identity-rules.js';
import type { PermissionCatalog } from '../access/permission-catalog.js';
import type { Principal } from '../access/principal.js';
import { decodeCursor, keysetPage } from '../shared/pagination.js';
import type { SignInRules } from '../access/sign-in-rules.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { iso } from '../shared/iso-time.js';
import { emailBudgetForm, spendSendBudget } from '../limits/send-budget.js';
import { assertUnderQuota } from '../limits/quotas.js';
import { ENDED_ROW_RETENTION_MS } from '../shared/occasional.js';

export interface InviteView {
  id: string;
  email: string;
  role_slugs: string[];
  expires_at: string;
}

export interface PendingInviteView extends InviteView {
  created_at: string;
  invited_by: string | null;
}

function pendingInviteView(invite: InviteRecord): PendingInviteView {
  return { id: invite.id, email: invite.email, role_slugs: invite.roleSlugs, expires_at: iso(invite.expiresAt), created_at: iso(invite.createdAt), invited_by: invite.invitedBy };
}

/**
 * E-mail invitations (docs/database.md and docs/organizations.md). The token is 256 random bits, stored only as a
 * keyed hash and handed only to the mailer after commit. States: pending, accepted,
 * revoked, expired.
 *
 * An invite to an address that already has an account also creates an `invited`
 * membership row (docs/organizations.md: the member list shows it, addressable by user id); the row
 * turns active on acceptance and is deleted when the invite is revoked.
 */
export class InviteService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
    private readonly policy: AccessPolicy,
    private readonly signInRules: SignInRules,
  ) {}

  /** POST /orgs/{id}/invites. Re-inviting a pending address rotates its token and extends the expiry. */
  async create(grant: AccessGrant, input: { email: string; roleSlugs: string[] }, meta: RequestMeta): Promise<InviteView> {
    const email = normaliseEmail(input.email);
    const roleSlugs = [...new Set(input.roleSlugs)];
    try {
      return await this.createOnce(grant, email, roleSlugs, meta);
    } catch (error) {
      // Two invites to one address at once: the loser of the pending_email slot retries as a rotation.
      if (!isUniqueViolation(error)) throw error;
      return this.createOnce(grant, email, roleSlugs, meta);
    }
  }

  private async createOnce(grant: AccessGrant, email: string, roleSlugs: string[], meta: RequestMeta): Promise<InviteView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const token = randomToken();
    const tokenHash = keyedHash(this.context.keys.tokenHash, token);
    const result = await runUnitOfWork(this.context, meta, async (uow) => {
      // Locked first, as every member and role change locks it: an accept, a revoke, a role's
      // deletion or the organization's own cannot commit between the reads below and the writes.
      const organization = await uow.repos.organizations.lockActive(organizationId);
      if (!organization) throw errors.notFound('Organization');
      const actor = await grant.recheck(uow.repos);
      const roles = await uow.repos.roles.findBySlugs(organizationId, roleSlugs);
      const unknown = roleSlugs.filter((slug) => !roles.some((role) => role.slug === slug));
      if (unknown.length > 0) throw errors.validation(unknown.map((slug) => `"role_slugs" contains an unknown role "${slug}"`));
      // Inviting with an owner-equivalent role is an ownership transfer (docs/organizations.md): step-up, like PATCH roles.
      await this.policy.assertMayGrantRoles(uow.repos, principal, actor, roles);

      // The invitee's account locked after the organization, as its deletion takes them, and read
      // again under the lock: a deletion that committed meanwhile has freed the address (no
      // account, no `invited` row), and one that comes later waits, then ends the row and revokes
      // the invitation with the rest.
      const found = await accountOfMailbox(uow, email);
      const locked = found && (await uow.repos.users.findByIdForUpdate(found.id));
      const invitee = locked?.email === found?.email ? locked : undefined;
      const membership = invitee ? await uow.repos.memberships.find(organizationId, invitee.id) : undefined;
      if (membership?.status === 'active') throw errors.conflict('That address already belongs to an active member.');
      if (membership?.status === 'suspended') {
        throw errors.invalidState('That address belongs to a suspended member; reactivate the member instead of inviting.');
      }

      await this.spendSendBudget(uow, organizationId, email);
      // Invitations that ended stayed for ever (invite, revoke, again, under the send budget):
      // the organization's that ended a day ago go with its next one (docs/organizations.md).
      await uow.repos.invites.pruneEndedInOrganization(organizationId, uow.now - ENDED_ROW_RETENTION_MS);
      const expiresAt = uow.now + this.context.config.tokens.inviteTtl * 1000;
      const existing = await uow.repos.invites.findPendingForEmail(organizationId, email);
      // A re-invite of a live invitation rotates its own slot; a new or expired one takes one.
      // Counted under the organization's lock above, so invitations at once cannot pass the cap.
      if (!existing || existing.expiresAt <= uow.now) {
        assertUnderQuota('pendingInvitesPerOrganization', await uow.repos.invites.countPendingInOrganization(organizationId, uow.now));
      }
      let inviteId: string;
      let createdAt: number;
      if (existing && (await uow.repos.invites.rotate(existing.id, { tokenHash, roleSlugs, invitedBy: principal.userId, now: uow.now, expiresAt }))) {
        inviteId = existing.id;
        createdAt = existing.createdAt;
      } else {
        inviteId = randomUUID();
        createdAt = uow.now;
        await uow.repos.invites.insert({ id: inviteId, organizationId, email, roleSlugs, tokenHash, invitedBy: principal.userId, now: uow.now, expiresAt });
      }
      if (invitee) {
        let membershipId = membership?.id;
        if (!membershipId) {
          membershipId = randomUUID();
          await uow.repos.memberships.insert({ id: membershipId, organizationId, userId: invitee.id, status: 'invited', now: uow.now });
        }
        // The invited row shows the roles the member will get on acceptance.
        await uow.repos.memberships.replaceRoles(membershipId, roles.map((role) => role.id));
      }
      await uow.emit({
        type: 'member.invited',
        actorId: principal.userId,
        userId: invitee?.id ?? null,
        organizationId,
        // Event data never holds an address (docs/events.md): audit rows outlive the account.
        data: { invite_id: inviteId, role_slugs: roleSlugs, reinvite: existing !== undefined },
      });
      const acceptInvite = this.context.config.links.acceptInvite;
      uow.afterCommit(() =>
        this.context.mailer.send({
          to: email,
          template: 'invite',
          context: {
            app_name: this.context.config.appName,
            token,
            ...(acceptInvite ? { url: acceptInvite.replaceAll('{token}', encodeURIComponent(token)) } : {}),
            organization_name: organization.name,
            inviter_email: principal.user.email,
            expires_at: iso(expiresAt),
          },
        }),
      );
      return { id: inviteId, email, role_slugs: roleSlugs, expires_at: iso(expiresAt), createdAt };
    });
    const { createdAt: _createdAt, ...view } = result;
    return view;
  }

  /**
   * Invite mail is budgeted per organization and per address (`invites.sendBudget`), so an
   * inviter can neither mail-bomb an address nor probe many addresses. Over either budget:
   * 429 rate_limited. Bucket names are keyed hashes, so no address sits in the table.
   */
  private async spendSendBudget(uow: UnitOfWork, organizationId: string, email: string): Promise<void> {
    const { perOrganization, perAddress } = this.context.config.invites.sendBudget;
    await spendSendBudget(uow, this.context, [
      { name: `invite-send:organization:${organizationId}`, budget: perOrganization },
      { name: `invite-send:address:${emailBudgetForm(email)}`, budget: perAddress },
    ]);
  }

  /** GET /orgs/{id}/invites: pending and unexpired only, keyset by id. */
  async listPending(organizationId: string, page: { limit: number; cursor?: string }): Promise<{ invites: PendingInviteView[]; nextCursor: string | null }> {
    const after = decodeCursor(page.cursor, ['id']);
    const rows = await this.context.store.repos.invites.listPending(organizationId, { limit: page.limit + 1, now: this.context.clock.now(), ...(after ? { afterId: after[0] } : {}) });
    const { items, nextCursor } = keysetPage(rows, page.limit, (invite) => [invite.id]);
    return { invites: items.map(pendingInviteView), nextCursor };
  }

  /** DELETE /orgs/{id}/invites/{inviteId}: 404 unless it is pending in this organization. */
  async revoke(grant: AccessGrant, inviteId: string, meta: RequestMeta): Promise<void> {
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      // The organization first (`createOnce`'s order): a re-invite in progress keeps the `invited` row it read.
      if (!(await uow.repos.organizations.lockActive(organizationId))) throw errors.notFound('Organization');
      await grant.recheck(uow.repos);
      const invite = await uow.repos.invites.findInOrganization(organizationId, inviteId);
      if (!invite || !(await uow.repos.invites.revoke(organizationId, inviteId, uow.now))) throw errors.notFound('Invite');
      const invitee = await accountOfMailbox(uow, invite.email);
      if (invitee) await uow.repos.memberships.deleteInvited(organizationId, invitee.id);
    });
  }

  /**
   * POST /auth/invites/accept. The e-mail must be the caller's (403, checked before the
   * token is spent so a wrong account cannot burn it); the token is consumed by one
   * conditional update, so concurrent accepts yield one membership.
   */
  async accept(principal: Principal, token: string, meta: RequestMeta): Promise<{ organization_id: string }> {
    const tokenHash = keyedHash(this.context.keys.tokenHash, token);
    // Require SSO (docs/sso.md): only a session opened through the enforcing connection joins; the invite stays pending.
    await this.signInRules.assertSessionAllowed(principal.user, principal.sessionId, 403);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const refused = () => uow.failAfterCommit(errors.invalidToken(400));
      const invite = await uow.repos.invites.findByTokenHash(tokenHash);
      if (!invite) return refused();
      // Pre-hijack: an account nobody has proven to own the address of cannot join.
      if (!principal.user.emailVerified) throw errors.emailUnverified('Verify your e-mail address before accepting an invitation.');
      // One mailbox, any spelling of its domain (`mailboxForm`): `ada@bücher.example` invited, `ada@xn--bcher-kva.example` registered.
      if (mailboxForm(invite.email) !== mailboxForm(principal.user.email)) throw errors.forbidden('This invitation was sent to another e-mail address.');
      // The organization before the invite and the membership, as invite creation and member changes lock them:
      // a re-invite or a role's deletion either commits before this point or waits for the acceptance.
      if (!(await uow.repos.organizations.lockActive(invite.organizationId))) return refused();
      if (invite.status === 'pending' && invite.expiresAt <= uow.now) {
        // A re-invite since the lookup extended the invite: its `invited` row stays.
        if (await uow.repos.invites.markExpired(invite.id, uow.now)) await uow.repos.memberships.deleteInvited(invite.organizationId, principal.userId);
        return refused();
      }
      if (!(await uow.repos.invites.consume(invite.id, tokenHash, uow.now))) return refused();

      const membership = await uow.repos.memberships.find(invite.organizationId, principal.userId);
      let membershipId: string;
      if (!membership) {
        membershipId = randomUUID();
        await uow.repos.memberships.insert({ id: membershipId, organizationId: invite.organizationId, userId: principal.userId, status: 'active', now: uow.now });
      } else if (membership.status === 'suspended') {
        throw errors.conflict('Your membership of this organization is suspended.');
      } else {
        membershipId = membership.id;
        if (membership.status !== 'active') await uow.repos.memberships.setStatus(membershipId, 'active', uow.now);
      }
      // Exactly the invited roles (a role deleted since the invitation is simply gone).
      const roles = await uow.repos.roles.findBySlugs(invite.organizationId, invite.roleSlugs);
      // Joined another way since the invite (single sign-on JIT) and made an owner meanwhile: the
      // invited roles replace theirs, but never those of the last active owner (invariant 3).
      const held = membership?.status === 'active' ? await uow.repos.memberships.rolesOf(membership.id) : undefined;
      if (membership && held && !roles.some(isOwnerRole)) {
        await assertNotLastOwner(uow, invite.organizationId, membership, held, 'You are the last active owner; the invited roles would leave the organization without one.');
      }
      await uow.repos.memberships.replaceRoles(membershipId, roles.map((role) => role.id));
      // The session's row last: the membership's insert took its keys' locks (organization, account) first, as revocations do.
      await this.policy.assertSessionLive(uow.repos, principal);
      await uow.emit({
        type: 'member.joined',
        actorId: principal.userId,
        userId: principal.userId,
        organizationId: invite.organizationId,
        // An active member's roles are replaced, not granted: the audit trail keeps what they were.
        data: { invite_id: invite.id, role_slugs: roles.map((role) => role.slug).sort(), ...(held ? { previous_role_slugs: held.map((role) => role.slug).sort() } : {}) },
      });
      return { organization_id: invite.organizationId };
    });
  }
}

/**
 * The account an invitation's address reaches: under the address as typed, else under another
 * spelling of its domain, since acceptance compares mailboxes (`mailboxForm`); one indexed read
 * (`UserRepository.findByEmail` with the mailbox's spellings).
 */
function accountOfMailbox(uow: UnitOfWork, email: string) {
  return uow.repos.users.findByEmail(email, mailboxSpellings(email));
}

/**
 * Invites a user sent stop being acceptable, with the `invited` member rows they made: in one
 * organization when the user is removed from it, in every one when the account is deleted. A
 * sender who is gone can no longer answer for who comes in (docs/organizations.md); a demotion
 * leaves them, as the organization's. The caller holds the organization's row (or the account's).
 */
export async function revokeInvitesSentBy(uow: UnitOfWork, userId: string, organizationId?: string): Promise<number> {
  let revoked = 0;
  for (const invite of await uow.repos.invites.listPendingSentBy(userId, organizationId)) {
    if (!(await uow.repos.invites.revoke(invite.organizationId, invite.id, uow.now))) continue;
    revoked += 1;
    const invitee = await accountOfMailbox(uow, invite.email);
    if (invitee) await uow.repos.memberships.deleteInvited(invite.organizationId, invitee.id);
  }
  return revoked;
}
