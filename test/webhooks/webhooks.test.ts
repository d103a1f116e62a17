import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import express from 'express';
import { Webhook } from 'standardwebhooks';
import { migrateIdentityDatabase } from '../../src/index.js';
import { assertError } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg, createWebhook, type CreatedOrg } from '../helpers/orgs.js';
import { type ReceivedRequest, WebhookReceiver } from '../helpers/webhook-receiver.js';
import { eventually } from '../helpers/eventually.js';

/*
 * docs/webhooks.md-13.4, organization webhooks. Threats: a signature a receiver cannot check with
 * the reference library, or a captured request replayed (the id and timestamp are signed); an
 * event lost on a failing receiver, or retried forever; a redirect that carries the request
 * elsewhere; a secret that leaks after creation; one organization reading another's webhooks
 * or receiving its events. Receivers are real HTTP servers on 127.0.0.1, so the guard is told
 * to allow http: and private networks (docs/events.md: tests and private deployments); the
 * guard's refusals are tested in webhooks-ssrf.test.ts. The clock starts at wall time, so
 * `standardwebhooks`' verify (which checks wall time +-300 s) accepts the first requests;
 * later ones are compared with its sign.
 */

const MAX_PER_ORG = 3;
const OVERLAP_SEC = 60;
let h: Harness;

before(async () => {
  h = await Harness.start({
    clockStart: Date.now(),
    config: {
      webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, maxPerOrg: MAX_PER_ORG, rotationOverlapSec: OVERLAP_SEC, timeoutMs: 2000 },
      events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } },
    },
  });
});
after(async () => {
  await h.close();
});

