import { asSsoRequiredUnlessRight, type SignInRules, ssoRequired } from '../access/sign-in-rules.js';
import { randomUUID } from 'node:crypto';
import type { ResolvedConfig } from '../../config/types.js';
import { decrypt, encrypt } from '../../crypto/aead.js';
import { keyedHash, randomToken } from '../../crypto/keyed-hash.js';
import { generateOtpCode, hashOtpCode, otpCodeMatches } from '../../crypto/otp-code.js';
import { errors, IdentityError } from '../../errors.js';
import type { PasswordlessChallengeRecord } from '../../store/passwordless-repository.js';
import type { UserRecord } from '../../store/user-repository.js';
import { mayAuthenticate } from '../access/access-policy.js';
import type { AccountService } from '../accounts/account-service.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { recordFirstEmailProof } from '../accounts/credential-lifecycle.js';
import { mailboxForm, mailboxOf, mailboxSpellings, normaliseEmail } from '../shared/identity-rules.js';
import { FailedAttemptSlot } from '../limits/lockout.js';
import { type LoginResult, loginFailed, type PasswordlessMethod } from '../sessions/sign-in-result.js';
import { MfaCodes } from '../mfa/mfa-codes.js';
import { assertWithinBudget, type BudgetBucket, destinationBudgetName, lockBudget, recordInBudget, spendSendBudget, trySpendSendBudget } from '../limits/send-budget.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { ENDED_ROW_RETENTION_MS, Occasional, PRUNE_EVERY_MS } from '../shared/occasional.js';

type PasswordlessSettings = NonNullable<ResolvedConfig['passwordless']>;

/** What `POST /auth/passwordless/start` answers, the same for every well-formed address. */
export interface PasswordlessStarted {
  challenge_id: string;
  expires_in: number;
}

/** The proof a verify carries: the code of one challenge, or a link's token. */
export type PasswordlessProof = { challengeId: string; code: string; token?: undefined } | { token: string; challengeId?: undefined; code?: undefined };

export interface PasswordlessSignIn {
  login: LoginResult;
  /** An answer with tokens says it (docs/passwordless.md): the host's page may greet a new account. */
  isNewUser: boolean;
  method: PasswordlessMethod;
}

/** AAD of a sealed sign-up address: a ciphertext copied onto another challenge does not open. */
const sealedAddressContext = (challengeId: string) => `passwordless-challenge:${challengeId}:address`;

/**
 * Passwordless sign-in by e-mail (docs/passwordless.md): a one-time code and,
 * when the host turns it on, a one-time link, mailed to the address. It is one more first
 * factor, not a second login path: once the code or link is checked, `AccountService.signIn`
 * runs exactly what a password login runs (the refusals, the MFA gate, the session, the events).
 *
 * Start answers the same for every address; only an eligible one is mailed. Every failed
 * verify counts toward its challenge, the account's verify budget (an address's, with no
 * account) and the account's lockout, like a wrong password; a new start resets none of them.
 */
export class PasswordlessService {
  private readonly codes: MfaCodes;
  private readonly endedPruning = new Occasional(PRUNE_EVERY_MS);

  constructor(
    private readonly context: ServiceContext,
    private readonly settings: PasswordlessSettings,
    private readonly accounts: AccountService,
    private readonly signInRules: SignInRules,
  ) {
    this.codes = new MfaCodes(context);
  }

