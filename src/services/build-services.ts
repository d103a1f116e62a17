import type { KeyRing } from './shared/key-ring.js';
import { AccountService } from './accounts/account-service.js';
import { AccessPolicy } from './access/access-policy.js';
import type { AccessReads } from './access/access-reads.js';
import { ApiKeyService } from './api-keys/api-key-service.js';
import type { ServiceContext } from './shared/service-context.js';
import { MeService } from './accounts/me-service.js';
import { InviteService } from './orgs/invite-service.js';
import { MemberService } from './orgs/member-service.js';
import { MfaService } from './mfa/mfa-service.js';
import { OrganizationService } from './orgs/organization-service.js';
import { PasskeyService } from './mfa/passkey-service.js';
import { PasswordlessService } from './passwordless/passwordless-service.js';
import { synchronisePermissionCatalog } from './access/permission-catalog-sync.js';
import { buildPermissionCatalog, type PermissionCatalog } from './access/permission-catalog.js';
import { RoleService } from './orgs/role-service.js';
import { SessionService } from './sessions/session-service.js';
import { SocialService, type SocialExchangeResult } from './social/social-service.js';
import { FederatedFlows } from './social/federated-flow.js';
import { SignInRules } from './access/sign-in-rules.js';
import { SsoService } from './sso/sso-service.js';
import type { RequestMeta } from './shared/service-context.js';
import { errors } from '../errors.js';
import type { DnsResolver } from '../adapters/types.js';
import { UserAdminService } from './accounts/user-admin-service.js';
import type { DeliveryTotals } from './shared/outbox.js';
import { WebhookService } from './webhooks/webhook-service.js';

/**
 * `identity.service`: what a host may call without HTTP, and nothing else (docs/getting-started.md).
 * The spec's domain operations, the privilege changes, key rotation, event delivery and
 * `close`. The store, keys, hasher, policy and key ring stay inside, so they can change
 * without breaking a host.
 */
export interface IdentityService {
  readonly accounts: AccountService;
  readonly sessions: SessionService;
  readonly me: MeService;
  readonly mfa: MfaService;
  readonly passkeys: PasskeyService;
  readonly organizations: OrganizationService;
  readonly members: MemberService;
  readonly invites: InviteService;
  readonly roles: RoleService;
  readonly users: UserAdminService;
  readonly apiKeys: ApiKeyService;
  readonly webhooks: WebhookService;
  /** Present only with a `social` config. */
  readonly social: SocialService | undefined;
  /** Present only with an `sso` config. */
  readonly sso: SsoService | undefined;
  /** Present only with a `passwordless` config. */
  readonly passwordless: PasswordlessService | undefined;
  grantSuperadmin(userId: string): Promise<void>;
  revokeSuperadmin(userId: string): Promise<void>;
  setMfaEnforced(userId: string, on: boolean): Promise<void>;
  rotateSigningKey(): Promise<{ kid: string }>;
  deliverDueEvents(): Promise<DeliveryTotals>;
  /** The router's `close()`: stops the delivery worker and the password workers, and the pool it created. */
  close(): Promise<void>;
}

/** The names `identity.service` carries; a packaging test holds the public surface to this list. */
export const PUBLIC_SERVICE_MEMBERS = [
  'accounts',
  'sessions',
  'me',
  'mfa',
  'passkeys',
  'organizations',
  'members',
  'invites',
  'roles',
  'users',
  'apiKeys',
  'webhooks',
  'social',
  'sso',
  'passwordless',
  'grantSuperadmin',
  'revokeSuperadmin',
  'setMfaEnforced',
  'rotateSigningKey',
  'deliverDueEvents',
  'close',
] as const satisfies ReadonlyArray<keyof IdentityService>;

/** The public face of the services: a frozen object with exactly the members above. */
export function publicServiceOf(services: IdentityServices, close: () => Promise<void>): IdentityService {
  const face: Record<string, unknown> = {};
  for (const name of PUBLIC_SERVICE_MEMBERS) {
    if (name === 'close') face.close = close;
    else {
      const member = (services as unknown as Record<string, unknown>)[name];
      face[name] = typeof member === 'function' ? member.bind(services) : member;
    }
  }
  return Object.freeze(face) as unknown as IdentityService;
}

/**
 * The whole service layer, inside the package: every route calls one method of one of
 * these. Hosts see `IdentityService`.
 */
export class IdentityServices {
  readonly catalog: PermissionCatalog;
  readonly keyRing: KeyRing;
  readonly sessions: SessionService;
  readonly mfa: MfaService;
  readonly passkeys: PasskeyService;
  readonly accounts: AccountService;
  /** The one access policy: router routes and host middleware evaluate requirements here. */
  readonly policy: AccessPolicy;
  readonly me: MeService;
  readonly organizations: OrganizationService;
  readonly members: MemberService;
  readonly invites: InviteService;
  readonly roles: RoleService;
  readonly users: UserAdminService;
  readonly apiKeys: ApiKeyService;
  /** Organization webhooks (docs/webhooks.md); the routes answer 404 unless `webhooks.enabled`. */
  readonly webhooks: WebhookService;
  /** Present only with a `social` config (docs/social-login.md). */
  readonly social: SocialService | undefined;
  /** Present only with an `sso` config (docs/sso.md). */
  readonly sso: SsoService | undefined;
  /** "Require SSO" (docs/sso.md): the one rule every sign-in path asks. */
  readonly signInRules: SignInRules;
  /** The federated round trip shared by social login and single sign-on. */
  readonly flows: FederatedFlows;
  /** Present only with a `passwordless` config (docs/passwordless.md). */
  readonly passwordless: PasswordlessService | undefined;

