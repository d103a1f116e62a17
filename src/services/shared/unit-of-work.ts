import { randomUUID } from 'node:crypto';
import type { EventInput, IdentityEvent, IdentityEventType } from '../../events.js';
import type { AuditEventRecord } from '../../store/audit-repository.js';
import { isDatabaseError } from '../../database-errors.js';
import type { Recording } from '../../store/recorded-write.js';
import type { Repositories } from '../../store/store.js';
import type { AccessScope } from './access-cache.js';
import type { RequestMeta, ServiceContext } from './service-context.js';
import type { OutboxEntry, WrittenDeliveries } from './outbox.js';
import { iso } from './iso-time.js';

/**
 * One transaction plus what must happen once it commits. Events are written to the audit
 * table inside the transaction, with one outbox row per target (`onEvent`, webhooks) beside
 * them, and delivered from the outbox only after commit (docs/events.md); mail and SMS go out
 * after commit too, so a rolled-back change never sends anything.
 */
export class UnitOfWork {
  private readonly committedEvents: IdentityEvent[] = [];
  private readonly outbox: OutboxEntry[] = [];
  private readonly afterCommitTasks: Array<() => Promise<void> | void> = [];
  private readonly invalidations: AccessScope[] = [];
  private failure: Error | undefined;

  constructor(
    readonly repos: Repositories,
    readonly now: number,
    private readonly meta: RequestMeta,
  ) {}

  /**
   * Records an event of this change. `onlyWebhook` sends it to that one webhook and to no
   * listener (`webhook.test`, docs/webhooks.md).
   */
  async emit(input: EventInput, options: { onlyWebhook?: { webhookId: string; deliveryId: string } } = {}): Promise<IdentityEvent> {
    const event = newEvent(input, this.now, this.meta);
    await this.repos.audit.insert(auditRecordOf(event, this.now));
    this.committedEvents.push(event);
    this.outbox.push({ event, ...(options.onlyWebhook ? { onlyWebhook: options.onlyWebhook } : {}) });
    return event;
  }

  /**
   * Cached access this change ends, for changes that emit no event naming it (committed
   * events invalidate by themselves). Applied after commit, before the response.
   */
  invalidates(...scopes: AccessScope[]): void {
    this.invalidations.push(...scopes);
  }

  /** Runs after commit; a failure is logged and never fails the request. */
  afterCommit(task: () => Promise<void> | void): void {
    this.afterCommitTasks.push(task);
  }

  /**
   * Commits what was written (audit rows, failure counters, a revoked family) and then
   * answers `error`: a refused attempt must leave its trace although the request fails.
   * Typed `never` so `return uow.failAfterCommit(...)` ends the work; `runUnitOfWork`
   * throws the error after commit, so the returned value is never observed.
   */
  failAfterCommit(error: Error): never {
    this.failure = error;
    return undefined as never;
  }

  /** @internal */
  get pendingFailure(): Error | undefined {
    return this.failure;
  }

  /** @internal The events of this change, with where each goes; the outbox writer reads them before commit. */
  get outboxEntries(): readonly OutboxEntry[] {
    return this.outbox;
  }

  /** @internal */
  drain(): { events: IdentityEvent[]; tasks: Array<() => Promise<void> | void>; invalidations: AccessScope[] } {
    return { events: this.committedEvents, tasks: this.afterCommitTasks, invalidations: this.invalidations };
  }
}

function newEvent(input: EventInput, now: number, meta: RequestMeta): IdentityEvent {
  return {
    id: randomUUID(),
    type: input.type,
    occurred_at: iso(now),
    actor_id: input.actorId ?? null,
    user_id: input.userId ?? null,
    organization_id: input.organizationId ?? null,
    ip: meta.ip,
    data: input.data ?? {},
  };
}

function auditRecordOf(event: IdentityEvent, now: number): Omit<AuditEventRecord, 'seq'> {
  return { id: event.id, type: event.type, occurredAt: now, actorId: event.actor_id, userId: event.user_id, organizationId: event.organization_id, ip: event.ip, data: event.data };
}

/** An audit row read back is the same event `onEvent` received (the audit log answers in this shape). */
export function eventFromAuditRecord(record: AuditEventRecord): IdentityEvent {
  return {
    id: record.id,
    type: record.type as IdentityEventType,
    occurred_at: iso(record.occurredAt),
    actor_id: record.actorId,
    user_id: record.userId,
    organization_id: record.organizationId,
    ip: record.ip,
    data: record.data,
  };
}

