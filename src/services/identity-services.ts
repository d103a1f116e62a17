import type { KeyRing } from './key-ring.js';
import { AccountService } from './account-service.js';
import { AccessPolicy } from './access-policy.js';
import { ApiKeyService } from './api-key-service.js';
import type { ServiceContext } from './context.js';
import { IdentityService } from './identity-service.js';
import { InviteService } from './invite-service.js';
import { MemberService } from './member-service.js';
import { MfaService } from './mfa-service.js';
import { OrganizationService } from './organization-service.js';
import { PasskeyService } from './passkey-service.js';
import { synchronisePermissionCatalog } from './permission-catalog-sync.js';
import { buildPermissionCatalog, type PermissionCatalog } from './permission-catalog.js';
import { RoleService } from './role-service.js';
import { SessionService } from './session-service.js';
import { SocialService } from './social-service.js';
import { UserAdminService } from './user-admin-service.js';
import type { DeliveryTotals } from './event-delivery.js';
import { WebhookService } from './webhook-service.js';

/**
 * The core service layer, usable without HTTP (`identity.service`). Every route calls
 * one method of one of these.
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
  readonly identity: IdentityService;
  readonly organizations: OrganizationService;
  readonly members: MemberService;
  readonly invites: InviteService;
  readonly roles: RoleService;
  readonly users: UserAdminService;
  readonly apiKeys: ApiKeyService;
  /** Organization webhooks (CONTRACT 13); the routes answer 404 unless `webhooks.enabled`. */
  readonly webhooks: WebhookService;
  /** Present only with a `social` config (CONTRACT 9). */
  readonly social: SocialService | undefined;

  constructor(readonly context: ServiceContext) {
    this.catalog = buildPermissionCatalog(context.config.permissions);
    this.keyRing = context.keyRing;
    this.policy = new AccessPolicy(context, this.catalog);
    this.sessions = new SessionService(context, this.catalog);
    this.passkeys = new PasskeyService(context, this.sessions, this.policy);
    this.mfa = new MfaService(context, this.sessions, this.policy, this.passkeys);
    this.accounts = new AccountService(context, this.sessions, this.mfa);
    this.identity = new IdentityService(context);
    this.organizations = new OrganizationService(context, this.catalog);
    this.members = new MemberService(context, this.catalog, this.policy);
    this.invites = new InviteService(context, this.catalog, this.policy);
    this.roles = new RoleService(context, this.catalog, this.policy);
    this.users = new UserAdminService(context, this.catalog);
    this.apiKeys = new ApiKeyService(context, this.catalog, this.policy);
    this.webhooks = new WebhookService(context, this.catalog);
    this.social = context.config.social ? new SocialService(context, context.config.social, this.sessions, this.mfa, this.policy) : undefined;
  }

  /** Start-up work that needs the schema (called once `ready` has migrated). */
  async initialise(): Promise<void> {
    // Later areas add their start-up work here (e.g. the global superadmin role row).
    // The global superadmin role: one row (fixed id, so concurrent start-ups insert it once) holding the full catalog.
    await this.context.store.repos.roles.ensureSuperadminRole(this.catalog.entries.map((entry) => entry.key), this.context.clock.now());
    const changes = await synchronisePermissionCatalog(this.context.store, this.catalog, this.context.clock.now());
    // Worth a line only when existing organizations changed (not on a new database).
    if (changes.rolesUpdated > 0) this.context.logger.info('identity-router: host permissions synchronised with the organizations\' system roles', changes);
  }

  /** Grants the global superadmin role (every permission in every organization); idempotent, audited (`user.superadmin_granted`). */
  grantSuperadmin(userId: string): Promise<void> {
    return this.users.grantSuperadmin(userId);
  }

  /** Revokes the global superadmin role; idempotent, audited (`user.superadmin_revoked`). */
  revokeSuperadmin(userId: string): Promise<void> {
    return this.users.revokeSuperadmin(userId);
  }

  /** The per-user MFA enforcement flag (CONTRACT 5); audited (`user.mfa_enforcement_changed`). */
  setMfaEnforced(userId: string, on: boolean): Promise<void> {
    return this.users.setMfaEnforced(userId, on);
  }

  /**
   * Claims every event delivery due by the injected clock, makes one attempt on each and
   * resolves once the outcomes are recorded (CONTRACT 13.1). Rows leased by another instance
   * are skipped. For `events.delivery.worker: false`, cron jobs and tests.
   */
  deliverDueEvents(): Promise<DeliveryTotals> {
    return this.context.delivery.deliverDue();
  }

  /** The published next key becomes active and a fresh next key is published; the retiring one stays in the JWKS until the last token it signed has expired (CONTRACT 7). */
  rotateSigningKey(): Promise<{ kid: string }> {
    return this.keyRing.rotate();
  }
}
