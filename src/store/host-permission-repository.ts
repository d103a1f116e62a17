import { Repository } from './repository.js';

/** First half of the two-key advisory lock on the host permission catalog (see startup-lock.ts for the start-up lock's). */
const CATALOG_LOCK_CLASS = 0x1d3e7002;

/** The host permission keys the system roles were last synchronised with (migration 011). */
export class HostPermissionRepository extends Repository {
  /**
   * Holds the catalog until the transaction ends: `exclusive` while start-up synchronises the
   * system roles, `shared` while an organization is created from the templates. A creation
   * therefore either commits before the synchronisation reads the roles (and is updated by
   * it) or reads the catalog after it (and clones the new keys). SQLite serialises writers
   * already.
   */
  async lock(mode: 'shared' | 'exclusive'): Promise<void> {
    if (this.dialect !== 'pg') return;
    const lockFunction = mode === 'shared' ? 'pg_advisory_xact_lock_shared' : 'pg_advisory_xact_lock';
    await this.db.raw(`select ${lockFunction}(?, hashtext(?))`, [CATALOG_LOCK_CLASS, this.table.hostPermissions]);
  }

  async keys(): Promise<string[]> {
    const rows = await this.db(this.table.hostPermissions).select('key').orderBy('key');
    return rows.map((row) => String(row.key));
  }

  async add(keys: string[], now: number): Promise<void> {
    if (keys.length > 0) await this.db(this.table.hostPermissions).insert(keys.map((key) => ({ key, added_at: now }))).onConflict('key').ignore();
  }

  async remove(keys: string[]): Promise<void> {
    if (keys.length > 0) await this.db(this.table.hostPermissions).whereIn('key', keys).delete();
  }
}