let renames = 0;
/** A change in the organization: an `org.updated` event. Answers the event id. */
async function touch(org: CreatedOrg): Promise<string> {
  renames += 1;
  const response = await h.patch(`/orgs/${org.id}`, { name: `Renamed ${renames}` }, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  const latest = h.events.filter((candidate) => candidate.type === 'org.updated' && candidate.organization_id === org.id).at(-1);
  assert.ok(latest, 'an org.updated event');
  return latest.id;
}

async function deliveries(org: CreatedOrg, webhookId: string, query = ''): Promise<any[]> {
  const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries${query}`, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.deliveries;
}

const signaturesOf = (request: ReceivedRequest) => String(request.headers['webhook-signature']).split(' ');

/** The reference library's signature of this request under `secret` (what verify() compares, without its wall-clock window). */
function referenceSignature(request: ReceivedRequest, secret: string): string {
  return new Webhook(secret).sign(String(request.headers['webhook-id']), new Date(Number(request.headers['webhook-timestamp']) * 1000), request.body);
}

test('a delivery verifies with standardwebhooks; the body is {type, timestamp, data} with the event minus ip; id and timestamp are signed', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    assert.match(webhook.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    const eventId = await touch(org);
    await eventually(() => receiver.withId(eventId).length === 1, 'the receiver got the event');
    const [request] = receiver.withId(eventId);
    assert.equal(request!.method, 'POST');
    assert.equal(request!.path, '/hook');
    assert.equal(request!.headers['content-type'], 'application/json');
    assert.equal(request!.headers['webhook-timestamp'], String(Math.floor(h.clock.now() / 1000)));
    const payload = new Webhook(webhook.secret).verify(request!.body, request!.headers as Record<string, string>) as any;
    const event = h.events.find((candidate) => candidate.id === eventId)!;
    assert.deepEqual(payload, { type: 'org.updated', timestamp: event.occurred_at, data: { id: event.id, type: event.type, occurred_at: event.occurred_at, actor_id: event.actor_id, user_id: event.user_id, organization_id: event.organization_id, data: event.data } });
    assert.ok(!('ip' in payload.data), 'the endpoint is a third party: no ip');
    // A captured request replayed under another id or time fails verification.
    assert.throws(() => new Webhook(webhook.secret).verify(request!.body, { ...(request!.headers as Record<string, string>), 'webhook-id': 'another-id' }));
    assert.throws(() => new Webhook(webhook.secret).verify(request!.body, { ...(request!.headers as Record<string, string>), 'webhook-timestamp': String(Number(request!.headers['webhook-timestamp']) - 1) }));
    assert.throws(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(request!.body, request!.headers as Record<string, string>));

    const [delivery] = await deliveries(org, webhook.id);
    assert.deepEqual(Object.keys(delivery).sort(), ['attempts', 'created_at', 'delivered_at', 'event_id', 'event_type', 'id', 'last_error', 'last_status', 'next_attempt_at', 'status']);
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.event_id, eventId);
    assert.equal(delivery.last_status, 200);
    assert.equal(delivery.next_attempt_at, null);
  } finally {
    await receiver.close();
  }
});

// On PostgreSQL a refresh is one statement only while no webhook could take its event
// (commitRecordedWrite): with webhooks on it is a unit of work, whose outbox reads the
// subscriptions, so a webhook subscribed to refreshes gets them.
test('a token refresh in an organization reaches a webhook subscribed to auth.token_refreshed', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['auth.token_refreshed']);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: org.owner.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    const event = h.events.filter((candidate) => candidate.type === 'auth.token_refreshed' && candidate.organization_id === org.id).at(-1);
    assert.ok(event, 'an auth.token_refreshed event in the organization');
    await eventually(() => receiver.withId(event.id).length === 1, 'the webhook got the refresh');
    assert.deepEqual((await deliveries(org, webhook.id)).map((delivery) => [delivery.event_id, delivery.status]), [[event.id, 'delivered']]);
  } finally {
    await receiver.close();
  }
});

test('the Express receiver of docs/webhooks.md verifies deliveries with standardwebhooks and refuses a tampered one', async () => {
  const org = await createOrg(h);
  const seen: string[] = [];
  let secret = '';
  const app = express();
  // As docs/webhooks.md shows it: the raw body, verified before anything else.
  app.post('/identity', express.raw({ type: 'application/json' }), (req, res) => {
    let payload: { type: string; data: { id: string } };
    try {
      payload = new Webhook(secret).verify(req.body, req.headers as Record<string, string>) as typeof payload;
    } catch {
      res.status(400).end();
      return;
    }
    seen.push(payload.data.id);
    res.status(204).end();
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/identity`;
    secret = (await createWebhook(h, org, url, ['org.updated'])).secret;
    const eventId = await touch(org);
    await eventually(() => seen.includes(eventId), 'the receiver verified the delivery');
    const webhookId = (await h.get(`/orgs/${org.id}/webhooks`, { token: org.owner.token })).body.data.webhooks[0].id;
    assert.equal((await deliveries(org, webhookId))[0].status, 'delivered');
    // The receiver refuses a request signed with another secret: the router's delivery then fails (400).
    secret = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;
    const refusedId = await touch(org);
    const refused = async () => (await deliveries(org, webhookId)).find((delivery) => delivery.event_id === refusedId);
    await eventually(async () => (await refused())?.last_status === 400, 'the refused delivery is recorded');
    assert.equal((await refused()).status, 'pending');
    // Its retries would run into the next tests' steps.
    assert.equal((await h.delete(`/orgs/${org.id}/webhooks/${webhookId}`, { token: org.owner.token })).status, 200);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('the secret is shown once, by create and rotate, and never again in any answer, event, log or table', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url('/secret-path?token=capability'));
    const rotated = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/rotate-secret`, {}, { token: org.owner.token });
    assert.equal(rotated.status, 200, rotated.text);
    assert.match(rotated.body.data.secret, /^whsec_/);
    assert.equal(rotated.body.data.previous_secret_expires_at, new Date(h.clock.now() + OVERLAP_SEC * 1000).toISOString());
    const secrets = [webhook.secret, rotated.body.data.secret as string];
    const bare = secrets.map((secret) => secret.slice('whsec_'.length));

    const answers = [
      await h.get(`/orgs/${org.id}/webhooks`, { token: org.owner.token }),
      await h.get(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token }),
      await h.patch(`/orgs/${org.id}/webhooks/${webhook.id}`, { events: ['org.updated'] }, { token: org.owner.token }),
    ];
    for (const answer of answers) assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(Object.keys(answers[1]!.body.data).sort(), ['created_at', 'disabled_reason', 'events', 'id', 'status', 'updated_at', 'url']);
    await touch(org);
    await eventually(() => receiver.requests.length === 1, 'a delivery');
    const deliveryLog = await h.get(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries`, { token: org.owner.token });

    const tables = ['webhooks', 'event_deliveries', 'audit_events'];
    const dumps = await Promise.all(tables.map(async (table) => JSON.stringify(await h.knex(`${h.tablePrefix}${table}`).select())));
    const haystacks = [...answers.map((answer) => answer.text), deliveryLog.text, JSON.stringify(h.events), JSON.stringify(h.logs), ...dumps];
    for (const haystack of haystacks) {
      for (const needle of [...secrets, ...bare]) assert.ok(!haystack.includes(needle), 'a secret leaked');
    }
    // Webhook events carry neither the secret nor the URL's path or query (capability URLs hold tokens).
    const webhookEvents = h.events.filter((event) => event.type.startsWith('webhook.') && event.data.webhook_id === webhook.id);
    assert.deepEqual(webhookEvents.map((event) => event.type), ['webhook.created', 'webhook.secret_rotated', 'webhook.updated']);
    assert.deepEqual(webhookEvents[2]!.data, { webhook_id: webhook.id, fields: ['events'] });
    assert.ok(!JSON.stringify(webhookEvents).includes('secret-path') && !JSON.stringify(webhookEvents).includes('capability'), 'no URL path or query in webhook events');
  } finally {
    await receiver.close();
  }
});

