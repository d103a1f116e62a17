import { randomUUID } from 'node:crypto';
import type { IdentityEvent } from '../../events.js';
import type { DeliveryRecord, DeliveryTarget, NewDelivery } from '../../store/event-delivery-repository.js';
import type { DeliveryTotals, EventOutbox, OutboxEntry, WrittenDeliveries } from '../shared/outbox.js';
import type { Repositories } from '../../store/store.js';
import type { WebhookSubscription } from '../../store/webhook-repository.js';
import type { ServiceContext } from '../shared/service-context.js';
import { describeError, eventFromAuditRecord } from '../shared/unit-of-work.js';
import { timeOrderedUuid } from '../shared/ids.js';
import { attemptWebhook, type AttemptResult } from './webhook-attempt.js';
import { disableWebhook } from './webhook-service.js';
import { Occasional, PRUNE_EVERY_MS } from '../shared/occasional.js';
import { settleWithin } from '../shared/settle-within.js';

/** Rows one claim takes; a pass claims again until nothing is due. */
const CLAIM_BATCH = 100;
/** Attempts of one claim in flight at once. */
const ATTEMPT_CONCURRENCY = 10;
/** A pass stops after this many rows; the next one carries on (keeps its exclusion list bounded). */
const PASS_LIMIT = 5000;
const CLOSE_WAIT_MS = 5000;
/**
 * Webhook attempts of this instance's own changes (and replays) in flight at once. Each holds a
 * socket for up to `webhooks.timeoutMs`; past the bound a row is given back to the worker, whose
 * passes attempt ATTEMPT_CONCURRENCY at a time: a tenant's silent receiver and a loop of changes
 * cannot hold sockets without bound (docs/webhooks.md).
 */
const IMMEDIATE_WEBHOOK_ATTEMPTS = 50;
const DELIVERED_BATCH = 200;
const DELIVERED_FLUSH_MS = 20;

/** Webhook events are about the webhooks themselves: audited and handed to `onEvent`, never sent to one (docs/webhooks.md). */
const isWebhookEvent = (event: IdentityEvent) => event.type.startsWith('webhook.');

/**
 * The transactional outbox and its worker (docs/events.md). `writeOutbox` runs inside every
 * unit of work, so a delivery row exists exactly when its change committed. After commit the
 * writing instance attempts its own rows at once, under the lease it wrote them with; every
 * `pollMs` the worker claims due rows (its own failures, other instances' expired leases) and
 * attempts each once. Every attempt is made under a lease, and its outcome is written only
 * while that lease is held, so two instances never make the same attempt.
 */
