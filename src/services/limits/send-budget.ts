import type { WindowBudget } from '../../config/types.js';
import { keyedHash } from '../../crypto/keyed-hash.js';
import { errors, IdentityError } from '../../errors.js';
import type { Repositories } from '../../store/store.js';
import { mailboxForm } from '../shared/identity-rules.js';
import type { ServiceContext } from '../shared/service-context.js';
import type { UnitOfWork } from '../shared/unit-of-work.js';
import { Occasional, PRUNE_EVERY_MS } from '../shared/occasional.js';

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

/** What the budgets need of the router: the key their bucket names are hashed with, the windows, the store. */
export type BudgetContext = Pick<ServiceContext, 'keys' | 'config' | 'store'>;

/**
 * The one form of an e-mail address its budgets count under: the mailbox it reaches
 * (`mailboxForm`: its domain as the IDNA A-label). `ada@bücher.example`,
 * `ada@xn--bcher-kva.example` and the same host in full-width letters reach one mailbox, so they
 * spend one budget, not one each.
 */
export function emailBudgetForm(address: string): string {
  return mailboxForm(address);
}

/**
 * The name of the `otp.sendBudget.perDestination` bucket of a destination not yet confirmed as
 * anyone's factor: one per phone number or mailbox, across accounts and across routes (MFA
 * enrollment and passwordless start alike), so no route or account has a budget of its own
 * for one destination. See docs/security.md (send budgets).
 */
export function destinationBudgetName(channel: 'sms' | 'email', destination: string): string {
  return `otp-send:destination:${channel}:${channel === 'email' ? emailBudgetForm(destination) : destination}`;
}

/**
 * The one implementation of the send budgets, for OTP codes and invites alike: every bucket
 * a send counts in is locked for the transaction, counted, and only then spent, so
 * concurrent sends on any instance count one after the other and none fits under the last
 * slot. Over any bucket: 429 rate_limited with Retry-After (when its oldest counted send
 * leaves the window), and nothing is spent.
 */
export async function spendSendBudget(uow: UnitOfWork, context: BudgetContext, buckets: BudgetBucket[]): Promise<void> {
  const hashed = buckets.map(({ name, budget }) => ({ bucket: bucketKey(context, name), budget }));
  await uow.repos.rateEvents.lockBuckets(hashed.map(({ bucket }) => bucket));
  // Every bucket is read before refusing: Retry-After names the instant all of them have room,
  // not the first one checked (which may reopen long before another).
  let refusal: RateLimitRefusal | undefined;
  for (const { bucket, budget } of hashed) {
    const over = await overBudget(uow.repos, bucket, budget, uow.now);
    if (over && (!refusal || over.resetsAt > refusal.resetsAt)) refusal = over;
  }
  if (refusal) throw refused(refusal, uow.now);
  for (const { bucket, budget } of hashed) await spend(uow, context, bucket, budget);
}

/**
 * As `spendSendBudget`, for a public route that answers alike whether or not it sent
 * (enumeration-safe): over a bucket it sends nothing and answers false instead of 429, and
 * nothing is spent.
 */
export async function trySpendSendBudget(uow: UnitOfWork, context: BudgetContext, buckets: BudgetBucket[]): Promise<boolean> {
  try {
    await spendSendBudget(uow, context, buckets);
    return true;
  } catch (error) {
    if (error instanceof IdentityError && error.status === 429) return false;
    throw error;
  }
}

/**
 * The bucket of the links mailed to one address from the public account routes (the
 * verification link of register and resend, the reset link of forgot): many IP addresses
 * cannot flood one inbox past `otp.sendBudget.perDestination`. Its own bucket, not the codes'
 * one, so those requests cannot hold back a second factor's enrollment to the address.
 */
export function accountLinkBucket(context: BudgetContext, address: string): BudgetBucket {
  return { name: `account-link:address:${emailBudgetForm(address)}`, budget: context.config.otp.sendBudget.perDestination };
}

