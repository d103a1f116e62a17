import { toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export type DeliveryTarget = 'listener' | 'webhook';
export type DeliveryStatus = 'pending' | 'delivered' | 'dead';

/** One row of the outbox (docs/events.md): one target of one event. */
export interface DeliveryRecord {
  id: string;
  eventId: string;
  eventType: string;
  organizationId: string | null;
  target: DeliveryTarget;
  webhookId: string | null;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: number | null;
  lockedUntil: number | null;
  leaseOwner: string | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: number | null;
  createdAt: number;
}

export interface NewDelivery {
  id: string;
  eventId: string;
  eventType: string;
  organizationId: string | null;
  target: DeliveryTarget;
  webhookId: string | null;
  nextAttemptAt: number;
  /** Written already leased when the writing instance attempts the row at once after commit. */
  lease: { owner: string; until: number } | undefined;
  now: number;
}

/** What an attempt ended in; written only while the attempt's lease is still held. */
export interface DeliveryOutcome {
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: number | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: number | null;
  now: number;
}

function mapDelivery(row: Record<string, unknown>): DeliveryRecord {
  return {
    id: String(row.id),
    eventId: String(row.event_id),
    eventType: String(row.event_type),
    organizationId: (row.organization_id as string | null) ?? null,
    target: row.target as DeliveryTarget,
    webhookId: (row.webhook_id as string | null) ?? null,
    status: row.status as DeliveryStatus,
    attempts: toNumber(row.attempts),
    nextAttemptAt: toNullableNumber(row.next_attempt_at),
    lockedUntil: toNullableNumber(row.locked_until),
    leaseOwner: (row.lease_owner as string | null) ?? null,
    lastStatus: toNullableNumber(row.last_status),
    lastError: (row.last_error as string | null) ?? null,
    deliveredAt: toNullableNumber(row.delivered_at),
    createdAt: toNumber(row.created_at),
  };
}

export class EventDeliveryRepository extends Repository {
  async insertMany(deliveries: NewDelivery[]): Promise<void> {
    // One row, an event for the listener alone, is every write of the hot path with an
    // `onEvent`: a hot statement. More rows (webhooks too) are one insert through Knex.
    if (deliveries.length === 1) {
      await this.hot.run(this.db, 'eventDeliveries.insert', (values) => this.db(this.table.eventDeliveries).insert(deliveryColumns(values)), deliveryValues(deliveries[0]!));
      return;
    }
    if (deliveries.length === 0) return;
    await this.db(this.table.eventDeliveries).insert(deliveries.map((delivery) => deliveryColumns(deliveryValues(delivery))));
  }

  /**
   * Leases up to `limit` due rows to `owner` until `leaseUntil`: pending, due, and not leased
   * (or leased by an instance whose lease has run out). On PostgreSQL the candidates are
   * locked with SKIP LOCKED, so instances claiming at once take disjoint rows; SQLite has one
   * writer at a time. `exclude` keeps one pass from taking a row it has just attempted.
   */
  async claimDue(claim: { now: number; leaseUntil: number; owner: string; targets: DeliveryTarget[]; limit: number; exclude: readonly string[]; only?: readonly string[] }): Promise<DeliveryRecord[]> {
    if (claim.targets.length === 0) return [];
    const candidates = this.db(this.table.eventDeliveries)
      .select('id')
      .where('status', 'pending')
      .andWhere('next_attempt_at', '<=', claim.now)
      .andWhere((query) => query.whereNull('locked_until').orWhere('locked_until', '<=', claim.now))
      .whereIn('target', claim.targets)
      .orderBy('next_attempt_at')
      .limit(claim.limit);
    if (claim.exclude.length > 0) candidates.whereNotIn('id', claim.exclude);
    if (claim.only) candidates.whereIn('id', claim.only);
    if (this.dialect === 'pg') candidates.forUpdate().skipLocked();
    const rows = (await this.db(this.table.eventDeliveries)
      .whereIn('id', candidates)
      .update({ locked_until: claim.leaseUntil, lease_owner: claim.owner })
      .returning('*')) as Array<Record<string, unknown>>;
    return rows.map(mapDelivery);
  }

  /** Records an attempt's outcome if `owner` still holds the row's lease; false if it does not (nothing is written). */
  async recordOutcome(id: string, owner: string, outcome: DeliveryOutcome): Promise<boolean> {
    const updated = await this.db(this.table.eventDeliveries)
      .where({ id, lease_owner: owner, status: 'pending' })
      .update({
        status: outcome.status,
        attempts: outcome.attempts,
        next_attempt_at: outcome.nextAttemptAt,
        last_status: outcome.lastStatus,
        last_error: outcome.lastError,
        delivered_at: outcome.deliveredAt,
        locked_until: null,
        lease_owner: null,
        updated_at: outcome.now,
      });
    return updated > 0;
  }

  /** Extends a lease `owner` still holds on a pending row; false if another instance has taken the row or it is finished. */
  async renewLease(id: string, owner: string, leaseUntil: number): Promise<boolean> {
    return (await this.db(this.table.eventDeliveries).where({ id, lease_owner: owner, status: 'pending' }).update({ locked_until: leaseUntil })) > 0;
  }

  /** Several attempts of one lease that all succeeded, in one statement (the common case after a change). */
  async recordDelivered(ids: string[], owner: string, now: number): Promise<void> {
    if (ids.length === 0) return;
    await this.db(this.table.eventDeliveries)
      .whereIn('id', ids)
      .andWhere({ lease_owner: owner, status: 'pending' })
      .update({ status: 'delivered', attempts: this.db.raw('attempts + 1'), next_attempt_at: null, last_status: null, last_error: null, delivered_at: now, locked_until: null, lease_owner: null, updated_at: now });
  }

  /** Newest first; `before` is the (created_at, id) of the previous page's last row. */
  async listForWebhook(webhookId: string, page: { status?: DeliveryStatus | undefined; limit: number; before?: readonly [number, string] | undefined }): Promise<DeliveryRecord[]> {
    const query = this.db(this.table.eventDeliveries)
      .where({ webhook_id: webhookId })
      .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }])
      .limit(page.limit);
    if (page.status) query.andWhere({ status: page.status });
    if (page.before) {
      const [createdAt, id] = page.before;
      query.andWhere((inner) => inner.where('created_at', '<', createdAt).orWhere((same) => same.where('created_at', createdAt).andWhere('id', '<', id)));
    }
    return (await query).map(mapDelivery);
  }

  async findForWebhook(webhookId: string, id: string): Promise<DeliveryRecord | undefined> {
    const row = await this.db(this.table.eventDeliveries).where({ webhook_id: webhookId, id }).first();
    return row ? mapDelivery(row) : undefined;
  }

  /** docs/webhooks.md: pending, due now, a fresh budget of attempts. */
  async replay(id: string, now: number): Promise<void> {
    await this.db(this.table.eventDeliveries)
      .where({ id })
      .update({ status: 'pending', attempts: 0, next_attempt_at: now, delivered_at: null, locked_until: null, lease_owner: null, updated_at: now });
  }

  /** A disabled webhook's pending deliveries end (docs/webhooks.md). */
  async endPendingForWebhook(webhookId: string, now: number): Promise<void> {
    await this.db(this.table.eventDeliveries)
      .where({ webhook_id: webhookId, status: 'pending' })
      .update({ status: 'dead', last_error: 'endpoint_disabled', next_attempt_at: null, locked_until: null, lease_owner: null, updated_at: now });
  }

  async deleteForWebhooks(webhookIds: string[]): Promise<void> {
    if (webhookIds.length === 0) return;
    await this.db(this.table.eventDeliveries).whereIn('webhook_id', webhookIds).delete();
  }

  /** Drops finished rows older than `before` (docs/events.md `retentionDays`). */
  async pruneFinishedBefore(before: number): Promise<number> {
    return this.deleteInBatches(this.table.eventDeliveries, 'id', (query) => query.whereIn('status', ['delivered', 'dead']).andWhere('updated_at', '<', before));
  }
}

export function deliveryValues(delivery: NewDelivery) {
  return {
    id: delivery.id,
    eventId: delivery.eventId,
    eventType: delivery.eventType,
    organizationId: delivery.organizationId,
    target: delivery.target,
    webhookId: delivery.webhookId,
    nextAttemptAt: delivery.nextAttemptAt,
    lockedUntil: delivery.lease?.until ?? null,
    leaseOwner: delivery.lease?.owner ?? null,
    now: delivery.now,
  };
}

/** A new row's columns, from its values or from a hot statement's stand-ins for them. */
export function deliveryColumns(values: { readonly [K in keyof ReturnType<typeof deliveryValues>]: unknown }) {
  return {
    id: values.id,
    event_id: values.eventId,
    event_type: values.eventType,
    organization_id: values.organizationId,
    target: values.target,
    webhook_id: values.webhookId,
    status: 'pending',
    attempts: 0,
    next_attempt_at: values.nextAttemptAt,
    locked_until: values.lockedUntil,
    lease_owner: values.leaseOwner,
    created_at: values.now,
    updated_at: values.now,
  };
}
