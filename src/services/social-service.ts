import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import type { ResolvedSocialConfig, ResolvedSocialProvider } from '../config/social.js';
import { matchesReturnUrl } from '../config/social.js';
import { decrypt, encrypt } from '../crypto/aead.js';
import { keyedHash, randomToken } from '../crypto/keyed-hash.js';
import { errors, IdentityError, type SocialErrorCode } from '../errors.js';
import type { SocialFlowPurpose, SocialFlowRecord, SocialIdentityRecord } from '../store/social-repository.js';
import type { UserRecord } from '../store/user-repository.js';
import type { AccessPolicy } from './access-policy.js';
import type { LoginResult } from './login-result.js';
import type { RequestMeta, ServiceContext } from './context.js';
import { userStatus } from './identity-service.js';
import type { MfaService } from './mfa-service.js';
import { normaliseEmail } from './identity-rules.js';
import type { Principal } from './principal.js';
import type { SessionService } from './session-service.js';
import { recordFirstEmailProof } from './credential-lifecycle.js';
import { isUnreachable, SocialProviderClients } from './social-provider-client.js';
import { runUnitOfWork, type UnitOfWork } from './unit-of-work.js';
import { iso, isoOrNull } from './iso-time.js';

/** `identity` of CONTRACT 9.2; the provider's `sub` is never returned. */
export interface SocialIdentityView {
  id: string;
  provider: string;
  email: string | null;
  email_verified: boolean;
  created_at: string;
  last_login_at: string | null;
}

export interface AuthorizationStart {
  authorization_url: string;
  expires_in: number;
}

export type SocialExchangeResult =
  | { purpose: 'login'; login: LoginResult; isNewUser: boolean }
  | { purpose: 'link'; identity: SocialIdentityView };

/** What the exchange decided: who signs in, through which link, and whether the account is new. */
interface SocialFlowOutcome {
  user_id: string;
  identity_id: string;
  is_new_user: boolean;
}

/** What the callback learned from the provider (CONTRACT 9.3), sealed on the flow for the exchange. */
interface ProviderClaims {
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

/** RFC 6749 codes that may be passed on to the SPA as `social_error_detail` (CONTRACT 9.7). */
const FORWARDED_PROVIDER_ERRORS = new Set(['access_denied', 'server_error', 'temporarily_unavailable', 'invalid_scope', 'login_required', 'consent_required', 'interaction_required']);
const FLOW_RETENTION_MS = 24 * 60 * 60 * 1000;
const DISPLAY_NAME_MAX = 120;
const EMAIL_MAX_OCTETS = 320;
/** Two first logins of one new subject race on the unique indexes; the loser resolves again and finds the winner's link. */
const RESOLUTION_ATTEMPTS = 3;

/** A callback or exchange refusal: a code of CONTRACT 9.7 (or a login code of section 5). */
class SocialRefusal extends Error {
  constructor(
    readonly code: SocialErrorCode | 'account_disabled' | 'email_unverified' | 'invalid_credentials' | 'session_ended',
    readonly detail?: string,
  ) {
    super(code);
  }
}

class ResolutionConflict extends Error {}

/**
 * Social login through OpenID Connect providers (CONTRACT 9): the authorization round trip,
 * account resolution and linking, the one-time exchange, and link management. The OpenID
 * client library is loaded only when a provider is first used.
 */
export class SocialService {
  private readonly clients: SocialProviderClients;

  constructor(
    private readonly context: ServiceContext,
    private readonly social: ResolvedSocialConfig,
    private readonly sessions: SessionService,
    private readonly mfa: MfaService,
    private readonly policy: AccessPolicy,
  ) {
    this.clients = new SocialProviderClients(context.clock, context.logger);
  }

  listProviders(): Array<{ id: string; name: string }> {
    return [...this.social.providers.values()].map((provider) => ({ id: provider.id, name: provider.name }));
  }

  // ---------------------------------------------------------------- authorize