export class EventDelivery implements EventOutbox {
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  private closing = false;
  private readonly finishedPruning = new Occasional(PRUNE_EVERY_MS);
  private readonly inFlight = new Set<Promise<unknown>>();
  /** Webhook attempts started by `attemptWritten` and `attemptNow` still running (IMMEDIATE_WEBHOOK_ATTEMPTS). */
  private immediateWebhookAttempts = 0;
  /** The lease of the rows this instance writes and attempts at once; claims take fresh ones. */
  private readonly ownLease = randomUUID();
  private readonly deliveredQueue: string[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  /** Batches of successes being written now (`flushDelivered`). */
  private readonly recordingDelivered = new Set<Promise<unknown>>();

  constructor(private readonly context: ServiceContext) {}

  private get settings() {
    return this.context.config.events.delivery;
  }

  /** The targets this instance writes and claims: `listener` only with an `onEvent`, `webhook` only with webhooks on. */
  private get targets(): DeliveryTarget[] {
    return [...(this.context.onEvent ? (['listener'] as const) : []), ...(this.context.config.webhooks.enabled ? (['webhook'] as const) : [])];
  }

  /** Called by the unit of work inside its transaction, after its work: one row per target of each event. */
  async writeOutbox(repos: Repositories, entries: readonly OutboxEntry[], now: number): Promise<WrittenDeliveries | undefined> {
    if (entries.length === 0 || this.targets.length === 0) return undefined;
    const scoped = this.context.config.webhooks.enabled ? entries.filter((entry) => !entry.onlyWebhook && !isWebhookEvent(entry.event) && entry.event.organization_id !== null) : [];
    const organizationIds = [...new Set(scoped.map((entry) => entry.event.organization_id!))];
    const subscriptions = organizationIds.length > 0 ? await repos.webhooks.activeSubscriptions(organizationIds) : [];
    const written = this.rowsFor(entries, now, subscriptions);
    await repos.eventDeliveries.insertMany(written.rows);
    return written;
  }

  rowsWithoutReads(entries: readonly OutboxEntry[], now: number): WrittenDeliveries | undefined {
    return this.context.config.webhooks.enabled ? undefined : this.rowsFor(entries, now, []);
  }

  /** One row per target of each event: the listener's, and each subscribed webhook's. */
  private rowsFor(entries: readonly OutboxEntry[], now: number, subscriptions: WebhookSubscription[]): WrittenDeliveries {
    const listener = this.context.onEvent !== undefined;
    const webhooksOn = this.context.config.webhooks.enabled;
    const { schedule, leaseSec, worker } = this.settings;
    const firstDelay = (schedule[0] ?? 0) * 1000;
    // The writing instance attempts at once only if attempt 1 is due at once and it runs a worker.
    const owner = worker && firstDelay === 0 && !this.closing ? this.ownLease : undefined;
    const base = { nextAttemptAt: now + firstDelay, lease: owner ? { owner, until: now + leaseSec * 1000 } : undefined, now };
    const rows: NewDelivery[] = [];
    const row = (event: IdentityEvent, target: DeliveryTarget, webhookId: string | null): NewDelivery => ({
      id: timeOrderedUuid(now),
      eventId: event.id,
      eventType: event.type,
      organizationId: event.organization_id,
      target,
      webhookId,
      ...base,
    });
    for (const { event, onlyWebhook } of entries) {
      if (onlyWebhook) {
        if (webhooksOn) rows.push({ ...row(event, 'webhook', onlyWebhook.webhookId), id: onlyWebhook.deliveryId });
        continue;
      }
      if (listener) rows.push(row(event, 'listener', null));
      if (subscriptions.length === 0 || isWebhookEvent(event) || event.organization_id === null) continue;
      for (const subscription of subscriptions) {
        if (subscription.organizationId !== event.organization_id) continue;
        if (subscription.events.includes('*') || subscription.events.includes(event.type)) rows.push(row(event, 'webhook', subscription.id));
      }
    }
    return { rows, events: new Map(entries.map((entry) => [entry.event.id, entry.event])), owner };
  }

  /**
   * After commit: the rows a change wrote under this instance's lease are attempted now. The
   * listener is called synchronously from here, so a host's listener runs before the response.
   */
  attemptWritten(written: WrittenDeliveries): void {
    const { owner } = written;
    if (!owner || written.rows.length === 0) return;
    for (const row of written.rows) {
      const event = written.events.get(row.eventId)!;
      if (row.target === 'listener') {
        this.track(
          this.callListener(event).then((result) => {
            if (result.kind === 'delivered') this.queueDelivered(row.id);
            else return this.record(asRecord(row), owner, result);
          }),
        );
      } else if (this.immediateWebhookAttempts >= IMMEDIATE_WEBHOOK_ATTEMPTS) {
        // Its lease ends now: the worker's next pass claims it (a failed attempt would wait longer).
        this.track(this.context.store.repos.eventDeliveries.renewLease(row.id, owner, this.context.clock.now()));
      } else {
        this.track(this.immediately(() => this.attemptWebhookRow(asRecord(row), owner, event)));
      }
    }
  }

  /** Counts a webhook attempt against IMMEDIATE_WEBHOOK_ATTEMPTS while it runs. */
  private immediately<T>(attempt: () => Promise<T>, count = 1): Promise<T> {
    this.immediateWebhookAttempts += count;
    return attempt().finally(() => {
      this.immediateWebhookAttempts -= count;
    });
  }

  /**
   * The listener's successes after changes are recorded together: one statement for every
   * change of the next 20 ms (or 200 rows), instead of one write per request on the hot path.
   * They were written under this instance's own lease, which no claim ever uses.
   */
  private queueDelivered(id: string): void {
    this.deliveredQueue.push(id);
    if (this.deliveredQueue.length >= DELIVERED_BATCH) this.flushDelivered();
    else if (!this.flushTimer) {
      this.flushTimer = setTimeout(() => this.flushDelivered(), DELIVERED_FLUSH_MS);
      this.flushTimer.unref();
    }
  }

  /**
   * Records the queued successes, and resolves once every batch started so far is written: a
   * batch the timer started may still be on its way, and a pass that did not wait for it would
   * find its rows pending.
   */
  private flushDelivered(): Promise<unknown> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const ids = this.deliveredQueue.splice(0);
    if (ids.length > 0) {
      const recording = this.track(this.context.store.repos.eventDeliveries.recordDelivered(ids, this.ownLease, this.context.clock.now()));
      this.recordingDelivered.add(recording);
      void recording.finally(() => this.recordingDelivered.delete(recording));
    }
    return Promise.all(this.recordingDelivered);
  }

