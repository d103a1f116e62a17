/**
 * Every failure the router answers with on purpose. Hosts and tests switch on `code`,
 * never on the message.
 */
export type IdentityErrorCode =
  | 'unauthorized'
  | 'step_up_required'
  | 'invalid_credentials'
  | 'invalid_grant'
  | 'invalid_token'
  | 'session_ended'
  | 'forbidden'
  | 'email_unverified'
  | 'account_disabled'
  | 'mfa_enrollment_required'
  | 'mfa_required'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'last_factor_protected'
  | 'invalid_code'
  | 'unsupported_factor'
  | 'invalid_state'
  | 'validation_failed'
  | 'invalid_json'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'too_many_requests'
  | 'unavailable'
  | 'request_abandoned'
  | 'internal_error'
  | SocialErrorCode
  | WebhookErrorCode
  | SsoErrorCode;

/** Single sign-on per organization (docs/sso.md); the last three travel as `social_error`. */
export type SsoErrorCode =
  | 'invalid_domain'
  | 'domain_not_verified'
  | 'invalid_issuer'
  | 'domain_taken'
  | 'sso_not_configured'
  | 'sso_required'
  | 'sso_email_outside_domain'
  | 'sso_not_member'
  | 'sso_member_suspended';

/** Webhook failures (docs/webhooks.md). */
export type WebhookErrorCode = 'invalid_webhook_url' | 'webhook_limit' | 'webhook_disabled';

/**
 * Social login failures (docs/social-login.md). Callback failures travel as `?social_error=<code>`
 * on the redirect; the rest are JSON answers.
 */
export type SocialErrorCode =
  | 'social_state_invalid'
  | 'provider_error'
  | 'provider_response_invalid'
  | 'provider_unavailable'
  | 'social_email_required'
  | 'account_link_required'
  | 'signup_disabled'
  | 'identity_already_linked'
  | 'provider_already_linked'
  | 'reauthentication_required'
  | 'last_login_method_protected';

export interface IdentityErrorOptions {
  /** Extra fields merged into the JSON body, e.g. `{ step_up: '/auth/mfa/step-up' }`. */
  extra?: Record<string, unknown>;
  /** Response headers, e.g. `WWW-Authenticate` or `Retry-After`. */
  headers?: Record<string, string>;
  /** Validation messages; only for `validation_failed` (answered as `{errors: [...]}`). */
  errors?: string[];
  cause?: unknown;
}

/** The one error type services throw; `http/error-handler.ts` maps it to a response. */
export class IdentityError extends Error {
  override readonly name = 'IdentityError';
  readonly status: number;
  readonly code: IdentityErrorCode;
  readonly extra: Record<string, unknown>;
  readonly headers: Record<string, string>;
  readonly errors: string[] | undefined;

  constructor(status: number, code: IdentityErrorCode, message: string, options: IdentityErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
    this.code = code;
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
    this.errors = options.errors;
  }
}

const BEARER_CHALLENGE = 'Bearer';

