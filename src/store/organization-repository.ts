import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

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

  async isSuperadmin(userId: string): Promise<boolean> {
    const row = await this.db(`${this.table.globalRoleGrants} as g`)
      .join(`${this.table.roles} as r`, 'r.id', 'g.role_id')
      .where({ 'g.user_id': userId, 'r.slug': 'superadmin' })
      .whereNull('r.organization_id')
      .first('g.user_id');
    return row !== undefined;
  }
}

// Filled in by the organizations work (spec 4.3).
export class MembershipRepository extends Repository {}
export class InviteRepository extends Repository {}
