import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { harnessesClosedAfterFile, type Harness, STRONG_PASSWORD } from '../helpers/harness.js';
import { addMember, createOrg, createWebhook, type CreatedOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { eventually } from '../helpers/eventually.js';

/*
 * CONTRACT 13 taken sentence by sentence (docs/events.md, docs/webhooks.md): the points the
 * other webhook files leave implicit. Threats: a deployment that allowed private networks for a
 * test receiver silently also sending events in clear text (allowHttp is its own switch); a
 * retry schedule that hammers a failing receiver or gives up early; events leaking to a webhook
 * outside its organization or its subscription; answers whose shape drifts from the contract.
 * Receivers are real HTTP servers on 127.0.0.1; names resolve through a stub `adapters.dns`.
 */

const start = harnessesClosedAfterFile();
const receivers: WebhookReceiver[] = [];

async function receiver(status = 200): Promise<WebhookReceiver> {
  const started = await WebhookReceiver.start(() => ({ status }));
  receivers.push(started);
  return started;
}

test.after(async () => {
  for (const entry of receivers) await entry.close();
});

const stubDns = (answers: Record<string, string[]>) => ({
  lookup: async (hostname: string) => {
    const addresses = answers[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: (address.includes(':') ? 6 : 4) as 4 | 6 }));
  },
});

