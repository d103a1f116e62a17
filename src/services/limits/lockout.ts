import type { ResolvedConfig } from '../../config/types.js';
import type { Repositories } from '../../store/store.js';
import type { ReadBesideAccount, UserRecord } from '../../store/user-repository.js';
import type { UnitOfWork } from '../shared/unit-of-work.js';
import { errors } from '../../errors.js';
import { iso } from '../shared/iso-time.js';
import { mailboxSpellings } from '../shared/identity-rules.js';

type LockoutSettings = ResolvedConfig['auth']['lockout'];

/**
 * How long an attempt waits for a free slot while others are being compared, in real time
 * (the injected clock drives windows and locks, but a test clock stands still, and a wait is
 * about the machine's pace, not the account's policy). Past it: 429 with Retry-After.
 */
const SLOT_WAIT_LIMIT_MS = 3000;
/** How often a waiting attempt asks the database again, for slots given back on other instances. */
const SLOT_POLL_MS = 25;
const RETRY_AFTER_SECONDS = 1;

/**
 * Attempts on this process waiting for a slot, by account: a slot given back here wakes them
 * at once instead of at their next poll. Only a hint to try again; the database decides.
 */
const waiting = new Map<string, Set<() => void>>();

function wakeWaiters(userId: string): void {
  const wakers = waiting.get(userId);
  if (!wakers) return;
  waiting.delete(userId);
  for (const wake of wakers) wake();
}

function nextTry(userId: string, waitMs: number): Promise<void> {
  return new Promise((resolve) => {
    const wakers = waiting.get(userId) ?? new Set<() => void>();
    waiting.set(userId, wakers);
    const wake = () => {
      clearTimeout(timer);
      wakers.delete(wake);
      if (wakers.size === 0 && waiting.get(userId) === wakers) waiting.delete(userId);
      resolve();
    };
    const timer = setTimeout(wake, waitMs);
    wakers.add(wake);
  });
}

function attemptLimits(lockout: LockoutSettings): { threshold: number; windowMs: number } {
  return { threshold: lockout.threshold, windowMs: lockout.window * 1000 };
}

/** An account whose password may be compared: it has one and is not deleted. Others cost a burnt hash and hold no slot. */
export function hasPasswordToCompare(user: UserRecord): user is UserRecord & { passwordHash: string } {
  return user.deletedAt === null && Boolean(user.passwordHash);
}

/**
 * The account lockout (docs/configuration.md `auth.lockout`), in one place for every kind of failed
 * authentication: a wrong password, a wrong current password, a wrong second-factor code
 * (login gate and step-up) and a failed passkey assertion count alike.
 *
 * A slot is reserved BEFORE the secret is compared: concurrent guesses cannot
 * all be evaluated against the same stale count, and no more are compared at once than the
 * failures left before the lock. An attempt that finds every free slot held by attempts
 * still being compared waits for one: a right password is never refused as a
 * wrong one because others were in flight. A successful attempt gives its slot back without
 * clearing earlier failures: a correct password alone does not reset the count; only a
 * completed sign-in (or a password reset) does. See docs/security.md (lockout).
 */
export class FailedAttemptSlot {
  private settled = false;

  private constructor(
    private readonly repos: Repositories,
    private readonly lockout: LockoutSettings,
    readonly userId: string,
  ) {}

