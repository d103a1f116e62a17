import type { PermissionCatalog } from './permission-catalog.js';
import { SUPERADMIN_ROLE_SLUG } from './permission-catalog.js';
import type { Repositories } from '../store/store.js';

/** What a user may do in one organization, resolved from the database (claims are never the authority). */
export interface ResolvedAuthority {
  superadmin: boolean;
  /** Active member of the (active) organization. */
  member: boolean;
  roles: string[];
  permissions: ReadonlySet<string>;
}

export const NO_AUTHORITY: ResolvedAuthority = { superadmin: false, member: false, roles: [], permissions: new Set() };

export async function resolveAuthority(repos: Repositories, catalog: PermissionCatalog, userId: string, organizationId: string | null): Promise<ResolvedAuthority> {
  const [superadmin, membership] = await Promise.all([
    repos.roles.isSuperadmin(userId),
    organizationId ? repos.roles.resolveMembershipAuthority(userId, organizationId) : Promise.resolve(undefined),
  ]);
  const member = membership?.membershipStatus === 'active';
  const roles = member ? [...membership!.roleSlugs] : [];
  if (superadmin) {
    return { superadmin, member, roles: [...roles, SUPERADMIN_ROLE_SLUG], permissions: new Set(catalog.entries.map((entry) => entry.key)) };
  }
  return { superadmin, member, roles, permissions: new Set(member ? membership!.permissionKeys : []) };
}