  /**
   * POST /auth/passwordless/start. Throttled by the address alone (cooldown and per-destination
   * budget, 429), whether or not it has an account; a refused start rolls back and counts toward
   * nothing. An ineligible address (unknown with sign-up off, disabled, locked) gets a challenge
   * no code opens, and no mail; an account over its per-account send budget too.
   */
  async start(emailInput: string, meta: RequestMeta): Promise<PasswordlessStarted> {
    const address = normaliseEmail(emailInput);
    const addressHash = this.addressHash(address);
    const challengeId = randomUUID();
    const { otp } = this.context.config;
    const ttl = this.settings.ttl;
    await runUnitOfWork(this.context, meta, async (uow) => {
      // The address's per-destination budget is the one MFA enrollment codes to it spend too
      // (docs/security.md: one budget per mailbox). Spending it takes its lock for the rest of
      // the transaction, so the cooldown below is read by one start of this address at a time.
      await spendSendBudget(uow, this.context, [{ name: destinationBudgetName('email', address), budget: otp.sendBudget.perDestination }]);
      const lastStarted = await uow.repos.passwordlessChallenges.lastStartedAt(addressHash);
      if (lastStarted !== undefined && uow.now - lastStarted < otp.resendCooldown * 1000) {
        const resetsAt = lastStarted + otp.resendCooldown * 1000;
        throw errors.rateLimited((resetsAt - uow.now) / 1000, 'rate_limited', { limit: 1, resetsAt });
      }
      await uow.repos.passwordlessChallenges.pruneEnded(addressHash, uow.now - ENDED_ROW_RETENTION_MS);
      this.pruneAllEndedOccasionally(uow);

      const user = await uow.repos.users.findByEmail(address, mailboxSpellings(address));
      const eligible = user ? mayAuthenticate(user) && !isLocked(user, uow.now) : this.settings.allowSignup;
      const mails = eligible && (!user || (await this.spendAccountSendBudget(uow, user.id)));
      const challenge = { id: challengeId, userId: user?.id ?? null, addressHash, now: uow.now, expiresAt: uow.now + ttl * 1000 };
      // An address with no account is kept sealed, mailed or not: verify answers require-SSO by its domain.
      const addressSealed = user ? null : encrypt(this.context.keys.passwordlessAddressEncryption, address, sealedAddressContext(challengeId));
      if (!mails) {
        await uow.repos.passwordlessChallenges.insert({ ...challenge, addressSealed, codeHash: null, linkHash: null });
        return;
      }

      const code = generateOtpCode(otp.length);
      const token = this.settings.link ? randomToken() : undefined;
      await uow.repos.passwordlessChallenges.expireOutstanding(addressHash, uow.now);
      await uow.repos.passwordlessChallenges.insert({
        ...challenge,
        // Only a sign-up needs the address back at verify; sealed, so no row holds it in plain text.
        addressSealed,
        codeHash: hashOtpCode(this.context.keys.otpCodeHash, challengeId, code),
        linkHash: token === undefined ? null : this.linkHash(token),
      });
      const mailContext: Record<string, unknown> = { app_name: this.context.config.appName, code, ttl };
      const linkTemplate = this.context.config.links.passwordlessLogin;
      if (token !== undefined && linkTemplate !== undefined) {
        mailContext.token = token;
        mailContext.url = linkTemplate.replaceAll('{token}', encodeURIComponent(token));
      }
      // The mail goes to the stored address (docs/passwordless.md), which the typed one matched case-insensitively.
      const to = user?.email ?? address;
      uow.afterCommit(() => this.context.mailer.send({ to, template: 'login_code', context: mailContext }));
    });
    return { challenge_id: challengeId, expires_in: ttl };
  }

  /**
   * POST /auth/passwordless/verify. Every refusal is 422 invalid_code; a locked account
   * compares nothing. Success consumes the challenge (code and link together) in one
   * conditional update, proves the address (the first proof removes a password set before
   * it, docs/passwordless.md), creates the account of a sign-up, and hands over to the sign-in every
   * first factor shares.
   */
  async verify(proof: PasswordlessProof, meta: RequestMeta): Promise<PasswordlessSignIn> {
    const method: PasswordlessMethod = proof.token !== undefined ? 'email_link' : 'email_code';
    const repos = this.context.store.repos;
    const challenge = proof.token !== undefined ? await repos.passwordlessChallenges.findByLinkHash(this.linkHash(proof.token)) : await repos.passwordlessChallenges.findById(proof.challengeId);
    // Neither an account nor an address is known: nothing to count toward.
    if (!challenge) throw errors.invalidCode();
    const stored = challenge.userId === null ? undefined : await repos.users.findById(challenge.userId);
    const account = stored && stored.deletedAt === null ? stored : undefined;
    // Require SSO (docs/sso.md): decided by the address's domain before any code is compared, the
    // same with or without an account, counting toward nothing. Only a superadmin's right code passes;
    // a wrong one gets the same 403, and counts as it would anywhere else.
    const address = this.addressOf(challenge, account);
    const enforced = address === undefined ? undefined : await this.signInRules.beforeCredential(address, account?.id);
    try {
      return await this.recordingRefusal(account, method, meta, async () => {
        if (enforced && !enforced.superadmin) throw ssoRequired(enforced.requirement);
        return this.verifyChallenge(challenge, account, proof, method, meta);
      });
    } catch (error) {
      throw enforced ? asSsoRequiredUnlessRight(error, enforced.requirement) : error;
    }
  }

