import { randomUUID } from 'node:crypto';
import QRCode from 'qrcode';
import { generateTotpSecret, totpProvisioningUri } from '../../crypto/totp.js';
import { errors, } from '../../errors.js';
import type { FactorType, MfaFactorRecord } from '../../store/mfa-repository.js';
import type { UserRecord } from '../../store/user-repository.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { MfaCodes, maskedDestination } from './mfa-codes.js';
import type { MfaTicket, TicketFirstFactor } from './mfa-ticket.js';
import type { HeldProof, LoginFactorView, PasswordlessMethod } from '../sessions/sign-in-result.js';
import type { PasskeyChallenge, PasskeyService } from './passkey-service.js';
import type { AuthenticationResponseJSON } from '@simplewebauthn/server';
import { mailboxForm, normaliseEmail } from '../shared/identity-rules.js';
import type { Principal } from '../access/principal.js';
import type { AccessTokenResponse, SessionService, TokenResponse } from '../sessions/session-service.js';
import { FailedAttemptSlot } from '../limits/lockout.js';
import { mayAuthenticate, type AccessPolicy } from '../access/access-policy.js';
import type { SignInRules } from '../access/sign-in-rules.js';
import { describeError, runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { ENDED_ROW_RETENTION_MS, Occasional, PRUNE_EVERY_MS } from '../shared/occasional.js';
import { assertUnderQuota } from '../limits/quotas.js';

/** A factor in the management list (docs/database.md): pending ones too. */
export interface FactorView extends LoginFactorView {
  confirmed: boolean;
}

export interface TotpEnrollment {
  factor_id: string;
  secret: string;
  otpauth_uri: string;
  qr_svg?: string;
  qr_png_base64?: string;
}

export interface CodeSent {
  channel: 'sms' | 'email';
  destination: string;
}

/** docs/database.md: a factor never confirmed is pruned after this long. */
const PENDING_FACTOR_LIFETIME_MS = 24 * 60 * 60 * 1000;
const SECOND_FACTOR_AMR = ['pwd', 'otp'];
/** How often a sign-in goes through the login gate when a factor is confirmed under it (`throughLoginGate`). */
const LOGIN_GATE_PASSES = 3;
/** A passkey after a password (RFC 8176 `hwk`: proof of a hardware-bound key). */
const PASSKEY_SECOND_FACTOR_AMR = ['pwd', 'hwk'];

type CodeMethod = FactorType | 'recovery';

/**
 * Where a sign-in at the login gate came from: its single sign-on connection, its passwordless
 * method, and for a password or a passwordless code what its proof rests on (`HeldProof`: its
 * ticket, like its session, is written only while that still holds).
 */
export interface SignInOrigin {
  ssoConnectionId?: string | undefined;
  /** A social first factor's provider, which `user.logged_in` carries after the gate (docs/social-login.md). */
  socialProvider?: string | undefined;
  signInMethod?: PasswordlessMethod | undefined;
  held?: HeldProof | undefined;
}

/** What answers the gate or step-up: a code (TOTP, SMS, e-mail, recovery) or a passkey assertion. */
export type SecondFactorProof = { code: string; response?: undefined } | { code?: undefined; response: AuthenticationResponseJSON };

/** Multi-factor authentication (docs/mfa.md): enrollment, the login gate, step-up and factor management. */
export class MfaService {
  private readonly codes: MfaCodes;
  private readonly ticketPruning = new Occasional(PRUNE_EVERY_MS);

  constructor(
    private readonly context: ServiceContext,
    private readonly sessions: SessionService,
    private readonly policy: AccessPolicy,
    private readonly passkeys: PasskeyService,
    private readonly signInRules: SignInRules,
  ) {
    this.codes = new MfaCodes(context);
  }

  // ---------------------------------------------------------------- login gate

  /**
   * The login gate and the session it lets through, the same for every first factor
   * (docs/mfa.md): `open` writes the session only if the user still has no confirmed factor,
   * and answers undefined otherwise. A factor confirmed after the gate looked then sends the
   * sign-in back through the gate, which asks for it. `noFactorWhenRead`: the account's own read
   * found none (the password login's statement on PostgreSQL), and the first pass trusts it
   * instead of reading the factors again.
   */
  async throughLoginGate<T>(
    user: UserRecord,
    meta: RequestMeta,
    firstFactor: TicketFirstFactor,
    origin: SignInOrigin,
    open: () => Promise<T | undefined>,
    noFactorWhenRead = false,
  ): Promise<{ kind: 'mfa_required'; mfaToken: string; factors: LoginFactorView[] } | { kind: 'opened'; opened: T }> {
    for (let pass = 1; pass <= LOGIN_GATE_PASSES; pass += 1) {
      const gate = await this.loginGate(user, meta, firstFactor, origin, noFactorWhenRead && pass === 1);
      if (gate) return { kind: 'mfa_required', mfaToken: gate.mfaToken, factors: gate.factors };
      const opened = await open();
      if (opened) return { kind: 'opened', opened };
    }
    // The account's factors changed under every pass: only its owner can do that, and may try again.
    throw errors.rateLimited(1, 'rate_limited', { limit: LOGIN_GATE_PASSES, resetsAt: this.context.clock.now() + 1000 });
  }

  /**
   * Decides whether a sign-in needs a second factor. Answers a ticket and the factors when it
   * does, nothing when a session may open, and refuses the sign-in in 'block' mode when MFA is
   * enforced and no factor is confirmed.
   */
  private async loginGate(
    user: UserRecord,
    meta: RequestMeta,
    firstFactor: TicketFirstFactor,
    origin: SignInOrigin,
    noFactorWhenRead: boolean,
  ): Promise<{ mfaToken: string; factors: LoginFactorView[] } | undefined> {
    const confirmed = noFactorWhenRead ? [] : await this.context.store.repos.mfaFactors.listConfirmed(user.id);
    if (confirmed.length === 0) {
      if (this.context.config.mfa.enforcementMode === 'block' && (await this.policy.isMfaEnforcedFor(this.context.store.repos, user))) {
        throw errors.mfaEnrollmentRequired('Multi-factor authentication is required for this account; enroll a factor first.');
      }
      return undefined;
    }
    const ticketId = randomUUID();
    const { token, expiresAt } = await this.context.jwt.signMfaTicket(user.id, ticketId);
    const repos = this.context.store.repos;
    const ticket = { id: ticketId, userId: user.id, now: this.context.clock.now(), expiresAt, ip: meta.ip, userAgent: meta.userAgent, firstFactor, ssoConnectionId: origin.ssoConnectionId, socialProvider: origin.socialProvider, signInMethod: origin.signInMethod };
    // Like the session it stands for: not for an account disabled, deleted or given a new password since the sign-in read it.
    if (!(await repos.mfaTickets.insert(ticket, origin.held?.passwordHash, origin.held?.unprovenAddress))) throw await this.signInRules.refusalOfRefusedWrite(repos, user.id, origin.held);
    this.pruneEndedTicketsOccasionally(ticket.now);
    const offered = confirmed.filter((factor) => (factor.type !== 'webauthn' || this.passkeys.enabled) && !provesOnlyTheFirstFactor({ firstFactor }, factor, user.email));
    return { mfaToken: token, factors: offered.map(loginFactorView) };
  }

  /**
   * Every login at the gate writes a ticket (with the client's IP and user agent) that opens
   * nothing past its five minutes, and no later login replaces it: without this a row per login
   * stayed for ever. Not awaited: the login answers without waiting for the delete.
   */
  private pruneEndedTicketsOccasionally(now: number): void {
    if (!this.ticketPruning.due(now)) return;
    this.context.store.repos.mfaTickets
      .pruneEndedBefore(now - ENDED_ROW_RETENTION_MS)
      .catch((error: unknown) => this.context.logger.warn('identity-router: pruning ended MFA tickets failed; the next login gate tries again', { error: describeError(error) }));
  }

  /**
   * An MFA ticket presented as a bearer value (docs/database.md); anything else is 401 unauthorized.
   * An exhausted ticket is still a ticket: its codes answer 422 invalid_code (docs/mfa.md).
   */
  async authenticateTicket(token: string): Promise<MfaTicket> {
    const claims = await this.context.jwt.verifyMfaTicket(token);
    if (!claims) throw invalidTicket();
    const ticket = await this.context.store.repos.mfaTickets.findById(claims.jti);
    const state = ticket && ticket.userId === claims.sub ? this.ticketState(ticket, this.context.clock.now()) : 'ended';
    if (state === 'ended') throw invalidTicket();
    return { id: ticket!.id, userId: ticket!.userId, firstFactor: ticket!.firstFactor, ssoConnectionId: ticket!.ssoConnectionId, socialProvider: ticket!.socialProvider, signInMethod: ticket!.signInMethod, exhausted: state === 'exhausted' };
  }

  /**
   * A ticket's one rule (docs/mfa.md): ended once consumed or expired; exhausted once
   * `otp.maxAttempts` codes of any kind failed on it, when no code is looked at any more.
   */
  private ticketState(ticket: { consumedAt: number | null; expiresAt: number; failedAttempts: number } | undefined, now: number): 'ended' | 'exhausted' | 'open' {
    if (!ticket || ticket.consumedAt !== null || ticket.expiresAt <= now) return 'ended';
    return ticket.failedAttempts >= this.context.config.otp.maxAttempts ? 'exhausted' : 'open';
  }

  /**
   * The account a ticket signs in, while it may still authenticate: one disabled or deleted
   * since its first factor gets neither a login code nor a session (spec 3: login blocked). Nor
   * does one whose domain came under "require SSO" since (docs/sso.md): a ticket from a first
   * factor taken before enforcement opens no session that skipped the organization's IdP; one
   * from its connection, or a superadmin's (its first factor was right), goes on.
   */
  private async accountOfTicket(ticket: MfaTicket): Promise<UserRecord> {
    const user = await this.context.store.repos.users.findById(ticket.userId);
    if (!user || !mayAuthenticate(user)) throw invalidTicket();
    await this.signInRules.assertAllowed(user.email, { userId: user.id, credentialRight: true, viaConnectionId: ticket.ssoConnectionId ?? null });
    return user;
  }

  /** POST /auth/mfa/challenge: sends a login code for an SMS or e-mail factor. */
  async sendLoginCode(ticket: MfaTicket, factorId: string, meta: RequestMeta): Promise<CodeSent | PasskeyChallenge> {
    if (ticket.exhausted) throw errors.invalidCode();
    await this.accountOfTicket(ticket);
    return runUnitOfWork(this.context, meta, async (uow) => {
      const factor = await this.confirmedFactor(uow, ticket.userId, factorId);
      await this.assertSecondFactorAfter(uow, ticket, factor);
      if (factor.type === 'webauthn') return this.passkeys.assertionOptions(uow, factor, 'login_mfa', ticket.id);
      assertCodeCanBeSent(factor);
      return this.codes.sendCode(uow, { factor, purpose: 'login_mfa', boundTo: ticket.id, cooldownCode: 'too_many_requests' });
    });
  }

  /**
   * POST /auth/mfa/verify: a TOTP code, the code of this ticket's live challenge, or a
   * recovery code. Success consumes the ticket and opens the session; every failure
   * counts against the challenge, the ticket, the verify window and the lockout.
   */
  async verifyLogin(ticket: MfaTicket, input: SecondFactorProof & { factorId?: string; type?: string }, meta: RequestMeta): Promise<TokenResponse> {
    if (ticket.exhausted) return this.refuseOnExhaustedTicket(ticket, input.type === 'recovery' ? undefined : input.factorId, meta);
    const user = await this.accountOfTicket(ticket);
    const factorId = input.type === 'recovery' ? undefined : input.factorId;
    if (factorId !== undefined && ticket.firstFactor === 'email') {
      // Refused before any attempt is taken: no code of it is compared, so nothing counts.
      const factor = await this.context.store.repos.mfaFactors.findOwned(factorId, user.id);
      if (factor && factor.confirmedAt !== null) await this.assertSecondFactorAfter(this.context.store, ticket, factor);
    }
    // A locked account compares no code and verifies no assertion (the lock holds across passwords and second factors).
    const opened = await this.withSecondFactorAttempt(user.id, meta, invalidTicket, async (uow, slot) => {
      // The ticket again, under the account's lock every verify of it takes: guesses sent at once
      // all read it open before any failure committed, and only otp.maxAttempts may be compared.
      const state = this.ticketState(await uow.repos.mfaTickets.findById(ticket.id), uow.now);
      if (state === 'ended') throw invalidTicket();
      if (state === 'exhausted') {
        await this.emitExhaustedTicketFailure(uow, ticket, factorId);
        return undefined;
      }
      const { accepted, method, factor } = await this.checkSecondFactor(uow, user.id, factorId, input, 'login_mfa', ticket.id);
      if (!accepted) {
        await uow.repos.mfaTickets.recordFailure(ticket.id);
        await this.recordSecondFactorFailure(uow, slot, { context: 'login', method, factorId: factor?.id ?? null });
        return undefined;
      }
      // Single use: of concurrent verifies only the one whose update takes the ticket goes on.
      if (!(await uow.repos.mfaTickets.consume(ticket.id, uow.now, this.context.config.otp.maxAttempts))) {
        throw invalidTicket();
      }
      // The sign-in is complete: only now do earlier failures stop counting.
      await uow.repos.users.clearFailedLogins(user.id);
      // docs/social-login.md and docs/passwordless.md: after a social or passwordless sign-in the first factor is `fed` or `email`, not `pwd`.
      const secondFactor = secondFactorAmr(method);
      const amr = [ticket.firstFactor ?? 'pwd', ...secondFactor.slice(1)];
      const opened = await this.sessions.open(uow, user, { mfa: true, amr, authTime: uow.now }, meta);
      // Opened through single sign-on: enforcement lets it refresh and accept invites (docs/sso.md).
      if (ticket.ssoConnectionId) await uow.repos.ssoIdentities.markSessionOpenedThrough(opened.session.id, ticket.ssoConnectionId);
      await uow.emit({ type: 'mfa.verified', actorId: user.id, userId: user.id, data: { method, factor_id: factor?.id ?? null } });
      if (method === 'recovery') await this.emitRecoveryUsed(uow, user.id);
      await uow.emit({ type: 'user.logged_in', actorId: user.id, userId: user.id, data: { mfa: true, amr, ...(ticket.ssoConnectionId ? { method: 'sso', connection_id: ticket.ssoConnectionId } : { method: signInMethodAfterGate(ticket, method), ...(ticket.firstFactor === 'fed' && ticket.socialProvider ? { provider: ticket.socialProvider } : {}) }) } });
      return opened;
    });
    return this.sessions.signOpened(opened);
  }

  /**
   * A code sent with an exhausted ticket is a failed verify like any other (spec 4.2: 422
   * invalid_code, and failures emit mfa.verify_failed). No code is compared, so it counts toward
   * neither the lockout nor the verify window; a factor id that is not the user's names nothing.
   */
  private async refuseOnExhaustedTicket(ticket: MfaTicket, factorId: string | undefined, meta: RequestMeta): Promise<never> {
    await runUnitOfWork(this.context, meta, (uow) => this.emitExhaustedTicketFailure(uow, ticket, factorId));
    throw errors.invalidCode();
  }

  /** The `mfa.verify_failed` of a code sent with an exhausted ticket (`refuseOnExhaustedTicket`). */
  private async emitExhaustedTicketFailure(uow: UnitOfWork, ticket: MfaTicket, factorId: string | undefined): Promise<void> {
    const factor = factorId === undefined ? undefined : await uow.repos.mfaFactors.findOwned(factorId, ticket.userId);
    if (factorId !== undefined && !factor) return;
    await uow.emit({ type: 'mfa.verify_failed', actorId: ticket.userId, userId: ticket.userId, data: { context: 'login', method: factor?.type ?? 'recovery', factor_id: factor?.id ?? null } });
  }

  // ---------------------------------------------------------------- step-up

  async sendStepUpCode(principal: Principal, factorId: string, meta: RequestMeta): Promise<CodeSent | PasskeyChallenge> {
    return runUnitOfWork(this.context, meta, async (uow) => {
      const factor = await this.confirmedFactor(uow, principal.userId, factorId);
      let challenge: CodeSent | PasskeyChallenge;
      if (factor.type === 'webauthn') {
        challenge = await this.passkeys.assertionOptions(uow, factor, 'step_up', principal.sessionId);
      } else {
        assertCodeCanBeSent(factor);
        challenge = await this.codes.sendCode(uow, { factor, purpose: 'step_up', boundTo: principal.sessionId, cooldownCode: 'too_many_requests' });
      }
      // The session's row last, after the challenge's insert took the account's key lock, as
      // revocations take them; the code goes out only after commit.
      await this.policy.assertSessionLive(uow.repos, principal);
      return challenge;
    });
  }

  /**
   * POST /auth/mfa/step-up: re-stamps the session's auth_time; the refresh token is untouched.
   * A locked account answers like a wrong code, without comparing (the lock is
   * checked on step-up).
   */
  async stepUp(principal: Principal, input: SecondFactorProof & { factorId?: string }, meta: RequestMeta): Promise<Omit<AccessTokenResponse, 'expires_in'>> {
    // Require SSO (docs/sso.md): a session from before enforcement ends at its next refresh. A
    // step-up signs a fresh access token too, so it is no way to keep such a session alive.
    await this.signInRules.assertSessionAllowed(principal.user, principal.sessionId, 401);
    const subject = await this.withSecondFactorAttempt(principal.userId, meta, () => errors.invalidCode(), async (uow, slot) => {
      const { accepted, method, factor } = await this.checkSecondFactor(uow, principal.userId, input.factorId, input, 'step_up', principal.sessionId);
      if (!accepted) {
        await this.recordSecondFactorFailure(uow, slot, { context: 'step_up', method, factorId: factor?.id ?? null });
        return undefined;
      }
      // Locked, after the account's row: a revocation after this waits for the new auth_time, then ends it.
      const session = await uow.repos.sessions.lockLive(principal.sessionId, uow.now);
      if (!session) throw errors.sessionEnded();
      const amr = secondFactorAmr(method);
      await uow.repos.sessions.recordStrongAuthentication(session.id, uow.now, amr);
      const refreshed = { ...session, mfa: true, amr, authTime: uow.now };
      const subject = await this.sessions.accessSubjectFor(uow.repos, refreshed, principal.user);
      await uow.emit({ type: 'mfa.step_up_completed', actorId: principal.userId, userId: principal.userId, data: { method, factor_id: factor?.id ?? null, session_id: session.id } });
      if (method === 'recovery') await this.emitRecoveryUsed(uow, principal.userId);
      return subject;
    });
    const { access_token, token_type } = await this.sessions.sign(subject);
    return { access_token, token_type };
  }

  /**
   * One second-factor attempt: a lockout slot is reserved before any code is compared, and
   * the per-account verify budget is checked and recorded in the same transaction, under
   * the user's row lock. `work` answers undefined for a wrong code: its failure
   * rows commit and the request answers 422 invalid_code.
   */
  private async withSecondFactorAttempt<T>(
    userId: string,
    meta: RequestMeta,
    lockedError: () => Error,
    work: (uow: UnitOfWork, slot: FailedAttemptSlot) => Promise<T | undefined>,
  ): Promise<T> {
    const slot = await FailedAttemptSlot.reserve(this.context.store.repos, this.context.config.auth.lockout, userId, this.context.clock.now());
    if (!slot) throw lockedError();
    try {
      return await runUnitOfWork(this.context, meta, async (uow) => {
        await uow.repos.users.findByIdForUpdate(userId);
        await this.codes.assertVerifyBudget(uow.repos, userId, uow.now);
        const result = await work(uow, slot);
        return result === undefined ? uow.failAfterCommit(errors.invalidCode()) : result;
      });
    } finally {
      // A success (or a refusal that compared nothing) gives the slot back; a failure keeps it.
      await slot.release();
    }
  }

  // ---------------------------------------------------------------- enrollment

  async enrollTotp(principal: Principal, format: 'svg' | 'png', meta: RequestMeta): Promise<TotpEnrollment> {
    const factorId = randomUUID();
    const secret = generateTotpSecret();
    await runUnitOfWork(this.context, meta, async (uow) => {
      // One MFA change per user at a time, as in enrollCodeFactor: two enrollments at once
      // leave one pending TOTP factor, the later one's.
      await uow.repos.users.findByIdForUpdate(principal.userId);
      await this.prunePendingFactors(uow, principal.userId);
      // A new enrollment replaces the caller's pending one instead of piling up secrets.
      await uow.repos.mfaFactors.deleteUnconfirmed(principal.userId, 'totp');
      assertUnderQuota('factorsPerUser', await uow.repos.mfaFactors.countForUser(principal.userId));
      await uow.repos.mfaFactors.insert({ id: factorId, userId: principal.userId, type: 'totp', destination: null, secretSealed: this.codes.sealTotpSecret(factorId, secret), now: uow.now });
      // The session's row last, after the account's, as revocations lock them.
      await this.policy.assertSessionLive(uow.repos, principal);
    });
    const otpauthUri = totpProvisioningUri(this.context.config.otp.totp.issuer, principal.user.email, secret);
    const enrollment: TotpEnrollment = { factor_id: factorId, secret, otpauth_uri: otpauthUri };
    if (format === 'png') enrollment.qr_png_base64 = (await QRCode.toBuffer(otpauthUri, { type: 'png', errorCorrectionLevel: 'M' })).toString('base64');
    else enrollment.qr_svg = await QRCode.toString(otpauthUri, { type: 'svg', errorCorrectionLevel: 'M' });
    return enrollment;
  }

  /** sms/enroll and email/enroll: an unconfirmed factor and a code sent to it. */
  async enrollCodeFactor(principal: Principal, type: 'sms' | 'email', destinationInput: string | undefined, meta: RequestMeta): Promise<{ factor_id: string; destination: string }> {
    const destination = type === 'email' ? normaliseEmail(destinationInput ?? principal.user.email) : (destinationInput ?? '');
    return runUnitOfWork(this.context, meta, async (uow) => {
      // One MFA change per user at a time, as in confirmFactor: two enrollments of one destination
      // make one pending factor, and a factor confirmed meanwhile is seen as confirmed.
      await uow.repos.users.findByIdForUpdate(principal.userId);
      await this.prunePendingFactors(uow, principal.userId);
      // One mailbox is one destination in any spelling of its domain (`mailboxForm`), as the send budgets count it.
      const existing =
        type === 'email'
          ? (await uow.repos.mfaFactors.listForUser(principal.userId)).filter((factor) => factor.type === 'email' && factor.destination !== null && mailboxForm(factor.destination) === mailboxForm(destination))
          : await uow.repos.mfaFactors.findByDestination(principal.userId, type, destination);
      if (existing.some((factor) => factor.confirmedAt !== null)) throw errors.conflict('This destination is already a confirmed factor.');
      // Enrolling the same destination again resends to the pending factor, under its cooldown.
      let factor = existing[0];
      if (!factor) {
        // Counted under the account's lock above, as every factor's creation is.
        assertUnderQuota('factorsPerUser', await uow.repos.mfaFactors.countForUser(principal.userId));
        const id = randomUUID();
        await uow.repos.mfaFactors.insert({ id, userId: principal.userId, type, destination, secretSealed: null, now: uow.now });
        factor = (await uow.repos.mfaFactors.findOwned(id, principal.userId))!;
      }
      const sent = await this.codes.sendCode(uow, { factor, purpose: 'enroll', boundTo: null, cooldownCode: 'rate_limited' });
      // As for a step-up code: the session's row last, and the code goes out only after commit.
      await this.policy.assertSessionLive(uow.repos, principal);
      return { factor_id: factor.id, destination: sent.destination };
    });
  }

  /**
   * The confirm routes: a valid code confirms the factor. The first confirmed factor becomes the
   * default, gets a batch of recovery codes and emits mfa.enrolled; every later one emits
   * mfa.factor_added. The credential gate (a verified e-mail, step-up once a factor exists)
   * is decided again under the user's row lock (docs/mfa.md).
   */
  async confirmFactor(principal: Principal, type: FactorType, factorId: string, code: string, meta: RequestMeta): Promise<{ status: 'confirmed'; recovery_codes?: string[] }> {
    return runUnitOfWork(this.context, meta, async (uow) => {
      // One MFA change per user at a time: "first confirmed factor" must mean exactly one,
      // and the verify budget is checked and recorded atomically.
      await uow.repos.users.findByIdForUpdate(principal.userId);
      await this.codes.assertVerifyBudget(uow.repos, principal.userId, uow.now);
      // The credential gate again, where the factor becomes live (docs/security.md).
      await this.policy.assertMayAddCredential(uow.repos, principal, 'second_factor');
      await this.prunePendingFactors(uow, principal.userId);
      const factor = await uow.repos.mfaFactors.findOwned(factorId, principal.userId);
      if (!factor || factor.type !== type) throw errors.notFound('Factor');
      // Spec 4.2: a confirmation replayed on a confirmed factor is a replayed code (422 invalid_code), as when a concurrent confirm won below.
      if (factor.confirmedAt !== null) throw errors.invalidCode();
      if (!(await this.codes.checkFactorCode(uow, factor, code, 'enroll', null))) {
        await this.codes.recordVerifyFailure(uow, principal.userId);
        return uow.failAfterCommit(errors.invalidCode());
      }
      const firstFactor = !(await uow.repos.mfaFactors.hasConfirmed(principal.userId));
      if (!(await uow.repos.mfaFactors.markConfirmed(factor.id, uow.now))) return uow.failAfterCommit(errors.invalidCode());
      if (!(await uow.repos.mfaFactors.hasDefault(principal.userId))) await uow.repos.mfaFactors.makeDefault(principal.userId, factor.id);
      if (!firstFactor) {
        await uow.emit({ type: 'mfa.factor_added', actorId: principal.userId, userId: principal.userId, data: { factor_id: factor.id, type: factor.type } });
        return { status: 'confirmed' as const };
      }
      const recoveryCodes = await this.codes.issueRecoveryCodes(uow, principal.userId);
      await uow.emit({ type: 'mfa.enrolled', actorId: principal.userId, userId: principal.userId, data: { factor_id: factor.id, type: factor.type } });
      return { status: 'confirmed' as const, recovery_codes: recoveryCodes };
    });
  }

  // ---------------------------------------------------------------- management

  async listFactors(principal: Principal, meta: RequestMeta): Promise<FactorView[]> {
    await runUnitOfWork(this.context, meta, (uow) => this.prunePendingFactors(uow, principal.userId));
    const factors = await this.context.store.repos.mfaFactors.listForUser(principal.userId);
    return factors.map((factor) => ({ ...loginFactorView(factor), confirmed: factor.confirmedAt !== null }));
  }

  async updateFactor(principal: Principal, factorId: string, changes: { label?: string | null; default?: boolean }, meta: RequestMeta): Promise<FactorView> {
    return runUnitOfWork(this.context, meta, async (uow) => {
      await uow.repos.users.findByIdForUpdate(principal.userId);
      await this.policy.assertSessionLive(uow.repos, principal);
      const factor = await uow.repos.mfaFactors.findOwned(factorId, principal.userId);
      if (!factor) throw errors.notFound('Factor');
      if (changes.default === true && factor.confirmedAt === null) throw errors.invalidState('Only a confirmed factor can be the default.');
      if (changes.label !== undefined) await uow.repos.mfaFactors.setLabel(factor.id, changes.label === null || changes.label === '' ? null : changes.label);
      if (changes.default === true) await uow.repos.mfaFactors.makeDefault(principal.userId, factor.id);
      if (changes.default === false) await uow.repos.mfaFactors.clearDefault(factor.id);
      const updated = (await uow.repos.mfaFactors.findOwned(factor.id, principal.userId))!;
      return { ...loginFactorView(updated), confirmed: updated.confirmedAt !== null };
    });
  }

  /** Step-up guarded at the route. The last confirmed factor stays while MFA is enforced for the user. */
  async removeFactor(principal: Principal, factorId: string, meta: RequestMeta): Promise<void> {
    const enforced = await this.policy.isMfaEnforcedFor(this.context.store.repos, principal.user);
    await runUnitOfWork(this.context, meta, async (uow) => {
      await uow.repos.users.findByIdForUpdate(principal.userId);
      // A thief's removal in flight when the owner ended the session removes nothing.
      await this.policy.assertSessionLive(uow.repos, principal);
      const factor = await uow.repos.mfaFactors.findOwned(factorId, principal.userId);
      if (!factor) throw errors.notFound('Factor');
      const confirmed = await uow.repos.mfaFactors.listConfirmed(principal.userId);
      const lastConfirmed = factor.confirmedAt !== null && confirmed.length === 1;
      if (lastConfirmed && enforced) {
        throw errors.lastFactorProtected();
      }
      await uow.repos.mfaFactors.deleteOwned(factor.id, principal.userId);
      const remaining = confirmed.filter((candidate) => candidate.id !== factor.id);
      if (factor.isDefault && remaining[0]) await uow.repos.mfaFactors.makeDefault(principal.userId, remaining[0].id);
      // Without a confirmed factor there is no MFA to recover; a later first factor issues a new batch.
      if (factor.confirmedAt !== null && remaining.length === 0) await uow.repos.recoveryCodes.retireAll(principal.userId, uow.now);
      await uow.emit({ type: 'mfa.factor_removed', actorId: principal.userId, userId: principal.userId, data: { factor_id: factor.id, type: factor.type, confirmed: factor.confirmedAt !== null } });
    });
  }

  async regenerateRecoveryCodes(principal: Principal, meta: RequestMeta): Promise<string[]> {
    return runUnitOfWork(this.context, meta, async (uow) => {
      await uow.repos.users.findByIdForUpdate(principal.userId);
      // Codes that stand in for a factor: not issued to a session that ended while the request waited.
      await this.policy.assertSessionLive(uow.repos, principal);
      if (!(await uow.repos.mfaFactors.hasConfirmed(principal.userId))) {
        throw errors.invalidState('Recovery codes need a confirmed factor first.');
      }
      const codes = await this.codes.issueRecoveryCodes(uow, principal.userId);
      await uow.emit({ type: 'mfa.recovery_regenerated', actorId: principal.userId, userId: principal.userId, data: { count: codes.length } });
      return codes;
    });
  }

  // ---------------------------------------------------------------- queries used elsewhere

  async recoveryCodesRemaining(userId: string): Promise<number> {
    return this.context.store.repos.recoveryCodes.countUnused(userId);
  }

  // ---------------------------------------------------------------- internals

  /**
   * docs/passwordless.md: after a passwordless sign-in, an e-mail factor to the address just proven is
   * no second factor (the same mailbox would pass both): 422 unsupported_factor.
   */
  private async assertSecondFactorAfter(uow: { repos: UnitOfWork['repos'] }, ticket: MfaTicket, factor: MfaFactorRecord): Promise<void> {
    if (ticket.firstFactor !== 'email') return;
    const user = await uow.repos.users.findById(ticket.userId);
    if (user && provesOnlyTheFirstFactor(ticket, factor, user.email)) {
      throw errors.unsupportedFactor('This sign-in already proved this e-mail address; choose another factor or a recovery code.');
    }
  }

  /** A confirmed factor of the user; unknown, foreign and pending factors are 404 alike. */
  private async confirmedFactor(uow: UnitOfWork, userId: string, factorId: string): Promise<MfaFactorRecord> {
    const factor = await uow.repos.mfaFactors.findOwned(factorId, userId);
    if (!factor || factor.confirmedAt === null) throw errors.notFound('Factor');
    // Without `webauthn` config a passkey is not offered (docs/mfa.md).
    if (factor.type === 'webauthn' && !this.passkeys.enabled) throw errors.notFound('Factor');
    return factor;
  }

  /**
   * A code of the named confirmed factor (bound to the ticket or session), a passkey
   * assertion for a `webauthn` factor, or, with no factor, a recovery code. A proof of the
   * wrong kind for the factor is a failed attempt like a wrong code.
   */
  private async checkSecondFactor(
    uow: UnitOfWork,
    userId: string,
    factorId: string | undefined,
    proof: SecondFactorProof,
    purpose: 'login_mfa' | 'step_up',
    boundTo: string,
  ): Promise<{ accepted: boolean; method: CodeMethod; factor: MfaFactorRecord | undefined }> {
    if (factorId === undefined) {
      return { accepted: proof.code !== undefined && (await this.codes.spendRecoveryCode(uow, userId, proof.code)), method: 'recovery', factor: undefined };
    }
    const factor = await this.confirmedFactor(uow, userId, factorId);
    if (factor.type === 'webauthn') {
      return { accepted: proof.response !== undefined && (await this.passkeys.checkFactorAssertion(uow, factor, proof.response, purpose, boundTo)), method: factor.type, factor };
    }
    return { accepted: proof.code !== undefined && (await this.codes.checkFactorCode(uow, factor, proof.code, purpose, boundTo)), method: factor.type, factor };
  }

  /** Pruned opportunistically on this user's own requests, so no scheduler is needed. */
  private async prunePendingFactors(uow: UnitOfWork, userId: string): Promise<void> {
    await uow.repos.mfaFactors.pruneUnconfirmed(userId, uow.now - PENDING_FACTOR_LIFETIME_MS);
  }

  private async recordSecondFactorFailure(uow: UnitOfWork, slot: FailedAttemptSlot, failure: { context: 'login' | 'step_up'; method: CodeMethod; factorId: string | null }): Promise<void> {
    const userId = slot.userId;
    await this.codes.recordVerifyFailure(uow, userId);
    await uow.emit({ type: 'mfa.verify_failed', actorId: userId, userId, data: { context: failure.context, method: failure.method, factor_id: failure.factorId } });
    await slot.fail(uow, 'second_factor');
  }

  private async emitRecoveryUsed(uow: UnitOfWork, userId: string): Promise<void> {
    const remaining = await uow.repos.recoveryCodes.countUnused(userId);
    await uow.emit({ type: 'mfa.recovery_used', actorId: userId, userId, data: { remaining } });
  }

}

function loginFactorView(factor: MfaFactorRecord): LoginFactorView {
  const view: LoginFactorView = { id: factor.id, type: factor.type, default: factor.isDefault };
  if (factor.label) view.label = factor.label;
  const destination = maskedDestination(factor);
  if (destination) view.destination = destination;
  return view;
}

/**
 * An e-mail factor whose destination is the mailbox a passwordless first factor just proved
 * (docs/passwordless.md), in any spelling of its domain (`mailboxForm`).
 */
function provesOnlyTheFirstFactor(ticket: { firstFactor?: TicketFirstFactor | undefined }, factor: Pick<MfaFactorRecord, 'type' | 'destination'>, provenAddress: string): boolean {
  return ticket.firstFactor === 'email' && factor.type === 'email' && factor.destination !== null && mailboxForm(factor.destination) === mailboxForm(provenAddress);
}

/** The `method` of `user.logged_in` after the gate: the first factor's for a social or passwordless sign-in, else the second factor's. */
function signInMethodAfterGate(ticket: MfaTicket, method: CodeMethod): string {
  if (ticket.firstFactor === 'fed') return 'social';
  if (ticket.firstFactor === 'email') return ticket.signInMethod ?? 'email_code';
  return method;
}

function secondFactorAmr(method: CodeMethod): string[] {
  return method === 'webauthn' ? PASSKEY_SECOND_FACTOR_AMR : SECOND_FACTOR_AMR;
}

function assertCodeCanBeSent(factor: MfaFactorRecord): void {
  if (factor.type === 'totp') throw errors.unsupportedFactor('TOTP factors need no challenge; submit the code from the authenticator app.');
}

function invalidTicket(): Error {
  return errors.unauthorized('The MFA ticket is invalid or expired.');
}
