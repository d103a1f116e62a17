import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { accountRefusalError, type SignInRules } from '../access/sign-in-rules.js';
import type * as OpenIdClient from 'openid-client';
import { matchesReturnUrl } from '../../config/social.js';
import { decrypt, encrypt } from '../../crypto/aead.js';
import { keyedHash, randomToken } from '../../crypto/keyed-hash.js';
import { errors, IdentityError, type SocialErrorCode, type SsoErrorCode } from '../../errors.js';
import type { SocialFlowPurpose, SocialFlowRecord } from '../../store/social-repository.js';
import type { UserRecord } from '../../store/user-repository.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { CONTROL_CHARACTER, normaliseEmail } from '../shared/identity-rules.js';
import type { HeldProof, LoginResult, SignInWay } from '../sessions/sign-in-result.js';
import type { MfaService } from '../mfa/mfa-service.js';
import type { Principal } from '../access/principal.js';
import type { AccessPolicy } from '../access/access-policy.js';
import type { SessionService } from '../sessions/session-service.js';
import { isUnreachable, type ProviderConfiguration } from './social-provider-client.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { ENDED_ROW_RETENTION_MS } from '../shared/occasional.js';

/*
 * The federated sign-in round trip, shared by social login (docs/social-login.md) and single sign-on
 * per organization (12): the flow row with hashed state and sealed PKCE verifier and nonce,
 * the `return_to` rule, the callback that only seals the validated claims on the flow, the
 * one-time exchange code bound to the tab by the handoff verifier, and the session opened at
 * the exchange behind the MFA gate. Each feature supplies its target (where the provider is
 * and how it is reached) and its account resolution; nothing here is copied between them.
 */

export interface AuthorizationStart {
  authorization_url: string;
  expires_in: number;
}

/** What the callback learned from the provider (docs/social-login.md), sealed on the flow for the exchange. */
export interface ProviderClaims {
  subject: string;
  email: string | null;
  emailVerified: boolean;
  name: string | null;
}

/** The callback's query, as the provider sent it. */
export interface CallbackParameters {
  code?: string;
  state?: string;
  iss?: string;
  error?: string;
}

/** `return_to`, error URL and lifetimes of one feature's flows (docs/social-login.md and docs/sso.md). */
export interface FlowSettings {
  returnUrls: string[];
  errorUrl: string | undefined;
  stateTtl: number;
  exchangeTtl: number;
}

/** One provider a flow goes to: a social provider or an organization's connection. */
export interface FlowTarget {
  /** Stored as the flow's `provider`; a state issued for another key counts as unknown. */
  key: string;
  connectionId: string | null;
  redirectUri: string;
  scopes: string[];
  authorizationParams: Record<string, string>;
  configuration(): Promise<{ client: typeof OpenIdClient; configuration: ProviderConfiguration }>;
}

export type RefusalCode =
  | SocialErrorCode
  | Extract<SsoErrorCode, 'sso_email_outside_domain' | 'sso_not_member' | 'sso_member_suspended' | 'sso_required'>
  | 'account_disabled'
  | 'email_unverified'
  | 'invalid_credentials'
  | 'session_ended';

/** A federated sign-in, as `FederatedFlow.openSession` opens it. */
export interface FederatedSignIn {
  /** What `user.logged_in` and `user.login_failed` say of the sign-in (docs/events.md). */
  method: Extract<SignInWay, { method: 'social' | 'sso' }>;
  /** The organization the events name (single sign-on). */
  organizationId?: string;
  /** Runs in the session's transaction, with its id. */
  opened?: (uow: UnitOfWork, sessionId: string) => Promise<void>;
  /** What the resolution proved that must still hold when the session or ticket is written. */
  held?: HeldProof | undefined;
}

/** A callback or exchange refusal: a code of docs/social-login.md and docs/sso.md (or a login code of section 5). */
export class FederatedRefusal extends Error {
  constructor(
    readonly code: RefusalCode,
    readonly detail?: string,
  ) {
    super(code);
  }
}

/** Two first sign-ins of one new subject race on the unique indexes; the loser resolves again and finds the winner's rows. */
export class ResolutionConflict extends Error {}
export const RESOLUTION_ATTEMPTS = 3;

