import { randomUUID } from 'node:crypto';
import { apiKeyDigest, newApiKey } from '../../crypto/api-key.js';
import { errors } from '../../errors.js';
import type { ApiKeyRecord } from '../../store/api-key-repository.js';
import { type AccessGrant, managesMembers, organizationOf } from '../access/access-policy.js';
import { assertHoldsEveryKey, type ResolvedAuthority } from '../access/authority.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { isWellFormedId } from '../shared/ids.js';
import { GLOBAL_ONLY_PERMISSIONS, type PermissionCatalog } from '../access/permission-catalog.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { assertUnderQuota } from '../limits/quotas.js';
import { iso, isoOrNull } from '../shared/iso-time.js';
import { ENDED_ROW_RETENTION_MS } from '../shared/occasional.js';

const DAY_SECONDS = 24 * 3600;
/** docs/api-keys.md: every key expires; 90 days unless asked otherwise, never beyond 365. */
export const API_KEY_DEFAULT_TTL_SECONDS = 90 * DAY_SECONDS;
export const API_KEY_MAX_TTL_SECONDS = 365 * DAY_SECONDS;
export const API_KEY_NAME_MAX_LENGTH = 120;
/** A key as lists show it: never the key, never its hash. */
export interface ApiKeyView {
  id: string;
  user_id: string;
  name: string;
  start: string;
  permission_keys: string[];
  expires_at: string;
  created_at: string;
  last_used_at: string | null;
}

/** The answer to creation, the only time the key itself is shown. */
export interface CreatedApiKeyView {
  id: string;
  name: string;
  key: string;
  start: string;
  permission_keys: string[];
  expires_at: string;
  created_at: string;
}

function apiKeyView(key: ApiKeyRecord): ApiKeyView {
  return {
    id: key.id,
    user_id: key.userId,
    name: key.name,
    start: key.start,
    permission_keys: [...key.permissionKeys],
    expires_at: iso(key.expiresAt),
    created_at: iso(key.createdAt),
    last_used_at: isoOrNull(key.lastUsedAt),
  };
}

/**
 * API keys (docs/api-keys.md): a script's credential for the host's own routes, on behalf of one
 * member of one organization. Creating, listing and revoking live here; using a key is the
 * access policy's (`AccessPolicy.authenticateApiKey` and `authorize`), like any other caller.
 */
export class ApiKeyService {
  constructor(
    private readonly context: ServiceContext,
    private readonly catalog: PermissionCatalog,
  ) {}