test('a receiver answering 500, 500, 200 sees one webhook-id three times, then the delivery is delivered', async () => {
  const receiver = await WebhookReceiver.start((request) => ({ status: receiver.withId(String(request.headers['webhook-id'])).length < 3 ? 500 : 200 }));
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
    const eventId = await touch(org);
    await eventually(async () => (await deliveries(org, webhook.id))[0]?.attempts === 1, 'attempt 1 recorded');
    let [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'pending');
    assert.equal(delivery.last_status, 500);
    assert.equal(delivery.last_error, 'http_status');
    assert.equal(delivery.next_attempt_at, new Date(h.clock.now() + 5000).toISOString());
    h.clock.advance(5);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 0, failed: 1 });
    h.clock.advance(5);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 1, failed: 0 });
    const seen = receiver.withId(eventId);
    assert.equal(seen.length, 3);
    assert.equal(receiver.requests.length, 3);
    assert.deepEqual(new Set(seen.map((request) => request.body)).size, 1, 'the same body every time');
    // Signed afresh on each attempt, with the clock's time.
    assert.deepEqual(seen.map((request) => Number(request.headers['webhook-timestamp'])), [0, 5, 10].map((offset) => Math.floor(h.clock.now() / 1000) - 10 + offset));
    for (const request of seen) assert.deepEqual(signaturesOf(request), [referenceSignature(request, webhook.secret)]);
    [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.attempts, 3);
    assert.equal(delivery.last_status, 200);
    assert.equal(delivery.last_error, null);
    assert.ok(delivery.delivered_at, 'delivered_at is set');
  } finally {
    await receiver.close();
  }
});