  /**
   * `identity.service.deliverDueEvents()`: claims every row due by the injected clock, makes
   * one attempt on each, and resolves once the outcomes are recorded. Rows leased elsewhere
   * are skipped.
   */
  async deliverDue(): Promise<DeliveryTotals> {
    const totals: DeliveryTotals = { attempted: 0, delivered: 0, failed: 0 };
    // Successes still queued are recorded first, so a step under a moved clock never retakes them.
    await this.flushDelivered();
    const seen: string[] = [];
    while (!this.closing && seen.length < PASS_LIMIT) {
      const claimed = await this.claimAndAttempt({ limit: CLAIM_BATCH, exclude: seen }, totals);
      if (claimed.length === 0) break;
      seen.push(...claimed);
    }
    await this.pruneFinished();
    return totals;
  }

  /**
   * `delivered` and `dead` rows go after `retentionDays` (CONTRACT 13), whoever runs the passes:
   * the worker, or a host's `deliverDueEvents()` with `worker: false`. At most once a minute of
   * the injected clock, as due times follow it.
   */
  private async pruneFinished(): Promise<void> {
    const now = this.context.clock.now();
    if (!this.finishedPruning.due(now)) return;
    await this.context.store.repos.eventDeliveries.pruneFinishedBefore(now - this.settings.retentionDays * 24 * 3600 * 1000);
  }

  /** A replayed row is attempted now, like the rows of a change, if it is still due and free. */
  attemptNow(ids: string[]): void {
    if (!this.settings.worker || this.closing || ids.length === 0) return;
    // Past the bound the row stays due and unleased: the worker's next pass claims it.
    if (this.immediateWebhookAttempts >= IMMEDIATE_WEBHOOK_ATTEMPTS) return;
    this.track(this.immediately(() => this.claimAndAttempt({ limit: ids.length, exclude: [], only: ids }, { attempted: 0, delivered: 0, failed: 0 }), ids.length));
  }

  /** One claim and one attempt on each row it took; answers the ids it claimed. */
  private async claimAndAttempt(scope: { limit: number; exclude: readonly string[]; only?: readonly string[] }, totals: DeliveryTotals): Promise<string[]> {
    const now = this.context.clock.now();
    const owner = randomUUID();
    const rows = await this.context.store.repos.eventDeliveries.claimDue({ now, leaseUntil: now + this.settings.leaseSec * 1000, owner, targets: this.targets, ...scope });
    if (rows.length === 0) return [];
    const events = new Map(
      (await this.context.store.repos.audit.findByIds([...new Set(rows.map((row) => row.eventId))])).map((record) => [record.id, eventFromAuditRecord(record)]),
    );
    await eachWithConcurrency(rows, ATTEMPT_CONCURRENCY, async (row) => {
      const event = events.get(row.eventId);
      const attempt = this.holdLease(row, owner).then((held) => {
        if (!held) return undefined;
        if (!event) return this.record(row, owner, { kind: 'dead', lastStatus: null, lastError: null });
        return row.target === 'listener' ? this.callListener(event).then((result) => this.record(row, owner, result)) : this.attemptWebhookRow(row, owner, event);
      });
      const result = await this.track(attempt);
      if (result === undefined) return;
      totals.attempted += 1;
      if (result.kind === 'delivered') totals.delivered += 1;
      else totals.failed += 1;
    });
    return rows.map((row) => row.id);
  }

  /**
   * Whether `owner` may still attempt a claimed row. A row can wait behind slower attempts of its
   * claim (ATTEMPT_CONCURRENCY at once, each up to `webhooks.timeoutMs`) until its lease has run
   * out, and another instance may have taken it by then: two instances would make the same
   * attempt. With less than half a lease left (half a lease is at least `timeoutMs`, a config
   * rule) the lease is renewed first, only if this claim still holds it; otherwise the row is left.
   */
  private async holdLease(row: DeliveryRecord, owner: string): Promise<boolean> {
    const now = this.context.clock.now();
    const leaseMs = this.settings.leaseSec * 1000;
    if (row.lockedUntil !== null && row.lockedUntil - now >= leaseMs / 2) return true;
    return this.context.store.repos.eventDeliveries.renewLease(row.id, owner, now + leaseMs);
  }

  /** Starts the poller (after `ready`); nothing with `worker: false`. */
  start(): void {
    if (!this.settings.worker || this.timer || this.closing) return;
    this.timer = setInterval(() => this.poll(), this.settings.pollMs);
    this.timer.unref();
  }

