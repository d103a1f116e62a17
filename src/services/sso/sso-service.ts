import { randomBytes, randomUUID } from 'node:crypto';
import type { SignInRules } from '../access/sign-in-rules.js';
import { resolveTxt as systemResolveTxt } from 'node:dns/promises';
import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';
import type * as OpenIdClient from 'openid-client';
import { getPublicSuffix } from 'tldts';
import type { DnsResolver } from '../../adapters/types.js';
import { type ResolvedSsoConfig, ssoCallbackUrl } from '../../config/sso.js';
import { decrypt, encrypt } from '../../crypto/aead.js';
import { isUniqueViolation } from '../../database-errors.js';
import { errors, type IdentityError } from '../../errors.js';
import { guardedFetch } from '../../outbound/guarded-fetch.js';
import { OutboundFailure, OutboundGuard, OutboundRefusal } from '../../outbound/outbound-guard.js';
import type { SocialFlowRecord } from '../../store/social-repository.js';
import type { OrgDomainRecord, SsoConnectionRecord, TokenEndpointAuthMethod } from '../../store/sso-repository.js';
import type { Repositories } from '../../store/store.js';
import type { UserRecord } from '../../store/user-repository.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { type AccessGrant, assertFitsSsoDefaultRole, organizationOf } from '../access/access-policy.js';
import { assertHoldsEveryKey, type ResolvedAuthority } from '../access/authority.js';
import {
  type AuthorizationStart,
  type CallbackParameters,
  exchangeError,
  type FederatedFlows,
  FederatedRefusal,
  type FlowTarget,
  invalidExchangeCode,
  type ProviderClaims,
  RESOLUTION_ATTEMPTS,
  ResolutionConflict,
} from '../social/federated-flow.js';
import { addressDomain, domainForm, mailboxOf, mailboxSpellings, normaliseEmail, providerDisplayName } from '../shared/identity-rules.js';
import { iso } from '../shared/iso-time.js';
import { settleWithin } from '../shared/settle-within.js';
import { type LoginResult, loginFailed } from '../sessions/sign-in-result.js';
import { loadOpenIdClient, type ProviderConfiguration, providerUnavailable } from '../social/social-provider-client.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { TOMBSTONE_EMAIL_DOMAIN } from '../accounts/user-admin-service.js';
import { assertUnderQuota } from '../limits/quotas.js';

/** The flow key of every single sign-on flow; never a social provider id (those match `[a-z0-9-]`). */
export const SSO_FLOW_KEY = '@sso';
const HTTP_TIMEOUT_MS = 10_000;
/** A TXT query unanswered within this bound is a DNS error (422 `domain_not_verified`), never a hang. */
const TXT_TIMEOUT_MS = 10_000;
const CLOCK_TOLERANCE_SECONDS = 30;
const DISCOVERY_CACHE_MS = 60 * 60 * 1000;
const DEFAULT_SCOPES = ['openid', 'email', 'profile'];

/** Bundled consumer-mail domains (docs/sso.md): no organization owns its users' addresses there. */
export const CONSUMER_MAIL_DOMAINS: ReadonlySet<string> = new Set([
  'gmail.com', 'googlemail.com', 'outlook.com', 'hotmail.com', 'live.com', 'msn.com', 'yahoo.com', 'ymail.com',
  'icloud.com', 'me.com', 'mac.com', 'aol.com', 'proton.me', 'protonmail.com', 'pm.me', 'gmx.com', 'gmx.de', 'gmx.net',
  'web.de', 'mail.com', 'yandex.com', 'yandex.ru', 'mail.ru', 'zoho.com', 'fastmail.com', 'hey.com', 'tutanota.com',
  'qq.com', '163.com', '126.com', 'naver.com', 'hotmail.co.uk', 'yahoo.co.uk', 'yahoo.fr', 'orange.fr', 'free.fr',
  't-online.de', 'libero.it', 'comcast.net', 'verizon.net', 'att.net',
]);

/** `domain` of docs/sso.md. */
export interface DomainView {
  id: string;
  domain: string;
  status: 'pending' | 'verified';
  txt_name: string;
  txt_value: string;
  verified_at: string | null;
  created_at: string;
}

/** `connection` of docs/sso.md; the client secret is never part of it. */
export interface ConnectionView {
  id: string;
  issuer: string;
  client_id: string;
  scopes: string[];
  token_endpoint_auth_method: TokenEndpointAuthMethod;
  redirect_uri: string;
  enabled: boolean;
  status: 'active' | 'inactive';
  jit: boolean;
  default_role: string;
  enforce: boolean;
  created_at: string;
  updated_at: string;
}

export interface ConnectionInput {
  issuer?: string | undefined;
  client_id?: string | undefined;
  client_secret?: string | undefined;
  scopes?: string[] | undefined;
  token_endpoint_auth_method?: TokenEndpointAuthMethod | undefined;
  enabled?: boolean | undefined;
  jit?: boolean | undefined;
  default_role?: string | undefined;
  enforce?: boolean | undefined;
}

export interface SsoLoginResult {
  login: LoginResult;
  isNewUser: boolean;
  organizationId: string;
}

type IssuerRefusalReason = 'insecure_scheme' | 'private_address' | 'discovery_failed' | 'issuer_mismatch';

function invalidIssuer(reason: IssuerRefusalReason, message: string): IdentityError {
  return errors.invalidIssuer(message, reason);
}

function invalidDomain(message: string): IdentityError {
  return errors.invalidDomain(message);
}

function ssoNotConfigured(): IdentityError {
  return errors.ssoNotConfigured();
}

