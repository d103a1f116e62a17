import { errors, IdentityError } from '../../errors.js';
import type { UserRecord } from '../../store/user-repository.js';
import type { Repositories } from '../../store/store.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { addressDomain, normaliseEmail } from '../shared/identity-rules.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { type HeldProof, loginFailed, type SignInWay } from '../sessions/sign-in-result.js';

/** An address whose organization requires single sign-on (docs/sso.md). */
export interface SsoRequirement {
  connectionId: string;
  organizationId: string;
  organizationSlug: string;
}

/** Why an account whose credential was right still may not sign in. */
export type AccountRefusal = 'account_disabled' | 'invalid_credentials' | 'email_unverified';

/** Why a sign-in was refused by a change of its account while it was under way: its `user.login_failed` reason (docs/events.md). */
export type ChangedAccountReason = 'account_disabled' | 'locked' | 'email_unverified' | 'password_changed' | 'invalid_code' | 'account_link_required';

/**
 * A sign-in refused because its account changed while it was under way
 * (`SignInRules.refusalSinceRead`): answered as the refusal it carries, recorded with `reason`.
 */
export class AccountChangedDuringSignIn extends IdentityError {
  constructor(
    refusal: IdentityError,
    readonly reason: ChangedAccountReason,
  ) {
    super(refusal.status, refusal.code, refusal.message, { headers: refusal.headers, extra: refusal.extra });
  }
}

/** A refusal as every sign-in answers it: as `POST /auth/login` would. */
export function accountRefusalError(refusal: AccountRefusal): IdentityError {
  if (refusal === 'account_disabled') return errors.accountDisabled();
  if (refusal === 'email_unverified') return errors.emailUnverified('Verify your e-mail address before signing in.');
  return errors.invalidCredentials();
}

/**
 * The rules of who may sign in, each written once and asked by every sign-in path:
 * password, passkey, passwordless, social login and single sign-on.
 *
 * "Require SSO" (docs/sso.md), the one rule every sign-in path asks: password login,
 * passkey login, passwordless verify, registration, password forgot and reset, social login,
 * invite acceptance and refresh. The answer comes from the address's domain alone, before
 * any credential is compared, so it never tells whether an account exists; superadmins pass
 * only with a right credential, which the caller checks and reports with `credentialRight`.
 * Without an `sso` config nothing is ever required.
 */
export class SignInRules {
  constructor(private readonly context: ServiceContext) {}

  /**
   * May this account sign in, now that its credential was right? A disabled or deleted
   * account never; a locked one not while the lockout lasts (password and passkey logins
   * reserve a lockout slot before comparing, so they never reach here locked); an unproven
   * address not when `auth.requireVerifiedEmail` is on.
   */
  accountRefusal(user: Pick<UserRecord, 'status' | 'deletedAt' | 'lockedUntil' | 'emailVerified'>, now: number): AccountRefusal | undefined {
    if (user.deletedAt !== null || user.status === 'disabled') return 'account_disabled';
    if (user.lockedUntil !== null && user.lockedUntil > now) return 'invalid_credentials';
    if (this.context.config.auth.requireVerifiedEmail && !user.emailVerified) return 'email_unverified';
    return undefined;
  }

  /**
   * Why a sign-in whose session the store refused to write may not go on, read again now: the
   * account was disabled or deleted, or its password changed after the proof `held` rests on was
   * made, or its address was proven since a provider's link was resolved (`HeldProof`,
   * `SessionRepository.insert`): each answered as in series after the change. Undefined when the account is as the sign-in saw it:
   * then it was a factor confirmed meanwhile (`MfaService.throughLoginGate`).
   */
  async refusalSinceRead(repos: Repositories, userId: string, held?: HeldProof): Promise<AccountChangedDuringSignIn | undefined> {
    const account = await repos.users.findById(userId);
    if (!account) return new AccountChangedDuringSignIn(errors.accountDisabled(), 'account_disabled');
    const refusal = this.accountRefusal(account, this.context.clock.now());
    if (refusal) return new AccountChangedDuringSignIn(accountRefusalError(refusal), refusal === 'invalid_credentials' ? 'locked' : refusal);
    if (held?.passwordHash !== undefined && account.passwordHash !== held.passwordHash) {
      return held.firstFactor === 'email' ? new AccountChangedDuringSignIn(errors.invalidCode(), 'invalid_code') : new AccountChangedDuringSignIn(errors.invalidCredentials(), 'password_changed');
    }
    if (held?.unprovenAddress && account.emailVerified) return new AccountChangedDuringSignIn(errors.federatedRefusal('account_link_required'), 'account_link_required');
    return undefined;
  }

  /**
   * `refusalSinceRead` for a write refused on the account alone (a session past every gate, an
   * MFA ticket): there is always a refusal, and one the read no longer sees (the change rolled
   * back since) answers as a disabled account.
   */
  async refusalOfRefusedWrite(repos: Repositories, userId: string, held?: HeldProof): Promise<AccountChangedDuringSignIn> {
    return (await this.refusalSinceRead(repos, userId, held)) ?? new AccountChangedDuringSignIn(errors.accountDisabled(), 'account_disabled');
  }

  /**
   * `signIn`'s answer, its refusal by a change of its account while it was under way recorded
   * first: a failed login like any other (`user.login_failed` with the change as `reason`,
   * docs/events.md), though its credential was right when compared, so it counts toward no
   * lockout. `failed` names the account, the way in and the organization the event names.
   */
  async recordingChangedAccount<T>(signIn: Promise<T>, meta: RequestMeta, failed: { userId: string; way: SignInWay; organizationId?: string | undefined }): Promise<T> {
    try {
      return await signIn;
    } catch (error) {
      if (error instanceof AccountChangedDuringSignIn) {
        const { userId, way, organizationId } = failed;
        await this.recordingRefusal(meta, userId, async (uow) => {
          await uow.emit(loginFailed(userId, way, error.reason, organizationId));
        });
      }
      throw error;
    }
  }

