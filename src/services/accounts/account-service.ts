import { randomUUID } from 'node:crypto';
import { errors } from '../../errors.js';
import type { EventInput } from '../../events.js';
import { keyedHash, randomToken } from '../../crypto/keyed-hash.js';
import type { OneTimeTokenPurpose } from '../../store/session-repository.js';
import type { UserRecord } from '../../store/user-repository.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import type { MfaService } from '../mfa/mfa-service.js';
import { type FirstFactor, firstFactorWay, heldProofOf, type LoginResult, loginFailed } from '../sessions/sign-in-result.js';
import { assertPasswordAcceptable } from './password-policy.js';
import { mailboxOf, mailboxSpellings, normaliseDisplayName, normaliseEmail } from '../shared/identity-rules.js';
import type { Principal } from '../access/principal.js';
import type { SessionService } from '../sessions/session-service.js';
import { FailedAttemptSlot, hasPasswordToCompare } from '../limits/lockout.js';
import { accountLinkBucket, trySpendSendBudget } from '../limits/send-budget.js';
import { type AccessPolicy, mayAuthenticate } from '../access/access-policy.js';
import { revokeKeysOfUser } from '../api-keys/api-key-service.js';
import { recordFirstEmailProof } from './credential-lifecycle.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { accountRefusalError, asSsoRequiredUnlessRight, type ChangedAccountReason, type SignInRules, type SsoRequirement, ssoRequired } from '../access/sign-in-rules.js';
import { ENDED_ROW_RETENTION_MS } from '../shared/occasional.js';

/** Registration, e-mail verification, password login and password reset / change (docs/security.md). */
export class AccountService {
  constructor(
    private readonly context: ServiceContext,
    private readonly sessions: SessionService,
    private readonly mfa: MfaService,
    private readonly signInRules: SignInRules,
    private readonly policy: AccessPolicy,
  ) {}

