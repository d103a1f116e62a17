import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { servicesOf } from '../../src/create-identity-router.js';
import { runUnitOfWork } from '../../src/services/shared/unit-of-work.js';
import { WebhookRepository } from '../../src/store/webhook-repository.js';
import { assertError, assertNoInternals, countRows } from '../helpers/account.js';
import { eventually } from '../helpers/eventually.js';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { enrollTotp, totpCodeAt } from '../helpers/mfa.js';
import { createOrg, createWebhook, switchOrg, type CreatedOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

/*
 * An attacker's and a reviewer's pass over docs/webhooks.md and CONTRACT 13, for what the other
 * webhook tests leave open. Threats: an attempt made by two instances at once (a claim whose
 * lease runs out while its rows wait behind slow receivers); an unrelated change that fails
 * because a webhook was deleted meanwhile; an outcome the delivery log misreports (timeout,
 * connection); a receiver's answer stored; a sensitive webhook change without step-up; a URL
 * spelling that reaches the router's own network; bad input answered 500.
 */

const SKIP_PG = TEST_DB !== 'pg' && 'SQLite runs one write transaction at a time: no request can commit inside another\'s';

/** A server that records each request and never answers it (until closed). */
async function silentServer(): Promise<{ port: number; requests: number; close: () => Promise<void> }> {
  const state: { port: number; requests: number; close: () => Promise<void> } = { port: 0, requests: 0, close: async () => undefined };
  const server = http.createServer(() => {
    state.requests += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  state.close = () => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

/** A port on 127.0.0.1 that nothing listens on (it was just released). */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('outcomes, input and step-up', () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({
      clockStart: Date.now(),
      config: {
        webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 800 },
        events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } },
      },
    });
  });
  after(async () => {
    await h.close();
  });

  async function lastDelivery(org: CreatedOrg, webhookId: string): Promise<any> {
    const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries`, { token: org.owner.token });
    assert.equal(response.status, 200, response.text);
    return response.body.data.deliveries[0];
  }

  async function rename(org: CreatedOrg, name: string): Promise<string> {
    const response = await h.patch(`/orgs/${org.id}`, { name }, { token: org.owner.token });
    assert.equal(response.status, 200, response.text);
    return h.events.filter((event) => event.type === 'org.updated' && event.organization_id === org.id).at(-1)!.id;
  }

  test('a receiver that never answers is last_error timeout, a closed port connection; no answer body or header is stored', async () => {
    const silent = await silentServer();
    const answering = await WebhookReceiver.start(() => ({ status: 503, headers: { 'x-internal-token': 'answer-header-secret' } }));
    try {
      const org = await createOrg(h);
      const slow = await createWebhook(h, org, `http://127.0.0.1:${silent.port}/hook`);
      const refused = await createWebhook(h, org, `http://127.0.0.1:${await closedPort()}/hook`);
      const failing = await createWebhook(h, org, answering.url());
      await rename(org, 'Outcomes');
      await eventually(async () => (await lastDelivery(org, slow.id))?.attempts === 1, 'the silent receiver timed out');
      await eventually(async () => (await lastDelivery(org, refused.id))?.attempts === 1 && (await lastDelivery(org, failing.id))?.attempts === 1, 'the other attempts are recorded');
      const timedOut = await lastDelivery(org, slow.id);
      assert.equal(silent.requests, 1, 'the request reached the silent receiver');
      assert.deepEqual([timedOut.status, timedOut.last_status, timedOut.last_error], ['pending', null, 'timeout']);
      const connection = await lastDelivery(org, refused.id);
      assert.deepEqual([connection.status, connection.last_status, connection.last_error], ['pending', null, 'connection']);
      const answered = await lastDelivery(org, failing.id);
      assert.deepEqual([answered.status, answered.last_status, answered.last_error], ['pending', 503, 'http_status']);
      const dumps = await Promise.all(['webhooks', 'event_deliveries', 'audit_events'].map(async (table) => JSON.stringify(await h.knex(`${h.tablePrefix}${table}`).select())));
      for (const dump of [...dumps, JSON.stringify(h.logs)]) {
        assert.ok(!dump.includes('a body the router must never store'), 'the answer body is never stored');
        assert.ok(!dump.includes('answer-header-secret'), 'no answer header is stored');
      }
    } finally {
      await silent.close();
      await answering.close();
    }
  });

  test('a body with non-ASCII text verifies with standardwebhooks: the signed bytes are the bytes sent', async () => {
    const receiver = await WebhookReceiver.start();
    try {
      const org = await createOrg(h);
      const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
      const eventId = await rename(org, 'Zoë Ünïcode ✓ 日本 😀');
      await eventually(() => receiver.withId(eventId).length === 1, 'delivered');
      const [request] = receiver.withId(eventId);
      assert.equal(Number(request!.headers['content-length']), Buffer.byteLength(request!.body, 'utf8'));
      const payload = new Webhook(webhook.secret).verify(request!.body, request!.headers as Record<string, string>) as any;
      assert.equal(payload.data.data.changes.name, 'Zoë Ünïcode ✓ 日本 😀');
    } finally {
      await receiver.close();
    }
  });

  test('bad input on every webhook route is a 4xx with no internals, never a 500', async () => {
    const org = await createOrg(h);
    const token = org.owner.token;
    const webhook = await createWebhook(h, org, 'http://127.0.0.1:9/hook', ['org.updated']);
    const base = `/orgs/${org.id}/webhooks`;
    const cases: Array<[string, () => Promise<any>, number]> = [
      ['empty url', () => h.post(base, { url: '', events: ['*'] }, { token }), 422],
      ['huge url', () => h.post(base, { url: `https://example.com/${'a'.repeat(10_000)}`, events: ['*'] }, { token }), 422],
      ['unclosed IPv6 literal', () => h.post(base, { url: 'http://[::1/hook', events: ['*'] }, { token }), 422],
      ['space in host', () => h.post(base, { url: 'http://exa mple.com/hook', events: ['*'] }, { token }), 422],
      ['NUL in host', () => h.post(base, { url: 'http://a\u0000b.example/hook', events: ['*'] }, { token }), 422],
      ['javascript: URL', () => h.post(base, { url: 'javascript:alert(1)', events: ['*'] }, { token }), 422],
      ['empty event type', () => h.post(base, { url: 'http://127.0.0.1:9/hook', events: [''] }, { token }), 422],
      ['long event type', () => h.post(base, { url: 'http://127.0.0.1:9/hook', events: ['a'.repeat(65)] }, { token }), 422],
      ['too many event types', () => h.post(base, { url: 'http://127.0.0.1:9/hook', events: new Array(101).fill('org.updated') }, { token }), 422],
      ['non-string event types', () => h.post(base, { url: 'http://127.0.0.1:9/hook', events: [1, null] }, { token }), 422],
      ['empty patch', () => h.patch(`${base}/${webhook.id}`, {}, { token }), 422],
      ['bad status', () => h.patch(`${base}/${webhook.id}`, { status: 'deleted' }, { token }), 422],
      ['null url', () => h.patch(`${base}/${webhook.id}`, { url: null }, { token }), 422],
      ['malformed webhook id', () => h.get(`${base}/not-a-uuid`, { token }), 404],
      ['long webhook id', () => h.get(`${base}/${'f'.repeat(64)}`, { token }), 404],
      ['malformed delivery id', () => h.post(`${base}/${webhook.id}/deliveries/not-a-uuid/replay`, undefined, { token }), 404],
      ['limit 0', () => h.get(`${base}/${webhook.id}/deliveries?limit=0`, { token }), 422],
      ['limit 101', () => h.get(`${base}/${webhook.id}/deliveries?limit=101`, { token }), 422],
      ['limit not a number', () => h.get(`${base}/${webhook.id}/deliveries?limit=abc`, { token }), 422],
      ['unknown status', () => h.get(`${base}/${webhook.id}/deliveries?status=failed`, { token }), 422],
      ['cursor not base64 JSON', () => h.get(`${base}/${webhook.id}/deliveries?cursor=%00%ff`, { token }), 422],
      ['cursor of the wrong shape', () => h.get(`${base}/${webhook.id}/deliveries?cursor=${Buffer.from(JSON.stringify([1e300, 'x'])).toString('base64url')}`, { token }), 422],
      ['cursor with a far-future time', () => h.get(`${base}/${webhook.id}/deliveries?cursor=${Buffer.from(JSON.stringify([Number.MAX_SAFE_INTEGER, '00000000-0000-4000-8000-000000000000'])).toString('base64url')}`, { token }), 200],
    ];
    for (const [what, send, status] of cases) {
      const response = await send();
      assertNoInternals(response, what);
      assert.equal(response.status, status, `${what}: ${response.text}`);
    }
    assert.equal(await countRows(h, 'webhooks', { organization_id: org.id }), 1, 'nothing was written');
  });

  test('PATCH: webhook.updated names the fields changed; a PATCH that changes nothing emits nothing', async () => {
    const org = await createOrg(h);
    const webhook = await createWebhook(h, org, 'http://127.0.0.1:9/hook', ['org.updated']);
    const path = `/orgs/${org.id}/webhooks/${webhook.id}`;
    const updates = () => h.eventsOfType('webhook.updated').filter((event) => event.data.webhook_id === webhook.id).map((event) => event.data.fields);
    assert.equal((await h.patch(path, { url: 'http://127.0.0.1:9/other?token=capability', events: ['org.updated', 'member.joined'] }, { token: org.owner.token })).status, 200);
    assert.deepEqual(updates(), [['url', 'events']]);
    assert.equal((await h.patch(path, { url: 'http://127.0.0.1:9/other?token=capability', events: ['org.updated', 'member.joined'], status: 'active' }, { token: org.owner.token })).status, 200);
    assert.deepEqual(updates(), [['url', 'events']], 'nothing changed: no event');
    const disabled = await h.patch(path, { status: 'disabled' }, { token: org.owner.token });
    assert.deepEqual([disabled.body.data.status, disabled.body.data.disabled_reason], ['disabled', 'manual']);
    assert.deepEqual(updates(), [['url', 'events'], ['status']]);
    assert.ok(!JSON.stringify(h.events.filter((event) => event.type.startsWith('webhook.'))).includes('capability'), 'no URL in webhook events');
  });

  // Last in this harness: it moves the clock past security.stepUp.maxAge.
  test('create, PATCH, DELETE and rotate-secret need step-up; reads, the log, test and replay do not', async () => {
    const receiver = await WebhookReceiver.start();
    try {
      const org = await createOrg(h);
      const totp = await enrollTotp(h, org.owner.token);
      const webhook = await createWebhook(h, org, receiver.url());
      const sent = await h.post(`/orgs/${org.id}/webhooks/${webhook.id}/test`, undefined, { token: org.owner.token });
      assert.equal(sent.status, 202, sent.text);
      await eventually(() => receiver.withId(sent.body.data.event_id).length === 1, 'the test event arrived');
      h.clock.advance(301); // past the 300 s of security.stepUp.maxAge; the access token (15 min) still holds
      const path = `/orgs/${org.id}/webhooks/${webhook.id}`;
      const token = org.owner.token;
      for (const [what, response] of [
        ['create', await h.post(`/orgs/${org.id}/webhooks`, { url: receiver.url(), events: ['*'] }, { token })],
        ['patch', await h.patch(path, { status: 'disabled' }, { token })],
        ['rotate', await h.post(`${path}/rotate-secret`, {}, { token })],
        ['delete', await h.delete(path, { token })],
      ] as const) {
        assertError(response, 401, 'step_up_required', what);
      }
      assert.equal((await h.get(path, { token })).body.data.status, 'active', 'nothing changed');
      assert.equal(await countRows(h, 'webhooks', { organization_id: org.id }), 1);
      assert.equal((await h.get(`/orgs/${org.id}/webhooks`, { token })).status, 200);
      assert.equal((await h.get(`${path}/deliveries`, { token })).status, 200);
      assert.equal((await h.post(`${path}/test`, undefined, { token })).status, 202);
      assert.equal((await h.post(`${path}/deliveries/${sent.body.data.delivery_id}/replay`, undefined, { token })).status, 202);

      const stepped = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token });
      assert.equal(stepped.status, 200, stepped.text);
      const rotated = await h.post(`${path}/rotate-secret`, {}, { token: stepped.body.data.access_token });
      assert.equal(rotated.status, 200, rotated.text);
    } finally {
      await receiver.close();
    }
  });

  test(
    'a webhook deleted between an event\'s subscription read and its outbox write: the change still commits and no delivery is left',
    { skip: SKIP_PG, timeout: 60_000 },
    async () => {
      const org = await createOrg(h);
      const webhook = await createWebhook(h, org, 'http://127.0.0.1:9/hook', ['auth.token_refreshed']);
      // A second session of the owner: the deletion does not wait for the refreshed session's row.
      const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
      assert.equal(login.status, 200, login.text);
      const other = await switchOrg(h, login.body.data.access_token, org.id);
      const { outer: refreshed, inner: deleted } = await withRequestInTheWindow(
        h,
        { prototype: WebhookRepository.prototype, method: 'activeSubscriptions', when: (organizationIds) => organizationIds.includes(org.id) },
        () => h.delete(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: other }),
        () => h.post('/auth/token/refresh', { refresh_token: org.owner.refreshToken }),
      );
      const lastError = JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
      assert.equal(deleted?.status, 200, deleted?.text);
      assert.equal(refreshed.status, 200, `a token refresh failed because a webhook was deleted meanwhile: ${refreshed.text} ${lastError}`);
      assert.equal(await countRows(h, 'webhooks', { id: webhook.id }), 0);
      assert.equal(await countRows(h, 'event_deliveries', { webhook_id: webhook.id }), 0, 'no delivery outlives its webhook');
    },
  );
});