async function deliveries(h: Harness, org: CreatedOrg, webhookId: string): Promise<any[]> {
  const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries?limit=100`, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.deliveries;
}

let renames = 0;
async function touch(h: Harness, org: CreatedOrg): Promise<void> {
  renames += 1;
  const response = await h.patch(`/orgs/${org.id}`, { name: `Conformance ${renames}` }, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
}

describe('13.3 step 1: http: only under allowHttp', () => {
  test('allowPrivateNetworks alone admits private addresses over https: but not http: (422 invalid_webhook_url, reason scheme), at create and at update', async () => {
    const h = await start({
      dns: stubDns({ 'hooks.example.test': ['93.184.216.34'], 'internal.example.test': ['10.1.2.3'] }),
      config: { webhooks: { enabled: true, allowPrivateNetworks: true }, events: { delivery: { pollMs: 3_600_000 } } },
    });
    const org = await createOrg(h);
    // A private address is admitted by allowPrivateNetworks...
    const webhook = await createWebhook(h, org, 'https://internal.example.test/hook');
    // ...but the scheme rule is allowHttp's alone, for public and private hosts alike.
    for (const url of ['http://hooks.example.test/hook', 'http://internal.example.test/hook', 'http://10.1.2.3/hook']) {
      const created = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(created, 422, 'invalid_webhook_url', url);
      assert.equal(created.body.reason, 'scheme', url);
      const updated = await h.patch(`/orgs/${org.id}/webhooks/${webhook.id}`, { url }, { token: org.owner.token });
      assertError(updated, 422, 'invalid_webhook_url', url);
      assert.equal(updated.body.reason, 'scheme', url);
    }
    const read = await h.get(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token });
    assert.equal(read.body.data.url, 'https://internal.example.test/hook', 'nothing was written');
    const listed = await h.get(`/orgs/${org.id}/webhooks`, { token: org.owner.token });
    assert.equal(listed.body.data.webhooks.length, 1);
  });
});

describe('13.1 the retry schedule', () => {
  test('attempt 1 is due schedule[0] s after the event; attempt n+1 schedule[n] s after attempt n failed, lengthened by at most jitter; the last entry repeats; dead after maxAttempts', async () => {
    const schedule = [10, 20, 40];
    const jitter = 0.2;
    const h = await start({
      config: {
        webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000 },
        events: { delivery: { pollMs: 3_600_000, schedule, jitter, maxAttempts: 4 } },
      },
    });
    const failing = await receiver(500);
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, failing.url(), ['org.updated']);
    const eventAt = h.clock.now();
    await touch(h, org);

    // Written in the change's transaction, due schedule[0] s later, not attempted at once.
    let [delivery] = await deliveries(h, org, webhook.id);
    assert.equal(delivery.status, 'pending');
    assert.equal(delivery.attempts, 0);
    assert.equal(delivery.next_attempt_at, new Date(eventAt + schedule[0]! * 1000).toISOString());
    await h.identity.service.deliverDueEvents();
    h.clock.advance(schedule[0]! - 1);
    await h.identity.service.deliverDueEvents();
    assert.equal(failing.requests.length, 0, 'not due before schedule[0]');

    const expectedDelays = [20, 40, 40]; // schedule[1], schedule[2], then the last entry repeats
    h.clock.advance(1);
    for (let attempt = 1; attempt <= 4; attempt += 1) {
      const attemptedAt = h.clock.now();
      await h.identity.service.deliverDueEvents();
      assert.equal(failing.requests.length, attempt, `attempt ${attempt} made`);
      [delivery] = await deliveries(h, org, webhook.id);
      assert.equal(delivery.attempts, attempt);
      assert.equal(delivery.last_status, 500);
      assert.equal(delivery.last_error, 'http_status');
      if (attempt === 4) break;
      assert.equal(delivery.status, 'pending');
      const delay = expectedDelays[attempt - 1]! * 1000;
      const due = Date.parse(delivery.next_attempt_at);
      assert.ok(due >= attemptedAt + delay && due <= attemptedAt + delay * (1 + jitter), `attempt ${attempt + 1} due ${due - attemptedAt} ms after attempt ${attempt}, expected ${delay} to ${delay * (1 + jitter)}`);
      // Not a moment before it is due.
      h.clock.set(due - 1000);
      await h.identity.service.deliverDueEvents();
      assert.equal(failing.requests.length, attempt, `attempt ${attempt + 1} not made early`);
      h.clock.set(due);
    }
    assert.equal(delivery.status, 'dead', 'dead after maxAttempts failures');
    assert.equal(delivery.next_attempt_at, null);
    h.clock.advance(3600);
    await h.identity.service.deliverDueEvents();
    assert.equal(failing.requests.length, 4, 'a dead delivery is never attempted again');
  });
});

describe('13.2 and 13.4: answers and scope', () => {
  test('webhook and delivery objects carry exactly the contract fields; the list is {webhooks}', async () => {
    const h = await start({ config: { webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000 }, events: { delivery: { pollMs: 3_600_000 } } } });
    const ok = await receiver(200);
    const org = await createOrg(h);
    const created = await h.post(`/orgs/${org.id}/webhooks`, { url: ok.url(), events: ['org.updated'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(Object.keys(created.body.data).sort(), ['created_at', 'disabled_reason', 'events', 'id', 'secret', 'status', 'updated_at', 'url']);
    assert.match(created.body.data.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.equal(Buffer.from(created.body.data.secret.slice('whsec_'.length), 'base64').length, 32);
    assert.equal(created.body.data.status, 'active');
    assert.equal(created.body.data.disabled_reason, null);
    const webhookKeys = ['created_at', 'disabled_reason', 'events', 'id', 'status', 'updated_at', 'url'];
    const read = await h.get(`/orgs/${org.id}/webhooks/${created.body.data.id}`, { token: org.owner.token });
    assert.deepEqual(Object.keys(read.body.data).sort(), webhookKeys);
    const listed = await h.get(`/orgs/${org.id}/webhooks`, { token: org.owner.token });
    assert.deepEqual(Object.keys(listed.body.data), ['webhooks']);
    assert.deepEqual(Object.keys(listed.body.data.webhooks[0]).sort(), webhookKeys);

    await touch(h, org);
    await eventually(() => ok.requests.length === 1, 'delivered at once');
    await eventually(async () => (await deliveries(h, org, created.body.data.id))[0]?.status === 'delivered', 'outcome recorded');
    const page = await h.get(`/orgs/${org.id}/webhooks/${created.body.data.id}/deliveries`, { token: org.owner.token });
    assert.deepEqual(Object.keys(page.body.data).sort(), ['deliveries', 'next_cursor']);
    const [delivery] = page.body.data.deliveries;
    assert.deepEqual(Object.keys(delivery).sort(), ['attempts', 'created_at', 'delivered_at', 'event_id', 'event_type', 'id', 'last_error', 'last_status', 'next_attempt_at', 'status']);
    assert.equal(delivery.event_type, 'org.updated');
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.last_status, 200);
    assert.equal(delivery.last_error, null);
    assert.equal(delivery.next_attempt_at, null, 'null unless pending');
    assert.equal(delivery.delivered_at, new Date(h.clock.now()).toISOString());
  });

  test('replay answers 202 with the delivery pending, due now and attempts 0; an unknown delivery or another webhook\'s is 404', async () => {
    const h = await start({ config: { webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000 }, events: { delivery: { pollMs: 3_600_000, schedule: [0, 5], jitter: 0, maxAttempts: 2 } } } });
    const failing = await receiver(500);
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, failing.url(), ['org.updated']);
    const other = await createWebhook(h, org, failing.url('/other'), ['member.invited']);
    await touch(h, org);
    // Attempt 1 is made at once after commit (schedule[0] = 0), attempt 2 five seconds later.
    await eventually(async () => (await deliveries(h, org, webhook.id))[0]?.attempts === 1, 'attempt 1 recorded');
    h.clock.advance(5);
    await h.identity.service.deliverDueEvents();
    const [dead] = await deliveries(h, org, webhook.id);
    assert.equal(dead.status, 'dead');
    assert.equal(dead.attempts, 2);

    h.clock.advance(60);
    const replayed = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries/${dead.id}/replay`, undefined, { token: org.owner.token });
    assert.equal(replayed.status, 202, replayed.text);
    assert.equal(replayed.body.data.id, dead.id);
    assert.equal(replayed.body.data.event_id, dead.event_id);
    assert.equal(replayed.body.data.status, 'pending');
    assert.equal(replayed.body.data.attempts, 0);
    assert.equal(replayed.body.data.next_attempt_at, new Date(h.clock.now()).toISOString());

    assertError(await h.post(`/orgs/${org.id}/webhooks/${other.id}/deliveries/${dead.id}/replay`, undefined, { token: org.owner.token }), 404, 'not_found');
    assertError(await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/deliveries/00000000-0000-4000-8000-000000000000/replay`, undefined, { token: org.owner.token }), 404, 'not_found');
  });

  test('a webhook gets only its organization\'s events of its types: none without an organization, none about webhooks, none while disabled', async () => {
    const h = await start({ config: { webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000 }, events: { delivery: { pollMs: 3_600_000 } } } });
    const everything = await receiver(200);
    const org = await createOrg(h);
    const all = await createWebhook(h, org, everything.url('/all'), ['*']);
    const narrow = await createWebhook(h, org, everything.url('/narrow'), ['member.joined']);
    // Webhook events (created, updated, secret rotated, deleted) are audited but never sent to a webhook.
    const third = await createWebhook(h, org, everything.url('/third'), ['*']);
    assert.equal((await h.patch(`/orgs/${org.id}/webhooks/${third.id}`, { events: ['org.updated'] }, { token: org.owner.token })).status, 200);
    assert.equal((await h.post(`/orgs/${org.id}/webhooks/${third.id}/rotate-secret`, {}, { token: org.owner.token })).status, 200);
    assert.equal((await h.delete(`/orgs/${org.id}/webhooks/${third.id}`, { token: org.owner.token })).status, 200);
    // Events with no organization: a login.
    const login = await h.post('/auth/login', { email: org.owner.email, password: STRONG_PASSWORD });
    assert.equal(login.status, 200, login.text);
    // One organization event, and another organization's.
    await touch(h, org);
    const elsewhere = await createOrg(h);
    await touch(h, elsewhere);
    await eventually(() => everything.requests.length >= 1, 'the organization event delivered');
    await h.identity.service.deliverDueEvents();

    assert.ok(h.eventsOfType('webhook.secret_rotated').length > 0 && h.eventsOfType('user.logged_in').length > 0, 'the events happened');
    assert.deepEqual((await deliveries(h, org, all.id)).map((entry) => entry.event_type), ['org.updated']);
    assert.deepEqual(await deliveries(h, org, narrow.id), []);
    assert.deepEqual(everything.requests.map((request) => [request.path, JSON.parse(request.body).type]), [['/all', 'org.updated']]);

    // A disabled webhook gets no new deliveries.
    assert.equal((await h.patch(`/orgs/${org.id}/webhooks/${all.id}`, { status: 'disabled' }, { token: org.owner.token })).status, 200);
    await touch(h, org);
    await h.identity.service.deliverDueEvents();
    assert.equal((await deliveries(h, org, all.id)).length, 1, 'no row for the disabled webhook');
    assert.equal(everything.requests.length, 1);
  });

  test('every webhook route acts in the token\'s active organization: another organization\'s path is 403 forbidden', async () => {
    const h = await start({ config: { webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true }, events: { delivery: { pollMs: 3_600_000 } } } });
    const ok = await receiver(200);
    const mine = await createOrg(h);
    const theirs = await createOrg(h);
    const webhook = await createWebhook(h, theirs, ok.url());
    const token = mine.owner.token;
    const base = `/orgs/${theirs.id}/webhooks`;
    for (const [what, response] of [
      ['list', await h.get(base, { token })],
      ['create', await h.post(base, { url: ok.url(), events: ['*'] }, { token })],
      ['read', await h.get(`${base}/${webhook.id}`, { token })],
      ['update', await h.patch(`${base}/${webhook.id}`, { status: 'disabled' }, { token })],
      ['log', await h.get(`${base}/${webhook.id}/deliveries`, { token })],
      ['test', await h.post(`${base}/${webhook.id}/test`, undefined, { token })],
      ['delete', await h.delete(`${base}/${webhook.id}`, { token })],
    ] as const) {
      assertError(response, 403, 'forbidden', what);
    }
    // An admin holds webhooks.manage (owner and admin templates); a plain member does not.
    const admin = await addMember(h, theirs, theirs.owner.token, ['admin']);
    assert.equal((await h.get(base, { token: admin.token })).status, 200);
    const member = await addMember(h, theirs, theirs.owner.token, ['member']);
    assertError(await h.get(base, { token: member.token }), 403, 'forbidden');
    const read = await h.get(`${base}/${webhook.id}`, { token: theirs.owner.token });
    assert.equal(read.body.data.status, 'active', 'nothing changed');
  });
});