  /** POST/GET /auth/social/{provider}/authorize: a login flow. */
  startLogin(providerId: string, input: { returnTo?: string | undefined; handoffChallenge: string }, meta: RequestMeta): Promise<AuthorizationStart> {
    return this.start(this.provider(providerId), 'login', input, null, meta);
  }

  /**
   * POST /auth/social/{provider}/link: a link flow for the signed-in user. Its route declares
   * `freshAuthentication`, which the access policy checks at link start, never at the callback (CONTRACT 9.5).
   */
  async startLink(principal: Principal, providerId: string, input: { returnTo?: string | undefined; handoffChallenge: string }, meta: RequestMeta): Promise<AuthorizationStart> {
    return this.start(this.provider(providerId), 'link', input, principal, meta);
  }

  private async start(
    provider: ResolvedSocialProvider,
    purpose: SocialFlowPurpose,
    input: { returnTo?: string | undefined; handoffChallenge: string },
    principal: Principal | null,
    meta: RequestMeta,
  ): Promise<AuthorizationStart> {
    const returnTo = input.returnTo ?? this.social.returnUrls[0]!;
    if (!matchesReturnUrl(returnTo, this.social.returnUrls)) throw errors.validation(['return_to is not allowed']);
    const { client, configuration } = await this.clients.configuration(provider);
    const state = client.randomState();
    const nonce = client.randomNonce();
    const codeVerifier = client.randomPKCECodeVerifier();
    const codeChallenge = await client.calculatePKCECodeChallenge(codeVerifier);
    const flowId = randomUUID();
    await runUnitOfWork(this.context, meta, async (uow) => {
      // Pruned on the way, so no scheduler is needed (CONTRACT 9.10: rows older than one day).
      await uow.repos.socialFlows.pruneCreatedBefore(uow.now - FLOW_RETENTION_MS);
      await uow.repos.socialFlows.insert({
        id: flowId,
        stateHash: this.hash('state', state),
        provider: provider.id,
        purpose,
        userId: principal?.userId ?? null,
        sessionId: principal?.sessionId ?? null,
        secretsEnc: encrypt(this.context.keys.socialFlowEncryption, JSON.stringify({ code_verifier: codeVerifier, nonce }), `social-flow:${flowId}`),
        returnTo,
        handoffChallenge: input.handoffChallenge,
        now: uow.now,
        expiresAt: uow.now + this.social.stateTtl * 1000,
      });
    });
    const url = client.buildAuthorizationUrl(configuration, {
      ...provider.authorizationParams,
      redirect_uri: this.redirectUri(provider),
      response_type: 'code',
      scope: provider.scopes.join(' '),
      state,
      nonce,
      code_challenge: codeChallenge,
      code_challenge_method: 'S256',
    });
    return { authorization_url: url.href, expires_in: this.social.stateTtl };
  }

  // ---------------------------------------------------------------- callback

