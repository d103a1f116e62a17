import { decrypt } from '../../crypto/aead.js';
import { signWebhook } from '../../crypto/webhook-signature.js';
import type { IdentityEvent } from '../../events.js';
import { OutboundFailure, OutboundRefusal } from '../../outbound/outbound-guard.js';
import type { WebhookRecord } from '../../store/webhook-repository.js';
import type { ServiceContext } from '../shared/service-context.js';

/** `last_error` of docs/webhooks.md, plus `listener_error` for `onEvent` rows (never shown in a webhook's log). */
export type DeliveryError = 'http_status' | 'redirect' | 'timeout' | 'connection' | 'private_address' | 'unresolvable' | 'endpoint_disabled' | 'listener_error';

export type AttemptResult =
  | { kind: 'delivered'; lastStatus: number | null }
  | { kind: 'failed' | 'dead'; lastStatus: number | null; lastError: DeliveryError | null };

/** Associated data of a webhook secret's ciphertext: it decrypts only on its own webhook's row. */
export const webhookSecretContext = (webhookId: string) => `webhook-secret:${webhookId}`;

/** The secrets that sign now: the current one, and the previous one during the rotation overlap (docs/webhooks.md). */
export function signingSecrets(context: ServiceContext, webhook: WebhookRecord, now: number): string[] {
  const key = context.keys.webhookSecretEncryption;
  const secrets = [decrypt(key, webhook.secretEnc, webhookSecretContext(webhook.id)).toString('utf8')];
  if (webhook.previousSecretEnc && webhook.previousExpiresAt !== null && webhook.previousExpiresAt > now) {
    secrets.push(decrypt(key, webhook.previousSecretEnc, webhookSecretContext(webhook.id)).toString('utf8'));
  }
  return secrets;
}

/** The body of docs/webhooks.md: the event without `ip` (the endpoint is a third party). */
export function webhookBody(event: IdentityEvent): string {
  const { ip: _ip, ...data } = event;
  return JSON.stringify({ type: event.type, timestamp: event.occurred_at, data });
}

/**
 * One attempt to one webhook: through the outbound guard (checked again now, so a name that
 * rebinds to a private address reaches nothing), signed afresh with the injected clock's time.
 * The receiver's body is never read or stored.
 */
export async function attemptWebhook(context: ServiceContext, webhook: WebhookRecord, event: IdentityEvent): Promise<AttemptResult> {
  const now = context.clock.now();
  const body = webhookBody(event);
  const timestamp = Math.floor(now / 1000);
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'identity-router-webhooks',
    'webhook-id': event.id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signWebhook(signingSecrets(context, webhook, now), event.id, timestamp, body),
  };
  try {
    const response = await context.webhookGuard.request(webhook.url, { method: 'POST', headers, body, timeoutMs: context.config.webhooks.timeoutMs, discardBody: true });
    const status = response.status;
    if (status >= 200 && status < 300) return { kind: 'delivered', lastStatus: status };
    if (status === 410) return { kind: 'dead', lastStatus: status, lastError: 'http_status' };
    if (status >= 300 && status < 400) return { kind: 'failed', lastStatus: status, lastError: 'redirect' };
    return { kind: 'failed', lastStatus: status, lastError: 'http_status' };
  } catch (error) {
    if (error instanceof OutboundRefusal) return { kind: 'failed', lastStatus: null, lastError: error.reason === 'unresolvable' ? 'unresolvable' : 'private_address' };
    if (error instanceof OutboundFailure) return { kind: 'failed', lastStatus: null, lastError: error.kind === 'timeout' ? 'timeout' : 'connection' };
    throw error;
  }
}