/** Constructors for the errors used in more than one place, so status and code never drift apart. */
export const errors = {
  unauthorized: (message = 'Missing or invalid bearer credentials.') =>
    new IdentityError(401, 'unauthorized', message, { headers: { 'WWW-Authenticate': BEARER_CHALLENGE } }),
  stepUpRequired: () =>
    new IdentityError(401, 'step_up_required', 'This operation needs a recent second-factor check.', {
      extra: { step_up: '/auth/mfa/step-up' },
      headers: { 'WWW-Authenticate': 'Bearer error="step_up_required"' },
    }),
  invalidCredentials: (status: 401 | 403 = 401) =>
    new IdentityError(status, 'invalid_credentials', 'Invalid e-mail or password.', {
      headers: status === 401 ? { 'WWW-Authenticate': BEARER_CHALLENGE } : {},
    }),
  invalidGrant: () =>
    new IdentityError(401, 'invalid_grant', 'The refresh token is invalid, expired or already used.', {
      headers: { 'WWW-Authenticate': BEARER_CHALLENGE },
    }),
  invalidToken: (status: 400 | 401, message = 'The token is invalid, expired or already used.') =>
    new IdentityError(status, 'invalid_token', message, status === 401 ? { headers: { 'WWW-Authenticate': BEARER_CHALLENGE } } : {}),
  sessionEnded: () =>
    new IdentityError(401, 'session_ended', 'This session has been revoked.', { headers: { 'WWW-Authenticate': BEARER_CHALLENGE } }),
  forbidden: (message = 'You do not have permission to do this.') => new IdentityError(403, 'forbidden', message),
  noActiveOrganization: () => new IdentityError(403, 'forbidden', 'Select an organization first (POST /auth/switch-org).'),
  /** docs/security.md: an unproven address; `resend` points at the way to prove it. */
  emailUnverified: (message = 'Verify your e-mail address first.') =>
    new IdentityError(403, 'email_unverified', message, { extra: { resend: '/auth/email/verify/resend' } }),
  accountDisabled: () => new IdentityError(403, 'account_disabled', 'This account has been disabled.'),
  /** docs/social-login.md: a user without a factor whose sign-in is older than `security.stepUp.maxAge`. */
  reauthenticationRequired: () =>
    new IdentityError(401, 'reauthentication_required', 'Your sign-in is too old for this action; sign in again.', {
      headers: { 'WWW-Authenticate': 'Bearer error="reauthentication_required"' },
    }),
  notFound: (what = 'Resource') => new IdentityError(404, 'not_found', `${what} not found.`),
  conflict: (message: string) => new IdentityError(409, 'conflict', message),
  validation: (messages: string[]) =>
    new IdentityError(422, 'validation_failed', 'Validation failed.', { errors: messages }),
  invalidCode: () => new IdentityError(422, 'invalid_code', 'The code is wrong, expired or already used.'),
  /**
   * `window`: the group, budget, cooldown or wait that refused (its limit, and the instant in
   * epoch ms it has room again), so every 429 carries `X-RateLimit-*` beside `Retry-After` as a
   * rate-limit group's does (spec 7): required, so no 429 goes out without them.
   */
  rateLimited: (retryAfterSeconds: number, code: 'rate_limited' | 'too_many_requests', window: { limit: number; resetsAt: number }) =>
    new IdentityError(429, code, 'Too many requests; try again later.', {
      headers: {
        'Retry-After': String(Math.max(1, Math.ceil(retryAfterSeconds))),
        'X-RateLimit-Limit': String(window.limit),
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': String(Math.ceil(window.resetsAt / 1000)),
      },
      extra: { retry_after: Math.max(1, Math.ceil(retryAfterSeconds)) },
    }),
  unavailable: (cause?: unknown) =>
    new IdentityError(503, 'unavailable', 'The identity service is unavailable; try again shortly.', { cause }),
  /**
   * The client closed its connection before the answer: work it was waiting for is dropped.
   * 499 is nginx's "client closed request"; nobody is left to read it, and it is not an error
   * of the service, so it is not logged.
   */
  requestAbandoned: () => new IdentityError(499, 'request_abandoned', 'The client closed the request before it was answered.'),

  // Multi-factor authentication (docs/mfa.md).
  /** A caller with a confirmed factor whose session has not passed one, in a `require_mfa` organization. */
  mfaRequired: () => new IdentityError(403, 'mfa_required', 'This organization requires multi-factor authentication; complete a second-factor check (step-up) first.'),
  /** MFA is enforced and no factor is confirmed: enroll one first. */
  mfaEnrollmentRequired: (message = 'Multi-factor authentication is required; enroll and confirm a factor to continue.') =>
    new IdentityError(403, 'mfa_enrollment_required', message),
  invalidState: (message: string) => new IdentityError(422, 'invalid_state', message),
  unsupportedFactor: (message: string) => new IdentityError(422, 'unsupported_factor', message),
  lastFactorProtected: () => new IdentityError(409, 'last_factor_protected', 'MFA is enforced for this account; the last confirmed factor cannot be removed.'),

  // Social login and single sign-on (docs/social-login.md, docs/sso.md).
  lastLoginMethodProtected: () =>
    new IdentityError(409, 'last_login_method_protected', 'This is the last way to sign in to the account; set a password or link another provider first.'),
  socialStateInvalid: (headers: Record<string, string>) =>
    new IdentityError(400, 'social_state_invalid', 'The sign-in attempt is unknown, expired or already used; start again.', { headers }),
  providerUnavailable: (cause?: unknown) => new IdentityError(502, 'provider_unavailable', 'The identity provider could not be reached; try again shortly.', { cause }),
  /** A refusal of the federated round trip's account resolution or link, with the status that says what the client can do. */
  federatedRefusal: (code: FederatedRefusalCode) => {
    const [status, message] = FEDERATED_REFUSALS[code] ?? [502, 'The provider could not complete the sign-in.'];
    return new IdentityError(status, code, message);
  },
  ssoRequired: (organizationSlug: string, status: 401 | 403 = 403) =>
    new IdentityError(status, 'sso_required', 'Your organization requires signing in through its single sign-on.', {
      extra: { organization_slug: organizationSlug },
      ...(status === 401 ? { headers: { 'WWW-Authenticate': 'Bearer error="sso_required"' } } : {}),
    }),
  invalidIssuer: (message: string, reason: string) => new IdentityError(422, 'invalid_issuer', message, { extra: { reason } }),
  invalidDomain: (message: string) => new IdentityError(422, 'invalid_domain', message),
  domainNotVerified: (message: string) => new IdentityError(422, 'domain_not_verified', message),
  domainTaken: () => new IdentityError(409, 'domain_taken', 'Another organization has verified this domain.'),
  ssoNotConfigured: () => new IdentityError(404, 'sso_not_configured', 'Single sign-on is not configured for this address or organization.'),

  // Webhooks (docs/webhooks.md).
  webhookLimit: (max: number) => new IdentityError(409, 'webhook_limit', `An organization can have at most ${max} webhooks.`),
  invalidWebhookUrl: (message: string, reason: string) => new IdentityError(422, 'invalid_webhook_url', message, { extra: { reason } }),
  webhookDisabled: () => new IdentityError(409, 'webhook_disabled', 'The webhook is disabled.'),
};

/** Resolution and link refusals of the federated exchange that are not account refusals. */
export type FederatedRefusalCode = Exclude<SocialErrorCode | SsoErrorCode, 'invalid_domain' | 'domain_not_verified' | 'domain_taken' | 'invalid_issuer' | 'sso_not_configured'> | 'sso_required';

const FEDERATED_REFUSALS: Partial<Record<FederatedRefusalCode, [number, string]>> = {
  identity_already_linked: [409, 'This provider account is already linked to another user.'],
  provider_already_linked: [409, 'Your account is already linked to another account at this provider; unlink it first.'],
  account_link_required: [409, 'An account with this e-mail exists; sign in with it, then link this provider.'],
  social_email_required: [422, 'The provider did not share an e-mail address; allow it and try again.'],
  signup_disabled: [403, 'Sign-up through this provider is disabled.'],
  sso_required: [403, 'Your organization requires signing in through its single sign-on.'],
  sso_email_outside_domain: [403, "The identity provider asserted an address outside the organization's verified domains."],
  sso_not_member: [403, 'You are not a member of this organization.'],
  sso_member_suspended: [403, 'Your membership of this organization is suspended.'],
};