  /**
   * GET /auth/social/{provider}/callback. Answers where to send the browser: the flow's
   * `return_to` with a one-time `social_code` or a `social_error`. A state that is unknown,
   * expired or used has no trustworthy destination: 400, or `errorUrl` when configured.
   */
  async callback(providerId: string, parameters: CallbackParameters): Promise<string> {
    const provider = this.provider(providerId);
    const flow = parameters.state ? await this.context.store.repos.socialFlows.consumeByState(this.hash('state', parameters.state), this.context.clock.now()) : undefined;
    // A state issued for another provider is burned and signs no one in.
    if (!flow || flow.provider !== provider.id) {
      if (this.social.errorUrl) return withQuery(this.social.errorUrl, { social_error: 'social_state_invalid' });
      throw new IdentityError(400, 'social_state_invalid', 'The sign-in attempt is unknown, expired or already used; start again.', {
        headers: { 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' },
      });
    }
    try {
      // The callback changes no account, link, verification or session: it may be finished in
      // any browser (a link URL sent to a victim, RFC 9700 4.7). Whatever the flow does happens
      // at the exchange, once the tab that started it has shown its handoff verifier.
      const claims = await this.fetchClaims(provider, flow, parameters);
      const code = randomToken();
      await this.context.store.repos.socialFlows.setExchange(flow.id, {
        hash: this.hash('exchange', code),
        expiresAt: this.context.clock.now() + this.social.exchangeTtl * 1000,
        claimsEnc: encrypt(this.context.keys.socialFlowEncryption, JSON.stringify(claims), claimsAad(flow.id)),
      });
      return withQuery(flow.returnTo, { social_code: code });
    } catch (error) {
      const refusal = asRefusal(error);
      if (!refusal) throw error;
      return withQuery(flow.returnTo, { social_error: refusal.code, ...(refusal.detail ? { social_error_detail: refusal.detail } : {}) });
    }
  }

  /** Token exchange and ID-token validation by openid-client; the provider's tokens are dropped here (CONTRACT 9.3). */
  private async fetchClaims(provider: ResolvedSocialProvider, flow: SocialFlowRecord, parameters: CallbackParameters): Promise<ProviderClaims> {
    if (parameters.error !== undefined) {
      this.context.logger.warn('social provider answered with an error', { provider: provider.id, error: parameters.error.slice(0, 64) });
      throw new SocialRefusal('provider_error', FORWARDED_PROVIDER_ERRORS.has(parameters.error) ? parameters.error : undefined);
    }
    const secrets = JSON.parse(decrypt(this.context.keys.socialFlowEncryption, flow.secretsEnc, `social-flow:${flow.id}`).toString('utf8')) as { code_verifier: string; nonce: string };
    let provided: Awaited<ReturnType<SocialProviderClients['configuration']>>;
    try {
      provided = await this.clients.configuration(provider);
    } catch (error) {
      throw error instanceof IdentityError && error.code === 'provider_unavailable' ? new SocialRefusal('provider_unavailable') : error;
    }
    const { client, configuration } = provided;
    const currentUrl = new URL(this.redirectUri(provider));
    for (const [name, value] of Object.entries(parameters)) if (value !== undefined) currentUrl.searchParams.set(name, value);
    try {
      const tokens = await client.authorizationCodeGrant(configuration, currentUrl, {
        pkceCodeVerifier: secrets.code_verifier,
        expectedState: parameters.state!,
        expectedNonce: secrets.nonce,
        idTokenExpected: true,
      });
      const idToken = tokens.claims();
      if (!idToken) throw new SocialRefusal('provider_response_invalid');
      let source: Record<string, unknown> = idToken;
      // CONTRACT 9.3: e-mail from the ID token, else from UserInfo (which checks the subject).
      if (typeof idToken.email !== 'string') source = await client.fetchUserInfo(configuration, tokens.access_token, idToken.sub);
      return {
        subject: idToken.sub,
        email: normaliseProviderEmail(source.email),
        emailVerified: source.email_verified === true || source.email_verified === 'true',
        name: typeof idToken.name === 'string' ? idToken.name : typeof source.name === 'string' ? source.name : null,
      };
    } catch (error) {
      if (error instanceof SocialRefusal) throw error;
      const unreachable = isUnreachable(error);
      this.context.logger.warn('social callback refused by the provider response checks', { provider: provider.id, error: describeOpenIdError(error) });
      throw new SocialRefusal(unreachable ? 'provider_unavailable' : 'provider_response_invalid');
    }
  }

  /** CONTRACT 9.4, rules 1 to 4 in order, at the exchange. Refusals tied to a user are recorded (after commit) and then thrown. */
  private async resolveLogin(provider: ResolvedSocialProvider, claims: ProviderClaims, meta: RequestMeta): Promise<SocialFlowOutcome> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        const result = await runUnitOfWork(this.context, meta, (uow) => this.resolveLoginOnce(uow, provider, claims));
        if ('refusal' in result) throw result.refusal;
        return result.outcome;
      } catch (error) {
        if (error instanceof ResolutionConflict && attempt < RESOLUTION_ATTEMPTS) continue;
        throw error;
      }
    }
  }

  private async resolveLoginOnce(uow: UnitOfWork, provider: ResolvedSocialProvider, claims: ProviderClaims): Promise<{ outcome: SocialFlowOutcome; refusal?: undefined } | { refusal: SocialRefusal }> {
    const repos = uow.repos;
    const refuse = async (code: SocialRefusal['code'], userId: string | null) => {
      if (userId) await uow.emit({ type: 'user.login_failed', userId, data: { method: 'social', provider: provider.id, reason: code } });
      else this.context.logger.warn('social sign-in refused', { provider: provider.id, reason: code });
      return { refusal: new SocialRefusal(code) };
    };

    // Rule 1: the subject is the only link key.
    const linked = await repos.socialIdentities.findByProviderSubject(provider.id, claims.subject);
    if (linked && linked.issuer !== provider.issuer) {
      // Links never move silently to a new issuer.
      this.context.logger.warn('social link ignored: stored issuer differs from the configured one', { provider: provider.id, identity_id: linked.id });
      return refuse('account_link_required', null);
    }
    if (linked) {
      const user = await repos.users.findById(linked.userId);
      if (!user) return refuse('account_disabled', null);
      const refusal = this.loginRefusal(user, uow.now);
      if (refusal) return refuse(refusal, user.id);
      await repos.socialIdentities.recordLogin(linked.id, { email: claims.email, emailVerified: claims.emailVerified }, uow.now);
      return { outcome: { user_id: user.id, identity_id: linked.id, is_new_user: false } };
    }

    // Rule 2.
    if (!claims.email) return refuse('social_email_required', null);

    // Rule 3: auto-link only on a verified address on both sides, and one identity per provider.
    const local = await repos.users.findByEmail(claims.email);
    if (local) {
      const allowed =
        this.social.autoLinkByEmail &&
        claims.emailVerified &&
        local.emailVerified &&
        local.deletedAt === null &&
        !(await repos.socialIdentities.findForUserAndProvider(local.id, provider.id));
      if (!allowed) return refuse('account_link_required', local.id);
      const refusal = this.loginRefusal(local, uow.now);
      if (refusal) return refuse(refusal, local.id);
      const identityId = await this.insertLink(uow, local.id, provider, claims);
      await uow.emit({ type: 'user.social_linked', actorId: local.id, userId: local.id, data: { identity_id: identityId, provider: provider.id, method: 'auto_email' } });
      return { outcome: { user_id: local.id, identity_id: identityId, is_new_user: false } };
    }

    // Rule 4: sign-up.
    if (!provider.allowSignup) return refuse('signup_disabled', null);
    const userId = randomUUID();
    const displayName = claims.name ? [...claims.name.trim()].slice(0, DISPLAY_NAME_MAX).join('') || null : null;
    if (!(await repos.users.insertIfEmailFree({ id: userId, email: claims.email, emailVerified: claims.emailVerified, displayName, passwordHash: null, now: uow.now }))) {
      throw new ResolutionConflict();
    }
    const identityId = await this.insertLink(uow, userId, provider, claims);
    await uow.emit({ type: 'user.registered', actorId: userId, userId, data: { method: 'social', provider: provider.id } });
    await uow.emit({ type: 'user.social_linked', actorId: userId, userId, data: { identity_id: identityId, provider: provider.id, method: 'signup' } });
    // The account and its link stay; the login itself is refused until the address is verified.
    if (this.context.config.auth.requireVerifiedEmail && !claims.emailVerified) return refuse('email_unverified', userId);
    return { outcome: { user_id: userId, identity_id: identityId, is_new_user: true } };
  }

  /** CONTRACT 9.5 at the exchange of a link flow, once the bearer has been matched to the flow. */
  private async resolveLink(provider: ResolvedSocialProvider, flow: SocialFlowRecord, claims: ProviderClaims, meta: RequestMeta): Promise<SocialFlowOutcome> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runUnitOfWork(this.context, meta, (uow) => this.resolveLinkOnce(uow, provider, flow, claims));
      } catch (error) {
        if (error instanceof ResolutionConflict && attempt < RESOLUTION_ATTEMPTS) continue;
        throw error;
      }
    }
  }

  private async resolveLinkOnce(uow: UnitOfWork, provider: ResolvedSocialProvider, flow: SocialFlowRecord, claims: ProviderClaims): Promise<SocialFlowOutcome> {
    const repos = uow.repos;
    const session = flow.sessionId ? await repos.sessions.findLive(flow.sessionId, uow.now) : undefined;
    const user = flow.userId ? await repos.users.findByIdForUpdate(flow.userId) : undefined;
    if (!session || !user || session.userId !== user.id || user.status !== 'active' || user.deletedAt !== null) throw new SocialRefusal('session_ended');

    const existing = await repos.socialIdentities.findByProviderSubject(provider.id, claims.subject);
    if (existing && existing.userId !== user.id) throw new SocialRefusal('identity_already_linked');
    if (existing) {
      await repos.socialIdentities.recordLogin(existing.id, { email: claims.email, emailVerified: claims.emailVerified }, uow.now);
      return { user_id: user.id, identity_id: existing.id, is_new_user: false };
    }
    if (await repos.socialIdentities.findForUserAndProvider(user.id, provider.id)) throw new SocialRefusal('provider_already_linked');
    const identityId = await this.insertLink(uow, user.id, provider, claims);
    await uow.emit({ type: 'user.social_linked', actorId: user.id, userId: user.id, data: { identity_id: identityId, provider: provider.id, method: 'explicit' } });
    // Linking also verifies: a provider vouching for the account's own address proves it (rule 5 then runs).
    if (claims.emailVerified && claims.email === user.email && !user.emailVerified) await recordFirstEmailProof(uow, user, { method: 'social', provider: provider.id });
    return { user_id: user.id, identity_id: identityId, is_new_user: false };
  }

  private async insertLink(uow: UnitOfWork, userId: string, provider: ResolvedSocialProvider, claims: ProviderClaims): Promise<string> {
    const id = randomUUID();
    const inserted = await uow.repos.socialIdentities.insertIfFree({
      id,
      userId,
      provider: provider.id,
      issuer: provider.issuer,
      subject: claims.subject,
      email: claims.email,
      emailVerified: claims.emailVerified,
      createdAt: uow.now,
      lastLoginAt: uow.now,
    });
    if (!inserted) throw new ResolutionConflict();
    return id;
  }

  /** The refusals of password login (section 5), applied to a social sign-in. */
  private loginRefusal(user: UserRecord, now: number): 'account_disabled' | 'invalid_credentials' | 'email_unverified' | undefined {
    if (user.deletedAt !== null || user.status === 'disabled') return 'account_disabled';
    if (userStatus(user, now) === 'locked') return 'invalid_credentials';
    if (this.context.config.auth.requireVerifiedEmail && !user.emailVerified) return 'email_unverified';
    return undefined;
  }

  // ---------------------------------------------------------------- exchange

  /**
   * POST /auth/social/exchange. The code is burned by one conditional update before anything
   * is checked, so every failure (expired, wrong verifier, wrong bearer) burns it too. Only
   * then, with the tab that started the flow proven, is the account resolved (login) or the
   * link made (link): refusals are answered here, as JSON (CONTRACT 9.2, 9.7).
   */
  async exchange(input: { code: string; handoffVerifier: string; bearer: string | undefined }, meta: RequestMeta): Promise<SocialExchangeResult> {
    const invalid = () => errors.invalidToken(400, 'The sign-in code is invalid, expired or already used.');
    const flow = await this.context.store.repos.socialFlows.consumeExchange(this.hash('exchange', input.code), this.context.clock.now());
    if (!flow?.claimsEnc || flow.exchangeExpiresAt === null || flow.exchangeExpiresAt <= this.context.clock.now()) throw invalid();
    if (!handoffMatches(input.handoffVerifier, flow.handoffChallenge)) throw invalid();
    // A provider removed from the config since the callback signs no one in.
    const provider = this.social.providers.get(flow.provider);
    if (!provider) throw invalid();
    const claims = JSON.parse(decrypt(this.context.keys.socialFlowEncryption, flow.claimsEnc, claimsAad(flow.id)).toString('utf8')) as ProviderClaims;
    try {
      if (flow.purpose === 'link') return { purpose: 'link', identity: await this.completeLink(provider, flow, claims, input.bearer, meta) };
      return await this.completeLogin(provider, claims, meta);
    } catch (error) {
      throw error instanceof SocialRefusal ? exchangeError(error.code) : error;
    }
  }

  /** A link needs the bearer of the user and session that started the flow, still live (CONTRACT 9.5). */
  private async completeLink(provider: ResolvedSocialProvider, flow: SocialFlowRecord, claims: ProviderClaims, bearer: string | undefined, meta: RequestMeta): Promise<SocialIdentityView> {
    const principal = bearer ? await this.policy.authenticate(bearer).catch(() => undefined) : undefined;
    if (!principal || principal.userId !== flow.userId || principal.sessionId !== flow.sessionId) {
      if (bearer && !principal && (await this.sessions.isEndedSession(bearer))) throw new SocialRefusal('session_ended');
      throw errors.unauthorized('Linking needs the access token of the session that started it.');
    }
    const outcome = await this.resolveLink(provider, flow, claims, meta);
    const identity = await this.context.store.repos.socialIdentities.findOwned(outcome.identity_id, principal.userId);
    if (!identity) throw errors.notFound('Identity');
    return identityView(identity);
  }

  private async completeLogin(provider: ResolvedSocialProvider, claims: ProviderClaims, meta: RequestMeta): Promise<SocialExchangeResult> {
    const outcome = await this.resolveLogin(provider, claims, meta);
    const user = await this.context.store.repos.users.findById(outcome.user_id);
    if (!user) throw errors.invalidToken(400, 'The sign-in code is invalid, expired or already used.');
    // CONTRACT 9.6: the MFA gate applies unchanged; its verify then gives amr ['fed', 'otp'].
    const gate = await this.mfa.loginGate(user, meta, 'fed');
    if (gate) return { purpose: 'login', isNewUser: outcome.is_new_user, login: { kind: 'mfa_required', mfaToken: gate.mfaToken, factors: gate.factors } };
    const opened = await runUnitOfWork(this.context, meta, async (uow) => {
      const session = await this.sessions.open(uow, user, { mfa: false, amr: ['fed'], authTime: uow.now }, meta);
      await uow.emit({ type: 'user.logged_in', actorId: user.id, userId: user.id, data: { mfa: false, amr: ['fed'], method: 'social', provider: provider.id } });
      return session;
    });
    // Tokens are signed only after commit (no token for a session that was never stored).
    const tokens = await this.sessions.signOpened(opened);
    return {
      purpose: 'login',
      isNewUser: outcome.is_new_user,
      login: { kind: 'session', tokens, user: { id: user.id, email: user.email, email_verified: user.emailVerified } },
    };
  }

  // ---------------------------------------------------------------- identities

  async listIdentities(principal: Principal): Promise<SocialIdentityView[]> {
    return (await this.context.store.repos.socialIdentities.listForUser(principal.userId)).map(identityView);
  }

  /** DELETE /auth/social/identities/{id} (step-up at the route). Never leaves the user without a way to sign in. */
  async unlink(principal: Principal, identityId: string, meta: RequestMeta): Promise<void> {
    await runUnitOfWork(this.context, meta, async (uow) => {
      // One change of sign-in methods per user at a time: two unlinks cannot both pass the last-method check.
      const user = await uow.repos.users.findByIdForUpdate(principal.userId);
      const identity = await uow.repos.socialIdentities.findOwned(identityId, principal.userId);
      if (!user || !identity) throw errors.notFound('Identity');
      const otherLinks = (await uow.repos.socialIdentities.listForUser(user.id)).filter((candidate) => candidate.id !== identity.id);
      const passkeys = await uow.repos.socialIdentities.countPasskeys(user.id);
      if (!user.passwordHash && passkeys === 0 && otherLinks.length === 0) {
        throw new IdentityError(409, 'last_login_method_protected', 'This is the last way to sign in to the account; set a password or link another provider first.');
      }
      await uow.repos.socialIdentities.deleteOwned(identity.id, user.id);
      await uow.emit({ type: 'user.social_unlinked', actorId: user.id, userId: user.id, data: { identity_id: identity.id, provider: identity.provider, reason: 'user' } });
    });
  }

  // ---------------------------------------------------------------- internals

  private provider(providerId: string): ResolvedSocialProvider {
    const provider = this.social.providers.get(providerId);
    if (!provider) throw errors.notFound('Provider');
    return provider;
  }

  /** Never derived from Host or X-Forwarded-*: hosts register exactly this URL (CONTRACT 9.1). */
  private redirectUri(provider: ResolvedSocialProvider): string {
    return `${this.social.redirectBase}/auth/social/${provider.id}/callback`;
  }

  private hash(kind: 'state' | 'exchange', value: string): string {
    return keyedHash(this.context.keys.socialFlowHash, `${kind}:${value}`);
  }
}