  /**
   * Start is public and writes a row for any well-formed address, and most addresses a stranger
   * types never start again: their ended challenges (a sealed address among them) would stay for
   * ever. After commit and outside the start's transaction, so the delete takes no lock a start waits for.
   */
  private pruneAllEndedOccasionally(uow: UnitOfWork): void {
    if (!this.endedPruning.due(uow.now)) return;
    const before = uow.now - ENDED_ROW_RETENTION_MS;
    uow.afterCommit(() => this.context.store.repos.passwordlessChallenges.pruneAllEnded(before));
  }

  /** The address a challenge was started for: its account's, or a sign-in with no account's, sealed. */
  private addressOf(challenge: PasswordlessChallengeRecord, account: UserRecord | undefined): string | undefined {
    if (account) return account.email;
    if (challenge.addressSealed === null) return undefined;
    return decrypt(this.context.keys.passwordlessAddressEncryption, challenge.addressSealed, sealedAddressContext(challenge.id)).toString('utf8');
  }

  /**
   * A refused verify on an account's challenge emits `user.login_failed {method, reason}`, `reason`
   * being the error code answered (docs/passwordless.md). `invalid_code` and `account_disabled` are
   * recorded where they arise, with the counts they go with; the refusals whose transaction rolls
   * back (a verify budget's 429, `sso_required`) are recorded here, after it. No account: nothing.
   */
  private async recordingRefusal<T>(account: UserRecord | undefined, method: PasswordlessMethod, meta: RequestMeta, verify: () => Promise<T>): Promise<T> {
    try {
      return await verify();
    } catch (error) {
      if (account && error instanceof IdentityError && REFUSALS_RECORDED_AFTER.has(error.code)) {
        await runUnitOfWork(this.context, meta, (uow) => emitRefusal(uow, account.id, method, error.code));
      }
      throw error;
    }
  }

  private async verifyChallenge(challenge: PasswordlessChallengeRecord, account: UserRecord | undefined, proof: PasswordlessProof, method: PasswordlessMethod, meta: RequestMeta): Promise<PasswordlessSignIn> {
    const repos = this.context.store.repos;
    // The slot is taken before anything is compared, as for a password (lockout.ts).
    const slot = account ? await FailedAttemptSlot.reserve(repos, this.context.config.auth.lockout, account.id, this.context.clock.now()) : undefined;
    if (account && !slot) {
      // A live lockout compares nothing, but its refusal still counts toward the address's
      // verify budget (429 past it), as a refusal of an address with no account does: otherwise
      // an account would be told apart by its lock swallowing the budget (never a 429). Not the
      // account's own budget, which its factor enrollments and MFA gate also spend.
      await runUnitOfWork(this.context, meta, async (uow) => {
        await this.assertAddressVerifyBudget(uow, challenge);
        await recordInBudget(uow, this.context, this.addressVerifyBucket(challenge.addressHash));
        await emitRefusal(uow, account.id, method);
      });
      throw errors.invalidCode();
    }
    try {
      const proven = await runUnitOfWork(this.context, meta, async (uow) => {
        // One verify of an account at a time: its budget and its failures are counted in order.
        const locked = account ? await uow.repos.users.findByIdForUpdate(account.id) : undefined;
        // Deleted since it was read: its tombstone has nothing to prove, count toward or sign in,
        // and the verify answers as one that came after the deletion.
        if (locked && locked.deletedAt !== null) throw errors.invalidCode();
        await this.assertVerifyBudget(uow, challenge, account);
        if (!(await this.spend(uow, challenge, proof))) {
          await this.recordFailure(uow, challenge, account, slot, method);
          return uow.failAfterCommit(errors.invalidCode());
        }
        return this.proveAddress(uow, challenge, locked, method);
      });
      // The password the account held when the code was spent: a reset or change committed since ended this code (docs/passwordless.md).
      const login = await this.accounts.signIn(proven.user, { amr: 'email', method, heldPasswordHash: proven.user.passwordHash }, slot, meta);
      return { login, isNewUser: proven.isNewUser, method };
    } finally {
      await slot?.release();
    }
  }

