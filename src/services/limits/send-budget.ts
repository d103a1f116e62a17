import type { WindowBudget } from '../../config/types.js';
import { keyedHash } from '../../crypto/keyed-hash.js';
import { errors } from '../../errors.js';
import type { Repositories } from '../../store/store.js';
import type { UnitOfWork } from '../shared/unit-of-work.js';

/**
 * A sliding-window budget of one bucket: `otp.sendBudget`, `otp.verifyBudget` and
 * `invites.sendBudget` (docs/configuration.md). `name` says whose budget it is; only its keyed hash
 * reaches the table, so no phone number or e-mail address is stored. See docs/security.md
 * (send budgets).
 */
export interface BudgetBucket {
  name: string;
  budget: WindowBudget;
}

/**
 * The one implementation of the send budgets, for OTP codes and invites alike: every bucket
 * a send counts in is locked for the transaction, counted, and only then spent, so
 * concurrent sends on any instance count one after the other and none fits under the last
 * slot. Over any bucket: 429 rate_limited with Retry-After (when its oldest counted send
 * leaves the window), and nothing is spent.
 */
export async function spendSendBudget(uow: UnitOfWork, identifierKey: Buffer, buckets: BudgetBucket[]): Promise<void> {
  const hashed = buckets.map(({ name, budget }) => ({ bucket: bucketKey(identifierKey, name), budget }));
  await uow.repos.rateEvents.lockBuckets(hashed.map(({ bucket }) => bucket));
  for (const { bucket, budget } of hashed) await assertWithin(uow.repos, bucket, budget, uow.now);
  for (const { bucket, budget } of hashed) await spend(uow, bucket, budget);
}

/**
 * Locks the bucket for the rest of the transaction (PostgreSQL), as a send does: a check whose
 * failure is recorded later in the same transaction then counts after every other one, when no
 * account's row lock already orders them.
 */
export async function lockBudget(uow: UnitOfWork, identifierKey: Buffer, { name }: BudgetBucket): Promise<void> {
  await uow.repos.rateEvents.lockBuckets([bucketKey(identifierKey, name)]);
}

/** Refuses (429) when the bucket is spent, without spending it: the verify budget is checked before a code is looked at. */
export async function assertWithinBudget(repos: Repositories, identifierKey: Buffer, { name, budget }: BudgetBucket, now: number): Promise<void> {
  await assertWithin(repos, bucketKey(identifierKey, name), budget, now);
}

/** Spends one unit of the bucket (a failed verification). */
export async function recordInBudget(uow: UnitOfWork, identifierKey: Buffer, { name, budget }: BudgetBucket): Promise<void> {
  await spend(uow, bucketKey(identifierKey, name), budget);
}

function bucketKey(identifierKey: Buffer, name: string): string {
  return keyedHash(identifierKey, name);
}

async function assertWithin(repos: Repositories, bucket: string, budget: WindowBudget, now: number): Promise<void> {
  const since = now - budget.windowSec * 1000;
  if ((await repos.rateEvents.countSince(bucket, since)) < budget.limit) return;
  const oldest = (await repos.rateEvents.oldestSince(bucket, since)) ?? now;
  throw errors.rateLimited((oldest + budget.windowSec * 1000 - now) / 1000, 'rate_limited');
}

async function spend(uow: UnitOfWork, bucket: string, budget: WindowBudget): Promise<void> {
  // Events that left the window go as the bucket is spent, so a budget never grows without bound.
  await uow.repos.rateEvents.pruneBucketBefore(bucket, uow.now - budget.windowSec * 1000);
  await uow.repos.rateEvents.record(bucket, uow.now);
}