test('retries end in dead after the maximum attempts; replay resends the same id with a fresh budget', async () => {
  let answer = 503;
  const receiver = await WebhookReceiver.start(() => ({ status: answer }));
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    const eventId = await touch(org);
    await eventually(async () => (await deliveries(org, webhook.id))[0]?.attempts === 1, 'attempt 1 recorded');
    h.clock.advance(5);
    await h.identity.service.deliverDueEvents();
    h.clock.advance(5);
    await h.identity.service.deliverDueEvents();
    let [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'dead');
    assert.equal(delivery.attempts, 3);
    assert.equal(delivery.last_status, 503);
    assert.equal(delivery.next_attempt_at, null);
    h.clock.advance(300);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
    assert.equal(receiver.withId(eventId).length, 3);
    assert.deepEqual((await deliveries(org, webhook.id, '?status=dead')).map((entry) => entry.id), [delivery.id]);
    assert.deepEqual(await deliveries(org, webhook.id, '?status=pending'), []);

    answer = 200;
    const replay = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries/${delivery.id}/replay`, undefined, { token: org.owner.token });
    assert.equal(replay.status, 202, replay.text);
    assert.equal(replay.body.data.status, 'pending');
    assert.equal(replay.body.data.attempts, 0);
    assert.equal(replay.body.data.next_attempt_at, new Date(h.clock.now()).toISOString());
    // A replay is attempted at once by the instance that made it, like a change's own rows.
    await eventually(async () => (await deliveries(org, webhook.id))[0]?.status === 'delivered', 'the replay is delivered');
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 0, delivered: 0, failed: 0 });
    assert.equal(receiver.withId(eventId).length, 4, 'replay resends with the same webhook-id');
    [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.attempts, 1);

    const unknown = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries/00000000-0000-4000-8000-000000000000/replay`, undefined, { token: org.owner.token });
    assertError(unknown, 404, 'not_found');
  } finally {
    await receiver.close();
  }
});

test('a 302 is a failed attempt (redirect) and its Location is never requested', async () => {
  const elsewhere = await WebhookReceiver.start();
  const receiver = await WebhookReceiver.start(() => ({ status: 302, headers: { location: elsewhere.url('/stolen') } }));
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    await touch(org);
    await eventually(async () => (await deliveries(org, webhook.id))[0]?.attempts === 1, 'attempt 1 recorded');
    const [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'pending');
    assert.equal(delivery.last_status, 302);
    assert.equal(delivery.last_error, 'redirect');
    assert.equal(elsewhere.connections, 0, 'the Location was never requested');
    assert.equal((await h.delete(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token })).status, 200, 'its retries stay out of the next tests');
  } finally {
    await receiver.close();
    await elsewhere.close();
  }
});

test('a 410 disables the webhook (gone), ends its pending deliveries, and a re-enabled webhook delivers again', async () => {
  let gone = true;
  const receiver = await WebhookReceiver.start(() => ({ status: gone ? 410 : 200 }));
  const slow = await WebhookReceiver.start(() => ({ status: 500 }));
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    await touch(org);
    await eventually(async () => (await h.get(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token })).body.data.status === 'disabled', 'the webhook is disabled');
    const read = await h.get(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token });
    assert.equal(read.body.data.disabled_reason, 'gone');
    const [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.status, 'dead');
    assert.equal(delivery.last_status, 410);
    const disabled = h.eventsOfType('webhook.disabled').filter((event) => event.data.webhook_id === webhook.id);
    assert.deepEqual(disabled.map((event) => event.data), [{ webhook_id: webhook.id, reason: 'gone' }]);

    // A disabled webhook gets no new deliveries; replay and test are refused.
    const before = receiver.requests.length;
    await touch(org);
    assert.equal((await deliveries(org, webhook.id)).length, 1);
    assertError(await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries/${delivery.id}/replay`, undefined, { token: org.owner.token }), 409, 'webhook_disabled');
    assertError(await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/test`, undefined, { token: org.owner.token }), 409, 'webhook_disabled');

    gone = false;
    const enabled = await h.patch(`/orgs/${org.id}/webhooks/${webhook.id}`, { status: 'active' }, { token: org.owner.token });
    assert.equal(enabled.status, 200, enabled.text);
    assert.equal(enabled.body.data.status, 'active');
    assert.equal(enabled.body.data.disabled_reason, null);
    const eventId = await touch(org);
    await eventually(() => receiver.withId(eventId).length === 1, 'delivered after re-enabling');
    assert.equal(receiver.requests.length, before + 1);

    // Disabling by hand ends the pending deliveries (endpoint_disabled), with reason manual.
    const other = await createWebhook(h, org, slow.url());
    await touch(org);
    await eventually(async () => (await deliveries(org, other.id))[0]?.attempts === 1, 'attempt 1 on the failing receiver');
    const manual = await h.patch(`/orgs/${org.id}/webhooks/${other.id}`, { status: 'disabled' }, { token: org.owner.token });
    assert.equal(manual.body.data.disabled_reason, 'manual');
    const [ended] = await deliveries(org, other.id);
    assert.equal(ended.status, 'dead');
    assert.equal(ended.last_error, 'endpoint_disabled');
    assert.deepEqual(h.eventsOfType('webhook.disabled').filter((event) => event.data.webhook_id === other.id).map((event) => event.data), [{ webhook_id: other.id, reason: 'manual' }]);
  } finally {
    await receiver.close();
    await slow.close();
  }
});

