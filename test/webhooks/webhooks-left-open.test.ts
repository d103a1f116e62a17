import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { encrypt } from '../../src/crypto/aead.js';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { Harness } from '../helpers/harness.js';
import { createOrg, createWebhook, type CreatedOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

/*
 * docs/webhooks.md, a webhook secret that no longer decrypts. A router whose config `secret`
 * changed does not start (its signing keys do not decrypt, docs/security.md "The secret cannot
 * be changed"), so a running router meets this only for a row sealed under another secret (a
 * row restored or copied from another deployment). The threat: that delivery is retried after
 * every lease, forever, without its attempts counting toward `maxAttempts`, and the log repeats
 * a crypto error without telling the operator what to do. Contract 13.2 fixes the `last_error`
 * values, so the attempt fails with `last_error` null and the reason goes to the host's log,
 * once per attempt, naming the webhook and never a secret or a stack. The operator's way out is
 * a rotation: the new secret signs, the unreadable previous one is skipped.
 * No worker runs: every attempt is a `deliverDueEvents()` step.
 */

const LEASE_SEC = 60;
const MAX_ATTEMPTS = 3;
let h: Harness;

before(async () => {
  h = await Harness.start({
    clockStart: Date.now(),
    // Only webhook rows: each step's totals count this test's webhook attempts alone.
    noListener: true,
    config: {
      webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000, rotationOverlapSec: 3600 },
      events: { delivery: { worker: false, pollMs: 3_600_000, leaseSec: LEASE_SEC, schedule: [0, 5, 5], jitter: 0, maxAttempts: MAX_ATTEMPTS } },
    },
  });
});
after(async () => {
  await h.close();
});

/** The webhook's secret sealed again under another deployment's `secret`, as a restored row would be. */
async function sealElsewhere(webhookId: string, secret: string): Promise<void> {
  const elsewhere = deriveKeys('another-deployment-secret-of-at-least-32-chars').webhookSecretEncryption;
  await h.knex(`${h.tablePrefix}webhooks`).where({ id: webhookId }).update({ secret_enc: encrypt(elsewhere, secret, `webhook-secret:${webhookId}`) });
}

/** Renames the organization: an `org.updated` event. Answers its id (the webhook's newest delivery's). */
async function rename(org: CreatedOrg, webhookId: string, name: string): Promise<string> {
  const response = await h.patch(`/orgs/${org.id}`, { name }, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return (await deliveries(org, webhookId))[0].event_id;
}

async function deliveries(org: CreatedOrg, webhookId: string): Promise<any[]> {
  const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries`, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.deliveries;
}

async function deliveryOf(org: CreatedOrg, webhookId: string, eventId: string): Promise<any> {
  return (await deliveries(org, webhookId)).find((entry) => entry.event_id === eventId);
}

test('a webhook whose secret no longer decrypts: each attempt counts, the delivery dies after maxAttempts, the log says why without a secret or a stack', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
    await sealElsewhere(webhook.id, webhook.secret);
    const eventId = await rename(org, webhook.id, 'Renamed with an unreadable secret');
    const logsBefore = h.logs.length;
    // More steps than maxAttempts, each past the lease and the schedule: an attempt that never
    // counts would stay pending through all of them.
    for (let step = 0; step < MAX_ATTEMPTS + 3; step += 1) {
      await h.identity.service.deliverDueEvents();
      h.clock.advance(LEASE_SEC + 10);
    }
    const dead = await deliveryOf(org, webhook.id, eventId);
    assert.equal(dead.status, 'dead', JSON.stringify(dead));
    assert.equal(dead.attempts, MAX_ATTEMPTS);
    assert.equal(dead.last_status, null);
    assert.equal(dead.last_error, null, 'contract 13.2 has no last_error value for it: the reason is in the log');
    assert.equal(receiver.requests.length, 0, 'nothing unsigned or wrongly signed is sent');
    const lines = h.logs.slice(logsBefore);
    const reasons = lines.filter((line) => line.msg.includes(webhook.id) && /does not decrypt/.test(line.msg));
    assert.equal(reasons.length, MAX_ATTEMPTS, JSON.stringify(lines));
    const text = JSON.stringify(lines);
    assert.ok(!text.includes('whsec_') && !text.includes(webhook.secret.slice(6, 20)), 'no secret in the log');
    assert.ok(!/\n\s+at /.test(text) && !text.includes('authenticate data'), `no stack or crypto error in the log: ${text}`);
  } finally {
    await receiver.close();
  }
});

test('after a rotation of an unreadable secret, deliveries are signed with the new secret alone (the unreadable previous one is skipped)', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    // Back to wall time: standardwebhooks' verify() checks the timestamp against it.
    h.clock.set(Date.now());
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
    await sealElsewhere(webhook.id, webhook.secret);
    const rotated = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/rotate-secret`, {}, { token: org.owner.token });
    assert.equal(rotated.status, 200, rotated.text);
    const eventId = await rename(org, webhook.id, 'Renamed after the rotation');
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 1, failed: 0 });
    const [request] = receiver.withId(eventId);
    assert.ok(request, 'the receiver got the event');
    assert.equal(String(request.headers['webhook-signature']).split(' ').length, 1, 'one signature: the previous secret cannot be read');
    new Webhook(rotated.body.data.secret).verify(request.body, request.headers as Record<string, string>);
    assert.equal((await deliveryOf(org, webhook.id, eventId)).status, 'delivered');
  } finally {
    await receiver.close();
  }
});
