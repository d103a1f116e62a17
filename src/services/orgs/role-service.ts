import { randomUUID } from 'node:crypto';
import { errors } from '../../errors.js';
import { isUniqueViolation } from '../../database-errors.js';
import type { RoleRecord } from '../../store/organization-repository.js';
import { type AccessGrant, assertFitsSsoDefaultRole, isOwnerEquivalent, isOwnerRole, organizationOf, type AccessPolicy } from '../access/access-policy.js';
import { assertHoldsEveryKey } from '../access/authority.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { GLOBAL_ONLY_PERMISSIONS, SUPERADMIN_ROLE_SLUG, type PermissionCatalog } from '../access/permission-catalog.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { assertUnderQuota } from '../limits/quotas.js';

/** docs/database.md. */
export interface RoleView {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  is_system: boolean;
  permission_keys: string[];
}

export function roleView(role: RoleRecord): RoleView {
  return { id: role.id, slug: role.slug, name: role.name, description: role.description, is_system: role.isSystem, permission_keys: [...role.permissionKeys].sort() };
}

/**
 * Organization roles (docs/organizations.md). Decisions where the spec is open: editing the cloned
 * owner role and deleting any system role answer 409 conflict; unknown keys and keys that
 * exist only globally (users.read, users.manage) are 422 validation failures; keys the
 * actor does not hold are 403 (no escalation).
 */