test('during the rotation overlap both secrets sign, the new one first; afterwards only the new one', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    const rotated = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/rotate-secret`, {}, { token: org.owner.token });
    const fresh = rotated.body.data.secret as string;
    const during = await touch(org);
    await eventually(() => receiver.withId(during).length === 1, 'delivered during the overlap');
    const [overlap] = receiver.withId(during);
    assert.deepEqual(signaturesOf(overlap!), [referenceSignature(overlap!, fresh), referenceSignature(overlap!, webhook.secret)]);

    h.clock.advance(OVERLAP_SEC);
    const afterwards = await touch(org);
    await eventually(() => receiver.withId(afterwards).length === 1, 'delivered after the overlap');
    const [late] = receiver.withId(afterwards);
    assert.deepEqual(signaturesOf(late!), [referenceSignature(late!, fresh)]);
  } finally {
    await receiver.close();
  }
});

test("another organization's webhooks answer 404, and its events never arrive; a webhook gets only the types it subscribes to", async () => {
  const receiverA = await WebhookReceiver.start();
  const receiverB = await WebhookReceiver.start();
  try {
    const orgA = await createOrg(h);
    const orgB = await createOrg(h);
    const hookA = await createWebhook(h, orgA, receiverA.url(), ['org.updated']);
    const hookB = await createWebhook(h, orgB, receiverB.url(), ['member.invited']);

    // B's owner, in B, naming A's webhook under B's path: 404.
    for (const path of [`/webhooks/${hookA.id}`, `/webhooks/${hookA.id}/deliveries`, `/webhooks/${hookA.id}/test`]) {
      const response = path.endsWith('/test') ? await h.post(`/orgs/${orgB.id}${path}`, undefined, { token: orgB.owner.token }) : await h.get(`/orgs/${orgB.id}${path}`, { token: orgB.owner.token });
      assertError(response, 404, 'not_found');
    }
    assertError(await h.patch(`/orgs/${orgB.id}/webhooks/${hookA.id}`, { status: 'disabled' }, { token: orgB.owner.token }), 404, 'not_found');
    assertError(await h.delete(`/orgs/${orgB.id}/webhooks/${hookA.id}`, { token: orgB.owner.token }), 404, 'not_found');
    // B's owner under A's path: not a member there.
    assert.equal((await h.get(`/orgs/${orgA.id}/webhooks`, { token: orgB.owner.token })).status, 403);
    assert.deepEqual((await h.get(`/orgs/${orgB.id}/webhooks`, { token: orgB.owner.token })).body.data.webhooks.map((entry: any) => entry.id), [hookB.id]);

    const eventA = await touch(orgA);
    await touch(orgB); // org.updated in B: B's webhook does not subscribe to it, A's is in another organization
    await h.post('/auth/login', { email: orgA.owner.email, password: orgA.owner.password }); // no organization: no webhook
    await addMember(h, orgB, orgB.owner.token); // member.invited in B
    await eventually(() => receiverB.requests.length === 1 && receiverA.requests.length === 1, 'each receiver got its one event');
    assert.deepEqual(receiverA.requests.map((request) => request.headers['webhook-id']), [eventA]);
    assert.equal(JSON.parse(receiverB.requests[0]!.body).type, 'member.invited');
    for (const request of receiverA.requests) assert.equal(JSON.parse(request.body).data.organization_id, orgA.id);
  } finally {
    await receiverA.close();
    await receiverB.close();
  }
});

test('test sends a webhook.test event to that webhook only, audited and never handed to onEvent', async () => {
  const receiver = await WebhookReceiver.start();
  const bystander = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
    await createWebhook(h, org, bystander.url());
    const sent = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/test`, undefined, { token: org.owner.token });
    assert.equal(sent.status, 202, sent.text);
    assert.deepEqual(Object.keys(sent.body.data).sort(), ['delivery_id', 'event_id']);
    await eventually(() => receiver.withId(sent.body.data.event_id).length === 1, 'the test event arrived');
    const body = JSON.parse(receiver.requests[0]!.body);
    assert.equal(body.type, 'webhook.test');
    assert.deepEqual(body.data.data, { webhook_id: webhook.id });
    const [delivery] = await deliveries(org, webhook.id);
    assert.equal(delivery.id, sent.body.data.delivery_id);
    assert.equal(delivery.event_type, 'webhook.test');
    assert.equal(h.events.filter((event) => event.type === 'webhook.test').length, 0, 'never to onEvent');
    const audit = await h.get(`/orgs/${org.id}/audit-log`, { token: org.owner.token });
    assert.ok(audit.body.data.events.some((event: any) => event.id === sent.body.data.event_id && event.type === 'webhook.test'), 'the test event is in the audit log');
    assert.equal(bystander.requests.length, 0, 'another webhook of the organization never gets it, nor the webhook.* events');
  } finally {
    await receiver.close();
    await bystander.close();
  }
});

