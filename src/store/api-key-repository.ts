import type { Knex } from 'knex';
import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export interface ApiKeyRecord {
  id: string;
  userId: string;
  organizationId: string;
  name: string;
  start: string;
  permissionKeys: string[];
  createdAt: number;
  expiresAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
}

export interface NewApiKey {
  id: string;
  userId: string;
  organizationId: string;
  name: string;
  keyHash: string;
  start: string;
  permissionKeys: string[];
  now: number;
  expiresAt: number;
}

/** A key found by its hash, with what decides on every use whether it still works. */
export interface ApiKeyForUse {
  key: ApiKeyRecord;
  owner: { status: string; deletedAt: number | null; lockedUntil: number | null; mfaEnforced: boolean; hasConfirmedFactor: boolean; inMfaRequiringOrganization: boolean };
  organizationActive: boolean;
}

const KEY_COLUMNS = ['id', 'user_id', 'organization_id', 'name', 'start', 'permission_keys', 'created_at', 'expires_at', 'last_used_at', 'revoked_at'] as const;

function mapApiKey(row: Record<string, unknown>): ApiKeyRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    organizationId: String(row.organization_id),
    name: String(row.name),
    start: String(row.start),
    permissionKeys: JSON.parse(String(row.permission_keys)) as string[],
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
    lastUsedAt: toNullableNumber(row.last_used_at),
    revokedAt: toNullableNumber(row.revoked_at),
  };
}

export class ApiKeyRepository extends Repository {
  async insert(key: NewApiKey): Promise<void> {
    await this.db(this.table.apiKeys).insert({
      id: key.id,
      user_id: key.userId,
      organization_id: key.organizationId,
      name: key.name,
      key_hash: key.keyHash,
      start: key.start,
      permission_keys: JSON.stringify(key.permissionKeys),
      created_at: key.now,
      expires_at: key.expiresAt,
    });
  }

  /**
   * The one lookup on every use: the unique hash index finds the key, and the same round
   * trip brings the owner's state, the organization's state and the two facts the MFA
   * enrollment gate needs, so a key costs no more queries than an access token.
   */
  async findForUse(keyHash: string): Promise<ApiKeyForUse | undefined> {
    const factors = this.db(this.table.mfaFactors).whereRaw('?? = ??', ['user_id', 'k.user_id']).whereNotNull('confirmed_at').select(this.db.raw('1'));
    const mfaOrganizations = this.db(`${this.table.memberships} as mm`)
      .join(`${this.table.organizations} as mo`, 'mo.id', 'mm.organization_id')
      .whereRaw('?? = ??', ['mm.user_id', 'k.user_id'])
      .where({ 'mm.status': 'active', 'mo.status': 'active', 'mo.require_mfa': true })
      .select(this.db.raw('1'));
    const row = await this.db(`${this.table.apiKeys} as k`)
      .join(`${this.table.users} as u`, 'u.id', 'k.user_id')
      .join(`${this.table.organizations} as o`, 'o.id', 'k.organization_id')
      .where('k.key_hash', keyHash)
      .first([
        ...KEY_COLUMNS.map((column) => `k.${column}`),
        'u.status as user_status',
        'u.deleted_at as user_deleted_at',
        'u.locked_until as user_locked_until',
        'u.mfa_enforced as user_mfa_enforced',
        'o.status as organization_status',
        this.db.raw('(case when exists ? then 1 else 0 end) as has_confirmed_factor', [factors]),
        this.db.raw('(case when exists ? then 1 else 0 end) as in_mfa_organization', [mfaOrganizations]),
      ]);
    if (!row) return undefined;
    return {
      key: mapApiKey(row),
      owner: {
        status: String(row.user_status),
        deletedAt: toNullableNumber(row.user_deleted_at),
        lockedUntil: toNullableNumber(row.user_locked_until),
        mfaEnforced: toBoolean(row.user_mfa_enforced),
        hasConfirmedFactor: toNumber(row.has_confirmed_factor) === 1,
        inMfaRequiringOrganization: toNumber(row.in_mfa_organization) === 1,
      },
      organizationActive: row.organization_status === 'active',
    };
  }

