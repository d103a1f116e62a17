import { randomUUID } from 'node:crypto';
import { encrypt } from '../../crypto/aead.js';
import { newWebhookSecret } from '../../crypto/webhook-signature.js';
import { errors } from '../../errors.js';
import { EVENT_TYPES } from '../../events.js';
import { OutboundFailure, OutboundRefusal } from '../../outbound/outbound-guard.js';
import type { DeliveryRecord, DeliveryStatus } from '../../store/event-delivery-repository.js';
import type { WebhookDisabledReason, WebhookRecord } from '../../store/webhook-repository.js';
import { type AccessGrant, organizationOf } from '../access/access-policy.js';
import type { RequestMeta, ServiceContext } from '../shared/service-context.js';
import { isWellFormedId, timeOrderedUuid } from '../shared/ids.js';
import { iso, isoOrNull } from '../shared/iso-time.js';
import { decodeCursor, keysetPage } from '../shared/pagination.js';
import { runUnitOfWork, type UnitOfWork } from '../shared/unit-of-work.js';
import { webhookSecretContext } from './webhook-attempt.js';

/** Event types a webhook may subscribe to: every type but the webhooks' own (docs/webhooks.md). */
export const SUBSCRIBABLE_EVENT_TYPES: readonly string[] = EVENT_TYPES.filter((type) => !type.startsWith('webhook.'));

export interface WebhookView {
  id: string;
  url: string;
  events: string[];
  status: 'active' | 'disabled';
  disabled_reason: WebhookDisabledReason | null;
  created_at: string;
  updated_at: string;
}

export interface DeliveryView {
  id: string;
  event_id: string;
  event_type: string;
  status: DeliveryStatus;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  next_attempt_at: string | null;
  delivered_at: string | null;
  created_at: string;
}

function webhookView(webhook: WebhookRecord): WebhookView {
  return {
    id: webhook.id,
    url: webhook.url,
    events: [...webhook.events],
    status: webhook.status,
    disabled_reason: webhook.disabledReason,
    created_at: iso(webhook.createdAt),
    updated_at: iso(webhook.updatedAt),
  };
}

function deliveryView(delivery: DeliveryRecord): DeliveryView {
  return {
    id: delivery.id,
    event_id: delivery.eventId,
    event_type: delivery.eventType,
    status: delivery.status,
    attempts: delivery.attempts,
    last_status: delivery.lastStatus,
    last_error: delivery.lastError,
    next_attempt_at: delivery.status === 'pending' ? isoOrNull(delivery.nextAttemptAt) : null,
    delivered_at: isoOrNull(delivery.deliveredAt),
    created_at: iso(delivery.createdAt),
  };
}

/** `events` of a webhook: a non-empty list of subscribable types, or `["*"]`. */
function validEvents(events: string[]): string[] {
  const unique = [...new Set(events)];
  if (unique.length === 1 && unique[0] === '*') return unique;
  const problems = unique.filter((type) => !SUBSCRIBABLE_EVENT_TYPES.includes(type)).map((type) => `"events" holds "${type}", which is not an event type a webhook can receive`);
  if (problems.length > 0) throw errors.validation(problems);
  return unique;
}

/**
 * Organization webhooks (docs/webhooks.md). The guard checks a URL before the transaction (it
 * resolves names over the network); the permission is re-checked inside it. Delivery itself is
 * the outbox's (event-delivery.ts): this service only writes webhooks and events.
 */
export class WebhookService {
  constructor(private readonly context: ServiceContext) {}