/** `base64url(SHA-256(verifier))` equals the stored challenge, compared in constant time. */
function handoffMatches(verifier: string, challenge: string): boolean {
  const computed = Buffer.from(createHash('sha256').update(verifier, 'utf8').digest('base64url'));
  const expected = Buffer.from(challenge);
  return computed.length === expected.length && timingSafeEqual(computed, expected);
}

function withQuery(base: string, parameters: Record<string, string>): string {
  const url = new URL(base);
  for (const [name, value] of Object.entries(parameters)) url.searchParams.set(name, value);
  return url.href;
}

function identityView(identity: SocialIdentityRecord): SocialIdentityView {
  return {
    id: identity.id,
    provider: identity.provider,
    email: identity.email,
    email_verified: identity.emailVerified,
    created_at: iso(identity.createdAt),
    last_login_at: isoOrNull(identity.lastLoginAt),
  };
}

/** A provider address we can store: a string that looks like an address and fits the column. */
function normaliseProviderEmail(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const email = normaliseEmail(value);
  if (!/^[^\s@]+@[^\s@]+$/.test(email) || Buffer.byteLength(email, 'utf8') > EMAIL_MAX_OCTETS) return null;
  return email;
}

function asRefusal(error: unknown): SocialRefusal | undefined {
  if (error instanceof SocialRefusal) return error;
  if (error instanceof IdentityError && error.code === 'provider_unavailable') return new SocialRefusal('provider_unavailable');
  return undefined;
}

