import type { PermissionDefinition } from '../../config/types.js';

/** docs/database.md. Keys marked `global` are granted only through the superadmin role. */
export const CORE_PERMISSIONS = [
  { key: 'org.read', description: 'View the organization profile' },
  { key: 'org.update', description: 'Edit the organization name and settings' },
  { key: 'org.delete', description: 'Delete the organization' },
  { key: 'members.read', description: 'List members' },
  { key: 'members.invite', description: "Send, list and revoke invitations; see invited and suspended members' e-mails" },
  { key: 'members.update', description: 'Change member roles or suspend members' },
  { key: 'members.remove', description: 'Remove a member' },
  { key: 'roles.read', description: 'List roles' },
  { key: 'roles.manage', description: 'Create, update and delete custom roles' },
  { key: 'users.read', description: 'Read user records (admin scope, superadmin only)' },
  { key: 'users.manage', description: 'Disable and enable users (admin scope, superadmin only)' },
  { key: 'audit.read', description: "Read the organization's audit log" },
  // docs/webhooks.md
  { key: 'webhooks.manage', description: "Manage the organization's webhooks and read their delivery log" },
] as const satisfies readonly PermissionDefinition[];

/** Keys that only the global superadmin role holds. */
export const GLOBAL_ONLY_PERMISSIONS: ReadonlySet<string> = new Set(['users.read', 'users.manage']);

export const SYSTEM_ROLE_SLUGS = ['owner', 'admin', 'member'] as const;
export type SystemRoleSlug = (typeof SYSTEM_ROLE_SLUGS)[number];
export const SUPERADMIN_ROLE_SLUG = 'superadmin';
export const OWNER_ROLE_SLUG = 'owner';

export interface PermissionCatalog {
  /** Every key, core and host. */
  entries: PermissionDefinition[];
  has(key: string): boolean;
  /** Organization-scoped keys (the owner template). */
  organizationKeys: string[];
  /** The host's keys (`config.permissions`), core keys aside. */
  hostKeys: string[];
  /** The key sets of the system templates cloned into each organization. */
  templates: Record<SystemRoleSlug, { name: string; description: string; keys: string[] }>;
  /**
   * A template's keys with the host keys the database's catalog holds (which start-up
   * synchronised from the configuration) instead of this instance's own.
   */
  templateKeys(slug: SystemRoleSlug, storedHostKeys: readonly string[]): string[];
}

/** The system roles that hold every host key (docs/security.md); `member` holds none. */
export const HOST_KEY_HOLDERS: ReadonlySet<string> = new Set(['owner', 'admin']);

/** docs/sso.md: only with an `sso` config; owner templates hold it, admin does not. */
export const SSO_PERMISSION = { key: 'sso.manage', description: "Manage the organization's verified domains and single sign-on connection" } as const;

export function buildPermissionCatalog(hostPermissions: PermissionDefinition[], features: { sso?: boolean } = {}): PermissionCatalog {
  const core: PermissionDefinition[] = [...CORE_PERMISSIONS, ...(features.sso ? [SSO_PERMISSION] : [])];
  const entries: PermissionDefinition[] = [...core, ...hostPermissions.filter((p) => !core.some((entry) => entry.key === p.key))];
  const keys = new Set(entries.map((entry) => entry.key));
  const organizationKeys = entries.map((entry) => entry.key).filter((key) => !GLOBAL_ONLY_PERMISSIONS.has(key));
  const coreKeys: ReadonlySet<string> = new Set(core.map((entry) => entry.key));
  const hostKeys = entries.map((entry) => entry.key).filter((key) => !coreKeys.has(key));
  const templates: PermissionCatalog['templates'] = {
    owner: { name: 'Owner', description: 'Full control of the organization', keys: organizationKeys },
    admin: { name: 'Admin', description: 'Everything but deleting the organization', keys: organizationKeys.filter((key) => key !== 'org.delete' && key !== SSO_PERMISSION.key) },
    member: { name: 'Member', description: 'Read access to the organization', keys: ['org.read', 'members.read', 'roles.read'] },
  };
  return {
    entries,
    has: (key) => keys.has(key),
    organizationKeys,
    hostKeys,
    templates,
    templateKeys: (slug, storedHostKeys) => [
      ...templates[slug].keys.filter((key) => coreKeys.has(key)),
      ...(HOST_KEY_HOLDERS.has(slug) ? storedHostKeys : []),
    ],
  };
}
