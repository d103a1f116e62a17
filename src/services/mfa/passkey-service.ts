import { randomBytes, randomUUID } from 'node:crypto';
import { type LoginResult, loginFailed } from '../sessions/sign-in-result.js';
import type {
  AuthenticationResponseJSON,
  AuthenticatorTransport,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/server';
import { keyedHash } from '../../crypto/keyed-hash.js';
import { errors, } from '../../errors.js';
import type { MfaFactorRecord } from '../../store/mfa-repository.js';
import type { PasskeyChallengePurpose, PasskeyRecord } from '../../store/passkey-repository.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import type { AccessPolicy } from '../access/access-policy.js';
import { accountRefusalError, asSsoRequiredUnlessRight, type SignInRules, ssoRequired } from '../access/sign-in-rules.js';
import { FailedAttemptSlot } from '../limits/lockout.js';
import { MfaCodes } from './mfa-codes.js';
import type { Principal } from '../access/principal.js';
import type { SessionService } from '../sessions/session-service.js';
import { describeError, runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { assertUnderQuota } from '../limits/quotas.js';

type WebauthnLibrary = typeof import('@simplewebauthn/server');
let webauthnLibrary: Promise<WebauthnLibrary> | undefined;
/** Loaded on first use, so hosts that do not configure passkeys never load it (nor its polyfills). */
const loadWebauthn = (): Promise<WebauthnLibrary> => (webauthnLibrary ??= import('@simplewebauthn/server'));

/** RFC 8176: a hardware-bound key, with the user verified on the device. */
export const PASSKEY_LOGIN_AMR = ['hwk', 'user'];

export interface PasskeyChallenge {
  channel: 'webauthn';
  options: PublicKeyCredentialRequestOptionsJSON;
}

export interface PasskeyRegistration {
  factor_id: string;
  status: 'confirmed';
  recovery_codes?: string[];
}

/** A passkey login always opens a session: `mfa` is true, there is no gate (docs/mfa.md). */
export type PasskeyLogin = Extract<LoginResult, { kind: 'session' }>;

type AssertionCheck = 'ok' | 'invalid' | 'counter_regressed';

/**
 * Passkeys (docs/mfa.md): registration as a `webauthn` factor, passwordless login with
 * discoverable credentials, and the assertion check the MFA gate and step-up use. Every
 * challenge is stored as a keyed hash, expires with `otp.ttl` and is taken by one
 * conditional update before the assertion is looked at, so a challenge works at most once.
 */
export class PasskeyService {
  private readonly codes: MfaCodes;

  constructor(
    private readonly context: ServiceContext,
    private readonly sessions: SessionService,
    private readonly policy: AccessPolicy,
    private readonly signInRules: SignInRules,
  ) {
    this.codes = new MfaCodes(context);
  }

  /** False without `webauthn` config: the routes answer 404 and passkeys are not offered. */
  get enabled(): boolean {
    return this.context.config.webauthn !== undefined;
  }

  // ---------------------------------------------------------------- registration

  async registrationOptions(principal: Principal, meta: RequestMeta): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const config = this.requireConfig();
    const webauthn = await loadWebauthn();
    return runUnitOfWork(this.context, meta, async (uow) => {
      const existing = await uow.repos.passkeys.listForUser(principal.userId);
      // One random handle per user, so an authenticator replaces its old passkey for this account instead of adding one.
      const userHandle = existing[0]?.userHandle ?? randomBytes(32).toString('base64url');
      const options = await webauthn.generateRegistrationOptions({
        rpName: config.rpName,
        rpID: config.rpId,
        userName: principal.user.email,
        userDisplayName: principal.user.displayName ?? principal.user.email,
        userID: new Uint8Array(Buffer.from(userHandle, 'base64url')),
        timeout: this.context.config.otp.ttl * 1000,
        attestationType: 'none',
        excludeCredentials: existing.map((passkey) => ({ id: passkey.credentialId, transports: passkey.transports as AuthenticatorTransport[] })),
        // Discoverable, so the same passkey also signs in without a password.
        authenticatorSelection: { residentKey: 'required', userVerification: 'preferred' },
      });
      await this.storeChallenge(uow, options.challenge, { purpose: 'register', userId: principal.userId, boundTo: principal.sessionId, userHandle });
      await this.policy.assertSessionLive(uow.repos, principal);
      return options;
    });
  }

  /**
   * A verified attestation becomes a confirmed `webauthn` factor. The first confirmed factor
   * becomes the default, gets recovery codes and emits mfa.enrolled; a later one emits
   * mfa.factor_added. A passkey signs in on its own, so the credential gate asks a fresh
   * authentication, decided again under the user's row lock (docs/mfa.md).
   */
  async verifyRegistration(principal: Principal, input: { response: RegistrationResponseJSON; label?: string | null }, meta: RequestMeta): Promise<PasskeyRegistration> {
    const config = this.requireConfig();
    const webauthn = await loadWebauthn();
    const challenge = challengeOf(input.response);
    return runUnitOfWork(this.context, meta, async (uow) => {
      // One MFA change per user at a time: "first confirmed factor" must mean exactly one,
      // and the verify budget is checked and recorded atomically.
      await uow.repos.users.findByIdForUpdate(principal.userId);
      await this.codes.assertVerifyBudget(uow.repos, principal.userId, uow.now);
      // The credential gate again, where the passkey becomes live (docs/security.md).
      await this.policy.assertMayAddCredential(uow.repos, principal, 'sign_in_method');
      const consumed = challenge
        ? await uow.repos.passkeys.consumeChallenge({ challengeHash: this.hashChallenge(challenge), purpose: 'register', userId: principal.userId, boundTo: principal.sessionId }, uow.now)
        : undefined;
      if (!consumed?.userHandle) {
        await this.codes.recordVerifyFailure(uow, principal.userId);
        return uow.failAfterCommit(errors.invalidCode());
      }
      let registration: Awaited<ReturnType<WebauthnLibrary['verifyRegistrationResponse']>>['registrationInfo'];
      try {
        const verification = await webauthn.verifyRegistrationResponse({
          response: input.response,
          expectedChallenge: (presented) => presented === challenge,
          expectedOrigin: config.origins,
          expectedRPID: config.rpId,
          // User verification is demanded where it matters: at passwordless login.
          requireUserVerification: false,
        });
        registration =
          verification.verified && !namesTopOrigin(input.response) && isUsableCredentialId(verification.registrationInfo.credential.id, input.response.id)
            ? verification.registrationInfo
            : undefined;
      } catch (error) {
        this.context.logger.info('passkey registration refused', { reason: describeError(error) });
      }
      if (!registration) {
        await this.codes.recordVerifyFailure(uow, principal.userId);
        return uow.failAfterCommit(errors.invalidCode());
      }
      const { credential } = registration;
      if (await uow.repos.passkeys.credentialIdTaken(credential.id)) throw errors.conflict('This passkey is already registered.');
      // A passkey is a factor: it counts toward the account's factors, under the account's lock above.
      assertUnderQuota('factorsPerUser', await uow.repos.mfaFactors.countForUser(principal.userId));
      const factorId = randomUUID();
      const firstFactor = !(await uow.repos.mfaFactors.hasConfirmed(principal.userId));
      const inserted = await uow.repos.passkeys.insert({
        id: factorId,
        userId: principal.userId,
        label: input.label ? input.label : null,
        credentialId: credential.id,
        publicKey: Buffer.from(credential.publicKey).toString('base64url'),
        signCount: credential.counter,
        transports: knownTransports(credential.transports),
        userHandle: consumed.userHandle,
        now: uow.now,
      });
      // A concurrent registration of the same credential won the unique index.
      if (!inserted) throw errors.conflict('This passkey is already registered.');
      if (!(await uow.repos.mfaFactors.hasDefault(principal.userId))) await uow.repos.mfaFactors.makeDefault(principal.userId, factorId);
      const eventData = { factor_id: factorId, type: 'webauthn' };
      if (!firstFactor) {
        await uow.emit({ type: 'mfa.factor_added', actorId: principal.userId, userId: principal.userId, data: eventData });
        return { factor_id: factorId, status: 'confirmed' as const };
      }
      const recoveryCodes = await this.codes.issueRecoveryCodes(uow, principal.userId);
      await uow.emit({ type: 'mfa.enrolled', actorId: principal.userId, userId: principal.userId, data: eventData });
      return { factor_id: factorId, status: 'confirmed' as const, recovery_codes: recoveryCodes };
    });
  }

  // ---------------------------------------------------------------- passwordless login

  /**
   * Options for a discoverable-credential login (docs/mfa.md). `allowCredentials` is always
   * empty and an `email` in the body changes nothing: an answer that depended on it would
   * tell accounts with passkeys apart from the rest, and hand out their credential ids.
   */
  async loginOptions(meta: RequestMeta): Promise<{ challenge_id: string; options: PublicKeyCredentialRequestOptionsJSON }> {
    const config = this.requireConfig();
    const webauthn = await loadWebauthn();
    const options = await webauthn.generateAuthenticationOptions({
      rpID: config.rpId,
      timeout: this.context.config.otp.ttl * 1000,
      userVerification: 'required',
      allowCredentials: [],
    });
    const challengeId = await runUnitOfWork(this.context, meta, (uow) => this.storeChallenge(uow, options.challenge, { purpose: 'login', userId: null, boundTo: null, userHandle: null }));
    return { challenge_id: challengeId, options };
  }

  /**
   * A passwordless login: a lockout slot is reserved before anything is verified:
   * concurrent guesses cannot all be checked against one stale count), then the challenge is
   * taken (so an assertion works once, even when it then fails), then the credential's
   * signature, origin, RP id, user verification and counter are checked. A failure with a
   * known credential keeps its slot, so it counts toward the lockout like a wrong password.
   */
  async verifyLogin(input: { challengeId: string; response: AuthenticationResponseJSON }, meta: RequestMeta): Promise<PasskeyLogin> {
    this.requireConfig();
    const challenge = challengeOf(input.response);
    if (!challenge) throw errors.invalidCode();
    const repos = this.context.store.repos;
    const passkey = await repos.passkeys.findByCredentialId(input.response.id);
    const consume = (uow: UnitOfWork) => uow.repos.passkeys.consumeChallenge({ challengeHash: this.hashChallenge(challenge), purpose: 'login', id: input.challengeId }, uow.now);
    if (!passkey) {
      // Unknown credential: the challenge is spent all the same.
      return runUnitOfWork(this.context, meta, async (uow) => {
        await consume(uow);
        return uow.failAfterCommit(errors.invalidCode());
      });
    }
    // Require SSO (docs/sso.md): decided by the account's domain before a slot is taken or the
    // assertion verified, counting toward no lockout (a credential id is no secret: forged
    // assertions would lock the employee out of the organization's IdP). Only a superadmin's
    // assertion is verified there, and without a right one it answers the same 403.
    const owner = await repos.users.findById(passkey.userId);
    const enforced = owner ? await this.signInRules.beforeCredential(owner.email, owner.id) : undefined;
    if (enforced && !enforced.superadmin) {
      // The challenge is spent all the same.
      await runUnitOfWork(this.context, meta, (uow) => consume(uow));
      throw ssoRequired(enforced.requirement);
    }
    try {
      return await this.verifyKnownPasskeyLogin(passkey, input, challenge, consume, meta);
    } catch (error) {
      throw enforced ? asSsoRequiredUnlessRight(error, enforced.requirement) : error;
    }
  }

  /** `verifyLogin` for a credential the router knows: the lockout slot, the assertion, the sign-in. */
  private async verifyKnownPasskeyLogin(
    passkey: PasskeyRecord,
    input: { challengeId: string; response: AuthenticationResponseJSON },
    challenge: string,
    consume: (uow: UnitOfWork) => Promise<unknown>,
    meta: RequestMeta,
  ): Promise<PasskeyLogin> {
    const repos = this.context.store.repos;
    const slot = await FailedAttemptSlot.reserve(repos, this.context.config.auth.lockout, passkey.userId, this.context.clock.now());
    try {
      const opened = await runUnitOfWork(this.context, meta, async (uow) => {
        const user = await uow.repos.users.findByIdForUpdate(passkey.userId);
        const consumed = await consume(uow);
        // Read again under the account's lock, which every sign-in with it takes: the counter is
        // the one the last of them left, and a passkey removed meanwhile signs no one in.
        const current = await uow.repos.passkeys.findByCredentialId(input.response.id);
        if (!consumed || !user || user.deletedAt !== null || current?.id !== passkey.id) return uow.failAfterCommit(errors.invalidCode());
        // Like a password login: a locked account is not even checked.
        if (!slot) {
          await uow.emit(loginFailed(user.id, { method: 'passkey' }, 'locked'));
          return uow.failAfterCommit(errors.invalidCredentials());
        }
        await this.codes.assertVerifyBudget(uow.repos, user.id, uow.now);
        const check = await this.checkAssertion(uow, current, input.response, challenge, { requireUserVerification: true });
        if (check !== 'ok') {
          await uow.emit(loginFailed(user.id, { method: 'passkey', factor_id: passkey.id }, check === 'counter_regressed' ? 'counter_regressed' : 'invalid_assertion'));
          await this.codes.recordVerifyFailure(uow, user.id);
          await slot.fail(uow, 'second_factor');
          return uow.failAfterCommit(errors.invalidCode());
        }
        const refusal = this.signInRules.accountRefusal(user, uow.now);
        if (refusal) {
          if (refusal === 'account_disabled') await uow.emit(loginFailed(user.id, { method: 'passkey' }, 'account_disabled'));
          return uow.failAfterCommit(accountRefusalError(refusal));
        }
        // Require SSO (docs/sso.md); a superadmin's verified passkey is a right credential.
        const ssoRefusal = await this.signInRules.refusal(user.email, { userId: user.id, credentialRight: true, repos: uow.repos });
        if (ssoRefusal) return uow.failAfterCommit(ssoRefusal);
        // The sign-in is complete: only now do earlier failures stop counting.
        await uow.repos.users.clearFailedLogins(user.id);
        const opened = await this.sessions.open(uow, user, { mfa: true, amr: PASSKEY_LOGIN_AMR, authTime: uow.now }, meta);
        await uow.emit({ type: 'user.logged_in', actorId: user.id, userId: user.id, data: { mfa: true, amr: PASSKEY_LOGIN_AMR, method: 'passkey', factor_id: passkey.id } });
        return { opened, user: { id: user.id, email: user.email, email_verified: user.emailVerified } };
      });
      // Tokens are signed only after commit.
      return { kind: 'session', tokens: await this.sessions.signOpened(opened.opened), user: opened.user };
    } finally {
      // A success (or a refusal that verified nothing) gives the slot back; a failure keeps it.
      await slot?.release();
    }
  }

  // ---------------------------------------------------------------- MFA gate and step-up

  /** `/auth/mfa/challenge` and `/auth/mfa/step-up/challenge` for a `webauthn` factor. */
  async assertionOptions(uow: UnitOfWork, factor: MfaFactorRecord, purpose: 'login_mfa' | 'step_up', boundTo: string): Promise<PasskeyChallenge> {
    const config = this.requireConfig();
    const webauthn = await loadWebauthn();
    const passkey = await uow.repos.passkeys.findOwned(factor.id, factor.userId);
    if (!passkey) throw errors.notFound('Factor');
    const options = await webauthn.generateAuthenticationOptions({
      rpID: config.rpId,
      timeout: this.context.config.otp.ttl * 1000,
      // A second factor after a password: presence is enough, verification welcome.
      userVerification: 'preferred',
      allowCredentials: [{ id: passkey.credentialId, transports: passkey.transports as AuthenticatorTransport[] }],
    });
    await this.storeChallenge(uow, options.challenge, { purpose, userId: factor.userId, boundTo, userHandle: null });
    return { channel: 'webauthn', options };
  }

  /**
   * The assertion of a `webauthn` factor at the MFA gate or step-up, against a live
   * challenge issued to this user for this ticket or session. True only for the caller
   * whose update took the challenge and whose assertion verifies.
   */
  async checkFactorAssertion(uow: UnitOfWork, factor: MfaFactorRecord, response: AuthenticationResponseJSON, purpose: 'login_mfa' | 'step_up', boundTo: string): Promise<boolean> {
    this.requireConfig();
    const challenge = challengeOf(response);
    if (!challenge) return false;
    const consumed = await uow.repos.passkeys.consumeChallenge({ challengeHash: this.hashChallenge(challenge), purpose, userId: factor.userId, boundTo }, uow.now);
    if (!consumed) return false;
    const passkey = await uow.repos.passkeys.findOwned(factor.id, factor.userId);
    if (!passkey) return false;
    return (await this.checkAssertion(uow, passkey, response, challenge, { requireUserVerification: false })) === 'ok';
  }

  // ---------------------------------------------------------------- internals

  private requireConfig(): NonNullable<ServiceContext['config']['webauthn']> {
    const config = this.context.config.webauthn;
    if (!config) throw errors.notFound('Route');
    return config;
  }

  private hashChallenge(challenge: string): string {
    return keyedHash(this.context.keys.passkeyChallengeHash, challenge);
  }

  private async storeChallenge(
    uow: UnitOfWork,
    challenge: string,
    binding: { purpose: PasskeyChallengePurpose; userId: string | null; boundTo: string | null; userHandle: string | null },
  ): Promise<string> {
    const id = randomUUID();
    await uow.repos.passkeys.insertChallenge({ id, challengeHash: this.hashChallenge(challenge), ...binding, now: uow.now, expiresAt: uow.now + this.context.config.otp.ttl * 1000 });
    return id;
  }

  /**
   * Signature, origin, RP id, type, user presence (and verification when asked), the
   * credential and its user handle, then the counter. A counter that does not move forward
   * means a cloned authenticator (or a replay): refused, and reported as its own event.
   */
  private async checkAssertion(
    uow: UnitOfWork,
    passkey: PasskeyRecord,
    response: AuthenticationResponseJSON,
    challenge: string,
    options: { requireUserVerification: boolean },
  ): Promise<AssertionCheck> {
    const config = this.requireConfig();
    const webauthn = await loadWebauthn();
    if (response.id !== passkey.credentialId) return 'invalid';
    const userHandle = response.response.userHandle;
    if (userHandle !== undefined && userHandle !== null && userHandle !== passkey.userHandle) return 'invalid';
    let presentedCount: number;
    try {
      const verification = await webauthn.verifyAuthenticationResponse({
        response,
        expectedChallenge: (presented) => presented === challenge,
        expectedOrigin: config.origins,
        expectedRPID: config.rpId,
        // The counter is compared below (not by the library) so that a regression can be told apart and reported.
        credential: { id: passkey.credentialId, publicKey: new Uint8Array(Buffer.from(passkey.publicKey, 'base64url')), counter: 0, transports: passkey.transports as AuthenticatorTransport[] },
        requireUserVerification: options.requireUserVerification,
      });
      if (!verification.verified) return 'invalid';
      presentedCount = verification.authenticationInfo.newCounter;
    } catch (error) {
      this.context.logger.info('passkey assertion refused', { factor_id: passkey.id, reason: describeError(error) });
      return 'invalid';
    }
    const storedCount = passkey.signCount;
    if ((presentedCount > 0 || storedCount > 0) && presentedCount <= storedCount) {
      this.context.logger.warn('passkey signature counter went backwards; possible cloned authenticator', { factor_id: passkey.id });
      await uow.emit({
        type: 'mfa.passkey_counter_regressed',
        actorId: passkey.userId,
        userId: passkey.userId,
        data: { factor_id: passkey.id, stored_count: storedCount, presented_count: presentedCount },
      });
      return 'counter_regressed';
    }
    // Conditional on the value checked above: of two assertions checked against one counter, one moves it.
    if (!(await uow.repos.passkeys.advanceSignCount(passkey.id, storedCount, presentedCount))) return 'invalid';
    return 'ok';
  }

}

/** WebAuthn Level 3, 7.1 step 24: a credential id longer than this many bytes fails the registration. */
const MAX_CREDENTIAL_ID_BYTES = 1023;

/**
 * The attested credential id (from the signed authenticator data, not the client's unsigned
 * `id`) within the WebAuthn limit, and the id the client reported: a passkey is found at login
 * by the id the browser sends, so one attested under another id, or too long for the column
 * (a 500 on PostgreSQL), would be stored yet never sign in.
 */
function isUsableCredentialId(attested: string, reported: string): boolean {
  return attested === reported && Buffer.from(attested, 'base64url').length <= MAX_CREDENTIAL_ID_BYTES;
}

/** The transports of the WebAuthn registry (Level 3, "AuthenticatorTransport"). */
const KNOWN_TRANSPORTS: ReadonlySet<string> = new Set(['usb', 'nfc', 'ble', 'smart-card', 'hybrid', 'internal']);

/**
 * A new passkey's transports, each known one once. They come from the client beside the
 * attestation, unsigned, and are only a hint for later `allowCredentials`: anything else is
 * dropped rather than stored (unbounded, it overflowed the column: a 500 on PostgreSQL).
 */
function knownTransports(transports: readonly string[] | undefined): string[] {
  return [...new Set((transports ?? []).filter((transport) => KNOWN_TRANSPORTS.has(transport)))];
}

type ClientDataCarrier = { response?: { clientDataJSON?: unknown } } | undefined;

/** The response's clientDataJSON, parsed; undefined when unreadable. */
function clientDataOf(response: ClientDataCarrier): { challenge?: unknown; topOrigin?: unknown } | undefined {
  const encoded = response?.response?.clientDataJSON;
  if (typeof encoded !== 'string' || encoded.length > 4096) return undefined;
  try {
    const clientData: unknown = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8'));
    return typeof clientData === 'object' && clientData !== null ? clientData : undefined;
  } catch {
    return undefined;
  }
}

/** The challenge the browser signed, from the response's clientDataJSON; undefined when unreadable. */
function challengeOf(response: ClientDataCarrier): string | undefined {
  const challenge = clientDataOf(response)?.challenge;
  return typeof challenge === 'string' && challenge.length > 0 && challenge.length <= 512 ? challenge : undefined;
}

/**
 * A ceremony run in a frame under another site's page (WebAuthn Level 3, 7.1 and 7.2: a
 * `topOrigin` must be one the RP expects to be framed in). No top origin is configured, so
 * any is refused; the library refuses it at login, this refuses it at registration too.
 */
function namesTopOrigin(response: ClientDataCarrier): boolean {
  const topOrigin = clientDataOf(response)?.topOrigin;
  return topOrigin !== undefined && topOrigin !== null;
}
