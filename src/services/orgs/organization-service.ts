import { randomUUID } from 'node:crypto';
import type { PermissionDefinition } from '../../config/types.js';
import { errors } from '../../errors.js';
import { isUniqueViolation } from '../../database-errors.js';
import type { OrganizationRecord } from '../../store/organization-repository.js';
import { type AccessGrant, type AccessPolicy, organizationOf } from '../access/access-policy.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { OWNER_ROLE_SLUG, SYSTEM_ROLE_SLUGS, type PermissionCatalog } from '../access/permission-catalog.js';
import type { Principal } from '../access/principal.js';
import type { IdentityEvent } from '../../events.js';
import { decodeCursor, keysetPage } from '../shared/pagination.js';
import { eventFromAuditRecord, runUnitOfWork } from '../shared/unit-of-work.js';
import { deleteWebhooksOfOrganization } from '../webhooks/webhook-service.js';
import { assertUnderQuota } from '../limits/quotas.js';

export interface OrganizationView {
  id: string;
  name: string;
  slug: string;
  status: 'active' | 'suspended';
  settings: { require_mfa: boolean };
}

const SLUG_MAX = 160;
/** Attempts at a derived slug before giving up (each retry follows a concurrent insert of the same slug). */
const DERIVED_SLUG_ATTEMPTS = 5;

export function organizationView(organization: OrganizationRecord): OrganizationView {
  return {
    id: organization.id,
    name: organization.name,
    slug: organization.slug,
    status: organization.status,
    settings: { require_mfa: organization.requireMfa },
  };
}

/** `Acme Corp.` → `acme-corp`; an empty result (only symbols) becomes `org`. */
export function slugFromName(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, SLUG_MAX - 8)
    .replace(/-+$/g, '');
  return slug || 'org';
}

/** The first of base, base-2, base-3 ... not in `taken`. */
function firstFreeSlug(base: string, taken: ReadonlySet<string>): string {
  if (!taken.has(base)) return base;
  for (let n = 2; ; n += 1) {
    const candidate = `${base}-${n}`;
    if (!taken.has(candidate)) return candidate;
  }
}

/** Organizations (docs/database.md and docs/organizations.md); the authority chain of `/orgs/{id}` routes is the access policy's. */
export class OrganizationService {
  constructor(
    private readonly context: ServiceContext,
    private readonly catalog: PermissionCatalog,
    private readonly policy: AccessPolicy,
  ) {}

  /** GET /permissions: the core catalog plus the host's keys. */
  permissions(): PermissionDefinition[] {
    return this.catalog.entries.map(({ key, description }) => ({ key, description }));
  }

