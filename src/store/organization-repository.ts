import type { Knex } from 'knex';
import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';
import type { StandIns } from './hot-statements.js';
import type { TableNames } from './table-names.js';
import type { Db } from './transaction.js';

export type OrganizationStatus = 'active' | 'suspended';

export interface OrganizationRecord {
  id: string;
  name: string;
  slug: string;
  status: OrganizationStatus;
  requireMfa: boolean;
  createdAt: number;
  updatedAt: number;
  deletedAt: number | null;
}

export function mapOrganization(row: Record<string, unknown>): OrganizationRecord {
  return {
    id: String(row.id),
    name: String(row.name),
    slug: String(row.slug),
    status: row.status as OrganizationStatus,
    requireMfa: toBoolean(row.require_mfa),
    createdAt: toNumber(row.created_at),
    updatedAt: toNumber(row.updated_at),
    deletedAt: toNullableNumber(row.deleted_at),
  };
}

export interface MembershipAuthorityRow {
  membershipStatus: string;
  roleSlugs: string[];
  permissionKeys: string[];
}

export class OrganizationRepository extends Repository {
  async findActive(id: string): Promise<OrganizationRecord | undefined> {
    const row = await this.db(this.table.organizations).where({ id, status: 'active' }).first();
    return row ? mapOrganization(row) : undefined;
  }

  async findById(id: string): Promise<OrganizationRecord | undefined> {
    const row = await this.db(this.table.organizations).where({ id }).first();
    return row ? mapOrganization(row) : undefined;
  }

  /**
   * Locks the organization row for the rest of the transaction (PostgreSQL) so that owner
   * counts taken afterwards cannot be invalidated by a concurrent change (last-owner rule).
   */
  async lockActive(id: string): Promise<OrganizationRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.organizations).where({ id, status: 'active' })).first();
    return row ? mapOrganization(row) : undefined;
  }

  /**
   * Whether the organization is active, its row held until the transaction ends against a
   * change or deletion of it (PostgreSQL FOR KEY SHARE), not against other holders: a write
   * that joins the organization takes it before the account, in the lock order
   * (docs/database.md), without queueing behind other joins.
   */
  async holdActive(id: string): Promise<boolean> {
    const active = this.db(this.table.organizations).where({ id, status: 'active' }).select('id');
    return (await (this.dialect === 'pg' ? active.forKeyShare() : active).first()) !== undefined;
  }

  /**
   * Locks the rows of several organizations (PostgreSQL), in id order: two transactions locking
   * overlapping sets take them in the same order and never wait on each other in a cycle.
   */
  async lockAll(ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.lockForUpdate(this.db(this.table.organizations).whereIn('id', ids).orderBy('id').select('id'));
  }

  /** Slugs equal to `base` or of the form `base-<n>` (for deriving a free slug). */
  async slugsLike(base: string): Promise<string[]> {
    const rows = await this.db(this.table.organizations)
      .where('slug', base)
      // Slugs are [a-z0-9-] only, so the pattern needs no escaping.
      .orWhere('slug', 'like', `${base}-%`)
      .select('slug');
    return rows.map((row: Record<string, unknown>) => String(row.slug));
  }

  async slugTaken(slug: string): Promise<boolean> {
    return (await this.db(this.table.organizations).where({ slug }).first('id')) !== undefined;
  }

  async insert(organization: { id: string; name: string; slug: string; now: number }): Promise<void> {
    await this.db(this.table.organizations).insert({
      id: organization.id,
      name: organization.name,
      slug: organization.slug,
      status: 'active',
      require_mfa: false,
      created_at: organization.now,
      updated_at: organization.now,
    });
  }

  async update(id: string, changes: { name?: string; requireMfa?: boolean }, now: number): Promise<void> {
    const patch: Record<string, unknown> = { updated_at: now };
    if (changes.name !== undefined) patch.name = changes.name;
    if (changes.requireMfa !== undefined) patch.require_mfa = changes.requireMfa;
    await this.db(this.table.organizations).where({ id }).update(patch);
  }

  /** Soft delete; answers whether this call did it. */
  async suspend(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.organizations).where({ id, status: 'active' }).update({ status: 'suspended', deleted_at: now, updated_at: now })) === 1;
  }

  /** Active organizations in which the user is an active member, with their role slugs there. */
  async listActiveMembershipsOfUser(userId: string): Promise<Array<{ organization: OrganizationRecord; roleSlugs: string[] }>> {
    const rows = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.organizations} as o`, 'o.id', 'm.organization_id')
      .leftJoin(`${this.table.memberRoles} as mr`, 'mr.membership_id', 'm.id')
      .leftJoin(`${this.table.roles} as r`, 'r.id', 'mr.role_id')
      .where({ 'm.user_id': userId, 'm.status': 'active', 'o.status': 'active' })
      .select('o.*', 'r.slug as role_slug')
      .orderBy([{ column: 'o.created_at', order: 'asc' }, { column: 'o.id', order: 'asc' }]);
    const byOrganization = new Map<string, { organization: OrganizationRecord; roleSlugs: string[] }>();
    for (const row of rows) {
      const id = String(row.id);
      let entry = byOrganization.get(id);
      if (!entry) {
        entry = { organization: mapOrganization(row), roleSlugs: [] };
        byOrganization.set(id, entry);
      }
      if (row.role_slug) entry.roleSlugs.push(String(row.role_slug));
    }
    return [...byOrganization.values()];
  }

  /** Whether the user is an active member of an active organization that requires MFA. */
  async userBelongsToMfaRequiringOrganization(userId: string): Promise<boolean> {
    const row = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.organizations} as o`, 'o.id', 'm.organization_id')
      .where({ 'm.user_id': userId, 'm.status': 'active', 'o.status': 'active', 'o.require_mfa': true })
      .first('m.id');
    return row !== undefined;
  }
}

