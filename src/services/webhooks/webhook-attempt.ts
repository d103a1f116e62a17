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

/**
 * The secrets that sign now: the current one, and the previous one during the rotation overlap
 * (docs/webhooks.md); undefined when the current one does not decrypt. A previous secret that
 * does not decrypt is left out: the new one still signs, so a rotation is the way out.
 */
export function signingSecrets(context: ServiceContext, webhook: WebhookRecord, now: number): string[] | undefined {
  const current = openSecret(context, webhook, webhook.secretEnc);
  if (current === undefined) return undefined;
  const previous = webhook.previousSecretEnc && webhook.previousExpiresAt !== null && webhook.previousExpiresAt > now ? openSecret(context, webhook, webhook.previousSecretEnc) : undefined;
  return previous === undefined ? [current] : [current, previous];
}

/** A sealed secret opened, or undefined when it was sealed under another `secret` (or is damaged). */
function openSecret(context: ServiceContext, webhook: WebhookRecord, sealed: string): string | undefined {
  try {
    return decrypt(context.keys.webhookSecretEncryption, sealed, webhookSecretContext(webhook.id)).toString('utf8');
  } catch {
    return undefined;
  }
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
  const secrets = signingSecrets(context, webhook, now);
  if (!secrets) {
    // Thrown, it would leave the row leased and retried after every lease without counting
    // toward maxAttempts. It fails like any attempt instead; contract 13.2 has no `last_error`
    // for it, so the reason is for the host's log (the organization cannot mend it but by a rotation).
    context.logger.error(
      `identity-router: the secret of webhook ${webhook.id} does not decrypt with the configured \`secret\` (sealed under another one); nothing was sent and the attempt counts as failed. Rotate the webhook's secret, or restore the \`secret\` it was sealed with.`,
      { webhook_id: webhook.id, event_id: event.id },
    );
    return { kind: 'failed', lastStatus: null, lastError: null };
  }
  const body = webhookBody(event);
  const timestamp = Math.floor(now / 1000);
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'identity-router-webhooks',
    'webhook-id': event.id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signWebhook(secrets, event.id, timestamp, body),
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