  async findInOrganization(organizationId: string, id: string): Promise<ApiKeyRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.apiKeys).where({ id, organization_id: organizationId })).first(KEY_COLUMNS);
    return row ? mapApiKey(row) : undefined;
  }

  /** Keys not revoked, newest first; one user's, or (`userId` undefined) every member's. */
  async listInOrganization(organizationId: string, userId: string | undefined): Promise<ApiKeyRecord[]> {
    const query = this.db(this.table.apiKeys)
      .where({ organization_id: organizationId })
      .whereNull('revoked_at')
      .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }])
      .select(KEY_COLUMNS);
    if (userId !== undefined) query.andWhere({ user_id: userId });
    return (await query).map(mapApiKey);
  }

  /**
   * Drops one member's keys in one organization revoked before `before`: such a key answers 401
   * as an unknown one does. Only revoked ones: a revocation is an act, while an expiry is read
   * off the clock, and a clock stepped far ahead on one instance would otherwise delete every
   * live key of the member for good (test/platform/expiry-boundaries.test.ts). Served by the
   * `(organization_id, user_id)` index.
   */
  async pruneRevokedOfMember(organizationId: string, userId: string, before: number): Promise<void> {
    await this.db(this.table.apiKeys).where({ organization_id: organizationId, user_id: userId }).andWhere('revoked_at', '<=', before).delete();
  }

  /** Keys of one member of one organization that still work: neither revoked nor expired (the quota of docs/security.md). */
  async countLiveForMember(organizationId: string, userId: string, now: number): Promise<number> {
    const row = await this.db(this.table.apiKeys)
      .where({ organization_id: organizationId, user_id: userId })
      .whereNull('revoked_at')
      .andWhere('expires_at', '>', now)
      .count({ count: '*' })
      .first();
    return toNumber(row?.count ?? 0);
  }

  /** Answers whether this call revoked it (a key is revoked once). */
  async revoke(id: string, now: number, reason: string): Promise<boolean> {
    return (await this.db(this.table.apiKeys).where({ id }).whereNull('revoked_at').update({ revoked_at: now, revoked_reason: reason })) === 1;
  }

  /** Revokes every live key of one member of one organization; answers the keys it revoked. */
  async revokeAllForMember(organizationId: string, userId: string, now: number, reason: string): Promise<ApiKeyRecord[]> {
    return this.revokeLive(this.db(this.table.apiKeys).where({ organization_id: organizationId, user_id: userId }), now, reason);
  }

  /** Every live key of a user, in every organization (account recovery, the first proof of the address). */
  async revokeAllForUser(userId: string, now: number, reason: string): Promise<ApiKeyRecord[]> {
    return this.revokeLive(this.db(this.table.apiKeys).where({ user_id: userId }), now, reason);
  }

  /**
   * One conditional update that answers the rows it changed: a key revoked by another request
   * between a read of the live keys and their update would otherwise be answered here too, and
   * get a second `api_key.revoked` (PostgreSQL re-checks `revoked_at` after waiting on its row).
   */
  private async revokeLive(keys: Knex.QueryBuilder, now: number, reason: string): Promise<ApiKeyRecord[]> {
    const revoked = (await keys.whereNull('revoked_at').update({ revoked_at: now, revoked_reason: reason }).returning([...KEY_COLUMNS])) as Array<Record<string, unknown>>;
    return revoked.map(mapApiKey);
  }

  async revokeAllForOrganization(organizationId: string, now: number, reason: string): Promise<number> {
    return this.db(this.table.apiKeys).where({ organization_id: organizationId }).whereNull('revoked_at').update({ revoked_at: now, revoked_reason: reason });
  }

  /** A deleted user's keys go with the rest of their data (the user row stays as a tombstone). */
  async deleteAllForUser(userId: string): Promise<number> {
    return this.db(this.table.apiKeys).where({ user_id: userId }).delete();
  }

  /**
   * Records a use at most once per `intervalMs` per key, across instances: the condition in
   * the WHERE makes concurrent requests write once.
   */
  async touchLastUsed(id: string, now: number, intervalMs: number): Promise<void> {
    await this.db(this.table.apiKeys)
      .where({ id })
      .andWhere((q) => q.whereNull('last_used_at').orWhere('last_used_at', '<=', now - intervalMs))
      .update({ last_used_at: now });
  }
}
