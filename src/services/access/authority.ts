import { errors } from '../../errors.js';
import type { PermissionCatalog } from './permission-catalog.js';
import { SUPERADMIN_ROLE_SLUG } from './permission-catalog.js';
import type { MembershipAuthorityRow } from '../../store/organization-repository.js';
import type { Repositories } from '../../store/store.js';

/** What a user may do in one organization, resolved from the database (claims are never the authority). */
export interface ResolvedAuthority {
  superadmin: boolean;
  /** Active member of the (active) organization. */
  member: boolean;
  roles: string[];
  permissions: ReadonlySet<string>;
}

/** `knownSuperadmin` saves the query when the caller has just resolved it. */
export async function resolveAuthority(
  repos: Repositories,
  catalog: PermissionCatalog,
  userId: string,
  organizationId: string | null,
  knownSuperadmin?: boolean,
): Promise<ResolvedAuthority> {
  const [superadmin, membership] = await Promise.all([
    knownSuperadmin ?? repos.roles.isSuperadmin(userId),
    organizationId ? repos.roles.resolveMembershipAuthority(userId, organizationId) : Promise.resolve(undefined),
  ]);
  return authorityFrom(catalog, superadmin, membership);
}

/** The one rule that turns the superadmin flag and a membership into authority. */
export function authorityFrom(catalog: PermissionCatalog, superadmin: boolean, membership: MembershipAuthorityRow | undefined): ResolvedAuthority {
  const member = membership?.membershipStatus === 'active';
  const roles = member ? [...membership!.roleSlugs] : [];
  if (superadmin) {
    return { superadmin, member, roles: [...roles, SUPERADMIN_ROLE_SLUG], permissions: new Set(catalog.entries.map((entry) => entry.key)) };
  }
  return { superadmin, member, roles, permissions: new Set(member ? membership!.permissionKeys : []) };
}

/** No escalation (docs/organizations.md invariant 1): an actor grants only what they hold; a superadmin holds everything. */
export function assertHoldsEveryKey(actor: ResolvedAuthority, keys: Iterable<string>): void {
  if (actor.superadmin) return;
  for (const key of keys) {
    if (!actor.permissions.has(key)) throw errors.forbidden(`You cannot grant "${key}", which you do not hold.`);
  }
}