  /**
   * POST /orgs/{id}/api-keys. The route's requirement (an active member of the active
   * organization, its MFA policy, the credential gate) is met before this runs; the grant's
   * re-check evaluates it again under the user's row lock, with the authority the key is cut from.
   */
  async create(grant: AccessGrant, input: { name: string; permissionKeys: string[]; expiresIn?: number | undefined }, meta: RequestMeta): Promise<CreatedApiKeyView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const permissionKeys = [...new Set(input.permissionKeys)];
    for (const key of permissionKeys) {
      if (GLOBAL_ONLY_PERMISSIONS.has(key)) throw errors.forbidden(`An API key can never hold "${key}".`);
      if (!this.catalog.organizationKeys.includes(key)) throw errors.forbidden(`"${key}" is not an organization permission of the catalog.`);
    }
    const ttlSeconds = input.expiresIn ?? API_KEY_DEFAULT_TTL_SECONDS;
    return runUnitOfWork(this.context, meta, async (uow) => {
      // The organization before the account, as every write in it takes them (docs/database.md):
      // the key's insert takes the organization's key lock, which a member's removal, holding the
      // organization and then ending this caller's sessions, would otherwise meet in a deadlock.
      if (!(await uow.repos.organizations.lockActive(organizationId))) throw errors.notFound('Organization');
      await uow.repos.users.findByIdForUpdate(principal.userId);
      // The re-check evaluates the route's credential gate too, under this lock (docs/security.md).
      const authority = await this.memberAuthority(uow, grant);
      // No escalation: a key carries only what its creator holds now (a superadmin holds everything).
      assertHoldsEveryKey(authority, permissionKeys);
      // Counted under the account's lock taken above, so keys created at once cannot pass the cap.
      assertUnderQuota('apiKeysPerMember', await uow.repos.apiKeys.countLiveForMember(organizationId, principal.userId, uow.now));
      // The quota counts live keys only: without this, revoked keys stayed for ever (docs/api-keys.md).
      await uow.repos.apiKeys.pruneRevokedOfMember(organizationId, principal.userId, uow.now - ENDED_ROW_RETENTION_MS);
      const { key, start } = newApiKey();
      const id = randomUUID();
      const expiresAt = uow.now + ttlSeconds * 1000;
      await uow.repos.apiKeys.insert({ id, userId: principal.userId, organizationId, name: input.name, keyHash: this.hashOf(key), start, permissionKeys, now: uow.now, expiresAt });
      await uow.emit({ type: 'api_key.created', actorId: principal.userId, userId: principal.userId, organizationId, data: { api_key_id: id, name: input.name } });
      return { id, name: input.name, key, start, permission_keys: permissionKeys, expires_at: iso(expiresAt), created_at: iso(uow.now) };
    });
  }

  /**
   * GET /orgs/{id}/api-keys: the caller's own keys; with members.update, every member's. A read
   * guards no write, so the viewer's authority comes through the access cache the route's
   * requirement was just evaluated with, as the member page's does.
   */
  async list(grant: AccessGrant): Promise<ApiKeyView[]> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const everyone = managesMembers(grant.authority!);
    return (await this.context.store.repos.apiKeys.listInOrganization(organizationId, everyone ? undefined : principal.userId)).map(apiKeyView);
  }

  /**
   * DELETE /orgs/{id}/api-keys/{keyId}: the key's owner, or a holder of members.update.
   * Someone else's key reads as 404 to a caller who may not touch it. Revoking twice answers
   * the same and emits once.
   */
  async revoke(grant: AccessGrant, keyId: string, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const authority = await this.memberAuthority(uow, grant);
      const key = isWellFormedId(keyId) ? await uow.repos.apiKeys.findInOrganization(organizationId, keyId) : undefined;
      if (!key || (key.userId !== principal.userId && !managesMembers(authority))) throw errors.notFound('API key');
      if (await uow.repos.apiKeys.revoke(key.id, uow.now, key.userId === principal.userId ? 'revoked_by_owner' : 'revoked_by_admin')) {
        await uow.emit({ type: 'api_key.revoked', actorId: principal.userId, userId: key.userId, organizationId, data: { api_key_id: key.id, name: key.name, reason: key.userId === principal.userId ? 'revoked_by_owner' : 'revoked_by_admin' } });
      }
    });
  }

  /**
   * The caller's authority in the organization, read again in the transaction whose write it
   * guards: the route's requirement was met a moment before, and a membership that ended
   * since must not mint or revoke anything.
   */
  private async memberAuthority(uow: UnitOfWork, grant: AccessGrant): Promise<ResolvedAuthority> {
    const [organization, authority] = await Promise.all([uow.repos.organizations.findActive(organizationOf(grant)), grant.recheck(uow.repos)]);
    if (!organization) throw errors.notFound('Organization');
    return authority;
  }

  private hashOf(key: string): string {
    return apiKeyDigest(this.context.keys.apiKeyHash, key);
  }
}

/**
 * A membership that ends takes its keys with it (docs/api-keys.md): called inside the unit of
 * work that removes the member, so the revocation commits with the removal.
 */
export async function revokeKeysOfMember(uow: UnitOfWork, organizationId: string, userId: string, actorId: string | null, reason: string): Promise<void> {
  for (const key of await uow.repos.apiKeys.revokeAllForMember(organizationId, userId, uow.now, reason)) {
    await uow.emit({ type: 'api_key.revoked', actorId, userId, organizationId, data: { api_key_id: key.id, name: key.name, reason } });
  }
}

/**
 * Every key of a user, in every organization, with an `api_key.revoked` event each: account
 * recovery (`password_reset`, docs/api-keys.md) and the first proof of the address (`email_proven`,
 * docs/api-keys.md). Answers how many keys it revoked.
 */
export async function revokeKeysOfUser(uow: UnitOfWork, userId: string, actorId: string | null, reason: 'password_reset' | 'email_proven'): Promise<number> {
  const keys = await uow.repos.apiKeys.revokeAllForUser(userId, uow.now, reason);
  for (const key of keys) {
    await uow.emit({ type: 'api_key.revoked', actorId, userId, organizationId: key.organizationId, data: { api_key_id: key.id, name: key.name, reason } });
  }
  return keys.length;
}
