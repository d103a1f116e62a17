import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { OrganizationRepository } from '../../src/store/organization-repository.js';
import { countRows } from '../helpers/account.js';
import { eventually } from '../helpers/eventually.js';
import { decodeJwt, Harness, TEST_DB } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg, createWebhook, type CreatedOrg, superadmin, switchOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

/*
 * An attacker's pass over API keys, webhooks and durable events (docs/api-keys.md,
 * docs/webhooks.md, docs/events.md), for what the other files leave open. Threats: a key that
 * manages webhooks, which its owner's session could (keys never reach the router's routes); a
 * key created by a member whose permission was taken away after admission; an API key, its
 * hash or its start in a webhook's payload; a webhook deleted with retries pending still
 * receiving them; a receiver that streams an endless answer holding the attempt; events of a
 * user outside the organization (a superadmin whose role was revoked, still switched into an
 * organization they never joined) reaching its webhooks and audit log.
 */

const PG_ONLY = { skip: TEST_DB !== 'pg' && 'SQLite runs one write transaction at a time: no request can commit inside another\'s' };

let h: Harness;

before(async () => {
  h = await Harness.start({
    clockStart: Date.now(),
    config: {
      webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 5000 },
      events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } },
    },
  });
});
after(async () => {
  await h.close();
});

