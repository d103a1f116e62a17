import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export type DomainStatus = 'pending' | 'verified';

export interface OrgDomainRecord {
  id: string;
  organizationId: string;
  domain: string;
  status: DomainStatus;
  txtValue: string;
  verifiedAt: number | null;
  createdAt: number;
}

export type TokenEndpointAuthMethod = 'client_secret_basic' | 'client_secret_post';

export interface SsoConnectionRecord {
  id: string;
  organizationId: string;
  issuer: string;
  clientId: string;
  clientSecretEnc: string;
  scopes: string[];
  tokenEndpointAuthMethod: TokenEndpointAuthMethod;
  enabled: boolean;
  jit: boolean;
  defaultRole: string;
  enforce: boolean;
  createdAt: number;
  updatedAt: number;
}

export interface SsoIdentityRecord {
  id: string;
  connectionId: string;
  userId: string;
  issuer: string;
  subject: string;
  email: string | null;
  createdAt: number;
  lastLoginAt: number | null;
}

function mapDomain(row: Record<string, unknown>): OrgDomainRecord {
  return {
    id: String(row.id),
    organizationId: String(row.organization_id),
    domain: String(row.domain),
    status: row.status as DomainStatus,
    txtValue: String(row.txt_value),
    verifiedAt: toNullableNumber(row.verified_at),
    createdAt: toNumber(row.created_at),
  };
}

function mapConnection(row: Record<string, unknown>): SsoConnectionRecord {
  return {
    id: String(row.id),
    organizationId: String(row.organization_id),
    issuer: String(row.issuer),
    clientId: String(row.client_id),
    clientSecretEnc: String(row.client_secret_enc),
    scopes: JSON.parse(String(row.scopes)) as string[],
    tokenEndpointAuthMethod: row.token_endpoint_auth_method as TokenEndpointAuthMethod,
    enabled: toBoolean(row.enabled),
    jit: toBoolean(row.jit),
    defaultRole: String(row.default_role),
    enforce: toBoolean(row.enforce),
    createdAt: toNumber(row.created_at),
    updatedAt: toNumber(row.updated_at),
  };
}

function mapIdentity(row: Record<string, unknown>): SsoIdentityRecord {
  return {
    id: String(row.id),
    connectionId: String(row.connection_id),
    userId: String(row.user_id),
    issuer: String(row.issuer),
    subject: String(row.subject),
    email: (row.email as string | null) ?? null,
    createdAt: toNumber(row.created_at),
    lastLoginAt: toNullableNumber(row.last_login_at),
  };
}

/** Domains an organization claims, and their DNS TXT proof (docs/sso.md). */
export class OrgDomainRepository extends Repository {
  async listForOrganization(organizationId: string): Promise<OrgDomainRecord[]> {
    const rows = await this.db(this.table.orgDomains).where({ organization_id: organizationId }).orderBy([{ column: 'created_at' }, { column: 'id' }]);
    return rows.map(mapDomain);
  }