  /** Stops claiming and waits at most 5 s for the attempts in flight; an unfinished one keeps its lease. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // Listener calls still running may queue successes: wait for them, then record the queue.
    const deadline = Date.now() + CLOSE_WAIT_MS;
    await this.waitForInFlight(deadline);
    void this.flushDelivered();
    await this.waitForInFlight(deadline);
  }

  private async waitForInFlight(deadline: number): Promise<void> {
    if (this.inFlight.size === 0) return;
    let timeout: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.inFlight]),
      new Promise<void>((resolve) => {
        timeout = setTimeout(resolve, Math.max(0, deadline - Date.now()));
      }),
    ]);
    clearTimeout(timeout);
  }

  private poll(): void {
    if (this.polling || this.closing) return;
    this.polling = true;
    this.deliverDue()
      .catch((error: unknown) => this.context.logger.error('identity-router: event delivery poll failed; retrying at the next poll', { error: describeError(error) }))
      .finally(() => {
        this.polling = false;
      });
  }

  /**
   * Calls `onEvent`; called synchronously up to the listener's first await. A listener that has
   * not settled within `webhooks.timeoutMs` (within half a lease, a config rule) counts as failed
   * and is called again on the schedule: one that never settles would otherwise hold its claim,
   * and so the worker's every later pass, for ever.
   */
  private async callListener(event: IdentityEvent): Promise<AttemptResult> {
    try {
      const timeoutMs = this.context.config.webhooks.timeoutMs;
      await settleWithin(this.context.onEvent!(event), timeoutMs, `the listener did not settle within ${timeoutMs} ms`);
      return { kind: 'delivered', lastStatus: null };
    } catch (error) {
      this.context.logger.error(`onEvent listener failed for ${event.type}; it is called again on the retry schedule`, { event_id: event.id, error: describeError(error) });
      return { kind: 'failed', lastStatus: null, lastError: 'listener_error' };
    }
  }

  private async attemptWebhookRow(row: DeliveryRecord, owner: string, event: IdentityEvent): Promise<AttemptResult | undefined> {
    const webhook = row.webhookId ? await this.context.store.repos.webhooks.findById(row.webhookId) : undefined;
    const result: AttemptResult = webhook?.status !== 'active'
      ? { kind: 'dead', lastStatus: null, lastError: 'endpoint_disabled' }
      : await attemptWebhook(this.context, webhook, event);
    const recorded = await this.record(row, owner, result);
    // 410 Gone: the receiver asks for no more; the webhook is disabled with its pending rows (docs/webhooks.md).
    if (recorded && webhook && result.kind === 'dead' && result.lastStatus === 410) await disableWebhook(this.context, webhook.id, 'gone');
    return recorded;
  }

  /** Writes an attempt's outcome while the lease is held; undefined when the lease was lost (nothing written). */
  private async record(row: DeliveryRecord, owner: string, result: AttemptResult): Promise<AttemptResult | undefined> {
    const now = this.context.clock.now();
    const attempts = row.attempts + 1;
    const { schedule, maxAttempts, jitter } = this.settings;
    const exhausted = result.kind === 'failed' && attempts >= maxAttempts;
    const status = result.kind === 'delivered' ? 'delivered' : result.kind === 'dead' || exhausted ? 'dead' : 'pending';
    const delaySeconds = schedule[Math.min(attempts, schedule.length - 1)] ?? 0;
    const nextAttemptAt = status === 'pending' ? now + Math.round(delaySeconds * 1000 * (1 + Math.random() * jitter)) : null;
    const written = await this.context.store.repos.eventDeliveries.recordOutcome(row.id, owner, {
      status,
      attempts,
      nextAttemptAt,
      lastStatus: result.lastStatus,
      lastError: result.kind === 'delivered' ? null : result.lastError,
      deliveredAt: status === 'delivered' ? now : null,
      now,
    });
    return written ? result : undefined;
  }

  /** Keeps an attempt visible to `close()`; its failure is logged, never thrown at a request. */
  private track<T>(attempt: Promise<T>): Promise<T | undefined> {
    const guarded = attempt.catch((error: unknown) => {
      if (!this.closing) this.context.logger.error('identity-router: recording an event delivery failed; the row is retried after its lease', { error: describeError(error) });
      return undefined;
    });
    this.inFlight.add(guarded);
    void guarded.finally(() => this.inFlight.delete(guarded));
    return guarded;
  }
}

function asRecord(row: NewDelivery): DeliveryRecord {
  return {
    id: row.id,
    eventId: row.eventId,
    eventType: row.eventType,
    organizationId: row.organizationId,
    target: row.target,
    webhookId: row.webhookId,
    status: 'pending',
    attempts: 0,
    nextAttemptAt: row.nextAttemptAt,
    lockedUntil: row.lease?.until ?? null,
    leaseOwner: row.lease?.owner ?? null,
    lastStatus: null,
    lastError: null,
    deliveredAt: null,
    createdAt: row.now,
  };
}

async function eachWithConcurrency<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) {
      const item = items[next++]!;
      await work(item);
    }
  });
  await Promise.all(lanes);
}