/**
 * Single sign-on per organization (docs/sso.md): verified domains, the organization's own
 * OpenID provider behind the outbound guard, identifier-first sign-in through the federated
 * flows of section 9, and JIT membership. Enforcement lives in SignInRules.
 */
export class SsoService {
  private readonly guard: OutboundGuard;
  private readonly resolveTxt: (name: string) => Promise<string[][]>;
  private readonly configurations = new Map<string, { version: number; configuration: ProviderConfiguration; expiresAt: number }>();
  /** Discoveries under way, per connection and version: sign-ins that find none cached wait for the one in flight. */
  private readonly discovering = new Map<string, Promise<ProviderConfiguration>>();
  /** `blockedDomains` as domains are compared: an entry written in Unicode, or with a trailing dot, still blocks. */
  private readonly blockedDomains: ReadonlySet<string>;

  constructor(
    private readonly context: ServiceContext,
    private readonly sso: ResolvedSsoConfig,
    private readonly flows: FederatedFlows,
    private readonly signInRules: SignInRules,
    dns: DnsResolver | undefined,
  ) {
    this.guard = new OutboundGuard({ allowHttp: false, allowPrivateNetworks: sso.allowPrivateNetworks }, dns);
    this.resolveTxt = dns?.resolveTxt ? (name) => dns.resolveTxt!(name) : systemResolveTxt;
    this.blockedDomains = new Set(sso.blockedDomains.map((entry) => domainForm(entry) ?? entry));
  }

  // ---------------------------------------------------------------- domains

