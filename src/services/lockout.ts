import type { ResolvedConfig } from '../config/types.js';
import type { Repositories } from '../store/store.js';
import type { UserRecord } from '../store/user-repository.js';
import type { UnitOfWork } from './unit-of-work.js';
import { iso } from './iso-time.js';

type LockoutSettings = ResolvedConfig['auth']['lockout'];

/**
 * The account lockout (CONTRACT 2 `auth.lockout`), in one place for every kind of failed
 * authentication: a wrong password, a wrong current password and a wrong second-factor
 * code (login gate and step-up) count alike.
 *
 * A slot is reserved BEFORE the secret is compared (issue 10): concurrent guesses cannot
 * all be evaluated against the same stale count. A successful attempt gives its slot
 * back without clearing earlier failures: a correct password alone does not reset the
 * count; only a completed sign-in (or a password reset) does.
 */
export class FailedAttemptSlot {
  private settled = false;

  private constructor(
    private readonly repos: Repositories,
    private readonly lockout: LockoutSettings,
    readonly userId: string,
  ) {}

  /** A slot for one attempt, or undefined when the account is locked (the caller refuses without comparing). */
  static async reserve(repos: Repositories, lockout: LockoutSettings, userId: string, now: number): Promise<FailedAttemptSlot | undefined> {
    const reserved = await repos.users.reserveFailedAttempt(userId, now, { threshold: lockout.threshold, windowMs: lockout.window * 1000 });
    return reserved ? new FailedAttemptSlot(repos, lockout, userId) : undefined;
  }

  /** The attempt did not fail (it succeeded, or nothing was compared): its slot goes back; earlier failures still count. No-op once settled. */
  async release(): Promise<void> {
    if (this.settled) return;
    this.settled = true;
    await this.repos.users.releaseFailedAttempt(this.userId);
  }

  /**
   * The attempt completed a sign-in in `uow`: the slot goes back in the same transaction, and
   * earlier failures, if the account had any, end with it. Settled only once that commits; a
   * sign-in that rolls back still owes its `release()`.
   */
  async completeSignIn(uow: UnitOfWork, user: Pick<UserRecord, 'failedLoginCount' | 'lockedUntil'>): Promise<void> {
    if (user.failedLoginCount > 0 || user.lockedUntil !== null) await uow.repos.users.clearFailedLogins(this.userId);
    else await uow.repos.users.releaseFailedAttempt(this.userId);
    uow.afterCommit(() => {
      this.settled = true;
    });
  }

  /** The attempt failed: the slot stays taken; emits `user.locked` when this failure reached the threshold. */
  async fail(uow: UnitOfWork, reason: 'password' | 'second_factor' | 'email_code'): Promise<void> {
    this.settled = true;
    const lockedNow = await uow.repos.users.lockIfThresholdReached(this.userId, uow.now, { threshold: this.lockout.threshold, durationMs: this.lockout.duration * 1000 });
    if (lockedNow) {
      await uow.emit({ type: 'user.locked', userId: this.userId, data: { until: iso(uow.now + this.lockout.duration * 1000), reason } });
    }
  }
}