test('input: unknown or webhook.* types 422, a bad URL 422 invalid_webhook_url, the limit 409, webhooks.manage required', async () => {
  const org = await createOrg(h);
  const url = 'http://127.0.0.1:9/hook';
  for (const events of [['user.unknown'], ['webhook.created'], ['*', 'org.updated'], []]) {
    const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events }, { token: org.owner.token });
    assert.equal(response.status, 422, `${JSON.stringify(events)}: ${response.text}`);
    assert.ok(Array.isArray(response.body.errors), 'an {errors} answer');
  }
  for (const body of [{ url: 42, events: ['*'] }, { events: ['*'] }, { url, events: 'org.updated' }]) {
    assert.equal((await h.post(`/orgs/${org.id}/webhooks`, body, { token: org.owner.token })).status, 422, JSON.stringify(body));
  }
  const bad = await h.post(`/orgs/${org.id}/webhooks`, { url: 'ftp://example.com/hook', events: ['*'] }, { token: org.owner.token });
  assertError(bad, 422, 'invalid_webhook_url');
  assert.equal(bad.body.reason, 'scheme');
  const ids: string[] = [];
  for (let index = 0; index < MAX_PER_ORG; index += 1) ids.push((await createWebhook(h, org, url)).id);
  assertError(await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token }), 409, 'webhook_limit');
  const deleted = await h.delete(`/orgs/${org.id}/webhooks/${ids[0]}`, { token: org.owner.token });
  assert.equal(deleted.status, 200, deleted.text);
  assert.deepEqual(deleted.body.data, { status: 'deleted' });
  assertError(await h.get(`/orgs/${org.id}/webhooks/${ids[0]}`, { token: org.owner.token }), 404, 'not_found');
  assert.equal((await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token })).status, 201);

  const admin = await addMember(h, org, org.owner.token, ['admin']);
  assert.equal((await h.get(`/orgs/${org.id}/webhooks`, { token: admin.token })).status, 200, 'the admin template holds webhooks.manage');
  const member = await addMember(h, org, org.owner.token, ['member']);
  assert.equal((await h.get(`/orgs/${org.id}/webhooks`, { token: member.token })).status, 403);
  assert.equal((await h.get(`/orgs/${org.id}/webhooks`)).status, 401);
});