  async addDomain(grant: AccessGrant, input: string, meta: RequestMeta): Promise<DomainView> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    const domain = this.normaliseDomain(input);
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.recheck(uow, grant);
      if (await uow.repos.orgDomains.findVerified(domain).then((found) => found && found.organizationId !== organizationId)) throw domainTaken();
      const id = randomUUID();
      // ≥ 128 bits, unique per row (a unique index backs it).
      const txtValue = `identity-router-verification=${randomBytes(24).toString('base64url')}`;
      // Counted under the organization's lock `recheck` took, so domains added at once cannot pass the cap.
      assertUnderQuota('domainsPerOrganization', await uow.repos.orgDomains.countForOrganization(organizationId));
      if (!(await uow.repos.orgDomains.insertIfAbsent({ id, organizationId, domain, txtValue, now: uow.now }))) throw errors.conflict('The organization already holds this domain.');
      await uow.emit({ type: 'org.domain_added', actorId, organizationId, data: { domain_id: id, domain } });
      const added = await uow.repos.orgDomains.findInOrganization(organizationId, id);
      return this.domainView(added!);
    });
  }

  async listDomains(grant: AccessGrant): Promise<DomainView[]> {
    return (await this.context.store.repos.orgDomains.listForOrganization(organizationOf(grant))).map((domain) => this.domainView(domain));
  }

  /** On demand only; a verified domain answers without asking DNS again (docs/sso.md). */
  async verifyDomain(grant: AccessGrant, domainId: string, meta: RequestMeta): Promise<DomainView> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    const repos = this.context.store.repos;
    const domain = await repos.orgDomains.findInOrganization(organizationId, domainId);
    if (!domain) throw errors.notFound('Domain');
    if (domain.status === 'verified') return this.domainView(domain);
    const taken = await repos.orgDomains.findVerified(domain.domain);
    if (taken && taken.organizationId !== organizationId) throw domainTaken();
    let records: string[][];
    try {
      records = await settleWithin(this.resolveTxt(this.txtName(domain.domain)), TXT_TIMEOUT_MS, `TXT query unanswered after ${TXT_TIMEOUT_MS} ms`);
    } catch {
      records = [];
    }
    // A TXT record may arrive in several chunks of at most 255 octets; they are one value.
    if (!Array.isArray(records) || !records.some((chunks) => Array.isArray(chunks) && chunks.join('') === domain.txtValue)) {
      throw errors.domainNotVerified(`No TXT record at ${this.txtName(domain.domain)} holds this domain's verification value yet.`);
    }
    try {
      return await runUnitOfWork(this.context, meta, async (uow) => {
        // The DNS answer took time: whoever asked may have lost sso.manage meanwhile.
        await this.recheck(uow, grant);
        if (!(await uow.repos.orgDomains.markVerified(domain.id, domain.domain, uow.now))) throw new VerificationLost();
        await uow.emit({ type: 'org.domain_verified', actorId, organizationId, data: { domain_id: domain.id, domain: domain.domain } });
        return this.domainView((await uow.repos.orgDomains.findInOrganization(organizationId, domain.id))!);
      });
    } catch (error) {
      // Two verifies at once: the unique index on verified rows lets one win (on PostgreSQL the
      // loser may meet it as a unique violation). The loser answers from the row as it now is:
      // verified by a request of its own organization (200), or taken by another (409).
      if (!(error instanceof VerificationLost) && !isUniqueViolation(error)) throw error;
      const now = await repos.orgDomains.findInOrganization(organizationId, domain.id);
      if (!now) throw errors.notFound('Domain');
      if (now.status === 'verified') return this.domainView(now);
      throw domainTaken();
    }
  }

  async deleteDomain(grant: AccessGrant, domainId: string, meta: RequestMeta): Promise<void> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    await runUnitOfWork(this.context, meta, async (uow) => {
      await this.recheck(uow, grant);
      const domain = await uow.repos.orgDomains.findInOrganization(organizationId, domainId);
      if (!domain || !(await uow.repos.orgDomains.delete(organizationId, domainId))) throw errors.notFound('Domain');
      await uow.emit({ type: 'org.domain_removed', actorId, organizationId, data: { domain_id: domain.id, domain: domain.domain } });
    });
  }

  /**
   * Trim, lower-case, one trailing dot dropped, IDNA A-label; refused (422 `invalid_domain`):
   * not a hostname, a single label, an IP literal, a public suffix (private section
   * included), a consumer-mail or blocked domain, the tombstone domain.
   */
  normaliseDomain(input: string): string {
    let raw = input.trim().toLowerCase();
    if (raw.endsWith('.')) raw = raw.slice(0, -1);
    if (raw.startsWith('[') || isIP(raw) !== 0 || /^[0-9.]+$/.test(raw) || /^0x/i.test(raw)) throw invalidDomain('An IP address is not a domain.');
    // domainToASCII parses a URL's host: it would cut `acme.com/x`, `acme.com?x` or `acme.com#x`
    // at the delimiter and decode `%6d`, turning what is no host name into one.
    if (/[\s/\\?#@:%]/.test(raw)) throw invalidDomain('The domain is not a valid host name.');
    const domain = domainToASCII(raw);
    if (!domain || isIP(domain) !== 0) throw invalidDomain('The domain is not a valid host name.');
    const labels = domain.split('.');
    if (domain.length > 253 || labels.some((label) => !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(label))) throw invalidDomain('The domain is not a valid host name.');
    if (labels.length < 2) throw invalidDomain('A single-label name is not a domain an organization can own.');
    if (getPublicSuffix(domain, { allowPrivateDomains: true }) === domain) throw invalidDomain('A public suffix is not a domain an organization can own.');
    if (CONSUMER_MAIL_DOMAINS.has(domain) || this.blockedDomains.has(domain) || domain === TOMBSTONE_EMAIL_DOMAIN) {
      throw invalidDomain('Consumer e-mail domains cannot be claimed by an organization.');
    }
    return domain;
  }

  private txtName(domain: string): string {
    return `${this.sso.txtPrefix}.${domain}`;
  }

  private domainView(domain: OrgDomainRecord): DomainView {
    return {
      id: domain.id,
      domain: domain.domain,
      status: domain.status,
      txt_name: this.txtName(domain.domain),
      txt_value: domain.txtValue,
      verified_at: domain.verifiedAt === null ? null : iso(domain.verifiedAt),
      created_at: iso(domain.createdAt),
    };
  }

  // ---------------------------------------------------------------- connection

  async getConnection(grant: AccessGrant): Promise<ConnectionView> {
    const organizationId = organizationOf(grant);
    const connection = await this.context.store.repos.ssoConnections.findForOrganization(organizationId);
    if (!connection) throw errors.notFound('Connection');
    return this.connectionView(connection, await this.context.store.repos.orgDomains.hasVerified(organizationId));
  }

  async createConnection(grant: AccessGrant, input: ConnectionInput & { issuer: string; client_id: string; client_secret: string }, meta: RequestMeta): Promise<ConnectionView> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    if (await this.context.store.repos.ssoConnections.findForOrganization(organizationId)) throw errors.conflict('The organization already has a single sign-on connection.');
    const issuer = await this.checkIssuer(input.issuer, input.client_id, input.client_secret, input.token_endpoint_auth_method ?? 'client_secret_basic');
    return runUnitOfWork(this.context, meta, async (uow) => {
      // Discovery took time: the grant is checked again, and its fresh authority bounds the default role.
      const actor = await this.recheck(uow, grant);
      const defaultRole = await this.checkDefaultRole(uow.repos, organizationId, input.default_role ?? 'member', actor);
      const id = randomUUID();
      const connection: SsoConnectionRecord = {
        id,
        organizationId,
        issuer,
        clientId: input.client_id,
        clientSecretEnc: encrypt(this.context.keys.socialFlowEncryption, input.client_secret, secretAad(id)),
        scopes: checkScopes(input.scopes ?? DEFAULT_SCOPES),
        tokenEndpointAuthMethod: input.token_endpoint_auth_method ?? 'client_secret_basic',
        enabled: input.enabled ?? true,
        jit: input.jit ?? false,
        defaultRole,
        enforce: input.enforce ?? false,
        createdAt: uow.now,
        updatedAt: uow.now,
      };
      if (!(await uow.repos.ssoConnections.insertIfAbsent(connection))) throw errors.conflict('The organization already has a single sign-on connection.');
      await uow.emit({ type: 'sso.connection_created', actorId, organizationId, data: { connection_id: id } });
      return this.connectionView(connection, await uow.repos.orgDomains.hasVerified(organizationId));
    });
  }

  async updateConnection(grant: AccessGrant, input: ConnectionInput, meta: RequestMeta): Promise<ConnectionView> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    const current = await this.context.store.repos.ssoConnections.findForOrganization(organizationId);
    if (!current) throw errors.notFound('Connection');
    // The issuer decides where the secret goes (its token endpoint): a move takes a secret of its
    // own, or the stored one would be handed to an issuer whoever moved it may run.
    if (input.issuer !== undefined && input.issuer !== current.issuer && input.client_secret === undefined) {
      throw errors.validation(['client_secret is required when the issuer changes']);
    }
    const secret = input.client_secret ?? decrypt(this.context.keys.socialFlowEncryption, current.clientSecretEnc, secretAad(current.id)).toString('utf8');
    const clientId = input.client_id ?? current.clientId;
    const method = input.token_endpoint_auth_method ?? current.tokenEndpointAuthMethod;
    // A new issuer, client or secret is discovered again through the guard before anything is stored.
    const rediscovered = input.issuer !== undefined || input.client_id !== undefined || input.client_secret !== undefined;
    const issuer = rediscovered ? await this.checkIssuer(input.issuer ?? current.issuer, clientId, secret, method) : current.issuer;
    return runUnitOfWork(this.context, meta, async (uow) => {
      const actor = await this.recheck(uow, grant);
      // Read again under the organization's lock: what this request does not change stays as
      // the latest committed update left it, not as it was before discovery (no lost update).
      const latest = await uow.repos.ssoConnections.findForOrganization(organizationId);
      if (!latest || latest.id !== current.id) throw errors.notFound('Connection');
      // A secret given without an issuer was given for the one this request read: never stored
      // under another committed meanwhile (422 as above: the issuer belongs in the same request).
      if (input.client_secret !== undefined && input.issuer === undefined && latest.issuer !== current.issuer) {
        throw errors.validation(['client_secret was sent for an issuer the connection no longer has: send the issuer with its secret']);
      }
      // The move rule again, against the latest issuer: the stored secret is the one given for
      // it, so an issuer named in its place (one that matched what this request read, before a
      // move committed meanwhile) takes a secret of its own, or the new secret would go there.
      if (input.issuer !== undefined && input.client_secret === undefined && issuer !== latest.issuer) {
        throw errors.validation(['client_secret is required when the issuer changes']);
      }
      // Discovery vouches for the issuer only (the client, secret and method are not sent to it):
      // an issuer this request does not give is the latest one, which the update that wrote it discovered.
      const next: SsoConnectionRecord = {
        ...latest,
        issuer: input.issuer !== undefined ? issuer : latest.issuer,
        clientId: input.client_id ?? latest.clientId,
        clientSecretEnc: input.client_secret !== undefined ? encrypt(this.context.keys.socialFlowEncryption, input.client_secret, secretAad(current.id)) : latest.clientSecretEnc,
        tokenEndpointAuthMethod: input.token_endpoint_auth_method ?? latest.tokenEndpointAuthMethod,
        scopes: input.scopes !== undefined ? checkScopes(input.scopes) : latest.scopes,
        enabled: input.enabled ?? latest.enabled,
        jit: input.jit ?? latest.jit,
        defaultRole: input.default_role !== undefined ? await this.checkDefaultRole(uow.repos, organizationId, input.default_role, actor) : latest.defaultRole,
        enforce: input.enforce ?? latest.enforce,
        updatedAt: uow.now,
      };
      await uow.repos.ssoConnections.update(next);
      const changed = this.changedFields(latest, next, input);
      // CONTRACT 12.7: `changed` names what changed; a request that sent only what was already there emits nothing, as a webhook's update.
      if (changed.length > 0) await uow.emit({ type: 'sso.connection_updated', actorId, organizationId, data: { connection_id: current.id, changed } });
      this.configurations.delete(current.id);
      return this.connectionView(next, await uow.repos.orgDomains.hasVerified(organizationId));
    });
  }

  /** The fields of `input` whose value differs from the connection's before (a secret compared in clear), sorted. */
  private changedFields(before: SsoConnectionRecord, after: SsoConnectionRecord, input: ConnectionInput): string[] {
    // The views name the fields as the input does; `status` and the times are no input.
    const was = this.connectionView(before, false);
    const is = this.connectionView(after, false);
    return (Object.keys(input) as (keyof ConnectionInput)[])
      .filter((key) => input[key] !== undefined)
      .filter((key) =>
        key === 'client_secret'
          ? input.client_secret !== decrypt(this.context.keys.socialFlowEncryption, before.clientSecretEnc, secretAad(before.id)).toString('utf8')
          : JSON.stringify(was[key]) !== JSON.stringify(is[key]),
      )
      .sort();
  }

  async deleteConnection(grant: AccessGrant, meta: RequestMeta): Promise<void> {
    const organizationId = organizationOf(grant);
    const actorId = grant.principal.userId;
    await runUnitOfWork(this.context, meta, async (uow) => {
      await this.recheck(uow, grant);
      const removed = await uow.repos.ssoConnections.delete(organizationId);
      if (!removed) throw errors.notFound('Connection');
      this.configurations.delete(removed.id);
      await uow.emit({ type: 'sso.connection_deleted', actorId, organizationId, data: { connection_id: removed.id } });
    });
  }

  /**
   * docs/sso.md: a JIT default role is granted by whoever configures it, to everyone the IdP
   * vouches for. It may not be owner-equivalent (422: the IdP would mint owners), and no
   * escalation applies as to a role assignment or invite (403: only what the actor holds).
   */
  private async checkDefaultRole(repos: Repositories, organizationId: string, slug: string, actor: ResolvedAuthority): Promise<string> {
    const [role] = await repos.roles.findBySlugs(organizationId, [slug]);
    if (!role) throw errors.validation([`default_role "${slug}" is not a role of this organization`]);
    assertFitsSsoDefaultRole(role);
    assertHoldsEveryKey(actor, role.permissionKeys);
    return role.slug;
  }

  /**
   * The organization row locked, then the route's requirement (`sso.manage`) re-checked under
   * that lock: answers the actor's authority as the transaction sees it.
   */
  private async recheck(uow: UnitOfWork, grant: AccessGrant): Promise<ResolvedAuthority> {
    const organization = await uow.repos.organizations.lockActive(organizationOf(grant));
    if (!organization) throw errors.notFound('Organization');
    return grant.recheck(uow.repos);
  }

  /**
   * docs/sso.md at create and update: the issuer's form, then discovery through the guard,
   * the discovered `issuer` equal to the configured one, and every endpoint the document names
   * checked by the guard on its own (CONTRACT 12.2), the authorization endpoint too: only the
   * browser goes there, but over `http:` or to a private address it is no IdP of the
   * organization's this router should send its users to. Nothing is stored on a refusal.
   */
  private async checkIssuer(raw: string, clientId: string, clientSecret: string, method: TokenEndpointAuthMethod): Promise<string> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw invalidIssuer('discovery_failed', 'The issuer must be an absolute URL.');
    }
    if (url.username || url.password || url.search || url.hash || raw.includes('#') || raw.includes('?')) throw invalidIssuer('discovery_failed', 'The issuer must carry no user name, query or fragment.');
    try {
      this.guard.parse(raw);
    } catch (error) {
      if (error instanceof OutboundRefusal && error.reason === 'scheme') throw invalidIssuer('insecure_scheme', 'The issuer must be an https: URL.');
      throw invalidIssuer('discovery_failed', 'The issuer is not a URL the router may request.');
    }
    await this.discover(raw, clientId, clientSecret, method).catch((error: unknown) => {
      throw issuerFailure(error);
    });
    return raw;
  }

  /**
   * openid-client with the guard as its fetch: discovery, token, JWKS and UserInfo all go through
   * it. Every endpoint the document names is checked by the guard on its own, at configuration
   * and at every sign-in alike: the document may change after the connection was checked, and
   * the authorization endpoint is where the router sends the browser (an `http:`, private or
   * `javascript:` URL is no IdP's). A document without the endpoints of the code flow is unusable.
   */
  private async discover(issuer: string, clientId: string, clientSecret: string, method: TokenEndpointAuthMethod): Promise<ProviderConfiguration> {
    const configuration = await this.discoverUnchecked(issuer, clientId, clientSecret, method);
    const metadata = configuration.serverMetadata();
    if (typeof metadata.authorization_endpoint !== 'string' || typeof metadata.token_endpoint !== 'string') throw new Error('The discovery document lacks an authorization or token endpoint.');
    for (const endpoint of [metadata.authorization_endpoint, metadata.token_endpoint, metadata.jwks_uri, metadata.userinfo_endpoint]) {
      if (endpoint !== undefined) await this.guard.check(endpoint, Date.now() + HTTP_TIMEOUT_MS);
    }
    return configuration;
  }

  private async discoverUnchecked(issuer: string, clientId: string, clientSecret: string, method: TokenEndpointAuthMethod): Promise<ProviderConfiguration> {
    const client = await loadOpenIdClient();
    const fetch = providerFetch(this.guard) as unknown as NonNullable<OpenIdClient.DiscoveryRequestOptions[typeof client.customFetch]>;
    const authentication = method === 'client_secret_post' ? client.ClientSecretPost(clientSecret) : client.ClientSecretBasic(clientSecret);
    const insecure = new URL(issuer).protocol === 'http:';
    const configuration = await client.discovery(new URL(issuer), clientId, { [client.clockTolerance]: CLOCK_TOLERANCE_SECONDS }, authentication, {
      [client.customFetch]: fetch,
      timeout: HTTP_TIMEOUT_MS / 1000,
      ...(insecure ? { execute: [client.allowInsecureRequests] } : {}),
    });
    configuration[client.customFetch] = fetch;
    configuration.timeout = HTTP_TIMEOUT_MS / 1000;
    return configuration;
  }

  private connectionView(connection: SsoConnectionRecord, hasVerifiedDomain: boolean): ConnectionView {
    return {
      id: connection.id,
      issuer: connection.issuer,
      client_id: connection.clientId,
      scopes: connection.scopes,
      token_endpoint_auth_method: connection.tokenEndpointAuthMethod,
      redirect_uri: this.redirectUri(connection.id),
      enabled: connection.enabled,
      status: connection.enabled && hasVerifiedDomain ? 'active' : 'inactive',
      jit: connection.jit,
      default_role: connection.defaultRole,
      enforce: connection.enforce,
      created_at: iso(connection.createdAt),
      updated_at: iso(connection.updatedAt),
    };
  }

  /** Never derived from Host or X-Forwarded-*: administrators register exactly this URL. */
  private redirectUri(connectionId: string): string {
    return ssoCallbackUrl(this.sso, connectionId);
  }

  // ---------------------------------------------------------------- sign-in

  /**
   * POST /auth/sso/authorize, identifier-first. Routed by the verified domain of the address
   * or by the organization's slug; with no active connection the answer is 404
   * `sso_not_configured`, the same for every address at a domain, account or not.
   */
  async authorize(
    input: { email?: string | undefined; organizationSlug?: string | undefined; returnTo?: string | undefined; handoffChallenge: string },
    meta: RequestMeta,
  ): Promise<AuthorizationStart> {
    const repos = this.context.store.repos;
    let organizationId: string | undefined;
    let loginHint: string | undefined;
    if (input.email !== undefined) {
      const email = normaliseEmail(input.email);
      const domain = addressDomain(email);
      organizationId = domain ? (await repos.orgDomains.findVerified(domain))?.organizationId : undefined;
      loginHint = email;
    } else if (input.organizationSlug !== undefined) {
      organizationId = await repos.ssoConnections.organizationIdForSlug(input.organizationSlug);
    }
    const connection = organizationId ? await this.activeConnection(organizationId) : undefined;
    if (!connection) throw ssoNotConfigured();
    return this.flows.start(this.target(connection), this.sso, 'login', { returnTo: input.returnTo, handoffChallenge: input.handoffChallenge }, null, meta, loginHint ? { login_hint: loginHint } : {});
  }

  /** GET /auth/sso/{connectionId}/callback: 9.2's callback against the connection; steps 1 to 5 of 12.5 decided here, read-only. */
  async callback(connectionId: string, parameters: CallbackParameters, meta: RequestMeta): Promise<string> {
    return this.flows.callback(
      SSO_FLOW_KEY,
      this.sso,
      parameters,
      async (flow) => {
        // A state issued for another connection counts as unknown (and is burned).
        if (flow.connectionId !== connectionId) return undefined;
        const connection = await this.activeConnection(undefined, connectionId);
        return connection ? this.target(connection) : undefined;
      },
      async (flow, claims) => {
        const connection = await this.activeConnection(undefined, flow.connectionId!);
        if (!connection) throw new FederatedRefusal('provider_unavailable');
        const decided = await this.decide(this.context.store.repos, connection, claims, this.context.clock.now());
        if ('refusal' in decided) {
          // Recorded like a refused password login; nothing else is written at the callback.
          await runUnitOfWork(this.context, meta, (uow) => this.recordRefusal(uow, connection, decided));
          throw decided.refusal;
        }
      },
    );
  }

  /** The SSO half of POST /auth/social/exchange: steps 3 and 4 written, 4 and 5 checked again, then the session (docs/sso.md). */
  async completeExchange(flow: SocialFlowRecord, claims: ProviderClaims, meta: RequestMeta): Promise<SsoLoginResult> {
    const connection = await this.activeConnection(undefined, flow.connectionId!);
    if (!connection || flow.purpose !== 'login') throw invalidExchangeCode();
    let outcome: { userId: string; isNewUser: boolean };
    for (let attempt = 1; ; attempt += 1) {
      try {
        const result = await runUnitOfWork(this.context, meta, (uow) => this.resolveOnce(uow, connection, claims));
        if ('refusal' in result) throw exchangeError(result.refusal.code);
        outcome = result;
        break;
      } catch (error) {
        if (error instanceof ResolutionConflict && attempt < RESOLUTION_ATTEMPTS) continue;
        throw error;
      }
    }
    const user = await this.context.store.repos.users.findById(outcome.userId);
    if (!user) throw invalidExchangeCode();
    const login = await this.flows.openSession(user, meta, {
      method: { method: 'sso', connection_id: connection.id },
      organizationId: connection.organizationId,
      // Enforcement lets this session refresh and accept invites: it was opened through the connection.
      opened: (uow, sessionId) => uow.repos.ssoIdentities.markSessionOpenedThrough(sessionId, connection.id),
    });
    return { login, isNewUser: outcome.isNewUser, organizationId: connection.organizationId };
  }

  private async resolveOnce(uow: UnitOfWork, looked: SsoConnectionRecord, claims: ProviderClaims): Promise<{ userId: string; isNewUser: boolean } | { refusal: FederatedRefusal }> {
    // The organization before the account (decide locks a linked one): a JIT join's membership
    // insert needs the organization's key lock, which an invite or a member write holding the
    // organization and then wanting the account would otherwise meet in a deadlock.
    if (!(await uow.repos.organizations.holdActive(looked.organizationId))) throw invalidExchangeCode();
    // The connection as it is now that the organization is held (every change to it locks the
    // organization first), not as it was looked up before: one deleted, disabled or left without
    // a verified domain meanwhile signs no one in, and JIT and the default role are the latest.
    const connection = await uow.repos.ssoConnections.findById(looked.id);
    if (!connection?.enabled || !(await uow.repos.orgDomains.hasVerified(connection.organizationId))) throw invalidExchangeCode();
    const decided = await this.decide(uow.repos, connection, claims, uow.now, true);
    if ('refusal' in decided) {
      await this.recordRefusal(uow, connection, decided);
      return decided;
    }
    const { plan } = decided;
    const email = claims.email!;
    let userId = plan.user?.id;
    let isNewUser = false;
    if (!userId) {
      userId = randomUUID();
      const displayName = providerDisplayName(claims.name);
      if (!(await uow.repos.users.insertIfEmailFree({ id: userId, email, emailVerified: true, displayName, passwordHash: null, now: uow.now }, mailboxOf(email)))) throw new ResolutionConflict();
      isNewUser = true;
      await uow.emit({ type: 'user.registered', actorId: userId, userId, data: { method: 'sso', connection_id: connection.id } });
    }
    if (plan.identity) {
      await uow.repos.ssoIdentities.recordLogin(plan.identity.id, email, uow.now);
    } else {
      const identityId = randomUUID();
      if (!(await uow.repos.ssoIdentities.insertIfFree({ id: identityId, connectionId: connection.id, userId, issuer: connection.issuer, subject: claims.subject, email, createdAt: uow.now, lastLoginAt: uow.now }))) {
        throw new ResolutionConflict();
      }
      await uow.emit({ type: 'user.sso_linked', actorId: userId, userId, organizationId: connection.organizationId, data: { identity_id: identityId, connection_id: connection.id, method: isNewUser ? 'signup' : 'email_domain' } });
    }
    if (plan.join) {
      // A membership left `invited` by a pending invite becomes active; otherwise one is made (once, under a race).
      // One accepted or suspended since step 4 looked is decided again: no join over it.
      const pending = await uow.repos.memberships.find(connection.organizationId, userId);
      const membershipId = pending?.id ?? randomUUID();
      if (pending) {
        if (!(await uow.repos.memberships.activateInvited(pending.id, uow.now))) throw new ResolutionConflict();
      } else if (!(await uow.repos.memberships.insertActiveIfAbsent({ id: membershipId, organizationId: connection.organizationId, userId, now: uow.now }))) throw new ResolutionConflict();
      const [role] = await uow.repos.roles.findBySlugs(connection.organizationId, [connection.defaultRole]);
      // The default role replaces whatever an `invited` entry held (an invitation's roles come only with its
      // token); with that role deleted since, the join grants none.
      await uow.repos.memberships.replaceRoles(membershipId, role ? [role.id] : []);
      await uow.emit({ type: 'member.joined', actorId: userId, userId, organizationId: connection.organizationId, data: { via: 'sso_jit', role_slugs: role ? [role.slug] : [] } });
      uow.invalidates({ user: userId });
    }
    return { userId, isNewUser };
  }

  /**
   * A refused single sign-on, at the callback or the exchange: `user.login_failed` when it can
   * be tied to a user (docs/social-login.md and docs/sso.md), else a `warn` line; neither names the IdP subject.
   */
  private async recordRefusal(uow: UnitOfWork, connection: SsoConnectionRecord, decided: { refusal: FederatedRefusal; userId?: string }): Promise<void> {
    const reason = decided.refusal.code;
    if (decided.userId) await uow.emit(loginFailed(decided.userId, { method: 'sso', connection_id: connection.id }, reason, connection.organizationId));
    else this.context.logger.warn('single sign-on refused', { connection_id: connection.id, reason });
  }

  /**
   * docs/sso.md steps 1 to 5, in order, without writing: at the callback (a refusal becomes
   * `social_error`) and again at the exchange, inside its transaction. Answers what the
   * exchange must write, or the refusal (with the user it can be tied to).
   */
  private async decide(
    repos: Repositories,
    connection: SsoConnectionRecord,
    claims: ProviderClaims,
    now: number,
    forUpdate = false,
  ): Promise<{ plan: { user: UserRecord | undefined; identity: { id: string } | undefined; join: boolean } } | { refusal: FederatedRefusal; userId?: string }> {
    const refuse = (code: FederatedRefusal['code'], userId?: string) => ({ refusal: new FederatedRefusal(code), ...(userId ? { userId } : {}) });
    // 1. The verified domain makes the connection authoritative there, and only there.
    if (!claims.email) return refuse('social_email_required');
    const domain = addressDomain(claims.email);
    const verified = await repos.orgDomains.listVerifiedDomains(connection.organizationId);
    // 2. Looked up by (connection, sub) only, under the issuer it was made with.
    const linked = await repos.ssoIdentities.findByConnectionSubject(connection.id, claims.subject);
    if (!domain || !verified.includes(domain)) return refuse('sso_email_outside_domain', linked?.issuer === connection.issuer ? linked.userId : undefined);
    let user: UserRecord | undefined;
    let identity: { id: string } | undefined;
    if (linked && linked.issuer !== connection.issuer) {
      this.context.logger.warn('sso identity ignored: stored issuer differs from the connection', { connection_id: connection.id, identity_id: linked.id });
      return refuse('account_link_required');
    }
    if (linked) {
      user = forUpdate ? await repos.users.findByIdForUpdate(linked.userId) : await repos.users.findById(linked.userId);
      if (!user) return refuse('account_disabled');
      identity = { id: linked.id };
    } else {
      // 3. An account with that address is linked only if proven and not a superadmin.
      user = await repos.users.findByEmail(claims.email, mailboxSpellings(claims.email));
      if (user) {
        if (!user.emailVerified || user.deletedAt !== null || (await repos.roles.isSuperadmin(user.id))) return refuse('account_link_required', user.id);
        const existing = await repos.ssoIdentities.findForUser(connection.id, user.id);
        // This very subject, linked by a concurrent first sign-in after step 2 looked: resolve
        // again, and step 2 now finds it. Another subject's link keeps the account refused.
        if (existing?.subject === claims.subject) return this.decide(repos, connection, claims, now, forUpdate);
        if (existing) return refuse('account_link_required', user.id);
      } else if (!connection.jit) {
        return refuse('sso_not_member');
      }
    }
    // 4. Membership.
    let join = false;
    if (user) {
      const membership = await repos.memberships.find(connection.organizationId, user.id);
      if (membership?.status === 'suspended') return refuse('sso_member_suspended', user.id);
      if (membership?.status !== 'active') {
        if (!connection.jit) return refuse('sso_not_member', user.id);
        join = true;
      }
      // 5. Who may sign in at all: the rule every sign-in path asks.
      const refusal = this.signInRules.accountRefusal(user, now);
      if (refusal) return refuse(refusal, user.id);
      // Require SSO: an account at another organization's enforcing domain (one this
      // organization verified once, linked then, and gave up) signs in through that
      // organization's connection only. The IdP's assertion is this sign-in's credential.
      if (await this.signInRules.refusal(user.email, { userId: user.id, credentialRight: true, viaConnectionId: connection.id, repos })) return refuse('sso_required', user.id);
      // A linked account is judged by its own address as well as the asserted one (step 1): an
      // account at a domain this organization has given up is no longer its IdP's to sign in,
      // whether or not the domain's new owner requires single sign-on.
      if (identity && !verified.includes(addressDomain(user.email) ?? '')) return refuse('sso_email_outside_domain', user.id);
    } else {
      join = true;
    }
    return { plan: { user, identity, join } };
  }

  /** The organization's connection when it is active: enabled, and the organization holds a verified domain. */
  private async activeConnection(organizationId: string | undefined, connectionId?: string): Promise<SsoConnectionRecord | undefined> {
    const repos = this.context.store.repos;
    const connection = connectionId ? await repos.ssoConnections.findById(connectionId) : await repos.ssoConnections.findForOrganization(organizationId!);
    if (!connection?.enabled) return undefined;
    if (!(await repos.organizations.findActive(connection.organizationId))) return undefined;
    if (!(await repos.orgDomains.hasVerified(connection.organizationId))) return undefined;
    return connection;
  }

  private target(connection: SsoConnectionRecord): FlowTarget {
    return {
      key: SSO_FLOW_KEY,
      connectionId: connection.id,
      redirectUri: this.redirectUri(connection.id),
      scopes: connection.scopes,
      authorizationParams: {},
      configuration: async () => ({ client: await loadOpenIdClient(), configuration: await this.configuration(connection) }),
    };
  }

  /** Discovery through the guard, cached for an hour per connection version; a refusal at sign-in is `provider_unavailable`. */
  private async configuration(connection: SsoConnectionRecord): Promise<ProviderConfiguration> {
    const cached = this.configurations.get(connection.id);
    if (cached && cached.version === connection.updatedAt && cached.expiresAt > this.context.clock.now()) return cached.configuration;
    // Authorize is public: requests that find no discovery cached (at start-up, hourly, after an
    // edit, and on every one while the IdP fails) share one request to the IdP, as social login's do.
    const key = `${connection.id}:${connection.updatedAt}`;
    let discovering = this.discovering.get(key);
    if (!discovering) {
      discovering = this.discoverForSignIn(connection).finally(() => this.discovering.delete(key));
      this.discovering.set(key, discovering);
    }
    return discovering;
  }

  private async discoverForSignIn(connection: SsoConnectionRecord): Promise<ProviderConfiguration> {
    const secret = decrypt(this.context.keys.socialFlowEncryption, connection.clientSecretEnc, secretAad(connection.id)).toString('utf8');
    try {
      const configuration = await this.discover(connection.issuer, connection.clientId, secret, connection.tokenEndpointAuthMethod);
      this.configurations.set(connection.id, { version: connection.updatedAt, configuration, expiresAt: this.context.clock.now() + DISCOVERY_CACHE_MS });
      return configuration;
    } catch (error) {
      this.context.logger.warn('sso discovery failed', { connection_id: connection.id, reason: outboundRefusalIn(error)?.reason ?? 'discovery_failed' });
      // 502 at authorize; the callback turns it into social_error=provider_unavailable.
      throw providerUnavailable();
    }
  }
}