export class RoleRepository extends Repository {
  /** Role slugs and permission keys of a user's active membership in an active organization. */
  async resolveMembershipAuthority(userId: string, organizationId: string): Promise<MembershipAuthorityRow | undefined> {
    const rows = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.organizations} as o`, 'o.id', 'm.organization_id')
      .leftJoin(`${this.table.memberRoles} as mr`, 'mr.membership_id', 'm.id')
      .leftJoin(`${this.table.roles} as r`, 'r.id', 'mr.role_id')
      .where({ 'm.user_id': userId, 'm.organization_id': organizationId, 'o.status': 'active' })
      .select('m.status as membership_status', 'r.slug', 'r.permission_keys');
    if (rows.length === 0) return undefined;
    const roleSlugs: string[] = [];
    const permissionKeys = new Set<string>();
    for (const row of rows) {
      if (!row.slug) continue;
      roleSlugs.push(String(row.slug));
      for (const key of JSON.parse(String(row.permission_keys)) as string[]) permissionKeys.add(key);
    }
    return { membershipStatus: String(rows[0]!.membership_status), roleSlugs, permissionKeys: [...permissionKeys] };
  }

  async insert(role: NewRole): Promise<void> {
    await this.db(this.table.roles).insert(roleRow(role));
  }

  async insertMany(roles: NewRole[]): Promise<void> {
    if (roles.length > 0) await this.db(this.table.roles).insert(roles.map(roleRow));
  }

  /** The organization's custom roles (not the system templates), for its quota (read after lockActive). */
  async countCustomInOrganization(organizationId: string): Promise<number> {
    const row = await this.db(this.table.roles).where({ organization_id: organizationId, is_system: false }).count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  /** The organization's roles; the global superadmin role (organization_id NULL) never appears. */
  async listForOrganization(organizationId: string): Promise<RoleRecord[]> {
    const rows = await this.db(this.table.roles)
      .where({ organization_id: organizationId })
      .orderBy([{ column: 'is_system', order: 'desc' }, { column: 'created_at', order: 'asc' }, { column: 'slug', order: 'asc' }]);
    return rows.map(mapRole);
  }

  async findInOrganization(organizationId: string, roleId: string): Promise<RoleRecord | undefined> {
    const row = await this.db(this.table.roles).where({ organization_id: organizationId, id: roleId }).first();
    return row ? mapRole(row) : undefined;
  }

  /** The role, its row locked until the transaction ends: an edit compares against what it then writes over. */
  async findInOrganizationForUpdate(organizationId: string, roleId: string): Promise<RoleRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.roles).where({ organization_id: organizationId, id: roleId })).first();
    return row ? mapRole(row) : undefined;
  }

  async findBySlugs(organizationId: string, slugs: string[]): Promise<RoleRecord[]> {
    if (slugs.length === 0) return [];
    return (await this.db(this.table.roles).where({ organization_id: organizationId }).whereIn('slug', slugs)).map(mapRole);
  }

  async update(id: string, changes: { name?: string; description?: string | null; permissionKeys?: string[] }, now: number): Promise<void> {
    const patch: Record<string, unknown> = { updated_at: now };
    if (changes.name !== undefined) patch.name = changes.name;
    if (changes.description !== undefined) patch.description = changes.description;
    if (changes.permissionKeys !== undefined) patch.permission_keys = JSON.stringify(changes.permissionKeys);
    await this.db(this.table.roles).where({ id }).update(patch);
  }

  /** The system roles of every organization (the global superadmin role aside), locked for the catalog synchronisation. */
  async systemRolesOfOrganizations(): Promise<Array<{ id: string; slug: string; permissionKeys: string[] }>> {
    const rows = await this.lockForUpdate(this.db(this.table.roles).whereNotNull('organization_id').andWhere({ is_system: true }).select('id', 'slug', 'permission_keys'));
    return rows.map((row) => ({ id: String(row.id), slug: String(row.slug), permissionKeys: JSON.parse(String(row.permission_keys)) as string[] }));
  }

  /** One statement for many roles that end up with the same keys. */
  async setPermissionKeys(ids: string[], permissionKeys: string[], now: number): Promise<void> {
    for (let start = 0; start < ids.length; start += ROLE_UPDATE_CHUNK) {
      await this.db(this.table.roles).whereIn('id', ids.slice(start, start + ROLE_UPDATE_CHUNK)).update({ permission_keys: JSON.stringify(permissionKeys), updated_at: now });
    }
  }

  /** Deletes the role; member_roles rows go with it (ON DELETE CASCADE). Answers how many members held it. */
  async deleteDetaching(id: string): Promise<number> {
    const row = await this.db(this.table.memberRoles).where({ role_id: id }).count({ count: '*' }).first();
    await this.db(this.table.memberRoles).where({ role_id: id }).delete();
    await this.db(this.table.roles).where({ id }).delete();
    return toNumber(row?.count ?? 0);
  }

  /**
   * The global superadmin role row. Its id is fixed, so instances starting together insert
   * it once (the primary key settles the race); its keys follow the current catalog.
   */
  async ensureSuperadminRole(permissionKeys: string[], now: number): Promise<void> {
    await this.db(this.table.roles)
      .insert(roleRow({ id: SUPERADMIN_ROLE_ID, organizationId: null, slug: 'superadmin', name: 'Superadmin', description: 'Every permission in every organization', isSystem: true, permissionKeys, now }))
      .onConflict('id')
      .ignore();
    await this.db(this.table.roles).where({ id: SUPERADMIN_ROLE_ID }).update({ permission_keys: JSON.stringify(permissionKeys), updated_at: now });
  }

  /** Answers whether this call made the grant (false: it was held already). */
  async grantSuperadmin(userId: string, now: number): Promise<boolean> {
    const inserted = await this.db(this.table.globalRoleGrants)
      .insert({ user_id: userId, role_id: SUPERADMIN_ROLE_ID, created_at: now })
      .onConflict(['user_id', 'role_id'])
      .ignore()
      .returning('user_id');
    return inserted.length === 1;
  }

  async revokeSuperadmin(userId: string): Promise<boolean> {
    return (await this.db(this.table.globalRoleGrants).where({ user_id: userId, role_id: SUPERADMIN_ROLE_ID }).delete()) > 0;
  }

  async isSuperadmin(userId: string): Promise<boolean> {
    const grant = await this.hot.first(
      this.db,
      'globalRoleGrants.isSuperadmin',
      (values) => superadminGrantOf(this.db, this.table, values.userId).first('user_id'),
      { userId },
    );
    return grant !== undefined;
  }
}


/** Bound parameters per statement stay far below SQLite's and PostgreSQL's limits. */
const ROLE_UPDATE_CHUNK = 500;

/** Fixed id of the one global superadmin role row (organization_id NULL). */
export const SUPERADMIN_ROLE_ID = '00000000-0000-4000-8000-000000000001';

/** The row that makes `userId` a superadmin: read by `isSuperadmin`, and by the password login's account read on PostgreSQL. */
export function superadminGrantOf(db: Db, table: TableNames, userId: Knex.Value): Knex.QueryBuilder {
  return db(table.globalRoleGrants).where({ role_id: SUPERADMIN_ROLE_ID }).andWhere('user_id', userId);
}

export interface RoleRecord {
  id: string;
  organizationId: string | null;
  slug: string;
  name: string;
  description: string | null;
  isSystem: boolean;
  permissionKeys: string[];
  createdAt: number;
  updatedAt: number;
}

export interface NewRole {
  id: string;
  organizationId: string | null;
  slug: string;
  name: string;
  description: string | null;
  isSystem: boolean;
  permissionKeys: string[];
  now: number;
}

function roleRow(role: NewRole): Record<string, unknown> {
  return {
    id: role.id,
    organization_id: role.organizationId,
    slug: role.slug,
    name: role.name,
    description: role.description,
    is_system: role.isSystem,
    permission_keys: JSON.stringify(role.permissionKeys),
    created_at: role.now,
    updated_at: role.now,
  };
}

export function mapRole(row: Record<string, unknown>): RoleRecord {
  return {
    id: String(row.id),
    organizationId: (row.organization_id as string | null) ?? null,
    slug: String(row.slug),
    name: String(row.name),
    description: (row.description as string | null) ?? null,
    isSystem: toBoolean(row.is_system),
    permissionKeys: JSON.parse(String(row.permission_keys)) as string[],
    createdAt: toNumber(row.created_at),
    updatedAt: toNumber(row.updated_at),
  };
}

export type MembershipStatus = 'active' | 'invited' | 'suspended';

export interface MembershipRecord {
  id: string;
  organizationId: string;
  userId: string;
  status: MembershipStatus;
  createdAt: number;
}

function mapMembership(row: Record<string, unknown>): MembershipRecord {
  return {
    id: String(row.id),
    organizationId: String(row.organization_id),
    userId: String(row.user_id),
    status: row.status as MembershipStatus,
    createdAt: toNumber(row.created_at),
  };
}

/** A member as listed (docs/database.md), before e-mail gating. */
export interface MemberRow {
  membershipId: string;
  userId: string;
  email: string;
  displayName: string | null;
  status: MembershipStatus;
  roleSlugs: string[];
}

export class MembershipRepository extends Repository {
  async find(organizationId: string, userId: string): Promise<MembershipRecord | undefined> {
    const row = await this.db(this.table.memberships).where({ organization_id: organizationId, user_id: userId }).first();
    return row ? mapMembership(row) : undefined;
  }

  async insert(membership: { id: string; organizationId: string; userId: string; status: MembershipStatus; now: number }): Promise<void> {
    await this.db(this.table.memberships).insert({
      id: membership.id,
      organization_id: membership.organizationId,
      user_id: membership.userId,
      status: membership.status,
      created_at: membership.now,
      updated_at: membership.now,
    });
  }

  async setStatus(id: string, status: MembershipStatus, now: number): Promise<void> {
    await this.db(this.table.memberships).where({ id }).update({ status, updated_at: now });
  }

  async delete(id: string): Promise<void> {
    await this.db(this.table.memberships).where({ id }).delete();
  }

  /** An active membership unless the user already has one here (a JIT join, when two first sign-ins race); false when one was there. */
  async insertActiveIfAbsent(membership: { id: string; organizationId: string; userId: string; now: number }): Promise<boolean> {
    const inserted = await this.db(this.table.memberships)
      .insert({ id: membership.id, organization_id: membership.organizationId, user_id: membership.userId, status: 'active', created_at: membership.now, updated_at: membership.now })
      .onConflict()
      .ignore()
      .returning('id');
    return inserted.length === 1;
  }

  /** An `invited` placeholder becomes active (a JIT join over a pending invite); false when it is no longer `invited`. */
  async activateInvited(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.memberships).where({ id, status: 'invited' }).update({ status: 'active', updated_at: now })) > 0;
  }

  /** Removes an `invited` placeholder (its invite was revoked or superseded); active and suspended rows stay. */
  async deleteInvited(organizationId: string, userId: string): Promise<void> {
    await this.db(this.table.memberships).where({ organization_id: organizationId, user_id: userId, status: 'invited' }).delete();
  }

  async replaceRoles(membershipId: string, roleIds: string[]): Promise<void> {
    await this.db(this.table.memberRoles).where({ membership_id: membershipId }).delete();
    if (roleIds.length > 0) await this.db(this.table.memberRoles).insert(roleIds.map((roleId) => ({ membership_id: membershipId, role_id: roleId })));
  }

  async rolesOf(membershipId: string): Promise<RoleRecord[]> {
    const rows = await this.db(`${this.table.memberRoles} as mr`).join(`${this.table.roles} as r`, 'r.id', 'mr.role_id').where({ 'mr.membership_id': membershipId }).select('r.*');
    return rows.map(mapRole);
  }

  /** Active organizations in which the user is an active member holding the system role `ownerSlug` (the quota of docs/security.md; read under the account's lock). */
  async countActiveOwnedBy(userId: string, ownerSlug: string): Promise<number> {
    const row = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.organizations} as o`, 'o.id', 'm.organization_id')
      .join(`${this.table.memberRoles} as mr`, 'mr.membership_id', 'm.id')
      .join(`${this.table.roles} as r`, 'r.id', 'mr.role_id')
      .where({ 'm.user_id': userId, 'm.status': 'active', 'o.status': 'active', 'r.slug': ownerSlug, 'r.is_system': true })
      .countDistinct({ count: 'm.id' })
      .first();
    return toNumber(row?.count ?? 0);
  }

  /** Active members holding one role of the organization (read after lockActive in the same transaction). */
  async countActiveHolders(organizationId: string, roleId: string): Promise<number> {
    const row = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.memberRoles} as mr`, 'mr.membership_id', 'm.id')
      .where({ 'm.organization_id': organizationId, 'm.status': 'active', 'mr.role_id': roleId })
      .countDistinct({ count: 'm.id' })
      .first();
    return toNumber(row?.count ?? 0);
  }

  /**
   * One page of members in user-id order (keyset on the (organization_id, user_id) unique
   * index, so a page costs the same in an organization of any size). `invited` rows count
   * only while their invite is pending and unexpired.
   */
  async listPage(organizationId: string, page: { limit: number; afterUserId?: string; now: number }): Promise<MemberRow[]> {
    const shape = (values: StandIns<{ organizationId: string; now: number; limit: number }>) =>
      this.db(`${this.table.memberships} as m`)
        .join(`${this.table.users} as u`, 'u.id', 'm.user_id')
        .where('m.organization_id', values.organizationId)
        .andWhere((outer) =>
          outer.whereNot('m.status', 'invited').orWhereExists((sub) =>
            sub
              .select(this.db.raw('1'))
              .from(`${this.table.invites} as i`)
              .whereRaw('i.organization_id = m.organization_id')
              .whereRaw('i.pending_email = u.email')
              .where('i.status', 'pending')
              .where('i.expires_at', '>', values.now),
          ),
        )
        .orderBy('m.user_id', 'asc')
        .limit(values.limit)
        .select('m.id as membership_id', 'm.user_id', 'm.status', 'u.email', 'u.display_name', this.roleSlugsOfMembership('m.id'));
    const values = { organizationId, now: page.now, limit: page.limit };
    const rows =
      page.afterUserId === undefined
        ? await this.hot.all(this.db, 'memberships.listPage', shape, values)
        : await this.hot.all(this.db, 'memberships.listPageAfter', (standIns: StandIns<typeof values & { afterUserId: string }>) => shape(standIns).andWhere('m.user_id', '>', standIns.afterUserId), {
            ...values,
            afterUserId: page.afterUserId,
          });
    return rows.map((row) => ({
      membershipId: String(row.membership_id),
      userId: String(row.user_id),
      email: String(row.email),
      displayName: (row.display_name as string | null) ?? null,
      status: row.status as MembershipStatus,
      roleSlugs: parseRoleSlugs(row.role_slugs),
    }));
  }

  /**
   * The page's role slugs in the same query: a correlated subquery per returned row (a JSON
   * array), so the cost follows the page size, never the organization's size, on both databases.
   */
  private roleSlugsOfMembership(membershipColumn: string): Knex.Raw {
    const aggregate = this.dialect === 'pg' ? "coalesce(json_agg(r.slug), '[]'::json)" : 'json_group_array(r.slug)';
    return this.db.raw(`(select ${aggregate} from ?? as mr join ?? as r on r.id = mr.role_id where mr.membership_id = ??) as role_slugs`, [
      this.table.memberRoles,
      this.table.roles,
      membershipColumn,
    ]);
  }

  async findMember(organizationId: string, userId: string): Promise<MemberRow | undefined> {
    const row = await this.db(`${this.table.memberships} as m`)
      .join(`${this.table.users} as u`, 'u.id', 'm.user_id')
      .where({ 'm.organization_id': organizationId, 'm.user_id': userId })
      .first('m.id as membership_id', 'm.user_id', 'm.status', 'u.email', 'u.display_name');
    if (!row) return undefined;
    const slugs = await this.roleSlugsByMembership([String(row.membership_id)]);
    return {
      membershipId: String(row.membership_id),
      userId: String(row.user_id),
      email: String(row.email),
      displayName: (row.display_name as string | null) ?? null,
      status: row.status as MembershipStatus,
      roleSlugs: slugs.get(String(row.membership_id)) ?? [],
    };
  }

  private async roleSlugsByMembership(membershipIds: string[]): Promise<Map<string, string[]>> {
    const bySlug = new Map<string, string[]>();
    if (membershipIds.length === 0) return bySlug;
    const rows = await this.db(`${this.table.memberRoles} as mr`)
      .join(`${this.table.roles} as r`, 'r.id', 'mr.role_id')
      .whereIn('mr.membership_id', membershipIds)
      .orderBy('r.slug', 'asc')
      .select('mr.membership_id', 'r.slug');
    for (const row of rows) {
      const id = String(row.membership_id);
      const list = bySlug.get(id) ?? [];
      list.push(String(row.slug));
      bySlug.set(id, list);
    }
    return bySlug;
  }
}

export type InviteStatus = 'pending' | 'accepted' | 'revoked' | 'expired';

export interface InviteRecord {
  id: string;
  organizationId: string;
  email: string;
  roleSlugs: string[];
  invitedBy: string | null;
  status: InviteStatus;
  createdAt: number;
  expiresAt: number;
}

function mapInvite(row: Record<string, unknown>): InviteRecord {
  return {
    id: String(row.id),
    organizationId: String(row.organization_id),
    email: String(row.email),
    roleSlugs: JSON.parse(String(row.role_slugs)) as string[],
    invitedBy: (row.invited_by as string | null) ?? null,
    status: row.status as InviteStatus,
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
  };
}

export class InviteRepository extends Repository {
  /** The pending invite of an address, expired or not (the unique pending_email slot). */
  async findPendingForEmail(organizationId: string, email: string): Promise<InviteRecord | undefined> {
    const row = await this.db(this.table.invites).where({ organization_id: organizationId, pending_email: email }).first();
    return row ? mapInvite(row) : undefined;
  }

  async insert(invite: { id: string; organizationId: string; email: string; roleSlugs: string[]; tokenHash: string; invitedBy: string; now: number; expiresAt: number }): Promise<void> {
    await this.db(this.table.invites).insert({
      id: invite.id,
      organization_id: invite.organizationId,
      email: invite.email,
      role_slugs: JSON.stringify(invite.roleSlugs),
      token_hash: invite.tokenHash,
      invited_by: invite.invitedBy,
      status: 'pending',
      pending_email: invite.email,
      created_at: invite.now,
      updated_at: invite.now,
      expires_at: invite.expiresAt,
    });
  }

  /** Re-invite: a new token (the old one stops working), new roles and a fresh expiry. */
  async rotate(id: string, changes: { tokenHash: string; roleSlugs: string[]; invitedBy: string; now: number; expiresAt: number }): Promise<boolean> {
    return (
      (await this.db(this.table.invites).where({ id, status: 'pending' }).update({
        token_hash: changes.tokenHash,
        role_slugs: JSON.stringify(changes.roleSlugs),
        invited_by: changes.invitedBy,
        updated_at: changes.now,
        expires_at: changes.expiresAt,
      })) === 1
    );
  }

  async findByTokenHash(tokenHash: string): Promise<InviteRecord | undefined> {
    const row = await this.db(this.table.invites).where({ token_hash: tokenHash }).first();
    return row ? mapInvite(row) : undefined;
  }

  async findInOrganization(organizationId: string, id: string): Promise<InviteRecord | undefined> {
    const row = await this.db(this.table.invites).where({ organization_id: organizationId, id }).first();
    return row ? mapInvite(row) : undefined;
  }

  /**
   * Single use: one conditional update; answers whether this call accepted it. The token is
   * matched again, so one a re-invite rotated away since it was looked up is refused.
   */
  async consume(id: string, tokenHash: string, now: number): Promise<boolean> {
    return (
      (await this.db(this.table.invites).where({ id, token_hash: tokenHash, status: 'pending' }).andWhere('expires_at', '>', now).update({ status: 'accepted', pending_email: null, updated_at: now })) === 1
    );
  }

  /** Answers whether this call expired it (a re-invite since may have extended it). */
  async markExpired(id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.invites).where({ id, status: 'pending' }).andWhere('expires_at', '<=', now).update({ status: 'expired', pending_email: null, updated_at: now })) === 1;
  }

  /** Answers whether this call revoked it. */
  async revoke(organizationId: string, id: string, now: number): Promise<boolean> {
    return (await this.db(this.table.invites).where({ organization_id: organizationId, id, status: 'pending' }).update({ status: 'revoked', pending_email: null, updated_at: now })) === 1;
  }

  /**
   * Drops an organization's invitations that ended (accepted, revoked, marked expired) before
   * `before`: their token answers as an unknown one, and no list shows them. Served by the
   * `(organization_id, status)` index.
   */
  async pruneEndedInOrganization(organizationId: string, before: number): Promise<void> {
    await this.db(this.table.invites).where({ organization_id: organizationId }).whereIn('status', ['accepted', 'revoked', 'expired']).andWhere('updated_at', '<=', before).delete();
  }

  /** Pending invites a user sent: in one organization (they leave it), or in every one (the account is deleted). */
  async listPendingSentBy(userId: string, organizationId?: string): Promise<InviteRecord[]> {
    return (await this.db(this.table.invites).where({ invited_by: userId, status: 'pending', ...(organizationId ? { organization_id: organizationId } : {}) }).orderBy('id')).map(mapInvite);
  }

  async revokePendingForEmail(organizationId: string, email: string, now: number): Promise<void> {
    await this.db(this.table.invites).where({ organization_id: organizationId, pending_email: email, status: 'pending' }).update({ status: 'revoked', pending_email: null, updated_at: now });
  }

  /**
   * A deleted role leaves the pending invites that name it: an invite keeps slugs, and a later
   * role under the same slug must not be granted by an invite made before it existed.
   */
  async removeRoleSlugFromPending(organizationId: string, slug: string, now: number): Promise<number> {
    const rows = await this.db(this.table.invites).where({ organization_id: organizationId, status: 'pending' }).select('id', 'role_slugs');
    let changed = 0;
    for (const row of rows) {
      const slugs = JSON.parse(String(row.role_slugs)) as string[];
      if (!slugs.includes(slug)) continue;
      await this.db(this.table.invites)
        .where({ id: row.id, status: 'pending' })
        .update({ role_slugs: JSON.stringify(slugs.filter((held) => held !== slug)), updated_at: now });
      changed += 1;
    }
    return changed;
  }

  async revokeAllPending(organizationId: string, now: number): Promise<number> {
    return this.db(this.table.invites).where({ organization_id: organizationId, status: 'pending' }).update({ status: 'revoked', pending_email: null, updated_at: now });
  }

  /** Pending invitations not yet expired, for the organization's quota (read after lockActive). */
  async countPendingInOrganization(organizationId: string, now: number): Promise<number> {
    const row = await this.db(this.table.invites)
      .where({ organization_id: organizationId, status: 'pending' })
      .andWhere('expires_at', '>', now)
      .count({ count: '*' })
      .first();
    return toNumber(row?.count ?? 0);
  }

  /** Pending, unexpired invites in id order (keyset pagination). */
  async listPending(organizationId: string, page: { limit: number; afterId?: string; now: number }): Promise<InviteRecord[]> {
    const query = this.db(this.table.invites)
      .where({ organization_id: organizationId, status: 'pending' })
      .andWhere('expires_at', '>', page.now)
      .orderBy('id', 'asc')
      .limit(page.limit);
    if (page.afterId !== undefined) query.andWhere('id', '>', page.afterId);
    return (await query).map(mapInvite);
  }
}

/** pg parses the JSON array; SQLite answers its text. Sorted, as the member view lists them. */
function parseRoleSlugs(value: unknown): string[] {
  const slugs = (typeof value === 'string' ? JSON.parse(value) : value ?? []) as Array<string | null>;
  return slugs.filter((slug): slug is string => slug !== null).map(String).sort();
}