/**
 * Locks the bucket for the rest of the transaction (PostgreSQL), as a send does: a check whose
 * failure is recorded later in the same transaction then counts after every other one, when no
 * account's row lock already orders them.
 */
export async function lockBudget(uow: UnitOfWork, context: BudgetContext, { name }: BudgetBucket): Promise<void> {
  await uow.repos.rateEvents.lockBuckets([bucketKey(context, name)]);
}

/** Refuses (429) when the bucket is spent, without spending it: the verify budget is checked before a code is looked at. */
export async function assertWithinBudget(repos: Repositories, context: BudgetContext, { name, budget }: BudgetBucket, now: number): Promise<void> {
  await assertWithin(repos, bucketKey(context, name), budget, now);
}

/** Spends one unit of the bucket (a failed verification). */
export async function recordInBudget(uow: UnitOfWork, context: BudgetContext, { name, budget }: BudgetBucket): Promise<void> {
  await spend(uow, context, bucketKey(context, name), budget);
}

function bucketKey(context: BudgetContext, name: string): string {
  return keyedHash(context.keys.identifierHash, name);
}

interface RateLimitRefusal {
  limit: number;
  resetsAt: number;
}

/** A spent bucket's limit and the instant its oldest counted event leaves the window; undefined while it has room. */
async function overBudget(repos: Repositories, bucket: string, budget: WindowBudget, now: number): Promise<RateLimitRefusal | undefined> {
  const since = now - budget.windowSec * 1000;
  if ((await repos.rateEvents.countSince(bucket, since)) < budget.limit) return undefined;
  const oldest = (await repos.rateEvents.oldestSince(bucket, since)) ?? now;
  return { limit: budget.limit, resetsAt: oldest + budget.windowSec * 1000 };
}

function refused({ limit, resetsAt }: RateLimitRefusal, now: number): IdentityError {
  return errors.rateLimited((resetsAt - now) / 1000, 'rate_limited', { limit, resetsAt });
}

async function assertWithin(repos: Repositories, bucket: string, budget: WindowBudget, now: number): Promise<void> {
  const over = await overBudget(repos, bucket, budget, now);
  if (over) throw refused(over, now);
}

async function spend(uow: UnitOfWork, context: BudgetContext, bucket: string, budget: WindowBudget): Promise<void> {
  // Events that left the window go as the bucket is spent, so a budget never grows without bound.
  await uow.repos.rateEvents.pruneBucketBefore(bucket, uow.now - budget.windowSec * 1000);
  await uow.repos.rateEvents.record(bucket, uow.now);
  pruneEndedOccasionally(uow, context);
}

/**
 * Events are kept at least this long whatever the windows here: the default longest window
 * (`invites.sendBudget.perAddress`), so another instance on the database with the default
 * windows loses no event it still counts.
 */
const MIN_RETENTION_SEC = 86_400;
/** Per router (its resolved config), by its clock. */
const pruning = new WeakMap<object, Occasional>();

/**
 * Most buckets are spent once and never again (an address a stranger typed into passwordless
 * start, one invite), so their events would never go with their own next spend: past the
 * longest window of every budget they count for nothing, and are deleted. After commit and
 * outside the send's transaction, so the delete takes no lock a send waits for.
 */
function pruneEndedOccasionally(uow: UnitOfWork, context: BudgetContext): void {
  const occasional = pruning.get(context.config) ?? new Occasional(PRUNE_EVERY_MS);
  pruning.set(context.config, occasional);
  if (!occasional.due(uow.now)) return;
  const { otp, invites } = context.config;
  const longestSec = Math.max(
    MIN_RETENTION_SEC,
    otp.sendBudget.perDestination.windowSec,
    otp.sendBudget.perAccount.windowSec,
    otp.verifyBudget.windowSec,
    invites.sendBudget.perOrganization.windowSec,
    invites.sendBudget.perAddress.windowSec,
  );
  const before = uow.now - longestSec * 1000;
  uow.afterCommit(() => context.store.repos.rateEvents.pruneBefore(before));
}
