import { errors } from '../errors.js';
import { resolveAuthority } from './authority.js';
import type { ServiceContext } from './context.js';
import type { PermissionCatalog } from './permission-catalog.js';
import type { Principal } from './principal.js';

/** Organizations, members, invitations and roles (spec 4.3). */
export class OrganizationService {
  constructor(
    private readonly context: ServiceContext,
    private readonly catalog: PermissionCatalog,
  ) {}

  /**
   * The authority chain of every `/orgs/{id}` route: the path organization must be the
   * token's active one (superadmins exempt), must exist and be active (404), and the
   * caller must hold `permission` there, resolved from the database (403).
   */
  async assertPermission(principal: Principal, organizationId: string, permission: string): Promise<void> {
    const repos = this.context.store.repos;
    const superadmin = await repos.roles.isSuperadmin(principal.userId);
    if (!superadmin && organizationId !== principal.organizationId) throw errors.forbidden('The organization in the path is not your active organization.');
    const organization = await repos.organizations.findActive(organizationId);
    if (!organization) throw errors.notFound('Organization');
    const authority = await resolveAuthority(repos, this.catalog, principal.userId, organizationId);
    if (!authority.permissions.has(permission)) throw errors.forbidden();
  }
}