  async create(grant: AccessGrant, input: { url: string; events: string[] }, meta: RequestMeta): Promise<WebhookView & { secret: string }> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const events = validEvents(input.events);
    const url = await this.checkUrl(input.url);
    const secret = newWebhookSecret();
    const id = randomUUID();
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      // The organization row is locked: two creations at once cannot both pass the limit.
      if ((await uow.repos.webhooks.countInOrganization(organizationId)) >= this.context.config.webhooks.maxPerOrg) {
        throw errors.webhookLimit(this.context.config.webhooks.maxPerOrg);
      }
      await uow.repos.webhooks.insert({ id, organizationId, url, events, secretEnc: this.seal(id, secret), now: uow.now });
      await uow.emit({ type: 'webhook.created', actorId: principal.userId, organizationId, data: { webhook_id: id } });
      const created = await uow.repos.webhooks.findInOrganization(organizationId, id);
      return { ...webhookView(created!), secret };
    });
  }

  async list(organizationId: string): Promise<WebhookView[]> {
    return (await this.context.store.repos.webhooks.listInOrganization(organizationId)).map(webhookView);
  }

  async get(organizationId: string, webhookId: string): Promise<WebhookView> {
    return webhookView(await this.find(this.context.store.repos, organizationId, webhookId));
  }

  async update(grant: AccessGrant, webhookId: string, input: { url?: string; events?: string[]; status?: 'active' | 'disabled' }, meta: RequestMeta): Promise<WebhookView> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const events = input.events === undefined ? undefined : validEvents(input.events);
    const current = await this.find(this.context.store.repos, organizationId, webhookId);
    // A changed URL, and a re-enabled webhook, pass the guard again (docs/webhooks.md).
    const url = input.url !== undefined ? await this.checkUrl(input.url) : undefined;
    const reenabling = url === undefined && input.status === 'active' && current.status === 'disabled';
    if (reenabling) await this.checkUrl(current.url);
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      const webhook = await this.find(uow.repos, organizationId, webhookId);
      const fields: string[] = [];
      if (url !== undefined && url !== webhook.url) fields.push('url');
      if (events !== undefined && JSON.stringify(events) !== JSON.stringify(webhook.events)) fields.push('events');
      // Only after the guard passed: a webhook active when first read (nothing was checked) and
      // disabled since stays disabled, as if this update had come before the disable.
      const enabling = input.status === 'active' && webhook.status === 'disabled' && (url !== undefined || reenabling);
      const disabling = input.status === 'disabled' && webhook.status === 'active';
      if (enabling || disabling) fields.push('status');
      if (fields.length > 0) {
        await uow.repos.webhooks.update(webhook.id, { ...(url !== undefined ? { url } : {}), ...(events ? { events } : {}), ...(enabling ? { status: 'active', disabledReason: null } : {}) }, uow.now);
        await uow.emit({ type: 'webhook.updated', actorId: principal.userId, organizationId, data: { webhook_id: webhook.id, fields } });
        if (disabling) await disableInUnit(uow, webhook, 'manual', principal.userId);
      }
      return webhookView((await uow.repos.webhooks.findInOrganization(organizationId, webhook.id))!);
    });
  }

  async delete(grant: AccessGrant, webhookId: string, meta: RequestMeta): Promise<void> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    await runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      const webhook = await this.find(uow.repos, organizationId, webhookId);
      await uow.repos.eventDeliveries.deleteForWebhooks([webhook.id]);
      await uow.repos.webhooks.delete(webhook.id);
      await uow.emit({ type: 'webhook.deleted', actorId: principal.userId, organizationId, data: { webhook_id: webhook.id } });
    });
  }

  /** A new secret; the previous one keeps signing for `rotationOverlapSec` (docs/webhooks.md). */
  async rotateSecret(grant: AccessGrant, webhookId: string, meta: RequestMeta): Promise<{ secret: string; previous_secret_expires_at: string }> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const secret = newWebhookSecret();
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      const webhook = await this.find(uow.repos, organizationId, webhookId);
      const previousExpiresAt = uow.now + this.context.config.webhooks.rotationOverlapSec * 1000;
      await uow.repos.webhooks.update(webhook.id, { secretEnc: this.seal(webhook.id, secret), previousSecretEnc: webhook.secretEnc, previousExpiresAt }, uow.now);
      await uow.emit({ type: 'webhook.secret_rotated', actorId: principal.userId, organizationId, data: { webhook_id: webhook.id } });
      return { secret, previous_secret_expires_at: iso(previousExpiresAt) };
    });
  }

  async deliveries(organizationId: string, webhookId: string, page: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<{ deliveries: DeliveryView[]; next_cursor: string | null }> {
    const webhook = await this.find(this.context.store.repos, organizationId, webhookId);
    const before = decodeCursor(page.cursor, ['integer', 'id']);
    const rows = await this.context.store.repos.eventDeliveries.listForWebhook(webhook.id, { status: page.status, limit: page.limit + 1, before });
    const { items, nextCursor } = keysetPage(rows, page.limit, (row) => [row.createdAt, row.id]);
    return { deliveries: items.map(deliveryView), next_cursor: nextCursor };
  }

  /** Pending, due now, attempts back to 0; the same event id is sent again (docs/webhooks.md). */
  async replay(grant: AccessGrant, webhookId: string, deliveryId: string, meta: RequestMeta): Promise<DeliveryView> {
    const organizationId = organizationOf(grant);
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      const webhook = await this.find(uow.repos, organizationId, webhookId);
      const delivery = isWellFormedId(deliveryId) ? await uow.repos.eventDeliveries.findForWebhook(webhook.id, deliveryId) : undefined;
      if (!delivery) throw errors.notFound('Delivery');
      if (webhook.status !== 'active') throw disabledError();
      await uow.repos.eventDeliveries.replay(delivery.id, uow.now);
      uow.afterCommit(() => this.context.delivery.attemptNow([delivery.id]));
      return deliveryView((await uow.repos.eventDeliveries.findForWebhook(webhook.id, delivery.id))!);
    });
  }

  /** A `webhook.test` event, audited, sent to this webhook only and never to `onEvent`. */
  async sendTest(grant: AccessGrant, webhookId: string, meta: RequestMeta): Promise<{ event_id: string; delivery_id: string }> {
    const { principal } = grant;
    const organizationId = organizationOf(grant);
    const deliveryId = timeOrderedUuid(this.context.clock.now());
    return runUnitOfWork(this.context, meta, async (uow) => {
      await this.authorize(uow, grant);
      const webhook = await this.find(uow.repos, organizationId, webhookId);
      if (webhook.status !== 'active') throw disabledError();
      const event = await uow.emit({ type: 'webhook.test', actorId: principal.userId, organizationId, data: { webhook_id: webhook.id } }, { onlyWebhook: { webhookId: webhook.id, deliveryId } });
      return { event_id: event.id, delivery_id: deliveryId };
    });
  }

  /** The organization row locked, then the route's requirement re-checked under that lock. */
  private async authorize(uow: UnitOfWork, grant: AccessGrant): Promise<void> {
    const organization = await uow.repos.organizations.lockActive(organizationOf(grant));
    if (!organization) throw errors.notFound('Organization');
    await grant.recheck(uow.repos);
  }

  private async find(repos: ServiceContext['store']['repos'], organizationId: string, webhookId: string): Promise<WebhookRecord> {
    const webhook = isWellFormedId(webhookId) ? await repos.webhooks.findInOrganization(organizationId, webhookId) : undefined;
    if (!webhook) throw errors.notFound('Webhook');
    return webhook;
  }

  /** The guard of docs/webhooks.md at create and update: a refusal is 422 and nothing is written. */
  private async checkUrl(raw: string): Promise<string> {
    try {
      const target = await this.context.webhookGuard.check(raw, Date.now() + this.context.config.webhooks.timeoutMs);
      return target.url.href;
    } catch (error) {
      if (error instanceof OutboundRefusal) throw errors.invalidWebhookUrl(error.message, error.reason);
      if (error instanceof OutboundFailure) throw errors.invalidWebhookUrl("The URL's host does not resolve.", 'unresolvable');
      throw error;
    }
  }

  private seal(webhookId: string, secret: string): string {
    return encrypt(this.context.keys.webhookSecretEncryption, secret, webhookSecretContext(webhookId));
  }
}

