import { toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export type WebhookStatus = 'active' | 'disabled';
export type WebhookDisabledReason = 'gone' | 'manual';

export interface WebhookRecord {
  id: string;
  organizationId: string;
  url: string;
  events: string[];
  status: WebhookStatus;
  disabledReason: WebhookDisabledReason | null;
  secretEnc: string;
  previousSecretEnc: string | null;
  previousExpiresAt: number | null;
  createdAt: number;
  updatedAt: number;
}

/** What the outbox needs to pick an event's webhooks. */
export interface WebhookSubscription {
  id: string;
  organizationId: string;
  events: string[];
}

function mapWebhook(row: Record<string, unknown>): WebhookRecord {
  return {
    id: String(row.id),
    organizationId: String(row.organization_id),
    url: String(row.url),
    events: JSON.parse(String(row.events)) as string[],
    status: row.status as WebhookStatus,
    disabledReason: (row.disabled_reason as WebhookDisabledReason | null) ?? null,
    secretEnc: String(row.secret_enc),
    previousSecretEnc: (row.previous_secret_enc as string | null) ?? null,
    previousExpiresAt: toNullableNumber(row.previous_expires_at),
    createdAt: toNumber(row.created_at),
    updatedAt: toNumber(row.updated_at),
  };
}

export class WebhookRepository extends Repository {
  async insert(webhook: { id: string; organizationId: string; url: string; events: string[]; secretEnc: string; now: number }): Promise<void> {
    await this.db(this.table.webhooks).insert({
      id: webhook.id,
      organization_id: webhook.organizationId,
      url: webhook.url,
      events: JSON.stringify(webhook.events),
      status: 'active',
      disabled_reason: null,
      secret_enc: webhook.secretEnc,
      previous_secret_enc: null,
      previous_expires_at: null,
      created_at: webhook.now,
      updated_at: webhook.now,
    });
  }

  async findById(id: string): Promise<WebhookRecord | undefined> {
    const row = await this.db(this.table.webhooks).where({ id }).first();
    return row ? mapWebhook(row) : undefined;
  }

  async findInOrganization(organizationId: string, id: string): Promise<WebhookRecord | undefined> {
    const row = await this.lockForUpdate(this.db(this.table.webhooks).where({ organization_id: organizationId, id })).first();
    return row ? mapWebhook(row) : undefined;
  }

  async listInOrganization(organizationId: string): Promise<WebhookRecord[]> {
    return (await this.db(this.table.webhooks).where({ organization_id: organizationId }).orderBy([{ column: 'created_at', order: 'asc' }, { column: 'id', order: 'asc' }])).map(mapWebhook);
  }

  async countInOrganization(organizationId: string): Promise<number> {
    const row = await this.db(this.table.webhooks).where({ organization_id: organizationId }).count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }

  /**
   * Active webhooks of these organizations, for the outbox writer. On PostgreSQL they are held
   * (FOR KEY SHARE) until the change commits: a webhook deleted after this read would otherwise
   * fail the delivery rows' foreign key, and with it an unrelated change (a token refresh). A
   * deletion now waits for the change and then removes its rows; a disable or edit does not wait.
   */
  async activeSubscriptions(organizationIds: string[]): Promise<WebhookSubscription[]> {
    if (organizationIds.length === 0) return [];
    const query = this.db(this.table.webhooks).whereIn('organization_id', organizationIds).andWhere({ status: 'active' }).select('id', 'organization_id', 'events');
    const rows = await (this.dialect === 'pg' ? query.forKeyShare() : query);
    return rows.map((row: Record<string, unknown>) => ({ id: String(row.id), organizationId: String(row.organization_id), events: JSON.parse(String(row.events)) as string[] }));
  }

  async update(id: string, fields: { url?: string; events?: string[]; status?: WebhookStatus; disabledReason?: WebhookDisabledReason | null; secretEnc?: string; previousSecretEnc?: string | null; previousExpiresAt?: number | null }, now: number): Promise<void> {
    await this.db(this.table.webhooks)
      .where({ id })
      .update({
        ...(fields.url !== undefined ? { url: fields.url } : {}),
        ...(fields.events !== undefined ? { events: JSON.stringify(fields.events) } : {}),
        ...(fields.status !== undefined ? { status: fields.status } : {}),
        ...(fields.disabledReason !== undefined ? { disabled_reason: fields.disabledReason } : {}),
        ...(fields.secretEnc !== undefined ? { secret_enc: fields.secretEnc } : {}),
        ...(fields.previousSecretEnc !== undefined ? { previous_secret_enc: fields.previousSecretEnc } : {}),
        ...(fields.previousExpiresAt !== undefined ? { previous_expires_at: fields.previousExpiresAt } : {}),
        updated_at: now,
      });
  }

  /** Disables an active webhook; false if it was not active (someone else did it first). */
  async disable(id: string, reason: WebhookDisabledReason, now: number): Promise<boolean> {
    return (await this.db(this.table.webhooks).where({ id, status: 'active' }).update({ status: 'disabled', disabled_reason: reason, updated_at: now })) > 0;
  }

  async delete(id: string): Promise<void> {
    await this.db(this.table.webhooks).where({ id }).delete();
  }

  /** Ids of an organization's webhooks, for deleting them with the organization. */
  async idsInOrganization(organizationId: string): Promise<string[]> {
    return (await this.db(this.table.webhooks).where({ organization_id: organizationId }).select('id')).map((row: { id: string }) => row.id);
  }

  async deleteMany(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.db(this.table.webhooks).whereIn('id', ids).delete();
  }
}
