import { randomUUID } from 'node:crypto';
import { type ResolvedSocialConfig, type ResolvedSocialProvider, socialCallbackUrl } from '../../config/social.js';
import { errors, } from '../../errors.js';
import type { SocialFlowPurpose, SocialFlowRecord, SocialIdentityRecord } from '../../store/social-repository.js';
import type { AccessPolicy } from '../access/access-policy.js';
import { type LoginResult, loginFailed } from '../sessions/sign-in-result.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import type { Principal } from '../access/principal.js';
import type { SessionService } from '../sessions/session-service.js';
import { recordFirstEmailProof } from '../accounts/credential-lifecycle.js';
import { SocialProviderClients } from './social-provider-client.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { providerDisplayName } from '../shared/identity-rules.js';
import {
  type AuthorizationStart,
  type CallbackParameters,
  type FederatedFlows,
  FederatedRefusal as SocialRefusal,
  type FlowTarget,
  exchangeError,
  invalidExchangeCode,
  type ProviderClaims,
  RESOLUTION_ATTEMPTS,
  ResolutionConflict,
} from './federated-flow.js';
import type { SignInRules } from '../access/sign-in-rules.js';

export type { AuthorizationStart, CallbackParameters } from './federated-flow.js';
import { iso, isoOrNull } from '../shared/iso-time.js';

/** `identity` of docs/social-login.md; the provider's `sub` is never returned. */
export interface SocialIdentityView {
  id: string;
  provider: string;
  email: string | null;
  email_verified: boolean;
  created_at: string;
  last_login_at: string | null;
}

export type SocialExchangeResult =
  | { purpose: 'login'; login: LoginResult; isNewUser: boolean }
  | { purpose: 'link'; identity: SocialIdentityView };

/** What the exchange decided: who signs in, through which link, and whether the account is new. */
interface SocialFlowOutcome {
  user_id: string;
  identity_id: string;
  is_new_user: boolean;
  /** A login's account had an unproven address when its link was resolved (`HeldProof.unprovenAddress`). */
  addressUnproven?: boolean;
}


/**
 * Social login through OpenID Connect providers (docs/social-login.md): the authorization round trip,
 * account resolution and linking, the one-time exchange, and link management. The OpenID
 * client library is loaded only when a provider is first used.
 */
export class SocialService {
  private readonly clients: SocialProviderClients;

  constructor(
    private readonly context: ServiceContext,
    private readonly social: ResolvedSocialConfig,
    private readonly sessions: SessionService,
    private readonly flows: FederatedFlows,
    private readonly policy: AccessPolicy,
    private readonly signInRules: SignInRules,
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
   * `freshAuthentication`, which the access policy checks at link start, never at the callback (docs/social-login.md).
   */
  async startLink(principal: Principal, providerId: string, input: { returnTo?: string | undefined; handoffChallenge: string }, meta: RequestMeta): Promise<AuthorizationStart> {
    return this.start(this.provider(providerId), 'link', input, principal, meta);
  }

  private start(
    provider: ResolvedSocialProvider,
    purpose: SocialFlowPurpose,
    input: { returnTo?: string | undefined; handoffChallenge: string },
    principal: Principal | null,
    meta: RequestMeta,
  ): Promise<AuthorizationStart> {
    return this.flows.start(this.target(provider), this.social, purpose, input, principal, meta);
  }

  // ---------------------------------------------------------------- callback

  /**
   * GET /auth/social/{provider}/callback. Answers where to send the browser: the flow's
   * `return_to` with a one-time `social_code` or a `social_error`. A state that is unknown,
   * expired or used has no trustworthy destination: 400, or `errorUrl` when configured.
   */
  async callback(providerId: string, parameters: CallbackParameters): Promise<string> {
    const provider = this.provider(providerId);
    // A state issued for another provider (or an organization's connection) is burned and signs no one in.
    return this.flows.callback(
      provider.id,
      this.social,
      parameters,
      async (flow) => (flow.connectionId === null ? this.target(provider) : undefined),
      async (flow, claims) => {
        // Require SSO (docs/sso.md): an address at an enforcing domain never signs in through a social provider.
        if (flow.purpose === 'login' && claims.email) await this.assertSsoAllows(claims.email);
      },
    );
  }

  /** docs/social-login.md, rules 1 to 4 in order, at the exchange. Refusals tied to a user are recorded (after commit) and then thrown. */
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
      if (userId) await uow.emit(loginFailed(userId, { method: 'social', provider: provider.id }, code));
      else this.context.logger.warn('social sign-in refused', { provider: provider.id, reason: code });
      return { refusal: new SocialRefusal(code) };
    };