  /** A code is checked only against its own challenge; a link's challenge was found by its token. */
  private async spend(uow: UnitOfWork, challenge: PasswordlessChallengeRecord, proof: PasswordlessProof): Promise<boolean> {
    // A link of a challenge whose attempts failed codes have spent is burned like its code.
    const { otp } = this.context.config;
    const repo = uow.repos.passwordlessChallenges;
    if (proof.token !== undefined) return repo.consume(challenge.id, uow.now, otp.maxAttempts - 1);
    // The attempt is taken before comparing; a caller without one never compares.
    if (challenge.codeHash === null || !(await repo.claimAttempt(challenge.id, otp.maxAttempts, uow.now))) return false;
    if (!otpCodeMatches(this.context.keys.otpCodeHash, challenge.id, proof.code, otp.length, challenge.codeHash)) return false;
    return repo.consume(challenge.id, uow.now, otp.maxAttempts);
  }

  /**
   * The code or link reached the address: the first proof runs (docs/passwordless.md), or, for an
   * address with no account, the account is created verified and without a password. A
   * disabled account proves nothing; the sign-in refuses it.
   */
  private async proveAddress(
    uow: UnitOfWork,
    challenge: PasswordlessChallengeRecord,
    account: UserRecord | undefined,
    method: PasswordlessMethod,
  ): Promise<{ user: UserRecord; isNewUser: boolean }> {
    let user = account;
    let isNewUser = false;
    if (!user) {
      // Sign-up happens here, at the first successful verify, never at start.
      if (challenge.addressSealed === null || !this.settings.allowSignup) throw errors.invalidCode();
      const address = decrypt(this.context.keys.passwordlessAddressEncryption, challenge.addressSealed, sealedAddressContext(challenge.id)).toString('utf8');
      await this.signInRules.assertAllowed(address, { credentialRight: true, repos: uow.repos });
      ({ user, isNewUser } = await this.signUpAt(uow, address, method));
      // An account registered at the address meanwhile is refused as on the account path, where
      // its lockout took no slot: a live lockout is 422 invalid_code, and proves nothing.
      if (!mayAuthenticate(user) || isLocked(user, uow.now)) throw errors.invalidCode();
    } else {
      await this.signInRules.assertAllowed(user.email, { userId: user.id, credentialRight: true, repos: uow.repos });
    }
    if (user.status === 'active' && !user.emailVerified) await recordFirstEmailProof(uow, user, { method, passwordless: true });
    const current = (await uow.repos.users.findById(user.id)) ?? user;
    return { user: current, isNewUser };
  }

  /**
   * A sign-up's account: created here, or registered meanwhile by someone else, whose address
   * this code proves; that one is read again under its row lock, so a deletion that committed
   * after it was found (its tombstone has another address) is seen, and the address, freed, is
   * signed up as if the deletion had come first.
   */
  private async signUpAt(uow: UnitOfWork, address: string, method: PasswordlessMethod): Promise<{ user: UserRecord; isNewUser: boolean }> {
    for (let round = 0; round < 2; round += 1) {
      const id = randomUUID();
      if (await uow.repos.users.insertIfEmailFree({ id, email: address, displayName: null, passwordHash: null, emailVerified: true, now: uow.now }, mailboxOf(address))) {
        await uow.emit({ type: 'user.registered', actorId: id, userId: id, data: { method } });
        return { user: (await uow.repos.users.findById(id))!, isNewUser: true };
      }
      const found = await uow.repos.users.findByEmail(address, mailboxSpellings(address));
      const locked = found && (await uow.repos.users.findByIdForUpdate(found.id));
      if (locked && mailboxForm(locked.email) === mailboxForm(address)) return { user: locked, isNewUser: false };
    }
    throw errors.invalidCode();
  }