export class RoleService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
    private readonly policy: AccessPolicy,
  ) {}

  /** The global superadmin role has no organization and so never appears here. */
  async list(organizationId: string): Promise<RoleView[]> {
    return (await this.context.store.repos.roles.listForOrganization(organizationId)).map(roleView);
  }

  async create(grant: AccessGrant, input: { name: string; slug: string; description?: string | null; permissionKeys: string[] }, meta: RequestMeta): Promise<RoleView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    if (input.slug === SUPERADMIN_ROLE_SLUG) throw errors.validation([`"slug" "${SUPERADMIN_ROLE_SLUG}" is reserved`]);
    const permissionKeys = this.checkedKeys(input.permissionKeys);
    try {
      return await runUnitOfWork(this.context, meta, async (uow) => {
        const actor = await this.actor(uow, grant);
        assertHoldsEveryKey(actor, permissionKeys);
        // A role holding org.delete or roles.manage is owner-equivalent (docs/organizations.md): step-up.
        if (isOwnerEquivalent({ slug: input.slug, isSystem: false, permissionKeys })) await this.policy.assertStepUp(uow.repos, principal);
        if ((await uow.repos.roles.findBySlugs(organizationId, [input.slug])).length > 0) throw errors.conflict('A role with that slug already exists in this organization.');
        // Counted under the organization's lock `actor` took, so roles created at once cannot pass the cap.
        assertUnderQuota('customRolesPerOrganization', await uow.repos.roles.countCustomInOrganization(organizationId));
        await this.checkSsoDefaultRole(uow, organizationId, { slug: input.slug, isSystem: false, permissionKeys });
        const role: RoleRecord = {
          id: randomUUID(),
          organizationId,
          slug: input.slug,
          name: input.name,
          description: input.description ?? null,
          isSystem: false,
          permissionKeys,
          createdAt: uow.now,
          updatedAt: uow.now,
        };
        await uow.repos.roles.insert({ ...role, now: uow.now });
        await uow.emit({ type: 'role.created', actorId: principal.userId, organizationId, data: { role_id: role.id, slug: role.slug, permission_keys: permissionKeys } });
        return roleView(role);
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw errors.conflict('A role with that slug already exists in this organization.');
      throw error;
    }
  }

  /** The slug is immutable; only keys the actor holds may be added. */
  async update(grant: AccessGrant, roleId: string, changes: { name?: string; description?: string | null; permissionKeys?: string[] }, meta: RequestMeta): Promise<RoleView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const permissionKeys = changes.permissionKeys === undefined ? undefined : this.checkedKeys(changes.permissionKeys);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const actor = await this.actor(uow, grant);
      const role = await uow.repos.roles.findInOrganizationForUpdate(organizationId, roleId);
      if (!role) throw errors.notFound('Role');
      if (isOwnerRole(role)) throw errors.conflict('The owner role cannot be edited.');
      if (permissionKeys) assertHoldsEveryKey(actor, permissionKeys.filter((key) => !role.permissionKeys.includes(key)));
      // Editing a role that is, or becomes, owner-equivalent (docs/organizations.md): step-up.
      if (isOwnerEquivalent(role) || (permissionKeys && isOwnerEquivalent({ ...role, permissionKeys }))) await this.policy.assertStepUp(uow.repos, principal);
      if (permissionKeys) await this.checkSsoDefaultRole(uow, organizationId, { ...role, permissionKeys });
      // Only a value that differs is a change (docs/events.md: `changes` names the fields changed);
      // one that changes nothing writes and emits nothing, as an organization's PATCH does.
      const update = {
        ...(changes.name !== undefined && changes.name !== role.name ? { name: changes.name } : {}),
        ...(changes.description !== undefined && changes.description !== role.description ? { description: changes.description } : {}),
        ...(permissionKeys !== undefined && !sameKeys(permissionKeys, role.permissionKeys) ? { permissionKeys } : {}),
      };
      if (Object.keys(update).length === 0) return roleView(role);
      await uow.repos.roles.update(role.id, update, uow.now);
      const updated: RoleRecord = { ...role, ...update, updatedAt: uow.now };
      await uow.emit({
        type: 'role.updated',
        actorId: principal.userId,
        organizationId,
        data: { role_id: role.id, slug: role.slug, changes: Object.keys(update).map((key) => (key === 'permissionKeys' ? 'permission_keys' : key)) },
      });
      return roleView(updated);
    });
  }

  /** Custom roles only; the members holding it lose it. */
  async delete(grant: AccessGrant, roleId: string, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      await this.actor(uow, grant);
      const role = await uow.repos.roles.findInOrganization(organizationId, roleId);
      if (!role) throw errors.notFound('Role');
      if (role.isSystem) throw errors.conflict('System roles (owner, admin, member) cannot be deleted.');
      const detached = await uow.repos.roles.deleteDetaching(role.id);
      // Invites name roles by slug: a role made later under this slug is not theirs to grant.
      await uow.repos.invites.removeRoleSlugFromPending(organizationId, role.slug, uow.now);
      await uow.emit({ type: 'role.deleted', actorId: principal.userId, organizationId, data: { role_id: role.id, slug: role.slug, members_detached: detached } });
    });
  }

  /** The connection names its `default_role` by slug: the rule holds for an edit of that role and for a new role made under its slug. */
  private async checkSsoDefaultRole(uow: UnitOfWork, organizationId: string, role: { slug: string; isSystem: boolean; permissionKeys: readonly string[] }): Promise<void> {
    // Only an owner-equivalent role can be refused: no read for any other.
    if (!isOwnerEquivalent(role)) return;
    const connection = await uow.repos.ssoConnections.findForOrganization(organizationId);
    if (connection?.defaultRole === role.slug) assertFitsSsoDefaultRole(role);
  }

  /** The organization row locked, then the route's requirement re-checked under that lock. */
  private async actor(uow: UnitOfWork, grant: AccessGrant) {
    const organization = await uow.repos.organizations.lockActive(organizationOf(grant));
    if (!organization) throw errors.notFound('Organization');
    return grant.recheck(uow.repos);
  }

  /** Every key must be in the catalog and organization-scoped (422 otherwise). */
  private checkedKeys(keys: string[]): string[] {
    const unique = [...new Set(keys)];
    const invalid = unique.filter((key) => !this.catalog.has(key) || GLOBAL_ONLY_PERMISSIONS.has(key));
    if (invalid.length > 0) throw errors.validation(invalid.map((key) => `"permission_keys" contains "${key}", which is not an organization permission in the catalog`));
    return unique.sort();
  }
}

/** Two sets of permission keys, whatever their order. */
function sameKeys(a: readonly string[], b: readonly string[]): boolean {
  const held = new Set(b);
  return a.length === held.size && a.every((key) => held.has(key));
}