    // Rule 1: the subject is the only link key.
    const linked = await repos.socialIdentities.findByProviderSubject(provider.id, claims.subject);
    if (linked && !this.signsIn(linked)) {
      // Links never move silently to a new issuer.
      this.context.logger.warn('social link ignored: stored issuer differs from the configured one', { provider: provider.id, identity_id: linked.id });
      return refuse('account_link_required', null);
    }
    if (linked) {
      const user = await repos.users.findById(linked.userId);
      if (!user) return refuse('account_disabled', null);
      const refusal = this.signInRules.accountRefusal(user, uow.now);
      if (refusal) return refuse(refusal, user.id);
      await repos.socialIdentities.recordLogin(linked.id, { email: claims.email, emailVerified: claims.emailVerified }, uow.now);
      return { outcome: { user_id: user.id, identity_id: linked.id, is_new_user: false, addressUnproven: !user.emailVerified } };
    }

    // Rule 2.
    if (!claims.email) return refuse('social_email_required', null);

    // Rule 3: auto-link only on a verified address on both sides, and one identity per provider.
    const local = await repos.users.findByEmail(claims.email);
    if (local) {
      const existing = await repos.socialIdentities.findForUserAndProvider(local.id, provider.id);
      // This very subject, linked by a concurrent first sign-in after rule 1 looked: start again,
      // and rule 1 now finds it. Another subject's link keeps the account refused.
      if (existing?.subject === claims.subject) throw new ResolutionConflict();
      const allowed = this.social.autoLinkByEmail && claims.emailVerified && local.emailVerified && local.deletedAt === null && !existing;
      if (!allowed) return refuse('account_link_required', local.id);
      const refusal = this.signInRules.accountRefusal(local, uow.now);
      if (refusal) return refuse(refusal, local.id);
      const identityId = await this.insertLink(uow, local.id, provider, claims);
      await uow.emit({ type: 'user.social_linked', actorId: local.id, userId: local.id, data: { identity_id: identityId, provider: provider.id, method: 'auto_email' } });
      return { outcome: { user_id: local.id, identity_id: identityId, is_new_user: false } };
    }