describe('the guard, more spellings (private networks refused)', () => {
  let h: Harness;
  let receiver: WebhookReceiver;
  const answers = new Map<string, string[]>();
  const dns = {
    lookup: async (hostname: string) => {
      const addresses = answers.get(hostname);
      if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      return addresses.map((address) => ({ address, family: (address.includes(':') ? 6 : 4) as 4 | 6 }));
    },
  };
  before(async () => {
    receiver = await WebhookReceiver.start();
    h = await Harness.start({ dns, config: { webhooks: { enabled: true, allowHttp: true }, events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } } } });
  });
  after(async () => {
    await h.close();
    await receiver.close();
  });

  test('percent-encoded, IDNA-mapped, whole-octal, per-octet hex, zero-padded and trailing-dot loopback, and a name with a trailing dot, are refused', async () => {
    const org = await createOrg(h);
    const port = receiver.port;
    answers.set('localhost.', ['127.0.0.1']);
    for (const url of [
      `http://%31%32%37.0.0.1:${port}/hook`,
      `http://①②⑦.0.0.1:${port}/hook`,
      `http://１２７.０.０.１:${port}/hook`,
      `http://017700000001:${port}/hook`,
      `http://0x7f.0x0.0x0.0x1:${port}/hook`,
      `http://127.000.000.001:${port}/hook`,
      `http://127.0.0.1.:${port}/hook`,
      `http://127.0.0.1%2e:${port}/hook`,
      `http://0:${port}/hook`,
      `http://[0:0:0:0:0:ffff:127.0.0.1]:${port}/hook`,
      `http://[::ffff:0a00:0001]:${port}/hook`,
      `http://[2002:7f00:1::]:${port}/hook`, // 6to4 of 127.0.0.1
      `http://localhost.:${port}/hook`,
    ]) {
      const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(response, 422, 'invalid_webhook_url', url);
      assert.equal(response.body.reason, 'private_address', url);
    }
    for (const url of [`http://user@127.0.0.1:${port}/hook`, `http://:secret@hooks.example.test/hook`, 'http://1.1.1.1&@127.0.0.1/hook']) {
      const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(response, 422, 'invalid_webhook_url', url);
      assert.equal(response.body.reason, 'credentials', url);
    }
    assert.equal(receiver.connections, 0, 'nothing reached the listener');
  });

  test('re-enabling a webhook whose name now resolves privately is refused, and it stays disabled', async () => {
    const org = await createOrg(h);
    answers.set('reenable.example.test', ['93.184.216.34']);
    const created = await h.post(`/orgs/${org.id}/webhooks`, { url: 'https://reenable.example.test/hook', events: ['*'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const path = `/orgs/${org.id}/webhooks/${created.body.data.id}`;
    assert.equal((await h.patch(path, { status: 'disabled' }, { token: org.owner.token })).status, 200);
    answers.set('reenable.example.test', ['10.0.0.7']);
    const enabled = await h.patch(path, { status: 'active' }, { token: org.owner.token });
    assertError(enabled, 422, 'invalid_webhook_url');
    assert.equal(enabled.body.reason, 'private_address');
    const read = await h.get(path, { token: org.owner.token });
    assert.deepEqual([read.body.data.status, read.body.data.disabled_reason], ['disabled', 'manual']);
  });
});

test('a claimed row still queued when its lease runs out is not attempted: the instance that took it over makes the attempt alone', async () => {
  const config = {
    webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true },
    // worker: false: every attempt is made by the steps below.
    events: { delivery: { worker: false, pollMs: 3_600_000, schedule: [0, 1], jitter: 0, maxAttempts: 5 } },
  };
  const first = await Harness.start({ noListener: true, config });
  const held: http.ServerResponse[] = [];
  const requests: Array<{ id: string; timestamp: number }> = [];
  let holdAt = -1;
  // Holds the answers to requests signed at `holdAt` (the first instance's claim); answers the others at once.
  const server = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const timestamp = Number(request.headers['webhook-timestamp']);
      requests.push({ id: String(request.headers['webhook-id']), timestamp });
      if (timestamp === holdAt) held.push(response);
      else response.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const second = await Harness.start({ shareDatabaseWith: first, ownConnection: true, noListener: true, config });
    try {
      const org = await createOrg(first);
      const created = await first.post(`/orgs/${org.id}/webhooks`, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, events: ['org.updated'] }, { token: org.owner.token });
      assert.equal(created.status, 201, created.text);
      // Eleven due rows: one more than the attempts one claim makes at once.
      await runUnitOfWork(servicesOf(first.identity).context, { ip: null, userAgent: null }, async (uow) => {
        for (let index = 0; index < 11; index += 1) await uow.emit({ type: 'org.updated', organizationId: org.id, data: { index } });
      });
      holdAt = Math.floor(first.clock.now() / 1000);
      const stepping = first.identity.service.deliverDueEvents();
      await eventually(() => held.length === 10, 'ten attempts in flight, the eleventh queued behind them');
      first.clock.advance(60); // leaseSec: the first instance's lease on all eleven has run out
      assert.deepEqual(await second.identity.service.deliverDueEvents(), { attempted: 11, delivered: 11, failed: 0 }, 'another instance takes the rows over');
      for (const response of held) response.writeHead(200).end();
      await stepping;
      const late = requests.filter((request) => request.timestamp > holdAt);
      assert.equal(late.length, 11, `after the lease ran out only the instance holding the rows sent them, once each; sent ${late.length}`);
      assert.equal(new Set(late.map((request) => request.id)).size, 11);
      const rows = await first.knex(`${first.tablePrefix}event_deliveries`).where({ webhook_id: created.body.data.id });
      assert.deepEqual(rows.map((row) => [row.status, Number(row.attempts)]), new Array(11).fill(['delivered', 1]));
    } finally {
      await second.close();
    }
  } finally {
    for (const response of held) if (!response.writableEnded) response.writeHead(200).end();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await first.close();
  }
});
