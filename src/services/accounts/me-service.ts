import type { ServiceContext } from '../shared/service-context.js';
import { SUPERADMIN_ROLE_SLUG } from '../access/permission-catalog.js';
import type { Principal } from '../access/principal.js';

export interface MeView {
  id: string;
  email: string;
  email_verified: boolean;
  display_name: string | null;
  status: 'active' | 'disabled' | 'locked';
  mfa_enforced: boolean;
  orgs: Array<{ id: string; name: string; slug: string; roles: string[] }>;
  roles: string[];
  recovery_codes_remaining: number;
}

/** GET /auth/me (docs/security.md). */
export class MeService {
  constructor(private readonly context: ServiceContext) {}

  async me(principal: Principal): Promise<MeView> {
    const { user } = principal;
    const [memberships, superadmin, recoveryCodesRemaining] = await Promise.all([
      this.context.access.activeMemberships(user.id),
      this.context.access.isSuperadmin(user.id),
      this.context.access.recoveryCodesRemaining(user.id),
    ]);
    const activeOrganization = memberships.find((entry) => entry.organization.id === principal.organizationId);
    const roles = [...(activeOrganization?.roleSlugs ?? []), ...(superadmin ? [SUPERADMIN_ROLE_SLUG] : [])];
    return {
      id: user.id,
      email: user.email,
      email_verified: user.emailVerified,
      display_name: user.displayName,
      status: userStatus(user, this.context.clock.now()),
      // docs/database.md: the per-user flag, not the effective enforcement.
      mfa_enforced: user.mfaEnforced,
      orgs: memberships.map(({ organization, roleSlugs }) => ({ id: organization.id, name: organization.name, slug: organization.slug, roles: roleSlugs })),
      roles,
      recovery_codes_remaining: recoveryCodesRemaining,
    };
  }
}

/** `locked` is not stored: it reads so while a lockout lasts (docs/security.md). */
export function userStatus(user: { status: 'active' | 'disabled'; lockedUntil: number | null }, now: number): 'active' | 'disabled' | 'locked' {
  if (user.status === 'disabled') return 'disabled';
  return user.lockedUntil !== null && user.lockedUntil > now ? 'locked' : 'active';
}
