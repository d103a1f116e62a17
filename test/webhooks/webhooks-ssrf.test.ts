import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { classifyAddress } from '../../src/outbound/address-ranges.js';
import { OutboundGuard, OutboundRefusal } from '../../src/outbound/outbound-guard.js';
import { assertError } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { createOrg, type CreatedOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { eventually } from '../helpers/eventually.js';

/*
 * docs/webhooks.md (and 12.2, whose guard this is). Threat: a tenant points a webhook at the
 * router's own network (loopback, private ranges, cloud metadata at 169.254.169.254), in any
 * spelling the URL parser accepts, or through a name that resolves to a public address when the
 * webhook is created and to a private one when it is sent (DNS rebinding). Every refusal is
 * proven by a real listener on 127.0.0.1 that counts TCP connections: it must see none.
 * Names resolve through a stub `adapters.dns`, so rebinding is a change of the stub's answer.
 */

class StubDns {
  readonly answers = new Map<string, string[]>();
  readonly lookups: string[] = [];
  readonly adapter = {
    lookup: async (hostname: string) => {
      this.lookups.push(hostname);
      const addresses = this.answers.get(hostname);
      if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      return addresses.map((address) => ({ address, family: (address.includes(':') ? 6 : 4) as 4 | 6 }));
    },
  };
}

const DELIVERY = { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 };

async function touch(h: Harness, org: CreatedOrg): Promise<void> {
  const response = await h.patch(`/orgs/${org.id}`, { name: `Renamed ${Math.random()}` }, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
}

async function lastDelivery(h: Harness, org: CreatedOrg, webhookId: string): Promise<any> {
  const response = await h.get(`/orgs/${org.id}/webhooks/${webhookId}/deliveries`, { token: org.owner.token });
  assert.equal(response.status, 200, response.text);
  return response.body.data.deliveries[0];
}

describe('private networks refused (the default)', () => {
  let h: Harness;
  let receiver: WebhookReceiver;
  const dns = new StubDns();
  before(async () => {
    receiver = await WebhookReceiver.start();
    h = await Harness.start({ dns: dns.adapter, config: { webhooks: { enabled: true, allowHttp: true }, events: { delivery: DELIVERY } } });
  });
  after(async () => {
    await h.close();
    await receiver.close();
  });

  test('create and update refuse loopback, private and link-local addresses in every literal form; no connection is made', async () => {
    const org = await createOrg(h);
    const port = receiver.port;
    dns.answers.set('localhost', ['127.0.0.1']);
    dns.answers.set('internal.example.test', ['93.184.216.34', '10.1.2.3']);
    dns.answers.set('mapped.example.test', ['::ffff:127.0.0.1']);
    const refused = [
      `http://127.0.0.1:${port}/hook`,
      `http://2130706433:${port}/hook`, // decimal
      `http://0x7f000001:${port}/hook`, // hex
      `http://0177.0.0.1:${port}/hook`, // octal
      `http://127.1:${port}/hook`, // short
      `http://0.0.0.0:${port}/hook`,
      `http://[::1]:${port}/hook`,
      `http://[::]:${port}/hook`,
      `http://[::ffff:127.0.0.1]:${port}/hook`, // IPv4-mapped
      `http://[::ffff:7f00:1]:${port}/hook`,
      `http://[::127.0.0.1]:${port}/hook`, // IPv4-compatible
      `http://[64:ff9b::7f00:1]:${port}/hook`, // NAT64
      `http://localhost:${port}/hook`,
      `http://mapped.example.test:${port}/hook`,
      `http://internal.example.test:${port}/hook`, // one private address refuses the URL
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]/hook',
      'http://10.0.0.1/hook',
      'http://172.16.5.4/hook',
      'http://192.168.1.1/hook',
      'http://100.64.0.1/hook',
      'http://198.18.0.1/hook',
      'http://224.0.0.1/hook',
      'http://255.255.255.255/hook',
      'http://[fc00::1]/hook',
      'http://[fd12:3456::1]/hook',
      'http://[ff02::1]/hook',
      'http://[::ffff:a9fe:a9fe]/hook', // 169.254.169.254, mapped
    ];
    for (const url of refused) {
      const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(response, 422, 'invalid_webhook_url', url);
      assert.equal(response.body.reason, 'private_address', url);
    }
    for (const [url, reason] of [
      ['http://user:pass@hooks.example.test/hook', 'credentials'],
      ['not a url', 'invalid'],
      [`https://hooks.example.test/${'a'.repeat(2049 - 'https://hooks.example.test/'.length)}`, 'invalid'], // 2049 characters
      ['ftp://hooks.example.test/hook', 'scheme'],
      ['https://nowhere.example.test/hook', 'unresolvable'],
    ] as const) {
      const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(response, 422, 'invalid_webhook_url', url);
      assert.equal(response.body.reason, reason, url);
    }
    assert.equal((await h.knex(`${h.tablePrefix}webhooks`).where({ organization_id: org.id })).length, 0, 'nothing is stored');

    // The same guard on a change of URL.
    dns.answers.set('hooks.example.test', ['93.184.216.34']);
    const created = await h.post(`/orgs/${org.id}/webhooks`, { url: 'https://hooks.example.test/hook', events: ['*'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const changed = await h.patch(`/orgs/${org.id}/webhooks/${created.body.data.id}`, { url: `http://127.0.0.1:${port}/hook` }, { token: org.owner.token });
    assertError(changed, 422, 'invalid_webhook_url');
    assert.equal((await h.get(`/orgs/${org.id}/webhooks/${created.body.data.id}`, { token: org.owner.token })).body.data.url, 'https://hooks.example.test/hook');
    await h.delete(`/orgs/${org.id}/webhooks/${created.body.data.id}`, { token: org.owner.token });
    assert.equal(receiver.connections, 0, 'no request reached the listener');
  });

  test('a name that rebinds to a private address at send time reaches nothing', async () => {
    const org = await createOrg(h);
    dns.answers.set('rebind.example.test', ['93.184.216.34']);
    const created = await h.post(`/orgs/${org.id}/webhooks`, { url: `http://rebind.example.test:${receiver.port}/hook`, events: ['*'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    // The attacker's DNS now answers with the router's own network.
    dns.answers.set('rebind.example.test', ['127.0.0.1']);
    await touch(h, org);
    await eventually(async () => (await lastDelivery(h, org, created.body.data.id))?.attempts === 1, 'the attempt is recorded');
    const delivery = await lastDelivery(h, org, created.body.data.id);
    assert.equal(delivery.status, 'pending');
    assert.equal(delivery.last_error, 'private_address');
    assert.equal(delivery.last_status, null);
    // A name that stops resolving is unresolvable, and nothing is sent either.
    dns.answers.delete('rebind.example.test');
    h.clock.advance(5);
    assert.deepEqual(await h.identity.service.deliverDueEvents(), { attempted: 1, delivered: 0, failed: 1 });
    assert.equal((await lastDelivery(h, org, created.body.data.id)).last_error, 'unresolvable');
    assert.equal(receiver.connections, 0, 'no request reached the listener');
  });
});

describe('private networks allowed (tests, private deployments)', () => {
  let h: Harness;
  let receiver: WebhookReceiver;
  const dns = new StubDns();
  before(async () => {
    receiver = await WebhookReceiver.start();
    h = await Harness.start({ dns: dns.adapter, config: { webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true }, events: { delivery: DELIVERY } } });
  });
  after(async () => {
    await h.close();
    await receiver.close();
  });

  test('the flags warn once at start-up', () => {
    assert.equal(h.logs.filter((line) => line.level === 'warn' && /allowPrivateNetworks/.test(line.msg)).length, 1);
    assert.equal(h.logs.filter((line) => line.level === 'warn' && /allowHttp/.test(line.msg)).length, 1);
  });

  test('link-local stays refused: the cloud metadata addresses', async () => {
    const org = await createOrg(h);
    dns.answers.set('metadata.example.test', ['169.254.169.254']);
    for (const url of ['http://169.254.169.254/latest/meta-data/', 'http://[fe80::1]/hook', 'http://[::ffff:169.254.169.254]/hook', 'http://metadata.example.test/hook']) {
      const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['*'] }, { token: org.owner.token });
      assertError(response, 422, 'invalid_webhook_url', url);
      assert.equal(response.body.reason, 'private_address', url);
    }
  });

  test('the socket is pinned to the checked address: the name is resolved once per attempt, and sent as Host', async () => {
    const org = await createOrg(h);
    dns.answers.set('pinned.example.test', ['127.0.0.1']);
    const created = await h.post(`/orgs/${org.id}/webhooks`, { url: `http://pinned.example.test:${receiver.port}/hook`, events: ['org.updated'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const before = dns.lookups.filter((name) => name === 'pinned.example.test').length;
    await touch(h, org);
    await eventually(() => receiver.requests.length === 1, 'delivered');
    // pinned.example.test exists only in the stub: had the connection resolved the name again, it would have failed.
    assert.equal(dns.lookups.filter((name) => name === 'pinned.example.test').length, before + 1);
    assert.equal(receiver.requests[0]!.headers.host, `pinned.example.test:${receiver.port}`);
    assert.equal((await lastDelivery(h, org, created.body.data.id)).status, 'delivered');
  });
});

describe('the guard module (shared with SSO, CONTRACT 12.2)', () => {
  test('classifies addresses', () => {
    const cases: Array<[string, string]> = [
      ['93.184.216.34', 'public'], ['8.8.8.8', 'public'], ['2606:4700::1111', 'public'],
      ['127.0.0.1', 'private'], ['10.0.0.1', 'private'], ['172.31.255.255', 'private'], ['172.32.0.1', 'public'],
      ['192.168.0.1', 'private'], ['100.64.0.1', 'private'], ['100.128.0.1', 'public'], ['198.19.255.255', 'private'],
      ['0.0.0.0', 'private'], ['224.0.0.1', 'private'], ['240.0.0.1', 'private'],
      ['169.254.169.254', 'link_local'], ['fe80::1', 'link_local'], ['febf::1', 'link_local'],
      ['::1', 'private'], ['::', 'private'], ['fc00::1', 'private'], ['ff02::1', 'private'],
      ['::ffff:127.0.0.1', 'private'], ['::ffff:8.8.8.8', 'public'], ['::ffff:169.254.169.254', 'link_local'],
      ['64:ff9b::a00:1', 'private'], ['64:ff9b::808:808', 'public'], ['2002:7f00:1::', 'private'],
      ['fe80::1%eth0', 'link_local'], ['not an address', 'private'],
    ];
    for (const [address, expected] of cases) assert.equal(classifyAddress(address), expected, address);
  });

  test('an origin list exempts exactly those origins (the SSO form of allowPrivateNetworks)', async () => {
    const guard = new OutboundGuard({ allowHttp: false, allowPrivateNetworks: ['http://127.0.0.1:8080'] }, undefined);
    assert.equal((await guard.check('http://127.0.0.1:8080/.well-known/openid-configuration')).address.address, '127.0.0.1');
    await assert.rejects(guard.check('http://127.0.0.1:8081/x'), (error: unknown) => error instanceof OutboundRefusal && error.reason === 'scheme');
    await assert.rejects(guard.check('https://127.0.0.1:8081/x'), (error: unknown) => error instanceof OutboundRefusal && error.reason === 'private_address');
    const metadata = new OutboundGuard({ allowHttp: false, allowPrivateNetworks: ['http://169.254.169.254'] }, undefined);
    await assert.rejects(metadata.check('http://169.254.169.254/latest'), (error: unknown) => error instanceof OutboundRefusal && error.reason === 'private_address');
  });
});