/** RFC 6749 codes that may be passed on to the SPA as `social_error_detail` (docs/social-login.md). */
const FORWARDED_PROVIDER_ERRORS = new Set(['access_denied', 'server_error', 'temporarily_unavailable', 'invalid_scope', 'login_required', 'consent_required', 'interaction_required']);
const EMAIL_MAX_OCTETS = 320;
/** OpenID Connect Core 2: `sub` is at most 255 ASCII characters; the identity tables hold exactly that. */
const SUBJECT_MAX = 255;
const REDIRECT_HEADERS = { 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' };

export class FederatedFlows {
  constructor(
    private readonly context: ServiceContext,
    private readonly sessions: SessionService,
    private readonly mfa: MfaService,
    private readonly signInRules: SignInRules,
    private readonly policy: AccessPolicy,
  ) {}

  /** Authorize: one flow row, and the provider's authorization URL (docs/social-login.md). */
  async start(
    target: FlowTarget,
    settings: FlowSettings,
    purpose: SocialFlowPurpose,
    input: { returnTo?: string | undefined; handoffChallenge: string },
    principal: Principal | null,
    meta: RequestMeta,
    extraParams: Record<string, string> = {},
  ): Promise<AuthorizationStart> {
    const returnTo = input.returnTo ?? settings.returnUrls[0]!;
    if (!matchesReturnUrl(returnTo, settings.returnUrls)) throw errors.validation(['return_to is not allowed']);
    const { client, configuration } = await target.configuration();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const codeVerifier = client.randomPKCECodeVerifier();
    const codeChallenge = await client.calculatePKCECodeChallenge(codeVerifier);
    const flowId = randomUUID();
    await runUnitOfWork(this.context, meta, async (uow) => {
      // A link's flow is a write of its session, as every other: not once the owner has ended it.
      if (principal) await this.policy.assertSessionLive(uow.repos, principal);
      // Pruned on the way, so no scheduler is needed (docs/social-login.md: rows older than one day).
      await uow.repos.socialFlows.pruneCreatedBefore(uow.now - ENDED_ROW_RETENTION_MS);
      await uow.repos.socialFlows.insert({
        id: flowId,
        stateHash: this.hash('state', state),
        provider: target.key,
        connectionId: target.connectionId,
        purpose,
        userId: principal?.userId ?? null,
        sessionId: principal?.sessionId ?? null,
        secretsEnc: encrypt(this.context.keys.socialFlowEncryption, JSON.stringify({ code_verifier: codeVerifier, nonce }), `social-flow:${flowId}`),
        returnTo,
        handoffChallenge: input.handoffChallenge,
        now: uow.now,
        expiresAt: uow.now + settings.stateTtl * 1000,
      });
    });
    const url = client.buildAuthorizationUrl(configuration, {
      ...target.authorizationParams,
      ...extraParams,
      redirect_uri: target.redirectUri,
      response_type: 'code',
      scope: target.scopes.join(' '),
      state,
      nonce,
      code_challenge: codeChallenge,
      code_challenge_method: 'S256',
    });
    return { authorization_url: url.href, expires_in: settings.stateTtl };
  }

  /**
   * The callback: consumes the flow by its state (one conditional update, before the provider
   * is called), validates the provider's answer, lets the feature `vet` the claims without
   * writing anything, and seals them on the flow with a one-time exchange code. Answers where
   * to send the browser. `target` is resolved from the flow's own key: a state issued for
   * another provider or connection is burned and counts as unknown.
   */
  async callback(
    expectedKey: string,
    settings: FlowSettings,
    parameters: CallbackParameters,
    resolveTarget: (flow: SocialFlowRecord) => Promise<FlowTarget | undefined>,
    vet: (flow: SocialFlowRecord, claims: ProviderClaims) => Promise<void> = async () => {},
  ): Promise<string> {
    const flow = parameters.state ? await this.context.store.repos.socialFlows.consumeByState(this.hash('state', parameters.state), this.context.clock.now()) : undefined;
    const target = flow && flow.provider === expectedKey ? await resolveTarget(flow) : undefined;
    if (!flow || !target) {
      if (settings.errorUrl) return withQuery(settings.errorUrl, { social_error: 'social_state_invalid' });
      throw errors.socialStateInvalid(REDIRECT_HEADERS);
    }
    try {
      // The callback changes no account, link, verification or session: it may be finished in
      // any browser (a link URL sent to a victim, RFC 9700 4.7). Whatever the flow does happens
      // at the exchange, once the tab that started it has shown its handoff verifier.
      const claims = await this.fetchClaims(target, flow, parameters);
      await vet(flow, claims);
      const code = randomToken();
      await this.context.store.repos.socialFlows.setExchange(flow.id, {
        hash: this.hash('exchange', code),
        expiresAt: this.context.clock.now() + settings.exchangeTtl * 1000,
        claimsEnc: encrypt(this.context.keys.socialFlowEncryption, JSON.stringify(claims), claimsAad(flow.id)),
      });
      return withQuery(flow.returnTo, { social_code: code });
    } catch (error) {
      const refusal = asRefusal(error);
      if (!refusal) throw error;
      return withQuery(flow.returnTo, { social_error: refusal.code, ...(refusal.detail ? { social_error_detail: refusal.detail } : {}) });
    }
  }

  /** Token exchange and ID-token validation by openid-client; the provider's tokens are dropped here (docs/social-login.md). */
  private async fetchClaims(target: FlowTarget, flow: SocialFlowRecord, parameters: CallbackParameters): Promise<ProviderClaims> {
    if (parameters.error !== undefined) {
      this.context.logger.warn('identity provider answered with an error', { provider: target.key, error: parameters.error.slice(0, 64) });
      throw new FederatedRefusal('provider_error', FORWARDED_PROVIDER_ERRORS.has(parameters.error) ? parameters.error : undefined);
    }
    const secrets = JSON.parse(decrypt(this.context.keys.socialFlowEncryption, flow.secretsEnc, `social-flow:${flow.id}`).toString('utf8')) as { code_verifier: string; nonce: string };
    let provided: Awaited<ReturnType<FlowTarget['configuration']>>;
    try {
      provided = await target.configuration();
    } catch (error) {
      throw error instanceof IdentityError && error.code === 'provider_unavailable' ? new FederatedRefusal('provider_unavailable') : error;
    }
    const { client, configuration } = provided;
    // The ID token's signature is checked against the provider's JWKS (docs/social-login.md).
    // openid-client skips that check for a token from the token endpoint (OpenID Connect Core
    // 3.1.3.7 lets TLS stand in for it) unless asked: a token endpoint answering for the issuer
    // would otherwise sign in whichever subject it wrote, under no key the issuer publishes.
    client.enableNonRepudiationChecks(configuration);
    const currentUrl = new URL(target.redirectUri);
    for (const [name, value] of Object.entries(parameters)) if (value !== undefined) currentUrl.searchParams.set(name, value);
    try {
      const tokens = await client.authorizationCodeGrant(configuration, currentUrl, {
        pkceCodeVerifier: secrets.code_verifier,
        expectedState: parameters.state!,
        expectedNonce: secrets.nonce,
        idTokenExpected: true,
      });
      const idToken = tokens.claims();
      if (!idToken) throw new FederatedRefusal('provider_response_invalid');
      let source: Record<string, unknown> = idToken;
      // docs/social-login.md: e-mail from the ID token, else from UserInfo (which checks the subject).
      if (typeof idToken.email !== 'string') source = await client.fetchUserInfo(configuration, tokens.access_token, idToken.sub);
      // What a provider asserts is input like any other: a subject past 255 characters, or a
      // control character in the subject or the address, is a malformed answer, refused before
      // it reaches a query or a column (PostgreSQL refuses a NUL outright: a 500).
      if (!isUsableSubject(idToken.sub) || (typeof source.email === 'string' && CONTROL_CHARACTER.test(source.email))) throw new FederatedRefusal('provider_response_invalid');
      return {
        subject: idToken.sub,
        email: normaliseProviderEmail(source.email),
        emailVerified: source.email_verified === true || source.email_verified === 'true',
        name: typeof idToken.name === 'string' ? idToken.name : typeof source.name === 'string' ? source.name : null,
      };
    } catch (error) {
      if (error instanceof FederatedRefusal) throw error;
      const unreachable = isUnreachable(error);
      this.context.logger.warn('callback refused by the provider response checks', { provider: target.key, error: describeOpenIdError(error) });
      throw new FederatedRefusal(unreachable ? 'provider_unavailable' : 'provider_response_invalid');
    }
  }

  /**
   * The exchange's first half (docs/social-login.md): the code is burned by one conditional update
   * before anything is checked, so every failure (expired, wrong verifier) burns it too.
   */
  async consumeExchange(input: { code: string; handoffVerifier: string }): Promise<{ flow: SocialFlowRecord; claims: ProviderClaims }> {
    const flow = await this.context.store.repos.socialFlows.consumeExchange(this.hash('exchange', input.code), this.context.clock.now());
    if (!flow?.claimsEnc || flow.exchangeExpiresAt === null || flow.exchangeExpiresAt <= this.context.clock.now()) throw invalidExchangeCode();
    if (!handoffMatches(input.handoffVerifier, flow.handoffChallenge)) throw invalidExchangeCode();
    const claims = JSON.parse(decrypt(this.context.keys.socialFlowEncryption, flow.claimsEnc, claimsAad(flow.id)).toString('utf8')) as ProviderClaims;
    return { flow, claims };
  }

  /**
   * A federated first factor completes the sign-in (docs/social-login.md and docs/sso.md): the MFA gate applies
   * unchanged, else a session opens with `amr: ['fed']`; `opened` runs in its transaction.
   */
  async openSession(user: UserRecord, meta: RequestMeta, signIn: FederatedSignIn): Promise<LoginResult> {
    const { method, organizationId, opened, held } = signIn;
    const ssoConnectionId = method.method === 'sso' ? method.connection_id : undefined;
    // Disabled or deleted after the provider's answer was checked: a failed sign-in like any other.
    const passed = await this.signInRules.recordingChangedAccount(
      this.mfa.throughLoginGate(user, meta, 'fed', { ssoConnectionId, socialProvider: method.method === 'social' ? method.provider : undefined, held }, () =>
        runUnitOfWork(this.context, meta, async (uow) => {
          const started = await this.sessions.openPastGate(uow, user, { mfa: false, amr: ['fed'], authTime: uow.now }, meta, held);
          if (!started) return undefined;
          if (opened) await opened(uow, started.session.id);
          await uow.emit({ type: 'user.logged_in', actorId: user.id, userId: user.id, data: { mfa: false, amr: ['fed'], ...method } });
          return started;
        }),
      ),
      meta,
      { userId: user.id, way: method, organizationId },
    );
    if (passed.kind === 'mfa_required') return passed;
    // Tokens are signed only after commit (no token for a session that was never stored).
    const tokens = await this.sessions.signOpened(passed.opened);
    return { kind: 'session', tokens, user: { id: user.id, email: user.email, email_verified: user.emailVerified } };
  }

  private hash(kind: 'state' | 'exchange', value: string): string {
    return keyedHash(this.context.keys.socialFlowHash, `${kind}:${value}`);
  }
}

export function invalidExchangeCode(): IdentityError {
  return errors.invalidToken(400, 'The sign-in code is invalid, expired or already used.');
}

/** `base64url(SHA-256(verifier))` equals the stored challenge, compared in constant time. */
function handoffMatches(verifier: string, challenge: string): boolean {
  const computed = Buffer.from(createHash('sha256').update(verifier, 'utf8').digest('base64url'));
  const expected = Buffer.from(challenge);
  return computed.length === expected.length && timingSafeEqual(computed, expected);
}

export function withQuery(base: string, parameters: Record<string, string>): string {
  const url = new URL(base);
  for (const [name, value] of Object.entries(parameters)) url.searchParams.set(name, value);
  return url.href;
}

function isUsableSubject(subject: string): boolean {
  return subject.length <= SUBJECT_MAX && !CONTROL_CHARACTER.test(subject);
}

/** A provider address we can store: a string that looks like an address and fits the column. */
function normaliseProviderEmail(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const email = normaliseEmail(value);
  if (!/^[^\s@]+@[^\s@]+$/.test(email) || Buffer.byteLength(email, 'utf8') > EMAIL_MAX_OCTETS) return null;
  return email;
}

function asRefusal(error: unknown): FederatedRefusal | undefined {
  if (error instanceof FederatedRefusal) return error;
  if (error instanceof IdentityError && error.code === 'provider_unavailable') return new FederatedRefusal('provider_unavailable');
  return undefined;
}

/** The AES-GCM associated data of a flow's sealed claims: they open only on their own flow. */
function claimsAad(flowId: string): string {
  return `social-claims:${flowId}`;
}

/** The error's class and code only: openid-client messages can quote provider responses. */
function describeOpenIdError(error: unknown): string {
  const candidate = error as { name?: string; code?: string; error?: string };
  return [candidate.name ?? 'Error', candidate.code, candidate.error].filter(Boolean).join(' ');
}

/**
 * A refusal as the exchange answers it: a login refusal as `POST /auth/login` would, a link
 * refusal as 409 (401 for a session revoked meanwhile), and the resolution refusals of 9.4
 * with the status that says what the client can do about them.
 */
export function exchangeError(code: FederatedRefusal['code']): IdentityError {
  switch (code) {
    case 'account_disabled':
    case 'email_unverified':
    case 'invalid_credentials':
      return accountRefusalError(code);
    case 'session_ended':
      return errors.sessionEnded();
    default:
      return errors.federatedRefusal(code);
  }
}