  /**
   * Records a refused sign-in of `userId` (its `user.login_failed`, and `record`'s other writes)
   * in its own unit of work, with no IP if the account is a tombstone by then (docs/security.md
   * "Deleted users"): a sign-in under way while the account was deleted is refused after the
   * deletion erased where the account's events came from, and its failure brings no IP back,
   * to the audit row or to the event. The account is read under its lock, as the deletion
   * takes it: a deletion that commits later erases this row's IP itself.
   */
  async recordingRefusal(meta: RequestMeta, userId: string | null, record: (uow: UnitOfWork) => Promise<void>): Promise<void> {
    // The unit of work reads `ip` when an event is emitted, so it is cleared before `record` runs.
    const recorded: RequestMeta = { ...meta };
    await runUnitOfWork(this.context, recorded, async (uow) => {
      if (userId !== null && (await uow.repos.users.findByIdForUpdate(userId))?.deletedAt != null) recorded.ip = null;
      await record(uow);
    });
  }

  /** The enforcing connection of the address's verified domain, if any. */
  async ssoRequirement(email: string, repos: Repositories = this.context.store.repos): Promise<SsoRequirement | undefined> {
    if (!this.context.config.sso) return undefined;
    // The domain as verification stores it (the A-label): an address typed with the domain's
    // Unicode or full-width form is at that domain too, as identifier-first routing sees it.
    const domain = addressDomain(normaliseEmail(email));
    if (!domain) return undefined;
    return repos.ssoConnections.findEnforcingForDomain(domain);
  }

  /**
   * Require SSO before a credential is compared (CONTRACT 12.6): the address's enforcing
   * requirement, if any, and whether its account is a superadmin, the one account whose
   * credential is still compared there (without a right one it answers what everyone there gets,
   * `asSsoRequiredUnlessRight`). Passwordless verify and passkey login ask it before they compare.
   */
  async beforeCredential(email: string, userId: string | undefined): Promise<{ requirement: SsoRequirement; superadmin: boolean } | undefined> {
    const requirement = await this.ssoRequirement(email);
    if (!requirement) return undefined;
    return { requirement, superadmin: userId !== undefined && (await this.context.store.repos.roles.isSuperadmin(userId)) };
  }

  /**
   * 403 `sso_required` for an address at an enforcing organization's domain, unless the
   * sign-in came through that organization's connection (`viaConnectionId`) or the account is
   * a superadmin whose credential was right. Answers the requirement for callers that must
   * finish a credential check first (superadmin exemption).
   */
  async assertAllowed(
    email: string,
    options: { userId?: string | undefined; credentialRight?: boolean; viaConnectionId?: string | null; repos?: Repositories } = {},
  ): Promise<void> {
    const refusal = await this.refusal(email, options);
    if (refusal) throw refusal;
  }

  /** The same rule, answered rather than thrown (for a transaction that must commit its own bookkeeping first). */
  async refusal(
    email: string,
    options: { userId?: string | undefined; credentialRight?: boolean; viaConnectionId?: string | null; repos?: Repositories } = {},
  ): Promise<IdentityError | undefined> {
    const requirement = await this.ssoRequirement(email, options.repos);
    if (!requirement) return undefined;
    if (options.viaConnectionId && options.viaConnectionId === requirement.connectionId) return undefined;
    if (options.userId && options.credentialRight && (await (options.repos ?? this.context.store.repos).roles.isSuperadmin(options.userId))) return undefined;
    return ssoRequired(requirement);
  }

  /**
   * A session's later uses (refresh, switch-org and step-up 401; invite acceptance and a new way
   * to sign in, at the credential gate, 403): allowed when the address is
   * under no enforcement, the session was opened through the enforcing connection, or the
   * account is a superadmin (its session was opened with a right credential).
   */
  async assertSessionAllowed(user: { id: string; email: string }, sessionId: string, status: 401 | 403, repos: Repositories = this.context.store.repos): Promise<void> {
    const requirement = await this.ssoRequirement(user.email, repos);
    if (!requirement) return;
    if ((await repos.ssoIdentities.sessionConnection(sessionId)) === requirement.connectionId) return;
    if (await repos.roles.isSuperadmin(user.id)) return;
    throw ssoRequired(requirement, status);
  }
}

export function ssoRequired(requirement: Pick<SsoRequirement, 'organizationSlug'>, status: 401 | 403 = 403): IdentityError {
  return errors.ssoRequired(requirement.organizationSlug, status);
}

/**
 * At an enforcing domain only a superadmin's credential is compared (CONTRACT 12.6). Without a
 * right one it answers what every address there gets: a wrong credential's `invalid_code`, a
 * live lockout's `invalid_credentials` (passkey login) and a budget's or a failed-attempt slot's
 * `rate_limited` (its wrong guesses are counted) would single the address out as a superadmin's.
 * Any other error is answered as it is.
 */
export function asSsoRequiredUnlessRight(error: unknown, requirement: Pick<SsoRequirement, 'organizationSlug'>): unknown {
  return error instanceof IdentityError && SINGLING_OUT.has(error.code) ? ssoRequired(requirement) : error;
}

const SINGLING_OUT = new Set(['invalid_code', 'invalid_credentials', 'rate_limited']);