test('deleting the organization deletes its webhooks and their pending deliveries', async () => {
  const receiver = await WebhookReceiver.start(() => ({ status: 500 }));
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url());
    await touch(org);
    await eventually(async () => (await deliveries(org, webhook.id))[0]?.attempts === 1, 'attempt 1 recorded');
    const deleted = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal((await h.knex(`${h.tablePrefix}webhooks`).where({ id: webhook.id })).length, 0);
    assert.equal((await h.knex(`${h.tablePrefix}event_deliveries`).where({ webhook_id: webhook.id })).length, 0);
    h.clock.advance(300);
    await h.identity.service.deliverDueEvents();
    assert.equal(receiver.requests.length, 1, 'nothing more is sent');
  } finally {
    await receiver.close();
  }
});

test('the delivery log pages newest first with next_cursor', async () => {
  const receiver = await WebhookReceiver.start();
  try {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
    const first = await touch(org);
    h.clock.advance(1);
    const second = await touch(org);
    const page = await h.get(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries?limit=1`, { token: org.owner.token });
    assert.equal(page.status, 200, page.text);
    assert.deepEqual(page.body.data.deliveries.map((entry: any) => entry.event_id), [second]);
    assert.ok(page.body.data.next_cursor, 'a next page');
    const next = await h.get(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries?limit=1&cursor=${page.body.data.next_cursor}`, { token: org.owner.token });
    assert.deepEqual(next.body.data.deliveries.map((entry: any) => entry.event_id), [first]);
    assert.equal(next.body.data.next_cursor, null);
    assert.equal((await h.get(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries?cursor=nonsense`, { token: org.owner.token })).status, 422);
  } finally {
    await receiver.close();
  }
});

test('without webhooks.enabled every webhook route answers 404 and no webhook row is written', async () => {
  const off = await Harness.start();
  try {
    const org = await createOrg(off);
    const response = await off.post(`/orgs/${org.id}/webhooks`, { url: 'https://example.com/hook', events: ['*'] }, { token: org.owner.token });
    assertError(response, 404, 'not_found');
    assertError(await off.get(`/orgs/${org.id}/webhooks`, { token: org.owner.token }), 404, 'not_found');
    assert.equal((await off.knex(`${off.tablePrefix}event_deliveries`).where({ target: 'webhook' })).length, 0);
  } finally {
    await off.close();
  }
});

test('migration 010 gives webhooks.manage to the owner and admin roles of organizations made before it', async () => {
  const older = await Harness.start();
  try {
    const org = await createOrg(older);
    const roles = `${older.tablePrefix}roles`;
    // The database as the release before it left it: no webhook tables, no key, 010 not applied.
    for (const row of await older.knex(roles).where({ organization_id: org.id })) {
      const keys = (JSON.parse(row.permission_keys) as string[]).filter((key) => key !== 'webhooks.manage');
      await older.knex(roles).where({ id: row.id }).update({ permission_keys: JSON.stringify(keys) });
    }
    await older.knex.schema.dropTable(`${older.tablePrefix}event_deliveries`);
    await older.knex.schema.dropTable(`${older.tablePrefix}webhooks`);
    await older.knex(`${older.tablePrefix}migrations`).where({ name: '010-events-and-webhooks' }).delete();
    await migrateIdentityDatabase(older.knex, { tablePrefix: older.tablePrefix });
    const keysOf = async (slug: string) => JSON.parse((await older.knex(roles).where({ organization_id: org.id, slug }).first()).permission_keys) as string[];
    assert.ok((await keysOf('owner')).includes('webhooks.manage'), 'owner holds webhooks.manage');
    assert.ok((await keysOf('admin')).includes('webhooks.manage'), 'admin holds webhooks.manage');
    assert.ok(!(await keysOf('member')).includes('webhooks.manage'), 'member does not');
  } finally {
    await older.close();
  }
});