/**
 * The guard as openid-client's fetch, for discovery, token, JWKS and UserInfo alike. A redirect
 * (which the guard never follows), a refusal and a connection that failed or timed out are no
 * usable answer: each is thrown as the platform's fetch reports a network failure, a
 * `TypeError('fetch failed')` with the guard's error as its cause. At sign-in that is
 * `provider_unavailable` (CONTRACT 12.2), not `provider_response_invalid`; at create and
 * update `issuerFailure` still finds the refusal's reason in the cause.
 */
function providerFetch(guard: OutboundGuard) {
  const guarded = guardedFetch(guard, HTTP_TIMEOUT_MS);
  return async (url: string, options: Parameters<typeof guarded>[1]): Promise<Response> => {
    let response: Response;
    try {
      response = await guarded(url, options);
    } catch (error) {
      if (error instanceof OutboundRefusal || error instanceof OutboundFailure) throw new TypeError('fetch failed', { cause: error });
      throw error;
    }
    if (response.status >= 300 && response.status < 400) throw new TypeError('fetch failed', { cause: new Error(`The provider answered ${response.status}; redirects are not followed.`) });
    return response;
  };
}

/** The guard's refusal somewhere in an error's cause chain, if any. */
function outboundRefusalIn(error: unknown): OutboundRefusal | undefined {
  for (let current: unknown = error, depth = 0; current && depth < 6; depth += 1) {
    if (current instanceof OutboundRefusal) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** The conditional update of a verify changed nothing: a concurrent verify got there first. */
class VerificationLost extends Error {}

function domainTaken(): IdentityError {
  return errors.domainTaken();
}

function secretAad(connectionId: string): string {
  return `sso-client-secret:${connectionId}`;
}

function checkScopes(scopes: string[]): string[] {
  if (!scopes.includes('openid') || !scopes.includes('email')) throw errors.validation(['scopes must include "openid" and "email"']);
  return [...new Set(scopes)];
}

/** A discovery or endpoint refusal as docs/sso.md's `reason`; no provider text is quoted. */
function issuerFailure(error: unknown): IdentityError {
  for (let current: unknown = error, depth = 0; current && depth < 6; depth += 1) {
    if (current instanceof OutboundRefusal) {
      if (current.reason === 'private_address') return invalidIssuer('private_address', 'The issuer or one of its endpoints resolves to a private, loopback or link-local address.');
      if (current.reason === 'scheme') return invalidIssuer('insecure_scheme', 'The issuer and its endpoints must use https:.');
      return invalidIssuer('discovery_failed', 'The issuer could not be discovered.');
    }
    const candidate = current as { code?: string; cause?: unknown };
    if (typeof candidate.code === 'string' && /COMPARISON|ISSUER/i.test(candidate.code)) return invalidIssuer('issuer_mismatch', 'The discovery document names another issuer.');
    current = candidate.cause;
  }
  return invalidIssuer('discovery_failed', 'The issuer could not be discovered.');
}