const disabledError = () => errors.webhookDisabled();

/** The one way a webhook is disabled: no new deliveries, its pending ones end, `webhook.disabled` is emitted. */
async function disableInUnit(uow: UnitOfWork, webhook: WebhookRecord, reason: WebhookDisabledReason, actorId: string | null): Promise<void> {
  if (!(await uow.repos.webhooks.disable(webhook.id, reason, uow.now))) return;
  await uow.repos.eventDeliveries.endPendingForWebhook(webhook.id, uow.now);
  await uow.emit({ type: 'webhook.disabled', actorId, organizationId: webhook.organizationId, data: { webhook_id: webhook.id, reason } });
}

/** A receiver answered 410 Gone (docs/webhooks.md). */
export async function disableWebhook(context: ServiceContext, webhookId: string, reason: WebhookDisabledReason): Promise<void> {
  await runUnitOfWork(context, { ip: null, userAgent: null }, async (uow) => {
    const webhook = await uow.repos.webhooks.findById(webhookId);
    if (webhook) await disableInUnit(uow, webhook, reason, null);
  });
}

/** Deleting an organization deletes its webhooks and their deliveries (docs/webhooks.md), in the deletion's unit of work. */
export async function deleteWebhooksOfOrganization(uow: UnitOfWork, organizationId: string): Promise<void> {
  const ids = await uow.repos.webhooks.idsInOrganization(organizationId);
  await uow.repos.eventDeliveries.deleteForWebhooks(ids);
  await uow.repos.webhooks.deleteMany(ids);
}