    // Rule 4: sign-up.
    if (!provider.allowSignup) return refuse('signup_disabled', null);
    const userId = randomUUID();
    const displayName = providerDisplayName(claims.name);
    if (!(await repos.users.insertIfEmailFree({ id: userId, email: claims.email, emailVerified: claims.emailVerified, displayName, passwordHash: null, now: uow.now }))) {
      throw new ResolutionConflict();
    }
    const identityId = await this.insertLink(uow, userId, provider, claims);
    await uow.emit({ type: 'user.registered', actorId: userId, userId, data: { method: 'social', provider: provider.id } });
    await uow.emit({ type: 'user.social_linked', actorId: userId, userId, data: { identity_id: identityId, provider: provider.id, method: 'signup' } });
    // The account and its link stay; the login itself is refused until the address is verified.
    if (this.context.config.auth.requireVerifiedEmail && !claims.emailVerified) return refuse('email_unverified', userId);
    return { outcome: { user_id: userId, identity_id: identityId, is_new_user: true, addressUnproven: !claims.emailVerified } };
  }

  /** docs/social-login.md at the exchange of a link flow, once the bearer has been matched to the flow. */
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
    const user = flow.userId ? await repos.users.findByIdForUpdate(flow.userId) : undefined;
    // The session that started the flow, locked after the account as every revocation takes them:
    // a logout-all committed since the bearer was checked refuses the link, a later one waits for it.
    const session = user && flow.sessionId ? await repos.sessions.lockLive(flow.sessionId, uow.now) : undefined;
    if (!session || !user || session.userId !== user.id || user.status !== 'active' || user.deletedAt !== null) throw new SocialRefusal('session_ended');
    // Require SSO (docs/sso.md): the link is written here, not at its start, so a session that
    // enforcement ended meanwhile adds no way in that would outlive it (403 sso_required, as at the start).
    await this.signInRules.assertSessionAllowed(user, session.id, 403, repos);

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

  // ---------------------------------------------------------------- exchange

  /**
   * The social half of POST /auth/social/exchange, once the code is burned and the handoff
   * verifier matched (FederatedFlows.consumeExchange): the account is resolved (login) or
   * the link made (link); refusals are answered here, as JSON (docs/social-login.md).
   */
  async completeExchange(flow: SocialFlowRecord, claims: ProviderClaims, bearer: string | undefined, meta: RequestMeta): Promise<SocialExchangeResult> {
    // A provider removed from the config since the callback signs no one in.
    const provider = this.social.providers.get(flow.provider);
    if (!provider) throw invalidExchangeCode();
    try {
      if (flow.purpose === 'link') return { purpose: 'link', identity: await this.completeLink(provider, flow, claims, bearer, meta) };
      return await this.completeLogin(provider, claims, meta);
    } catch (error) {
      throw error instanceof SocialRefusal ? exchangeError(error.code) : error;
    }
  }

  /** A link needs the bearer of the user and session that started the flow, still live (docs/social-login.md). */
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
    if (claims.email) await this.assertSsoAllows(claims.email);
    const outcome = await this.resolveLogin(provider, claims, meta);
    const user = await this.context.store.repos.users.findById(outcome.user_id);
    if (!user) throw invalidExchangeCode();
    // A linked account (9.4 rule 1) is judged by its own address, whatever the provider's is.
    await this.assertSsoAllows(user.email);
    // docs/social-login.md: the MFA gate applies unchanged; its verify then gives amr ['fed', 'otp'].
    // An unproven address's first proof, committed since the link was resolved, ends this sign-in as it ends the link's sessions.
    const held = outcome.addressUnproven ? { firstFactor: 'fed' as const, unprovenAddress: true } : undefined;
    const login = await this.flows.openSession(user, meta, { method: { method: 'social', provider: provider.id }, held });
    return { purpose: 'login', isNewUser: outcome.is_new_user, login };
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
      // A thief's unlink in flight when the owner ended the session removes nothing.
      await this.policy.assertSessionLive(uow.repos, principal);
      const identity = await uow.repos.socialIdentities.findOwned(identityId, principal.userId);
      if (!user || !identity) throw errors.notFound('Identity');
      // Another link is a way back in only while it can sign in: its provider configured, under the issuer it was made with.
      const otherLinks = (await uow.repos.socialIdentities.listForUser(user.id)).filter((candidate) => candidate.id !== identity.id && this.signsIn(candidate));
      const passkeys = await uow.repos.socialIdentities.countPasskeys(user.id);
      if (!user.passwordHash && passkeys === 0 && otherLinks.length === 0) {
        throw errors.lastLoginMethodProtected();
      }
      await uow.repos.socialIdentities.deleteOwned(identity.id, user.id);
      await uow.emit({ type: 'user.social_unlinked', actorId: user.id, userId: user.id, data: { identity_id: identity.id, provider: identity.provider, reason: 'user' } });
    });
  }

  // ---------------------------------------------------------------- internals

  /** A link signs in only through its provider as configured now: a link made under another issuer is never matched (docs/social-login.md). */
  private signsIn(identity: SocialIdentityRecord): boolean {
    return this.social.providers.get(identity.provider)?.issuer === identity.issuer;
  }

  private provider(providerId: string): ResolvedSocialProvider {
    const provider = this.social.providers.get(providerId);
    if (!provider) throw errors.notFound('Provider');
    return provider;
  }

  /** The one "require SSO" rule; a superadmin signed in by its provider holds a right credential. */
  private async assertSsoAllows(email: string): Promise<void> {
    const local = await this.context.store.repos.users.findByEmail(email);
    const refusal = await this.signInRules.refusal(email, { userId: local?.id, credentialRight: true });
    if (refusal) throw new SocialRefusal('sso_required');
  }

  /** Never derived from Host or X-Forwarded-*: hosts register exactly this URL (docs/social-login.md). */
  private target(provider: ResolvedSocialProvider): FlowTarget {
    return {
      key: provider.id,
      connectionId: null,
      redirectUri: socialCallbackUrl(this.social, provider.id),
      scopes: provider.scopes,
      authorizationParams: provider.authorizationParams,
      configuration: () => this.clients.configuration(provider),
    };
  }
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