  /**
   * POST /orgs: the system templates are cloned into the new organization and the caller
   * becomes its sole owner. An explicit slug that is taken is a 409; a derived one moves
   * on to `-2`, `-3`, ... (retrying when a concurrent creation took the same candidate).
   */
  async create(principal: Principal, input: { name: string; slug?: string }, meta: RequestMeta): Promise<{ id: string; name: string; slug: string; role: 'owner' }> {
    if (!principal.user.emailVerified) throw errors.emailUnverified('Verify your e-mail address before creating an organization.');
    const explicitSlug = input.slug;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runUnitOfWork(this.context, meta, async (uow) => {
          // The account's row first (the new organization's own row is nobody else's yet): creations
          // at once by one user count one after the other, so none passes the cap.
          await uow.repos.users.findByIdForUpdate(principal.userId);
          assertUnderQuota('organizationsOwnedPerUser', await uow.repos.memberships.countActiveOwnedBy(principal.userId, OWNER_ROLE_SLUG));
          let slug: string;
          if (explicitSlug !== undefined) {
            if (await uow.repos.organizations.slugTaken(explicitSlug)) throw errors.conflict('That slug is already taken.');
            slug = explicitSlug;
          } else {
            const base = slugFromName(input.name);
            slug = firstFreeSlug(base, new Set(await uow.repos.organizations.slugsLike(base)));
          }
          const organizationId = randomUUID();
          await uow.repos.organizations.insert({ id: organizationId, name: input.name, slug, now: uow.now });
          // The host keys come from the database's catalog, which start-up synchronises under
          // the exclusive lock: an instance still on an older configuration clones the same roles.
          await uow.repos.hostPermissions.lock('shared');
          const hostKeys = await uow.repos.hostPermissions.keys();
          const roles = SYSTEM_ROLE_SLUGS.map((roleSlug) => {
            const template = this.catalog.templates[roleSlug];
            const permissionKeys = this.catalog.templateKeys(roleSlug, hostKeys);
            return { id: randomUUID(), organizationId, slug: roleSlug, name: template.name, description: template.description, isSystem: true, permissionKeys, now: uow.now };
          });
          await uow.repos.roles.insertMany(roles);
          const membershipId = randomUUID();
          await uow.repos.memberships.insert({ id: membershipId, organizationId, userId: principal.userId, status: 'active', now: uow.now });
          await uow.repos.memberships.replaceRoles(membershipId, [roles.find((role) => role.slug === OWNER_ROLE_SLUG)!.id]);
          // The session's row last: the membership's insert took the account's key lock first, as revocations do.
          await this.policy.assertSessionLive(uow.repos, principal);
          await uow.emit({ type: 'org.created', actorId: principal.userId, userId: principal.userId, organizationId, data: { name: input.name, slug } });
          return { id: organizationId, name: input.name, slug, role: 'owner' as const };
        });
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
        if (explicitSlug !== undefined) throw errors.conflict('That slug is already taken.');
        if (attempt >= DERIVED_SLUG_ATTEMPTS) throw errors.conflict('Could not derive a free slug; pass one explicitly.');
      }
    }
  }

  /** GET /orgs: active organizations where the caller is an active member. */
  async listForUser(principal: Principal): Promise<Array<{ id: string; name: string; slug: string }>> {
    const memberships = await this.context.access.activeMemberships(principal.userId);
    return memberships.map(({ organization }) => ({ id: organization.id, name: organization.name, slug: organization.slug }));
  }

  async get(organizationId: string): Promise<OrganizationView> {
    const organization = await this.context.store.repos.organizations.findActive(organizationId);
    if (!organization) throw errors.notFound('Organization');
    return organizationView(organization);
  }

  async update(grant: AccessGrant, changes: { name?: string; requireMfa?: boolean }, meta: RequestMeta): Promise<OrganizationView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const organization = await uow.repos.organizations.lockActive(organizationId);
      if (!organization) throw errors.notFound('Organization');
      await grant.recheck(uow.repos);
      // Only a value that differs is a change: `settings: {}`, or the values already there, write
      // and emit nothing (docs/events.md), as a repeated disable or status change does.
      const name = changes.name !== undefined && changes.name !== organization.name ? changes.name : undefined;
      const requireMfa = changes.requireMfa !== undefined && changes.requireMfa !== organization.requireMfa ? changes.requireMfa : undefined;
      const changed: Record<string, unknown> = {};
      if (name !== undefined) changed.name = name;
      if (requireMfa !== undefined) changed.require_mfa = requireMfa;
      if (Object.keys(changed).length > 0) {
        await uow.repos.organizations.update(organizationId, { name, requireMfa }, uow.now);
        await uow.emit({ type: 'org.updated', actorId: principal.userId, organizationId, data: { changes: changed } });
      }
      return organizationView({ ...organization, ...(changes.name !== undefined ? { name: changes.name } : {}), ...(changes.requireMfa !== undefined ? { requireMfa: changes.requireMfa } : {}) });
    });
  }

  /**
   * Soft delete (docs/organizations.md): the organization reads as 404 from now on, so every member's
   * authority there ends at the next resolution; sessions scoped to it are revoked and
   * pending invites die.
   */
  async delete(grant: AccessGrant, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const organization = await uow.repos.organizations.lockActive(organizationId);
      if (!organization) throw errors.notFound('Organization');
      await grant.recheck(uow.repos);
      if (!(await uow.repos.organizations.suspend(organizationId, uow.now))) throw errors.notFound('Organization');
      const sessionsRevoked = await uow.repos.sessions.revokeAllForOrganization(organizationId, uow.now, 'org_deleted');
      const invitesRevoked = await uow.repos.invites.revokeAllPending(organizationId, uow.now);
      await uow.repos.apiKeys.revokeAllForOrganization(organizationId, uow.now, 'org_deleted');
      await deleteWebhooksOfOrganization(uow, organizationId);
      // docs/sso.md: deleting the organization releases its domains and removes its connection.
      await uow.repos.orgDomains.deleteAllOfOrganization(organizationId);
      await uow.repos.ssoConnections.delete(organizationId);
      await uow.emit({ type: 'org.deleted', actorId: principal.userId, organizationId, data: { sessions_revoked: sessionsRevoked, invites_revoked: invitesRevoked } });
    });
  }

  /** GET /orgs/{id}/audit-log (docs/organizations.md): newest first, keyset on the audit sequence. */
  async auditLog(organizationId: string, page: { limit: number; cursor?: string }): Promise<{ events: IdentityEvent[]; next_cursor: string | null }> {
    const before = decodeCursor(page.cursor, ['integer']);
    const rows = await this.context.store.repos.audit.listForOrganization(organizationId, { limit: page.limit + 1, ...(before ? { beforeSeq: before[0] } : {}) });
    const { items, nextCursor } = keysetPage(rows, page.limit, (event) => [event.seq]);
    return {
      events: items.map(eventFromAuditRecord),
      next_cursor: nextCursor,
    };
  }
}