async function deliveries(org: CreatedOrg, webhookId: string): Promise<any[]> {
  const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries`, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.deliveries;
}

/** A fresh sign-in of the organization's owner, scoped to it (creating a key needs a fresh authentication). */
async function freshOwnerToken(org: CreatedOrg): Promise<string> {
  const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  assert.equal(login.status, 200, login.text);
  return switchOrg(h, login.body.data.access_token, org.id);
}

describe('API keys and webhooks', () => {
  test('a key holding webhooks.manage manages no webhook: every webhook route answers 401 to it, in either header, and nothing changes', async () => {
    const org = await createOrg(h);
    const receiver = await WebhookReceiver.start();
    try {
      const webhook = await createWebhook(h, org, receiver.url());
      const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'hooks', permission_keys: ['webhooks.manage'] }, { token: await freshOwnerToken(org) });
      assert.equal(created.status, 201, created.text);
      const key: string = created.body.data.key;
      const base = `/orgs/${org.id}/webhooks`;
      const path = `${base}/${webhook.id}`;
      const [delivery] = await deliveries(org, webhook.id);
      const attempts: Array<[string, string, object | undefined]> = [
        ['post', base, { url: receiver.url('/mine'), events: ['*'] }],
        ['get', base, undefined],
        ['get', path, undefined],
        ['patch', path, { url: receiver.url('/moved') }],
        ['post', `${path}/rotate-secret`, {}],
        ['get', `${path}/deliveries`, undefined],
        ['post', `${path}/deliveries/${delivery?.id ?? '00000000-0000-4000-8000-000000000000'}/replay`, undefined],
        ['post', `${path}/test`, undefined],
        ['delete', path, undefined],
      ];
      for (const headers of [{ authorization: `Bearer ${key}` }, { 'x-api-key': key }] as Array<Record<string, string>>) {
        for (const [method, target, body] of attempts) {
          const response = await h.request(method, target, { headers, ...(body ? { body } : {}) });
          assert.equal(response.status, 401, `${method} ${target} with ${Object.keys(headers)[0]}: ${response.text}`);
          assert.equal(response.body.error, 'unauthorized');
          assert.ok(!response.text.includes(key), 'the key is never echoed');
        }
      }
      const read = await h.get(path, { token: org.owner.token });
      assert.equal(read.status, 200, read.text);
      assert.equal(read.body.data.url, receiver.url());
      assert.equal(await countRows(h, 'webhooks', { organization_id: org.id }), 1);
      assert.equal(h.events.filter((event) => event.organization_id === org.id && event.type.startsWith('webhook.') && event.type !== 'webhook.created').length, 0, 'no webhook event but the creation');
    } finally {
      await receiver.close();
    }
  });

  test('api_key.created and api_key.revoked reach a webhook with the id and name only: never the key, its hash or its start', async () => {
    const org = await createOrg(h);
    const receiver = await WebhookReceiver.start();
    try {
      const webhook = await createWebhook(h, org, receiver.url(), ['api_key.created', 'api_key.revoked']);
      const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'exported', permission_keys: ['org.read'] }, { token: await freshOwnerToken(org) });
      assert.equal(created.status, 201, created.text);
      const { id, key, start } = created.body.data as { id: string; key: string; start: string };
      const revoked = await h.delete(`/orgs/${org.id}/api-keys/${id}`, { token: org.owner.token });
      assert.equal(revoked.status, 200, revoked.text);
      await eventually(() => receiver.requests.length === 2, 'both key events reached the webhook');
      const [hash] = (await h.knex(`${h.tablePrefix}api_keys`).where({ id }).pluck('key_hash')) as string[];
      for (const request of receiver.requests) {
        const payload = new Webhook(webhook.secret).verify(request.body, request.headers as Record<string, string>) as any;
        assert.deepEqual(Object.keys(payload.data.data).sort(), payload.type === 'api_key.created' ? ['api_key_id', 'name'] : ['api_key_id', 'name', 'reason']);
        assert.equal(payload.data.data.api_key_id, id);
        for (const secret of [key, key.slice(4), hash!, start]) assert.ok(!request.body.includes(secret), `${payload.type} carries no key material`);
      }
    } finally {
      await receiver.close();
    }
  });

  test('a key created while its creator loses the permission after admission: 403, no key, no event (PostgreSQL)', { ...PG_ONLY, timeout: 60_000 }, async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const login = await h.post('/auth/login', { email: admin.email, password: admin.password });
    assert.equal(login.status, 200, login.text);
    const fresh = await switchOrg(h, login.body.data.access_token, org.id);
    const { outer: created, inner: demoted } = await withRequestInTheWindow(
      h,
      { prototype: OrganizationRepository.prototype, method: 'lockActive', when: (organizationId) => organizationId === org.id, at: 'before' },
      () => h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }),
      () => h.post(`/orgs/${org.id}/api-keys`, { name: 'admitted as an admin', permission_keys: ['webhooks.manage'] }, { token: fresh }),
    );
    assert.equal(demoted?.status, 200, demoted?.text);
    assert.equal(created.status, 403, `a key cut from a role taken away before its write: ${created.text}`);
    assert.equal(await countRows(h, 'api_keys', { user_id: admin.userId }), 0);
    assert.equal(h.events.filter((event) => event.type === 'api_key.created' && event.user_id === admin.userId).length, 0);
  });
});

describe('deliveries', () => {
  test('a webhook deleted while a delivery waits for its retry: the retry is never sent, to it or anywhere', async () => {
    const org = await createOrg(h);
    const receiver = await WebhookReceiver.start(() => ({ status: 503 }));
    try {
      const webhook = await createWebhook(h, org, receiver.url(), ['org.updated']);
      assert.equal((await h.patch(`/orgs/${org.id}`, { name: 'Retried' }, { token: org.owner.token })).status, 200);
      await eventually(async () => (await deliveries(org, webhook.id))[0]?.attempts === 1, 'the first attempt failed');
      assert.equal(receiver.requests.length, 1);
      assert.equal((await h.delete(`/orgs/${org.id}/webhooks/${webhook.id}`, { token: org.owner.token })).status, 200);
      assert.equal(await countRows(h, 'event_deliveries', { webhook_id: webhook.id }), 0, 'its deliveries go with it');
      receiver.responder = () => ({ status: 200 });
      h.clock.advance(60);
      const totals = await h.identity.service.deliverDueEvents();
      assert.equal(totals.attempted, 0, 'nothing is attempted for a deleted webhook');
      assert.equal(receiver.requests.length, 1, 'the receiver heard nothing more');
    } finally {
      await receiver.close();
    }
  });

  test('a receiver that answers 200 and then streams an endless body: delivered at once, the body never read, the socket closed', async () => {
    let streaming = 0;
    let closed = 0;
    const server = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        streaming += 1;
        response.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(64 * 1024, 97);
        const timer = setInterval(() => response.write(chunk), 1);
        response.on('close', () => {
          clearInterval(timer);
          closed += 1;
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const org = await createOrg(h);
      const webhook = await createWebhook(h, org, `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, ['org.updated']);
      const started = Date.now();
      assert.equal((await h.patch(`/orgs/${org.id}`, { name: 'Endless' }, { token: org.owner.token })).status, 200);
      await eventually(async () => (await deliveries(org, webhook.id))[0]?.status === 'delivered', 'the delivery is recorded');
      const elapsed = Date.now() - started;
      assert.ok(elapsed < 4000, `the attempt ended with the status line, well before webhooks.timeoutMs (took ${elapsed} ms)`);
      const [delivery] = await deliveries(org, webhook.id);
      assert.deepEqual([delivery.attempts, delivery.last_status, delivery.last_error], [1, 200, null]);
      assert.equal(streaming, 1);
      await eventually(() => closed === 1, 'the router closed the connection');
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('events of users outside the organization', () => {
  test('a superadmin revoked while switched into an organization they never joined: their refreshes reach neither its webhooks nor its audit log', async () => {
    const org = await createOrg(h);
    const receiver = await WebhookReceiver.start();
    try {
      await createWebhook(h, org, receiver.url(), ['auth.token_refreshed', 'auth.refresh_reuse_detected']);
      const root = await superadmin(h);
      await switchOrg(h, root.accessToken, org.id);
      const asRoot = await h.post('/auth/token/refresh', { refresh_token: root.refreshToken });
      assert.equal(asRoot.status, 200, asRoot.text);
      assert.equal(decodeJwt(asRoot.body.data.access_token).org, org.id, 'a superadmin acts in the organization');
      await h.identity.service.revokeSuperadmin(root.userId);
      const revokedAt = h.events.filter((event) => event.type === 'user.superadmin_revoked' && event.user_id === root.userId).at(-1)!;

      const refreshed = await h.post('/auth/token/refresh', { refresh_token: asRoot.body.data.refresh_token });
      assert.equal(refreshed.status, 200, refreshed.text);
      assert.equal(decodeJwt(refreshed.body.data.access_token).org ?? null, null, 'the new token names no organization');
      // The refresh token before the last one, presented again: a replay, reported.
      const replayed = await h.post('/auth/token/refresh', { refresh_token: asRoot.body.data.refresh_token });
      assert.equal(replayed.status, 401, replayed.text);

      const after = h.events.slice(h.events.indexOf(revokedAt) + 1).filter((event) => event.user_id === root.userId);
      assert.deepEqual(after.map((event) => event.type), ['auth.token_refreshed', 'auth.refresh_reuse_detected']);
      for (const event of after) {
        assert.notEqual(event.organization_id, org.id, `${event.type} of a non-member names the organization`);
      }
      const audit = await h.get(`/orgs/${org.id}/audit-log?limit=100`, { token: org.owner.token });
      assert.equal(audit.status, 200, audit.text);
      const afterIds = new Set(after.map((event) => event.id));
      assert.deepEqual((audit.body.data.events as any[]).filter((event) => afterIds.has(event.id)), [], 'the organization\'s audit log holds no event of a non-member');
      await h.identity.service.deliverDueEvents();
      assert.deepEqual(receiver.requests.filter((request) => afterIds.has(String(request.headers['webhook-id']))), [], 'the organization\'s webhook hears nothing of a non-member');
    } finally {
      await receiver.close();
    }
  });
});
