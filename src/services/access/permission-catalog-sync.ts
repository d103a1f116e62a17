import type { Store } from '../../store/store.js';
import { HOST_KEY_HOLDERS, type PermissionCatalog } from './permission-catalog.js';

export interface CatalogChanges {
  added: string[];
  removed: string[];
  /** System roles whose keys changed (0 on a database without organizations). */
  rolesUpdated: number;
}

/**
 * Brings the organizations' system roles in line with `config.permissions`, once per change
 * (docs/organizations.md, "Host permissions"). A host key that the database's catalog does not
 * hold yet is granted to every owner and admin role; a key it holds that the configuration no
 * longer lists is taken out of every system role (custom roles keep it; `requirePermission`
 * refuses it). Keys are compared with the catalog, not with each role, so an admin role an
 * organization trimmed on purpose is not refilled at every start-up.
 *
 * One transaction under the catalog's exclusive lock: instances starting one after the other
 * (or together) apply each change once, and an organization created meanwhile either is
 * updated here or clones the new catalog (OrganizationService.create holds the shared lock).
 */
export async function synchronisePermissionCatalog(store: Store, catalog: PermissionCatalog, now: number): Promise<CatalogChanges> {
  return store.transaction(async (repos) => {
    await repos.hostPermissions.lock('exclusive');
    const stored = new Set(await repos.hostPermissions.keys());
    const configured = new Set(catalog.hostKeys);
    const added = catalog.hostKeys.filter((key) => !stored.has(key));
    const removed = [...stored].filter((key) => !configured.has(key));
    if (added.length === 0 && removed.length === 0) return { added, removed, rolesUpdated: 0 };

    const gone = new Set(removed);
    const rolesByNextKeys = new Map<string, string[]>();
    for (const role of await repos.roles.systemRolesOfOrganizations()) {
      const kept = role.permissionKeys.filter((key) => !gone.has(key));
      const granted = HOST_KEY_HOLDERS.has(role.slug) ? added.filter((key) => !kept.includes(key)) : [];
      if (granted.length === 0 && kept.length === role.permissionKeys.length) continue;
      const nextKeys = JSON.stringify([...kept, ...granted]);
      rolesByNextKeys.set(nextKeys, [...(rolesByNextKeys.get(nextKeys) ?? []), role.id]);
    }
    // Most organizations share one key set per role, so this is a few statements, not one per role.
    for (const [nextKeys, roleIds] of rolesByNextKeys) await repos.roles.setPermissionKeys(roleIds, JSON.parse(nextKeys) as string[], now);
    await repos.hostPermissions.add(added, now);
    await repos.hostPermissions.remove(removed);
    return { added, removed, rolesUpdated: [...rolesByNextKeys.values()].reduce((sum, ids) => sum + ids.length, 0) };
  });
}
