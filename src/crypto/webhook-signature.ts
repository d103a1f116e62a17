import { createHmac, randomBytes } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';

/** docs/webhooks.md: `whsec_` + 32 random bytes in standard base64 (the Standard Webhooks secret form). */
export function newWebhookSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(32).toString('base64')}`;
}

/**
 * The `webhook-signature` header of Standard Webhooks: `v1,` + base64 HMAC-SHA256 of
 * `${id}.${timestamp}.${body}`, keyed with the base64 decoding of the secret after `whsec_`.
 * Several secrets (a rotation's overlap) give several entries separated by a space, in order.
 */
export function signWebhook(secrets: readonly string[], id: string, timestampSeconds: number, body: string): string {
  const signed = `${id}.${timestampSeconds}.${body}`;
  return secrets
    .map((secret) => `v1,${createHmac('sha256', Buffer.from(secret.slice(SECRET_PREFIX.length), 'base64')).update(signed, 'utf8').digest('base64')}`)
    .join(' ');
}