  /**
   * A slot for one attempt, or undefined when the account is locked (the caller refuses
   * without comparing). While the slots are held by attempts being compared, here or on
   * another instance, it waits for one; past SLOT_WAIT_LIMIT_MS it throws 429 rate_limited.
   * A request whose client has gone (`abandoned`) stops waiting: nobody is left to answer.
   */
  static async reserve(repos: Repositories, lockout: LockoutSettings, userId: string, now: number, abandoned?: AbortSignal, firstTry?: boolean): Promise<FailedAttemptSlot | undefined> {
    const limits = attemptLimits(lockout);
    const startedAt = performance.now();
    const giveUpAt = startedAt + SLOT_WAIT_LIMIT_MS;
    for (let reserved = firstTry; ; reserved = undefined) {
      if (reserved ?? (await repos.users.reserveFailedAttempt(userId, now, limits))) return new FailedAttemptSlot(repos, lockout, userId);
      if ((await repos.users.attemptState(userId, now, limits)) === 'locked') return undefined;
      if (abandoned?.aborted) throw errors.requestAbandoned();
      const left = giveUpAt - performance.now();
      // Its window: the attempts compared at once (the threshold, alike for every account), free
      // again a second after this answer, which comes `now` plus the wait (real time) later.
      if (left <= 0) throw errors.rateLimited(RETRY_AFTER_SECONDS, 'rate_limited', { limit: limits.threshold, resetsAt: now + (performance.now() - startedAt) + RETRY_AFTER_SECONDS * 1000 });
      await nextTry(userId, Math.min(left, SLOT_POLL_MS));
    }
  }

  /**
   * A password sign-in's account by address, with a slot for its attempt (`reserve`'s rule)
   * when it has a password and is not deleted. The first try at the slot is made in the same
   * statement as the read where the store can (PostgreSQL), which also reads what the sign-in
   * will need (`read`, undefined where it did not).
   */
  static async reserveForAccount(
    repos: Repositories,
    lockout: LockoutSettings,
    email: string,
    now: number,
    abandoned?: AbortSignal,
  ): Promise<{ user: UserRecord | undefined; slot: FailedAttemptSlot | undefined; read?: ReadBesideAccount | undefined }> {
    const found = await repos.users.findByEmailReservingAttempt(email, now, attemptLimits(lockout), mailboxSpellings(email));
    if (!found) return { user: undefined, slot: undefined };
    return { user: found.user, slot: await FailedAttemptSlot.reserveFor(repos, lockout, found.user, now, abandoned, found.reserved), read: found.read };
  }

  /** A slot for an attempt at `user`'s password (`reserve`), or none when it has no password to compare. */
  static async reserveFor(repos: Repositories, lockout: LockoutSettings, user: UserRecord, now: number, abandoned?: AbortSignal, firstTry?: boolean): Promise<FailedAttemptSlot | undefined> {
    return hasPasswordToCompare(user) ? FailedAttemptSlot.reserve(repos, lockout, user.id, now, abandoned, firstTry) : undefined;
  }

  /** The attempt did not fail (it succeeded, or nothing was compared): its slot goes back; earlier failures still count. No-op once settled. */
  async release(): Promise<void> {
    if (this.settled) return;
    this.settled = true;
    await this.repos.users.releaseFailedAttempt(this.userId);
    wakeWaiters(this.userId);
  }

  /**
   * The attempt completed a sign-in, and it has committed: the session's insert gave the slot
   * back and ended earlier failures, if the account had any (`completesAttempt`, in the same
   * statement or transaction). A sign-in that did not commit still owes its `release()`.
   */
  completedSignIn(): void {
    this.settled = true;
    wakeWaiters(this.userId);
  }

  /**
   * The attempt failed: its slot becomes a failure of the window, in `uow`; emits `user.locked`
   * when this failure reached the threshold. Settled once that commits; a failure that rolls
   * back still owes its `release()`.
   */
  async fail(uow: UnitOfWork, reason: 'password' | 'second_factor' | 'email_code'): Promise<void> {
    await uow.repos.users.recordFailedAttempt(this.userId);
    uow.afterCommit(() => {
      this.settled = true;
      wakeWaiters(this.userId);
    });
    const lockedNow = await uow.repos.users.lockIfThresholdReached(this.userId, uow.now, { threshold: this.lockout.threshold, durationMs: this.lockout.duration * 1000 });
    if (lockedNow) {
      await uow.emit({ type: 'user.locked', userId: this.userId, data: { until: iso(uow.now + this.lockout.duration * 1000), reason } });
    }
  }
}
