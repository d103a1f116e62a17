import type { Knex } from 'knex';
import type { Store as RateLimitStore } from 'express-rate-limit';
import type { ResolvedSocialConfig, SocialConfig } from './social.js';
import type { ResolvedSsoConfig, SsoConfig } from './sso.js';

export type RateLimitGroup =
  | 'login'
  | 'register'
  | 'password_forgot'
  | 'token_refresh'
  | 'token_consume'
  | 'mfa_send'
  | 'mfa_confirm'
  | 'mfa_enroll'
  | 'social'
  | 'authenticated';

export interface RateLimitRule {
  limit: number;
  windowSec: number;
  /**
   * When the group's store (Redis, the database) fails or does not answer within 5 s: `true`
   * lets the request through without a limit (fail open, logged); `false` (default) answers
   * 503 `unavailable`.
   */
  passOnStoreError?: boolean;
}

/**
 * Where the rate-limit counters live: `'memory'` (default; each instance counts on its own),
 * `'database'` (the router's database, shared by every instance), or an express-rate-limit
 * store per group, e.g. Redis through rate-limit-redis.
 */
export type RateLimitStoreOption = 'memory' | 'database' | ((group: RateLimitGroup) => RateLimitStore);

export interface WindowBudget {
  limit: number;
  windowSec: number;
}

export type DatabaseConfig =
  | Knex
  | (Knex.Config & { tablePrefix?: string });

export interface PermissionDefinition {
  key: string;
  description: string;
}

/** What a host passes to `createIdentityRouter`. Every option but `database`, `secret` and `issuer` has a default. */
export interface IdentityConfig {
  /** A Knex instance, or a Knex config object (`{client: 'better-sqlite3', connection: {filename}}`, `{client: 'pg', connection}`). */
  database: DatabaseConfig;
  /** Prefix of every table the router owns. Default `identity_`. May also be given as `database.tablePrefix`. */
  tablePrefix?: string;
  /** Run the bundled migrations at start-up. Default `true`. */
  migrate?: boolean;
  /** At least 32 characters. Sub-keys for encryption at rest and keyed hashes are derived from it (HKDF). */
  secret: string;
  /** JWT `iss`; also the TOTP issuer unless `otp.totp.issuer` is set. */
  issuer: string;
  /** JWT `aud` when set. */
  audience?: string;
  /** `app_name` in mail and SMS templates. Default: `issuer`. */
  appName?: string;
  tokens?: {
    /** seconds, default 900 */ accessTtl?: number;
    /** seconds, default 30 days; sliding: each rotation issues a token valid this long */ refreshTtl?: number;
    /** default true */ refreshRotation?: boolean;
    /** seconds, default 300 */ mfaTicketTtl?: number;
    /** seconds, default 24 h */ emailVerifyTtl?: number;
    /** seconds, default 1 h */ passwordResetTtl?: number;
    /** seconds, default 7 days */ inviteTtl?: number;
    /** seconds, default 90 days: the absolute lifetime of a session, counted from login; refresh never extends it */ sessionMaxAge?: number;
  };
  password?: {
    /** default 8 */ minLength?: number;
    /** default 128 */ maxLength?: number;
    /** default 12; tests may lower it (minimum 4) */ bcryptCost?: number;
    /** What new hashes are made with, default 'bcrypt'. Hashes of either kind verify; a login re-makes a hash that differs from this. */
    algorithm?: 'bcrypt' | 'argon2id';
    /** argon2id parameters, default OWASP's `{memoryCost: 19456 (KiB), timeCost: 2, parallelism: 1}` */
    argon2?: { memoryCost?: number; timeCost?: number; parallelism?: number };
    /** Hashing worker threads, default the cores (`os.availableParallelism()`) */
    workers?: number;
  };
  auth?: {
    /** `auth.require_verified_email`; default false */ requireVerifiedEmail?: boolean;
    /** `auth.lockout.*` in seconds; default `{threshold: 5, window: 900, duration: 900}` */
    lockout?: { threshold?: number; window?: number; duration?: number };
    /** `auth.rate_limits`: per group `{limit, windowSec}` or `false`; `false` disables all. */
    rateLimits?: false | Partial<Record<RateLimitGroup, RateLimitRule | false>>;
    /** `'memory'` (default), `'database'`, or an express-rate-limit store per group (e.g. Redis): see {@link RateLimitStoreOption}. */
    rateLimitStore?: RateLimitStoreOption;
  };
  otp?: {
    /** digits of SMS and e-mail codes, default 6 */ length?: number;
    /** seconds, default 300 */ ttl?: number;
    /** default 5 */ maxAttempts?: number;
    /** seconds, default 30 */ resendCooldown?: number;
    sendBudget?: { perDestination?: WindowBudget; perAccount?: WindowBudget };
    /** failed verifications per account, default `{limit: 20, windowSec: 900}` */
    verifyBudget?: WindowBudget;
    totp?: { issuer?: string };
  };
  invites?: {
    /**
     * Invite mail sent (re-invites included), default `{perOrganization: {limit: 50, windowSec: 3600},
     * perAddress: {limit: 5, windowSec: 86400}}`; over a budget: 429 rate_limited.
     */
    sendBudget?: { perOrganization?: WindowBudget; perAddress?: WindowBudget };
  };
  mfa?: {
    /** global enforcement, default false */ enforce?: boolean;
    /** default 'grace' */ enforcementMode?: 'grace' | 'block';
  };
  security?: {
    stepUp?: { /** seconds, default 300 */ maxAge?: number };
  };
  /** Host permission keys added to the catalog (organization-scoped; owner and admin hold them). */
  permissions?: PermissionDefinition[];
  /** URL templates with `{token}`; when set, the mail context also carries `url`. */
  links?: { verifyEmail?: string; resetPassword?: string; acceptInvite?: string; passwordlessLogin?: string };
  /** Passwordless sign-in by e-mail (docs/passwordless.md); without it the passwordless routes answer 404. */
  passwordless?: PasswordlessConfig;
  /** Social login through OpenID Connect providers (docs/social-login.md); without it the social routes answer 404. */
  social?: SocialConfig;
  /** Single sign-on per organization (docs/sso.md); without it the SSO routes answer 404. */
  sso?: SsoConfig;
  /** Passkeys (docs/mfa.md). Without it the passkey routes answer 404 and passkeys are not offered as factors. */
  webauthn?: WebauthnConfig;
  /** Durable delivery of events to `onEvent` and webhooks (docs/events.md). */
  events?: { delivery?: EventDeliveryConfig };
  /** Organization webhooks in the Standard Webhooks format (docs/webhooks.md). Off by default. */
  webhooks?: WebhooksConfig;
}