  constructor(readonly context: ServiceContext, { accessReads, dns }: { accessReads: AccessReads; dns?: DnsResolver | undefined }) {
    this.catalog = buildPermissionCatalog(context.config.permissions, { sso: context.config.sso !== undefined });
    this.signInRules = new SignInRules(context);
    this.keyRing = context.keyRing;
    this.policy = new AccessPolicy(context, this.catalog, accessReads, this.signInRules);
    this.sessions = new SessionService(context, this.catalog, this.policy, this.signInRules);
    this.passkeys = new PasskeyService(context, this.sessions, this.policy, this.signInRules);
    this.mfa = new MfaService(context, this.sessions, this.policy, this.passkeys, this.signInRules);
    this.accounts = new AccountService(context, this.sessions, this.mfa, this.signInRules, this.policy);
    this.me = new MeService(context);
    this.organizations = new OrganizationService(context, this.catalog, this.policy);
    this.members = new MemberService(context, this.catalog, this.policy);
    this.invites = new InviteService(context, this.catalog, this.policy, this.signInRules);
    this.roles = new RoleService(context, this.catalog, this.policy);
    this.users = new UserAdminService(context, this.catalog);
    this.apiKeys = new ApiKeyService(context, this.catalog);
    this.webhooks = new WebhookService(context);
    this.flows = new FederatedFlows(context, this.sessions, this.mfa, this.signInRules, this.policy);
    this.social = context.config.social ? new SocialService(context, context.config.social, this.sessions, this.flows, this.policy, this.signInRules) : undefined;
    this.sso = context.config.sso ? new SsoService(context, context.config.sso, this.flows, this.signInRules, dns) : undefined;
    this.passwordless = context.config.passwordless ? new PasswordlessService(context, context.config.passwordless, this.accounts, this.signInRules) : undefined;
  }

  /**
   * POST /auth/social/exchange (docs/social-login.md and docs/sso.md): the code is burned and the handoff
   * verifier matched once, then the flow's own feature completes it: its organization's
   * connection for a single sign-on flow, else its social provider.
   */
  async exchange(input: { code: string; handoffVerifier: string; bearer: string | undefined }, meta: RequestMeta): Promise<SocialExchangeResult & { organizationId?: string }> {
    const { flow, claims } = await this.flows.consumeExchange(input);
    if (flow.connectionId !== null) {
      if (!this.sso) throw errors.invalidToken(400, 'The sign-in code is invalid, expired or already used.');
      const result = await this.sso.completeExchange(flow, claims, meta);
      return { purpose: 'login', login: result.login, isNewUser: result.isNewUser, organizationId: result.organizationId };
    }
    if (!this.social) throw errors.invalidToken(400, 'The sign-in code is invalid, expired or already used.');
    return this.social.completeExchange(flow, claims, input.bearer, meta);
  }

  /** Start-up work that needs the schema (called once `ready` has migrated). */
  async initialise(): Promise<void> {
    // With `sso`, owners of organizations created before it hold sso.manage too (docs/sso.md).
    if (this.sso) await this.context.store.repos.ssoConnections.grantToOwnerRoles('sso.manage', this.context.clock.now());
    // The global superadmin role: one row (fixed id, so concurrent start-ups insert it once) holding the full catalog.
    await this.context.store.repos.roles.ensureSuperadminRole(this.catalog.entries.map((entry) => entry.key), this.context.clock.now());
    const changes = await synchronisePermissionCatalog(this.context.store, this.catalog, this.context.clock.now());
    // Worth a line only when existing organizations changed (not on a new database).
    if (changes.rolesUpdated > 0) this.context.logger.info('identity-router: host permissions synchronised with the organizations\' system roles', changes);
  }

  /**
   * After start-up, off the readiness path: refresh tokens stored before they carried a MAC
   * (docs/database.md) are no longer written, so the rows left only shrink, and the ones nobody
   * can use go at each start.
   */
  async deleteUnusableStoredRefreshTokens(): Promise<void> {
    const deleted = await this.context.store.repos.refreshTokens.deleteUnusable(this.context.clock.now());
    if (deleted > 0) this.context.logger.info('identity-router: stored refresh tokens nobody can use any more were deleted', { rows: deleted });
  }

  /** Grants the global superadmin role (every permission in every organization); idempotent, audited (`user.superadmin_granted`). */
  grantSuperadmin(userId: string): Promise<void> {
    return this.users.grantSuperadmin(userId);
  }

  /** Revokes the global superadmin role; idempotent, audited (`user.superadmin_revoked`). */
  revokeSuperadmin(userId: string): Promise<void> {
    return this.users.revokeSuperadmin(userId);
  }

  /** The per-user MFA enforcement flag (docs/security.md); audited (`user.mfa_enforcement_changed`). */
  setMfaEnforced(userId: string, on: boolean): Promise<void> {
    return this.users.setMfaEnforced(userId, on);
  }

  /**
   * Claims every event delivery due by the injected clock, makes one attempt on each and
   * resolves once the outcomes are recorded (docs/events.md). Rows leased by another instance
   * are skipped. For `events.delivery.worker: false`, cron jobs and tests.
   */
  deliverDueEvents(): Promise<DeliveryTotals> {
    return this.context.delivery.deliverDue();
  }

  /** The published next key becomes active and a fresh next key is published; the retiring one stays in the JWKS until the last token it signed has expired (docs/multiple-instances.md). */
  rotateSigningKey(): Promise<{ kid: string }> {
    return this.keyRing.rotate();
  }
}
