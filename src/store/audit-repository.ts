import { toNumber } from './database.js';
import { Repository } from './repository.js';

export interface AuditEventRecord {
  seq: number;
  id: string;
  type: string;
  occurredAt: number;
  actorId: string | null;
  userId: string | null;
  organizationId: string | null;
  ip: string | null;
  data: Record<string, unknown>;
}

function mapEvent(row: Record<string, unknown>): AuditEventRecord {
  return {
    seq: toNumber(row.seq),
    id: String(row.id),
    type: String(row.type),
    occurredAt: toNumber(row.occurred_at),
    actorId: (row.actor_id as string | null) ?? null,
    userId: (row.user_id as string | null) ?? null,
    organizationId: (row.organization_id as string | null) ?? null,
    ip: (row.ip as string | null) ?? null,
    data: JSON.parse(String(row.data)) as Record<string, unknown>,
  };
}

/** An audit row's values, named for a hot statement. */
export type AuditRowValues = {
  eventId: string;
  eventType: string;
  occurredAt: number;
  actorId: string | null;
  userId: string | null;
  organizationId: string | null;
  ip: string | null;
  data: string;
};

export function auditRowValues(event: Omit<AuditEventRecord, 'seq'>): AuditRowValues {
  return {
    eventId: event.id,
    eventType: event.type,
    occurredAt: event.occurredAt,
    actorId: event.actorId,
    userId: event.userId,
    organizationId: event.organizationId,
    ip: event.ip,
    data: JSON.stringify(event.data),
  };
}

/** The audit table's columns, each with the value that fills it. */
export const AUDIT_ROW: ReadonlyArray<readonly [column: string, value: keyof AuditRowValues]> = [
  ['id', 'eventId'],
  ['type', 'eventType'],
  ['occurred_at', 'occurredAt'],
  ['actor_id', 'actorId'],
  ['user_id', 'userId'],
  ['organization_id', 'organizationId'],
  ['ip', 'ip'],
  ['data', 'data'],
];

export class AuditRepository extends Repository {
  async insert(event: Omit<AuditEventRecord, 'seq'>): Promise<void> {
    // Every write of the hot path records an event: a hot statement.
    await this.hot.run(
      this.db,
      'audit.insert',
      (values) => this.db(this.table.auditEvents).insert(Object.fromEntries(AUDIT_ROW.map(([column, value]) => [column, values[value]]))),
      auditRowValues(event),
    );
  }

  /** Newest first; `beforeSeq` is the cursor of the previous page. */
  async listForOrganization(organizationId: string, page: { limit: number; beforeSeq?: number }): Promise<AuditEventRecord[]> {
    const query = this.db(this.table.auditEvents).where({ organization_id: organizationId }).orderBy('seq', 'desc').limit(page.limit);
    if (page.beforeSeq !== undefined) query.andWhere('seq', '<', page.beforeSeq);
    return (await query).map(mapEvent);
  }

  /**
   * A deleted account's events keep what happened but not the IP it came from: every event it
   * acted in, and those about it with no actor (a failed login). An administrator's IP on an
   * event about the user is the administrator's and stays.
   */
  async eraseIpOf(userId: string): Promise<void> {
    await this.db(this.table.auditEvents)
      .where({ actor_id: userId })
      .orWhere((query) => query.where({ user_id: userId }).whereNull('actor_id'))
      .update({ ip: null });
  }

  /** The events the outbox delivers, read back for an attempt (the audit row is the event). */
  async findByIds(ids: string[]): Promise<AuditEventRecord[]> {
    if (ids.length === 0) return [];
    return (await this.db(this.table.auditEvents).whereIn('id', ids)).map(mapEvent);
  }

  async listForUser(userId: string): Promise<AuditEventRecord[]> {
    return (await this.db(this.table.auditEvents).where({ user_id: userId }).orderBy('seq', 'asc')).map(mapEvent);
  }
}

/** First half of the two-key advisory lock of a budget bucket (see startup-lock.ts for the start-up lock's). */
const BUDGET_LOCK_CLASS = 0x1d3e7002;

export class RateEventRepository extends Repository {
  /**
   * Serialises the transactions that count and spend these buckets: on PostgreSQL a
   * transaction-scoped advisory lock per bucket (sorted, so two transactions never wait on
   * each other crosswise), released at commit or rollback. SQLite serialises writers already.
   * Call it inside the transaction, before counting.
   */
  async lockBuckets(buckets: string[]): Promise<void> {
    if (this.dialect !== 'pg') return;
    for (const bucket of [...new Set(buckets)].sort()) {
      await this.db.raw('select pg_advisory_xact_lock(?, hashtext(?))', [BUDGET_LOCK_CLASS, `${this.table.rateEvents}:${bucket}`]);
    }
  }

  async record(bucket: string, now: number): Promise<void> {
    await this.db(this.table.rateEvents).insert({ bucket, occurred_at: now });
  }

  async countSince(bucket: string, since: number): Promise<number> {
    const row = await this.db(this.table.rateEvents).where({ bucket }).andWhere('occurred_at', '>', since).count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  async oldestSince(bucket: string, since: number): Promise<number | undefined> {
    const row = await this.db(this.table.rateEvents).where({ bucket }).andWhere('occurred_at', '>', since).min({ oldest: 'occurred_at' }).first();
    return row?.oldest === null || row?.oldest === undefined ? undefined : toNumber(row.oldest);
  }

  /** Drops one bucket's events that have left its window, so budgets do not grow without bound. */
  async pruneBucketBefore(bucket: string, before: number): Promise<void> {
    await this.db(this.table.rateEvents).where({ bucket }).andWhere('occurred_at', '<=', before).delete();
  }

  /** Drops every bucket's events from before `before`: buckets that are never spent again (docs/database.md). */
  async pruneBefore(before: number): Promise<void> {
    await this.deleteInBatches(this.table.rateEvents, 'id', (query) => query.where('occurred_at', '<=', before));
  }
}