  /**
   * Enumeration-safe: the same work (one bcrypt hash) and the same answer whether or not
   * the address is new; only a new account gets mail.
   */
  async register(input: { email: string; password: string; displayName?: string | undefined }, meta: RequestMeta): Promise<void> {
    const email = normaliseEmail(input.email);
    // Require SSO (docs/sso.md): nothing is created or sent for an address at an enforcing domain.
    await this.signInRules.assertAllowed(email);
    // Before the hash: a refused name costs no bcrypt time (the route only bounds it).
    const displayName = normaliseDisplayName(input.displayName);
    assertPasswordAcceptable(input.password, email, this.context.config.password);
    const passwordHash = await this.context.hasher.hash(input.password);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const userId = randomUUID();
      const created = await uow.repos.users.insertIfEmailFree({ id: userId, email, displayName, passwordHash, now: uow.now }, mailboxOf(email));
      if (!created) return;
      await uow.emit({ type: 'user.registered', actorId: userId, userId });
      await this.sendOneTimeToken(uow, { id: userId, email }, 'verify_email');
    });
  }

  /** Idempotent: the same unexpired token answers again; the event fires on the first verification only. */
  async verifyEmail(token: string, meta: RequestMeta): Promise<void> {
    await runUnitOfWork(this.context, meta, async (uow) => {
      const stored = await uow.repos.oneTimeTokens.findByHash(keyedHash(this.context.keys.tokenHash, token), 'verify_email');
      if (!stored || stored.expiresAt <= uow.now) throw errors.invalidToken(400, 'The verification link is invalid or has expired.');
      // Locked, as the account's deletion locks it: an address is never proven for a tombstone.
      const user = await uow.repos.users.findByIdForUpdate(stored.userId);
      if (!user || user.deletedAt !== null) throw errors.invalidToken(400, 'The verification link is invalid or has expired.');
      await uow.repos.oneTimeTokens.consume(stored.id, uow.now);
      await recordFirstEmailProof(uow, user, { method: 'link' });
    });
  }

  async resendVerification(emailInput: string, meta: RequestMeta): Promise<void> {
    const email = normaliseEmail(emailInput);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockAccountAt(uow, email);
      if (!user || user.emailVerified || !mayAuthenticate(user)) return;
      await this.sendOneTimeToken(uow, user, 'verify_email');
    });
  }

  /**
   * `abandoned`: the client went away. A login still waiting for a hashing thread then ends
   * without comparing, recording or answering anything, and gives its failed-attempt slot
   * back: nothing was compared, so nothing counts against the account.
   */
  async login(input: { email: string; password: string }, meta: RequestMeta, abandoned?: AbortSignal): Promise<LoginResult> {
    const email = normaliseEmail(input.email);
    const now = this.context.clock.now();
    const repos = this.context.store.repos;
    // Require SSO (docs/sso.md): decided by the domain before any password check.
    const ssoRequirement = await this.signInRules.ssoRequirement(email);
    // The slot is taken before the hash is compared: concurrent guesses cannot all be compared.
    const accountRead = this.context.access.startRead();
    const { user, slot, read } = ssoRequirement
      ? await this.superadminPastSso(email, ssoRequirement, input.password, now, abandoned)
      : await FailedAttemptSlot.reserveForAccount(repos, this.context.config.auth.lockout, email, now, abandoned);

    if (!user || !hasPasswordToCompare(user) || !slot) {
      // Unknown, deleted and locked accounts cost the same bcrypt time as a real one.
      await this.context.hasher.burnVerification(input.password, abandoned);
      await this.recordLoginFailure(user, user && hasPasswordToCompare(user) ? 'locked' : 'unknown_account', meta);
      // At an enforcing domain a superadmin without a right credential (locked, or with no
      // password) answers what everyone there gets: a 401 would single the address out as a
      // superadmin's (CONTRACT 12.6).
      throw ssoRequirement ? ssoRequired(ssoRequirement) : errors.invalidCredentials();
    }

    // Only a wrong password keeps the slot (`fail` settles it); every other way out of this
    // block gives it back, a comparison that never ran (its client gone) included. A correct
    // password does not clear earlier failures: those end only when the sign-in completes (a
    // second factor may still be guessed, docs/security.md), which clears them in its own transaction.
    try {
      if (!(await this.context.hasher.verify(input.password, user.passwordHash, abandoned))) {
        await this.recordLoginFailure(user, 'wrong_password', meta, slot);
        throw ssoRequirement ? ssoRequired(ssoRequirement) : errors.invalidCredentials();
      }
      const comparedPasswordHash = await this.upgradePasswordHash(user, user.passwordHash, input.password);
      // What the account's statement read for the sign-in (PostgreSQL): the grant the token's
      // authority reads through the access cache after commit, kept only now so that failed
      // guesses fill no entries; and whether the MFA gate has factors to read.
      if (read) this.context.access.keepSuperadmin(user.id, read.superadmin, accountRead);
      return await this.signIn(user, { amr: 'pwd', method: 'password', comparedPasswordHash }, slot, meta, read?.hasConfirmedFactor === false);
    } finally {
      await slot.release();
    }
  }

  /**
   * At an enforcing domain only a superadmin goes on to the comparison (with its slot); anyone
   * else costs a burnt hash and answers sso_required, as a wrong password there does.
   */
  private async superadminPastSso(
    email: string,
    requirement: SsoRequirement,
    password: string,
    now: number,
    abandoned: AbortSignal | undefined,
  ): Promise<{ user: UserRecord; slot: FailedAttemptSlot | undefined; read: undefined }> {
    const repos = this.context.store.repos;
    const user = await repos.users.findByEmail(email, mailboxSpellings(email));
    if (!(user && (await repos.roles.isSuperadmin(user.id)))) {
      await this.context.hasher.burnVerification(password, abandoned);
      throw ssoRequired(requirement);
    }
    try {
      return { user, slot: await FailedAttemptSlot.reserveFor(repos, this.context.config.auth.lockout, user, now, abandoned), read: undefined };
    } catch (error) {
      // Every slot held past the wait: nothing was compared, so it costs the comparison everyone here pays.
      const answered = asSsoRequiredUnlessRight(error, requirement);
      if (answered !== error) await this.context.hasher.burnVerification(password, abandoned);
      throw answered;
    }
  }

  /**
   * Everything after a first factor has been checked, the same for every first factor (a
   * password, a passwordless code or link, docs/passwordless.md): the sign-in refusals, the MFA gate
   * (enforcement, grace and block mode, an organization's require_mfa), the session, the
   * `user.logged_in` event and the login answer. A session's opening clears earlier failures
   * with `slot`; the caller gives the slot back otherwise. An account created by this very
   * sign-in (a passwordless sign-up) has no failures and no slot. `noFactorWhenRead`: see
   * `MfaService.throughLoginGate`.
   */
  async signIn(user: UserRecord, firstFactor: FirstFactor, slot: FailedAttemptSlot | undefined, meta: RequestMeta, noFactorWhenRead = false): Promise<LoginResult> {
    const refusal = this.signInRules.accountRefusal(user, this.context.clock.now());
    // Spec 6: a failed login emits user.login_failed. A locked account's (invalid_credentials) was
    // recorded when its slot was refused; a right password costs no slot.
    if (refusal === 'account_disabled' || refusal === 'email_unverified') await this.recordLoginFailure(user, refusal, meta, undefined, firstFactor);
    if (refusal) throw accountRefusalError(refusal);
    // What the first factor proved must still hold when its session or ticket is written: a reset or change that committed since ends it.
    const held = heldProofOf(firstFactor);
    const origin = { signInMethod: firstFactor.method === 'password' ? undefined : firstFactor.method, held };
    const amr = [firstFactor.amr];
    const loggedIn: EventInput = { type: 'user.logged_in', actorId: user.id, userId: user.id, data: { mfa: false, amr, method: firstFactor.method } };
    const passed = await this.signInRules.recordingChangedAccount(
      this.mfa.throughLoginGate(user, meta, firstFactor.amr, origin, () => this.sessions.openSignedIn(user, amr, loggedIn, slot !== undefined, meta, held), noFactorWhenRead),
      meta,
      { userId: user.id, way: firstFactorWay(firstFactor) },
    );
    if (passed.kind === 'mfa_required') return passed;
    slot?.completedSignIn();
    const tokens = await this.sessions.signOpened(passed.opened);
    return { kind: 'session', tokens, user: { id: user.id, email: user.email, email_verified: user.emailVerified } };
  }

  /**
   * A hash made with another algorithm or cost than configured is re-made while the
   * password is at hand: raising `bcryptCost` or moving to argon2id takes effect at each
   * user's next login. It is not the password changing, so no event and no session ends.
   * Answers the hash the account now holds for this password: the sign-in's session is written
   * only while the account still holds it.
   */
  private async upgradePasswordHash(user: UserRecord, compared: string, password: string): Promise<string> {
    if (!this.context.hasher.needsRehash(compared)) return compared;
    const upgraded = await this.context.hasher.hash(password);
    return (await this.context.store.repos.users.replacePasswordHash(user.id, compared, upgraded)) ? upgraded : compared;
  }

  async forgotPassword(emailInput: string, meta: RequestMeta): Promise<void> {
    const email = normaliseEmail(emailInput);
    // Require SSO: no reset link is sent to an address at an enforcing domain, a superadmin's
    // included. A request carries no credential, so the answer comes from the domain alone
    // (CONTRACT 12.6): a superadmin exempted here would answer 202 where everyone else gets 403,
    // telling whoever asks which address holds superadmin. A reset link issued before
    // enforcement still serves a superadmin (`resetPassword`).
    await this.signInRules.assertAllowed(email);
    await runUnitOfWork(this.context, meta, async (uow) => {
      const user = await this.lockAccountAt(uow, email);
      if (!user || !mayAuthenticate(user)) return;
      await uow.emit({ type: 'user.password_reset_requested', userId: user.id });
      await this.sendOneTimeToken(uow, user, 'password_reset');
    });
  }

  async resetPassword(input: { token: string; newPassword: string }, meta: RequestMeta): Promise<void> {
    const tokenHash = keyedHash(this.context.keys.tokenHash, input.token);
    const invalid = () => errors.invalidToken(401, 'The reset link is invalid, expired or already used.');
    const stored = await this.context.store.repos.oneTimeTokens.findByHash(tokenHash, 'password_reset');
    if (!stored || stored.consumedAt !== null || stored.expiresAt <= this.context.clock.now()) throw invalid();
    const user = await this.context.store.repos.users.findById(stored.userId);
    // A disabled account's password stays as its administrator left it: forgot sends it no link,
    // and a link sent before the disable changes nothing while the account is disabled.
    if (!user || !mayAuthenticate(user)) throw invalid();
    // Require SSO: a token issued before enforcement changes nothing either; a superadmin's valid token is a right credential.
    await this.signInRules.assertAllowed(user.email, { userId: user.id, credentialRight: true });
    assertPasswordAcceptable(input.newPassword, user.email, this.context.config.password, 'new_password');
    const passwordHash = await this.context.hasher.hash(input.newPassword);

    await runUnitOfWork(this.context, meta, async (uow) => {
      // The account first, as its deletion and verify-email lock it (docs/database.md): a reset
      // that held its link and then wanted the account deadlocked with a deletion, which holds
      // the account and then removes the links. Under the lock a deletion is seen, or waits.
      const account = await uow.repos.users.findByIdForUpdate(user.id);
      if (!account || !mayAuthenticate(account)) throw invalid();
      // The conditional consume makes the token single-use even under concurrent resets.
      if (!(await uow.repos.oneTimeTokens.consume(stored.id, uow.now))) throw invalid();
      await uow.repos.users.setPasswordHash(user.id, passwordHash, uow.now);
      await uow.repos.users.clearFailedLogins(user.id);
      // The reset link reached the address, which proves it: the first proof clears whatever
      // was bound to an unverified account before it (the credential lifecycle).
      if (!user.emailVerified) await recordFirstEmailProof(uow, user, { method: 'password_reset' });
      await this.endPasswordBoundCredentials(uow, user.id);
      // Account recovery: keys outlive sessions, so whoever held the account must not keep one (docs/api-keys.md).
      await revokeKeysOfUser(uow, user.id, user.id, 'password_reset');
      const count = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'password_reset');
      await uow.emit({ type: 'user.password_changed', actorId: user.id, userId: user.id, data: { method: 'reset', sessions_revoked: count } });
    });
  }

  async changePassword(principal: Principal, input: { currentPassword: string; newPassword: string }, meta: RequestMeta): Promise<void> {
    // The hash read now, not the caller's kept account (the access cache): the new one is written
    // only while the account still holds the hash compared here.
    const user = (await this.context.store.repos.users.findById(principal.userId)) ?? principal.user;
    // A wrong current password counts toward the lockout like a wrong login (no
    // password oracle behind a stolen access token); a locked account compares nothing.
    const slot = user.passwordHash ? await FailedAttemptSlot.reserve(this.context.store.repos, this.context.config.auth.lockout, user.id, this.context.clock.now()) : undefined;
    if (!user.passwordHash || !slot) throw errors.invalidCredentials(403);
    const comparedHash = user.passwordHash;
    if (!(await this.context.hasher.verify(input.currentPassword, comparedHash))) {
      await runUnitOfWork(this.context, meta, (uow) => slot.fail(uow, 'password'));
      throw errors.invalidCredentials(403);
    }
    await slot.release();
    assertPasswordAcceptable(input.newPassword, user.email, this.context.config.password, 'new_password');
    const passwordHash = await this.context.hasher.hash(input.newPassword);
    await runUnitOfWork(this.context, meta, async (uow) => {
      // The password compared must still be the account's: a reset (or another change) that
      // committed during the comparison is not overwritten by a thief's in-flight change.
      if (!(await uow.repos.users.setPasswordHash(user.id, passwordHash, uow.now, comparedHash))) throw errors.invalidCredentials(403);
      // Nor by one whose session the owner ended meanwhile (logout-all, a revoked session).
      await this.policy.assertSessionLive(uow.repos, principal);
      await this.endPasswordBoundCredentials(uow, user.id);
      const count = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'password_changed', principal.sessionId);
      await uow.emit({ type: 'user.password_changed', actorId: user.id, userId: user.id, data: { method: 'change', sessions_revoked: count } });
    });
  }

  /**
   * A new password ends what the old one (or the mailbox before it) had opened: pending MFA
   * tickets, whose holder proved the old password, outstanding reset links, and passwordless
   * codes and links sent before it.
   */
  private async endPasswordBoundCredentials(uow: UnitOfWork, userId: string): Promise<void> {
    await uow.repos.mfaTickets.endAllForUser(userId, uow.now);
    await uow.repos.oneTimeTokens.expireOutstanding(userId, 'password_reset', uow.now);
    await uow.repos.passwordlessChallenges.expireOutstandingForUser(userId, uow.now);
  }

  /** Only a wrong password counts toward the lockout (its slot stays taken); unknown, locked and disabled accounts are only recorded. */
  private async recordLoginFailure(
    user: UserRecord | undefined,
    reason: 'unknown_account' | 'wrong_password' | ChangedAccountReason,
    meta: RequestMeta,
    slot?: FailedAttemptSlot,
    firstFactor?: FirstFactor,
  ): Promise<void> {
    // A tombstone's failure (a sign-in under way at its deletion) says not where it came from (SignInRules.recordingRefusal).
    await this.signInRules.recordingRefusal(meta, user?.id ?? null, async (uow) => {
      await uow.emit(loginFailed(user?.id ?? null, firstFactor ? firstFactorWay(firstFactor) : {}, reason));
      if (slot) await slot.fail(uow, 'password');
    });
  }

  /**
   * The account at `email`, its row locked before a link is retired or written for it, as its
   * deletion locks it before it removes the links (docs/database.md): taken the other way round,
   * the two deadlocked, and a link written for an account deleted meanwhile was mailed to the
   * address it no longer has. A deletion that committed first leaves nothing at the address.
   */
  private lockAccountAt(uow: UnitOfWork, email: string): Promise<UserRecord | undefined> {
    return uow.repos.users.findByEmailForUpdate(email, mailboxSpellings(email));
  }

  /** Over the address's link budget nothing is retired, written or sent, and the route answers as ever. */
  private async sendOneTimeToken(uow: UnitOfWork, user: { id: string; email: string }, purpose: OneTimeTokenPurpose): Promise<void> {
    if (!(await trySpendSendBudget(uow, this.context, [accountLinkBucket(this.context, user.email)]))) return;
    const token = randomToken();
    const ttl = purpose === 'verify_email' ? this.context.config.tokens.emailVerifyTtl : this.context.config.tokens.passwordResetTtl;
    if (purpose === 'password_reset') await uow.repos.oneTimeTokens.expireOutstanding(user.id, purpose, uow.now);
    // Each link left its row for ever: the account's links that expired a day ago go with its next one (docs/database.md).
    await uow.repos.oneTimeTokens.pruneExpiredOfUser(user.id, uow.now - ENDED_ROW_RETENTION_MS);
    await uow.repos.oneTimeTokens.insert({
      id: randomUUID(),
      userId: user.id,
      purpose,
      tokenHash: keyedHash(this.context.keys.tokenHash, token),
      now: uow.now,
      expiresAt: uow.now + ttl * 1000,
    });
    const template = purpose === 'verify_email' ? 'verify_email' : 'password_reset';
    const linkTemplate = purpose === 'verify_email' ? this.context.config.links.verifyEmail : this.context.config.links.resetPassword;
    const context: Record<string, unknown> = { app_name: this.context.config.appName, token };
    if (linkTemplate) context.url = linkTemplate.replaceAll('{token}', encodeURIComponent(token));
    uow.afterCommit(() => this.context.mailer.send({ to: user.email, template, context }));
  }
}