  /** Domains of the organization, pending or verified, for its quota (read after lockActive). */
  async countForOrganization(organizationId: string): Promise<number> {
    const row = await this.db(this.table.orgDomains).where({ organization_id: organizationId }).count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  async findInOrganization(organizationId: string, id: string): Promise<OrgDomainRecord | undefined> {
    const row = await this.db(this.table.orgDomains).where({ organization_id: organizationId, id }).first();
    return row ? mapDomain(row) : undefined;
  }

  /** The one verified holder of a domain, if any (the unique index on `verified_domain` keeps it one). */
  async findVerified(domain: string): Promise<OrgDomainRecord | undefined> {
    const row = await this.db(this.table.orgDomains).where({ verified_domain: domain }).first();
    return row ? mapDomain(row) : undefined;
  }

  async hasVerified(organizationId: string): Promise<boolean> {
    return (await this.db(this.table.orgDomains).where({ organization_id: organizationId, status: 'verified' }).first()) !== undefined;
  }

  async listVerifiedDomains(organizationId: string): Promise<string[]> {
    const rows = await this.db(this.table.orgDomains).where({ organization_id: organizationId, status: 'verified' }).select('domain');
    return rows.map((row: { domain: string }) => row.domain);
  }

  /** False when the organization already holds the domain (unique per organization). */
  async insertIfAbsent(domain: { id: string; organizationId: string; domain: string; txtValue: string; now: number }): Promise<boolean> {
    const inserted = await this.db(this.table.orgDomains)
      .insert({ id: domain.id, organization_id: domain.organizationId, domain: domain.domain, status: 'pending', txt_value: domain.txtValue, verified_domain: null, verified_at: null, created_at: domain.now })
      .onConflict()
      .ignore()
      .returning('id');
    return inserted.length === 1;
  }

  /** Marks the domain verified; false when another organization verified it first (unique `verified_domain`). */
  async markVerified(id: string, domain: string, now: number): Promise<boolean> {
    const taken = await this.findVerified(domain);
    if (taken && taken.id !== id) return false;
    const changed = await this.db(this.table.orgDomains)
      .where({ id, status: 'pending' })
      .whereNotExists(this.db(`${this.table.orgDomains} as other`).where('other.verified_domain', domain).select(this.db.raw('1')))
      .update({ status: 'verified', verified_domain: domain, verified_at: now });
    return changed === 1;
  }

  async delete(organizationId: string, id: string): Promise<boolean> {
    return (await this.db(this.table.orgDomains).where({ organization_id: organizationId, id }).delete()) === 1;
  }

  async deleteAllOfOrganization(organizationId: string): Promise<number> {
    return this.db(this.table.orgDomains).where({ organization_id: organizationId }).delete();
  }
}

/** The organization's OpenID provider (docs/sso.md); one per organization. */
export class SsoConnectionRepository extends Repository {
  async findForOrganization(organizationId: string): Promise<SsoConnectionRecord | undefined> {
    const row = await this.db(this.table.ssoConnections).where({ organization_id: organizationId }).first();
    return row ? mapConnection(row) : undefined;
  }

  async findById(id: string): Promise<SsoConnectionRecord | undefined> {
    const row = await this.db(this.table.ssoConnections).where({ id }).first();
    return row ? mapConnection(row) : undefined;
  }

  /**
   * docs/sso.md: every organization's `owner` system role holds `sso.manage` once `sso` is
   * configured, organizations created before it included. Idempotent; answers how many changed.
   */
  async grantToOwnerRoles(key: string, now: number): Promise<number> {
    const rows = await this.db(this.table.roles).where({ slug: 'owner', is_system: true }).whereNotNull('organization_id').select('id', 'permission_keys');
    let changed = 0;
    for (const row of rows as Array<{ id: string; permission_keys: string }>) {
      const keys = JSON.parse(row.permission_keys) as string[];
      if (keys.includes(key)) continue;
      await this.db(this.table.roles).where({ id: row.id }).update({ permission_keys: JSON.stringify([...keys, key]), updated_at: now });
      changed += 1;
    }
    return changed;
  }

  async organizationIdForSlug(slug: string): Promise<string | undefined> {
    const row = await this.db(this.table.organizations).where({ slug }).whereNull('deleted_at').first('id');
    return row ? String(row.id) : undefined;
  }

  /** False when the organization already has one. */
  async insertIfAbsent(connection: SsoConnectionRecord): Promise<boolean> {
    const inserted = await this.db(this.table.ssoConnections).insert(toRow(connection)).onConflict().ignore().returning('id');
    return inserted.length === 1;
  }

  async update(connection: SsoConnectionRecord): Promise<void> {
    const { id: _id, organization_id: _organization, created_at: _created, ...changes } = toRow(connection);
    await this.db(this.table.ssoConnections).where({ id: connection.id }).update(changes);
  }

  /** The connection removed, or undefined when there was none or a concurrent delete removed it first. */
  async delete(organizationId: string): Promise<SsoConnectionRecord | undefined> {
    const found = await this.findForOrganization(organizationId);
    if (!found) return undefined;
    return (await this.db(this.table.ssoConnections).where({ id: found.id }).delete()) === 1 ? found : undefined;
  }