/** Runs `work` in one transaction; throws the `failAfterCommit` error, if any, once committed. */
export function runUnitOfWork<T>(context: ServiceContext, meta: RequestMeta, work: (uow: UnitOfWork) => Promise<T>): Promise<T> {
  return unitOfWorkIn(context, meta, work, (body) => context.store.transaction(body));
}

async function unitOfWorkIn<T>(
  context: ServiceContext,
  meta: RequestMeta,
  work: (uow: UnitOfWork) => Promise<T>,
  inTransaction: (body: (repos: Repositories) => Promise<T>) => Promise<T>,
): Promise<T> {
  const now = context.clock.now();
  let unit: UnitOfWork | undefined;
  let deliveries: WrittenDeliveries | undefined;
  const result = await inTransaction(async (repos) => {
    unit = new UnitOfWork(repos, now, meta);
    const value = await work(unit);
    // The outbox rows commit with the change and its audit rows, or not at all.
    deliveries = await context.delivery.writeOutbox(repos, unit.outboxEntries, now);
    return value;
  });
  if (unit) {
    dispatchAfterCommit(context, unit.drain(), deliveries);
    if (unit.pendingFailure) throw unit.pendingFailure;
  }
  return result;
}

/**
 * A change that is one conditional write and the event it records: true, and the event, only
 * if the write changed a row. Where the store can write everything in one statement
 * (`Store.recordsInOneStatement`, PostgreSQL) and the event's outbox rows need no read (no
 * webhooks), `write` is given the moment of the change and what to record: the audit row and
 * the listener's outbox row, if there is a listener. That statement is then the whole
 * transaction, with no BEGIN or COMMIT. Otherwise the change is a unit of work of the write and
 * the event, committed with the other such changes of this turn of the event loop where the
 * store groups commits (`Store.committedInGroup`, SQLite).
 */
export async function commitRecordedWrite(
  context: ServiceContext,
  meta: RequestMeta,
  input: EventInput,
  write: (repos: Repositories, now: number, recording: Recording | undefined) => Promise<boolean>,
): Promise<boolean> {
  const { store } = context;
  if (store.recordsInOneStatement) {
    const now = context.clock.now();
    const event = newEvent(input, now, meta);
    const deliveries = context.delivery.rowsWithoutReads([{ event }], now);
    if (deliveries && deliveries.rows.length <= 1) {
      if (!(await write(store.repos, now, { event: auditRecordOf(event, now), delivery: deliveries.rows[0] }))) return false;
      dispatchAfterCommit(context, { events: [event], tasks: [], invalidations: [] }, deliveries);
      return true;
    }
  }
  return unitOfWorkIn(
    context,
    meta,
    async (uow) => {
      if (!(await write(uow.repos, uow.now, undefined))) return false;
      await uow.emit(input);
      return true;
    },
    (body) => store.committedInGroup(body),
  );
}

/** What follows every commit, in this order, whichever way the change was written. */
function dispatchAfterCommit(context: ServiceContext, committed: ReturnType<UnitOfWork['drain']>, deliveries: WrittenDeliveries | undefined): void {
  const { events, tasks, invalidations } = committed;
  // First, synchronously: the response that reports a revocation leaves after it is in force here.
  context.accessCache.invalidate(invalidations);
  context.accessCache.invalidateForEvents(events);
  // The listener is called synchronously from here (before the response), the webhooks right after.
  if (deliveries) context.delivery.attemptWritten(deliveries);
  for (const task of tasks) runSafely(context, 'after-commit delivery failed', task);
}

/** Starts `task` now (its synchronous part runs before the response) without waiting for it. */
function runSafely(context: ServiceContext, message: string, task: () => Promise<void> | void): void {
  try {
    const pending = task();
    if (pending && typeof pending.then === 'function') {
      pending.then(undefined, (error: unknown) => context.logger.error(message, { error: describeError(error) }));
    }
  } catch (error) {
    context.logger.error(message, { error: describeError(error) });
  }
}

/** A log line for an error. A database error is logged by its code and a fixed text: its message may hold bound values. */
export function describeError(error: unknown): string {
  if (isDatabaseError(error)) return `${error.name} ${error.code ?? '(no code)'}: database error (message withheld: it may quote values)`;
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