export interface EventDeliveryConfig {
  /** Run a delivery worker in this instance; default true. With false, call `identity.service.deliverDueEvents()` yourself. */
  worker?: boolean;
  /** milliseconds between claims of due rows, default 1000 */ pollMs?: number;
  /** seconds an instance holds a claimed row, default 60 */ leaseSec?: number;
  /** seconds before attempt 1, then between attempts (the last entry repeats); default `[0, 5, 300, 1800, 7200, 18000, 36000, 36000]` */
  schedule?: number[];
  /** failed attempts before a row is `dead`, default 8 */ maxAttempts?: number;
  /** each delay is lengthened by up to this fraction of itself, default 0.2 */ jitter?: number;
  /** days `delivered` and `dead` rows are kept, default 30 */ retentionDays?: number;
}

export interface WebhooksConfig {
  /** default false: the webhook routes answer 404 and no webhook row is written */ enabled?: boolean;
  /** default 10 */ maxPerOrg?: number;
  /** milliseconds for a whole attempt (resolution, connection, answer), default 10000 */ timeoutMs?: number;
  /** seconds both secrets sign after a rotation, default 86400 */ rotationOverlapSec?: number;
  /** accept `http:` URLs (tests, private deployments); default false */ allowHttp?: boolean;
  /** accept private addresses, never link-local (tests, private deployments); default false */ allowPrivateNetworks?: boolean;
}

export interface ResolvedEventDeliveryConfig {
  worker: boolean;
  pollMs: number;
  leaseSec: number;
  schedule: number[];
  maxAttempts: number;
  jitter: number;
  retentionDays: number;
}

export interface ResolvedWebhooksConfig {
  enabled: boolean;
  maxPerOrg: number;
  timeoutMs: number;
  rotationOverlapSec: number;
  allowHttp: boolean;
  allowPrivateNetworks: boolean;
}

export interface PasswordlessConfig {
  /** Also mail a one-time link (`links.passwordlessLogin` is then required). Default false. */
  link?: boolean;
  /** An address with no account gets one at its first successful verify. Default false. */
  allowSignup?: boolean;
  /** Seconds a code and its link live, default 600. */
  ttl?: number;
}

export interface WebauthnConfig {
  /** The relying-party id: the host name passkeys are bound to (`example.com`), no scheme or port. */
  rpId: string;
  /** Shown by the browser and authenticator. Default: `appName`. */
  rpName?: string;
  /** Every origin the pages that run the ceremony are served from (`https://app.example.com`); each must be on `rpId` or a subdomain of it. */
  origins: string[];
}

/** The configuration with every default applied; what services read. */
export interface ResolvedConfig {
  database: DatabaseConfig;
  tablePrefix: string;
  migrate: boolean;
  secret: string;
  issuer: string;
  audience: string | undefined;
  appName: string;
  tokens: {
    accessTtl: number;
    refreshTtl: number;
    refreshRotation: boolean;
    mfaTicketTtl: number;
    emailVerifyTtl: number;
    passwordResetTtl: number;
    inviteTtl: number;
    sessionMaxAge: number;
  };
  password: {
    minLength: number;
    maxLength: number;
    bcryptCost: number;
    algorithm: 'bcrypt' | 'argon2id';
    argon2: { memoryCost: number; timeCost: number; parallelism: number };
    /** undefined: the cores */
    workers: number | undefined;
  };
  auth: {
    requireVerifiedEmail: boolean;
    lockout: { threshold: number; window: number; duration: number };
    rateLimits: Record<RateLimitGroup, RateLimitRule | false>;
    rateLimitStore: RateLimitStoreOption;
  };
  otp: {
    length: number;
    ttl: number;
    maxAttempts: number;
    resendCooldown: number;
    sendBudget: { perDestination: WindowBudget; perAccount: WindowBudget };
    verifyBudget: WindowBudget;
    totp: { issuer: string };
  };
  invites: { sendBudget: { perOrganization: WindowBudget; perAddress: WindowBudget } };
  mfa: { enforce: boolean; enforcementMode: 'grace' | 'block' };
  security: { stepUp: { maxAge: number } };
  permissions: PermissionDefinition[];
  links: { verifyEmail?: string; resetPassword?: string; acceptInvite?: string; passwordlessLogin?: string };
  passwordless: { link: boolean; allowSignup: boolean; ttl: number } | undefined;
  webauthn: { rpId: string; rpName: string; origins: string[] } | undefined;
  social: ResolvedSocialConfig | undefined;
  sso: ResolvedSsoConfig | undefined;
  events: { delivery: ResolvedEventDeliveryConfig };
  webhooks: ResolvedWebhooksConfig;
}