  /** Over the verify budget no code is even looked at: 429 whatever the code (docs/passwordless.md). */
  /**
   * Every verify spends the address's budget, with or without an account, so the two answer
   * alike (429 past `otp.verifyBudget`); an account's verifies spend its own budget too.
   */
  private async assertVerifyBudget(uow: UnitOfWork, challenge: PasswordlessChallengeRecord, account: UserRecord | undefined): Promise<void> {
    if (account) await this.codes.assertVerifyBudget(uow.repos, account.id, uow.now);
    await this.assertAddressVerifyBudget(uow, challenge);
  }

  private async assertAddressVerifyBudget(uow: UnitOfWork, challenge: PasswordlessChallengeRecord): Promise<void> {
    // No account's lock orders an address's verifies: its bucket's does, so a failure recorded
    // below is counted before the next verify's check, not after its compare.
    const bucket = this.addressVerifyBucket(challenge.addressHash);
    await lockBudget(uow, this.context, bucket);
    await assertWithinBudget(uow.repos, this.context, bucket, uow.now);
  }

  /**
   * One failure, counted once: toward the challenge (its attempt, taken before comparing),
   * the verify budget of the address (and of the account) and the lockout like a wrong password.
   */
  private async recordFailure(uow: UnitOfWork, challenge: PasswordlessChallengeRecord, account: UserRecord | undefined, slot: FailedAttemptSlot | undefined, method: PasswordlessMethod): Promise<void> {
    await recordInBudget(uow, this.context, this.addressVerifyBucket(challenge.addressHash));
    if (!account || !slot) return;
    await this.codes.recordVerifyFailure(uow, account.id);
    await emitRefusal(uow, account.id, method);
    await slot.fail(uow, 'email_code');
  }

  /**
   * The mail counts toward the account's OTP send budget (the bucket its factor codes spend);
   * over it the start still answers 202 but sends nothing.
   */
  private spendAccountSendBudget(uow: UnitOfWork, userId: string): Promise<boolean> {
    return trySpendSendBudget(uow, this.context, [{ name: `otp-send:account:${userId}`, budget: this.context.config.otp.sendBudget.perAccount }]);
  }

  private addressVerifyBucket(addressHash: string): BudgetBucket {
    return { name: `otp-verify-failed:address:${addressHash}`, budget: this.context.config.otp.verifyBudget };
  }

  /**
   * The throttling and supersede key of an address: a keyed hash of the mailbox it reaches
   * (`mailboxForm`), never the address itself, so no spelling of one mailbox's domain has a
   * cooldown or a verify budget of its own (docs/security.md).
   */
  private addressHash(address: string): string {
    return keyedHash(this.context.keys.passwordlessHash, `address:${mailboxForm(address)}`);
  }

  private linkHash(token: string): string {
    return keyedHash(this.context.keys.passwordlessHash, `link:${token}`);
  }
}

function isLocked(user: Pick<UserRecord, 'lockedUntil'>, now: number): boolean {
  return user.lockedUntil !== null && user.lockedUntil > now;
}

/** A refused verify on an account's challenge (docs/passwordless.md): `reason` is the error code answered. */
async function emitRefusal(uow: UnitOfWork, userId: string, method: PasswordlessMethod, reason: string = 'invalid_code'): Promise<void> {
  await uow.emit(loginFailed(userId, { method }, reason));
}

/** Refusals whose own transaction rolls back, so `recordingRefusal` records them once it has. */
const REFUSALS_RECORDED_AFTER: ReadonlySet<string> = new Set(['rate_limited', 'sso_required']);