  /**
   * The enforcing connection whose organization verified `domain` (docs/sso.md): enabled,
   * `enforce` on, and the domain verified by that organization (so the connection is active).
   */
  async findEnforcingForDomain(domain: string): Promise<{ connectionId: string; organizationId: string; organizationSlug: string } | undefined> {
    const row = await this.db(`${this.table.orgDomains} as d`)
      .join(`${this.table.ssoConnections} as c`, 'c.organization_id', 'd.organization_id')
      .join(`${this.table.organizations} as o`, 'o.id', 'd.organization_id')
      .where('d.verified_domain', domain)
      .andWhere('c.enabled', true)
      .andWhere('c.enforce', true)
      .whereNull('o.deleted_at')
      .first('c.id as connection_id', 'o.id as organization_id', 'o.slug as slug');
    return row ? { connectionId: String(row.connection_id), organizationId: String(row.organization_id), organizationSlug: String(row.slug) } : undefined;
  }
}

function toRow(connection: SsoConnectionRecord): Record<string, unknown> {
  return {
    id: connection.id,
    organization_id: connection.organizationId,
    issuer: connection.issuer,
    client_id: connection.clientId,
    client_secret_enc: connection.clientSecretEnc,
    scopes: JSON.stringify(connection.scopes),
    token_endpoint_auth_method: connection.tokenEndpointAuthMethod,
    enabled: connection.enabled,
    jit: connection.jit,
    default_role: connection.defaultRole,
    enforce: connection.enforce,
    created_at: connection.createdAt,
    updated_at: connection.updatedAt,
  };
}

/** Users known to a connection by the IdP's subject (docs/sso.md step 2). */
export class SsoIdentityRepository extends Repository {
  /** Keyed by (connection, subject): a subject seen through another connection is another identity. */
  async findByConnectionSubject(connectionId: string, subject: string): Promise<SsoIdentityRecord | undefined> {
    const row = await this.db(this.table.ssoIdentities).where({ connection_id: connectionId, subject }).first();
    return row ? mapIdentity(row) : undefined;
  }

  async findForUser(connectionId: string, userId: string): Promise<SsoIdentityRecord | undefined> {
    const row = await this.db(this.table.ssoIdentities).where({ connection_id: connectionId, user_id: userId }).first();
    return row ? mapIdentity(row) : undefined;
  }

  /** False when the subject or the user's slot at this connection is taken (both unique): a concurrent first sign-in won. */
  async insertIfFree(identity: SsoIdentityRecord): Promise<boolean> {
    const inserted = await this.db(this.table.ssoIdentities)
      .insert({
        id: identity.id,
        connection_id: identity.connectionId,
        user_id: identity.userId,
        issuer: identity.issuer,
        subject: identity.subject,
        email: identity.email,
        created_at: identity.createdAt,
        last_login_at: identity.lastLoginAt,
      })
      .onConflict()
      .ignore()
      .returning('id');
    return inserted.length === 1;
  }

  /** An account's deletion (docs/security.md "Deleted users"): its identities go with it, as its social links do. */
  async deleteAllForUser(userId: string): Promise<void> {
    await this.db(this.table.ssoIdentities).where({ user_id: userId }).delete();
  }

  async recordLogin(id: string, email: string, now: number): Promise<void> {
    await this.db(this.table.ssoIdentities).where({ id }).update({ email, last_login_at: now });
  }

  async markSessionOpenedThrough(sessionId: string, connectionId: string): Promise<void> {
    await this.db(this.table.sessions).where({ id: sessionId }).update({ sso_connection_id: connectionId });
  }

  async sessionConnection(sessionId: string): Promise<string | null> {
    const row = await this.db(this.table.sessions).where({ id: sessionId }).first('sso_connection_id');
    return (row?.sso_connection_id as string | null | undefined) ?? null;
  }
}