/** The AES-GCM associated data of a flow's sealed claims: they open only on their own flow. */
function claimsAad(flowId: string): string {
  return `social-claims:${flowId}`;
}

/**
 * A refusal as the exchange answers it: a login refusal as `POST /auth/login` would, a link
 * refusal as 409 (401 for a session revoked meanwhile), and the resolution refusals of 9.4
 * with the status that says what the client can do about them.
 */
function exchangeError(code: SocialRefusal['code']): IdentityError {
  switch (code) {
    case 'account_disabled':
      return errors.accountDisabled();
    case 'email_unverified':
      return errors.emailUnverified('Verify your e-mail address before signing in.');
    case 'invalid_credentials':
      return errors.invalidCredentials();
    case 'session_ended':
      return errors.sessionEnded();
    case 'identity_already_linked':
      return new IdentityError(409, code, 'This provider account is already linked to another user.');
    case 'provider_already_linked':
      return new IdentityError(409, code, 'Your account is already linked to another account at this provider; unlink it first.');
    case 'account_link_required':
      return new IdentityError(409, code, 'An account with this e-mail exists; sign in with it, then link this provider.');
    case 'social_email_required':
      return new IdentityError(422, code, 'The provider did not share an e-mail address; allow it and try again.');
    case 'signup_disabled':
      return new IdentityError(403, code, 'Sign-up through this provider is disabled.');
    default:
      return new IdentityError(502, code, 'The provider could not complete the sign-in.');
  }
}

/** The error's class and code only: openid-client messages can quote provider responses. */
function describeOpenIdError(error: unknown): string {
  const candidate = error as { name?: string; code?: string; error?: string };
  return [candidate.name ?? 'Error', candidate.code, candidate.error].filter(Boolean).join(' ');
}

