import type { IdentityEvent } from '../../events.js';
import type { NewDelivery } from '../../store/event-delivery-repository.js';
import type { Repositories } from '../../store/store.js';

/** An event of a change and where it goes; `onlyWebhook` is the test event of one webhook (docs/webhooks.md). */
export interface OutboxEntry {
  event: IdentityEvent;
  onlyWebhook?: { webhookId: string; deliveryId: string };
}

/** The rows a change wrote, with the events in memory, for the attempt made at once after commit. */
export interface WrittenDeliveries {
  rows: NewDelivery[];
  events: Map<string, IdentityEvent>;
  /** The lease the rows were written under; undefined when this instance does not attempt them itself. */
  owner: string | undefined;
}

export interface DeliveryTotals {
  attempted: number;
  delivered: number;
  failed: number;
}

/**
 * The transactional outbox as the unit of work and the services see it. Its implementation,
 * the delivery worker, lives with the webhooks; declaring it here keeps the unit of work
 * below every domain.
 */
export interface EventOutbox {
  /**
   * The rows `writeOutbox` would write for these events, when finding them needs no read (no
   * webhook could take them): for a change written as one statement. Undefined when it does.
   */
  rowsWithoutReads(entries: readonly OutboxEntry[], now: number): WrittenDeliveries | undefined;
  /** Inside the unit of work's transaction: the delivery rows of its events. */
  writeOutbox(repos: Repositories, entries: readonly OutboxEntry[], now: number): Promise<WrittenDeliveries | undefined>;
  /** After commit: attempts the rows this instance just wrote. */
  attemptWritten(deliveries: WrittenDeliveries): void;
  /** Attempts these deliveries now (a webhook's test event). */
  attemptNow(deliveryIds: string[]): void;
  /** Claims every delivery due and makes one attempt on each. */
  deliverDue(): Promise<DeliveryTotals>;
}
