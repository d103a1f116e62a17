import type { ResolvedConfig } from '../config/types.js';
import type { UnitOfWork } from './unit-of-work.js';

/**
 * The account lockout (CONTRACT 2 `auth.lockout`), in one place for every kind of failed
 * authentication: a wrong password and a wrong second-factor code count alike. Emits
 * `user.locked` when this failure reaches the threshold.
 */
export async function countFailedAuthentication(
  uow: UnitOfWork,
  lockout: ResolvedConfig['auth']['lockout'],
  userId: string,
  reason: 'password' | 'second_factor',
): Promise<void> {
  const lockedNow = await uow.repos.users.recordFailedLogin(userId, uow.now, {
    threshold: lockout.threshold,
    windowMs: lockout.window * 1000,
    durationMs: lockout.duration * 1000,
  });
  if (lockedNow) {
    await uow.emit({ type: 'user.locked', userId, data: { until: new Date(uow.now + lockout.duration * 1000).toISOString(), reason } });
  }
}
