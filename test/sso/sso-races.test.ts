import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import type { Harness, TestResponse } from '../helpers/harness.js';
import { CLIENT_ID, CLIENT_SECRET, type TestOpenIdProvider } from '../helpers/oidc.js';
import { addMember, createOrg, type CreatedOrg } from '../helpers/orgs.js';
import { addVerifiedDomain, connect, StubDns, uniqueDomain, withSsoHarness } from '../helpers/sso.js';

/*
 * docs/sso.md under concurrent administration, on every database (PostgreSQL runs the
 * requests on separate connections at once):
 * - one domain added twice at once to one organization (by one administrator or two) would
 *   otherwise leave two rows or answer 500 on the unique (organization, domain) index; the
 *   contract answers 201 and 409 `conflict`. Added at once to two organizations, each holds
 *   it pending (201 twice, one row each); added while another organization verifies it, the
 *   add is 201 pending or 409 `domain_taken`, and never two verified owners;
 * - a domain deleted while its verification waits on DNS, or deleted twice at once, would
 *   otherwise be verified back into existence, answer 500, or announce its removal twice;
 * - a connection deleted while an update waits on discovery, or deleted twice at once, would
 *   otherwise be written back (resurrected), answer 500, or announce its deletion twice.
 * The pauses are the stub DNS and test IdP hooks; no test sleeps.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();
const ROUNDS = 3;

withSsoHarness(dns, (started) => ({ op, h } = started));

const eventsOf = (type: string, where: (data: Record<string, unknown>) => boolean) => h.events.filter((event) => event.type === type && where(event.data as Record<string, unknown>));
const statusesOf = (answers: TestResponse[]) => answers.map((answer) => answer.status).sort((a, b) => a - b);
const texts = (answers: TestResponse[]) => answers.map((answer) => `${answer.status} ${answer.text}`).join(' | ');

/** An organization with a second holder of sso.manage, fresh as the owner. */
async function twoAdministrators(): Promise<{ org: CreatedOrg; second: string }> {
  const org = await createOrg(h);
  // Holding what a member holds, so a connection's default role (member) is no escalation for either.
  const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
  const member = (roles.body.data as Array<{ slug: string; permission_keys: string[] }>).find((candidate) => candidate.slug === 'member')!;
  const role = await h.post(`/orgs/${org.id}/roles`, { name: 'IdP admins', slug: 'idp-admins', permission_keys: [...member.permission_keys, 'sso.manage'] }, { token: org.owner.token });
  assert.equal(role.status, 201, role.text);
  const admin = await addMember(h, org, org.owner.token, ['idp-admins']);
  return { org, second: admin.token };
}

describe('one domain added at once', () => {
  for (const who of ['one administrator twice', 'two administrators'] as const) {
    test(`to one organization by ${who}: one 201, one 409 conflict, one row, one event`, async () => {
      for (let round = 0; round < ROUNDS; round += 1) {
        const { org, second } = await twoAdministrators();
        const tokens = who === 'two administrators' ? [org.owner.token, second] : [org.owner.token, org.owner.token];
        const domain = uniqueDomain('same');
        // Written differently, normalised alike: the index sees one domain.
        const answers = await Promise.all([
          h.post(`/orgs/${org.id}/domains`, { domain }, { token: tokens[0] }),
          h.post(`/orgs/${org.id}/domains`, { domain: ` ${domain.toUpperCase()}. ` }, { token: tokens[1] }),
        ]);
        assert.deepEqual(statusesOf(answers), [201, 409], texts(answers));
        assertError(answers.find((answer) => answer.status === 409)!, 409, 'conflict');
        assert.equal(await countRows(h, 'org_domains', { organization_id: org.id, domain }), 1, 'one row');
        assert.equal(eventsOf('org.domain_added', (data) => data.domain === domain).length, 1, 'one event');
      }
    });
  }

  test('to two organizations: both 201 pending, one row each with its own token, neither verified', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const [first, second] = await Promise.all([createOrg(h), createOrg(h)]);
      const domain = uniqueDomain('both');
      const answers = await Promise.all([
        h.post(`/orgs/${first.id}/domains`, { domain }, { token: first.owner.token }),
        h.post(`/orgs/${second.id}/domains`, { domain }, { token: second.owner.token }),
      ]);
      assert.deepEqual(statusesOf(answers), [201, 201], texts(answers));
      for (const answer of answers) assert.equal(answer.body.data.status, 'pending');
      assert.notEqual(answers[0]!.body.data.txt_value, answers[1]!.body.data.txt_value, 'each its own token');
      assert.equal(await countRows(h, 'org_domains', { organization_id: first.id, domain }), 1);
      assert.equal(await countRows(h, 'org_domains', { organization_id: second.id, domain }), 1);
      assert.equal(await countRows(h, 'org_domains', { domain, status: 'verified' }), 0);
      assert.equal(eventsOf('org.domain_added', (data) => data.domain === domain).length, 2);
    }
  });

  test('while another organization verifies it: an add is 201 pending or 409 domain_taken, never two verified owners, never 500', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const [owner, latecomer, racer] = await Promise.all([createOrg(h), createOrg(h), createOrg(h)]);
      const domain = uniqueDomain('taken');
      const added = await h.post(`/orgs/${owner.id}/domains`, { domain }, { token: owner.owner.token });
      assert.equal(added.status, 201, added.text);
      dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
      // One add lands while the verification waits on DNS (the domain is still unverified), one
      // races the verification's write.
      let during: TestResponse | undefined;
      dns.duringNextTxt(async () => {
        during = await h.post(`/orgs/${latecomer.id}/domains`, { domain }, { token: latecomer.owner.token });
      });
      const [verified, racing] = await Promise.all([
        h.post(`/orgs/${owner.id}/domains/${added.body.data.id}/verify`, {}, { token: owner.owner.token }),
        h.post(`/orgs/${racer.id}/domains`, { domain }, { token: racer.owner.token }),
      ]);
      assert.equal(verified.status, 200, verified.text);
      assert.equal(during?.status, 201, during?.text);
      assert.equal(during!.body.data.status, 'pending');
      if (racing.status === 201) assert.equal(racing.body.data.status, 'pending');
      else assertError(racing, 409, 'domain_taken');
      const third = await createOrg(h);
      assertError(await h.post(`/orgs/${third.id}/domains`, { domain }, { token: third.owner.token }), 409, 'domain_taken');
      assertError(await h.post(`/orgs/${latecomer.id}/domains/${during!.body.data.id}/verify`, {}, { token: latecomer.owner.token }), 409, 'domain_taken');
      assert.equal(await countRows(h, 'org_domains', { domain, status: 'verified' }), 1, 'one verified owner');
      assert.equal(await countRows(h, 'org_domains', { domain }), racing.status === 201 ? 3 : 2);
    }
  });
});

describe('a domain deleted during its verification, or twice at once', () => {
  test('deleted while the TXT lookup is in flight: the delete 200, the verify 404 not_found, nothing verified back, one event each way', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const org = await createOrg(h);
      const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain('gone') }, { token: org.owner.token });
      assert.equal(added.status, 201, added.text);
      const { id, domain } = added.body.data as { id: string; domain: string };
      dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
      let deleted: TestResponse | undefined;
      dns.duringNextTxt(async () => {
        deleted = await h.delete(`/orgs/${org.id}/domains/${id}`, { token: org.owner.token });
      });
      const verified = await h.post(`/orgs/${org.id}/domains/${id}/verify`, {}, { token: org.owner.token });
      assert.equal(deleted?.status, 200, deleted?.text);
      assert.deepEqual(deleted!.body.data, { status: 'deleted' });
      assertError(verified, 404, 'not_found');
      assert.equal(await countRows(h, 'org_domains', { id }), 0, 'not verified back into existence');
      assert.equal(eventsOf('org.domain_removed', (data) => data.domain_id === id).length, 1);
      assert.equal(eventsOf('org.domain_verified', (data) => data.domain === domain).length, 0);
    }
  });

  test('deleted twice at once (one administrator twice, or two): one 200, one 404 not_found, one event', async () => {
    for (let round = 0; round < ROUNDS * 2; round += 1) {
      const { org, second } = await twoAdministrators();
      // A verified domain too: the connection it keeps active is no reason for anything else to change.
      const domain = round % 2 === 0 ? await addVerifiedDomain(h, dns, org) : (await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain('twice') }, { token: org.owner.token })).body.data;
      const path = `/orgs/${org.id}/domains/${domain.id}`;
      const answers = await Promise.all([h.delete(path, { token: org.owner.token }), h.delete(path, { token: round < ROUNDS ? org.owner.token : second })]);
      assert.deepEqual(statusesOf(answers), [200, 404], texts(answers));
      assertError(answers.find((answer) => answer.status === 404)!, 404, 'not_found');
      assert.equal(await countRows(h, 'org_domains', { id: domain.id }), 0);
      assert.equal(eventsOf('org.domain_removed', (data) => data.domain_id === domain.id).length, 1, 'one event');
    }
  });
});

describe('the connection deleted during an update, or twice at once', () => {
  const connectionEvents = (orgId: string, type: string) => h.events.filter((event) => event.organization_id === orgId && event.type === type);

  test('deleted while the update\'s discovery is in flight: the delete 200, the update 404 not_found, the connection stays gone, one event', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const org = await createOrg(h);
      await addVerifiedDomain(h, dns, org);
      const connection = await connect(h, op, org, { jit: true });
      let deleted: TestResponse | undefined;
      op.beforeNextDiscovery = async () => {
        deleted = await h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token });
      };
      const updated = await h.patch(`/orgs/${org.id}/sso`, { client_secret: 'another-secret', enforce: true }, { token: org.owner.token });
      assert.equal(op.beforeNextDiscovery, undefined, 'the delete ran during discovery');
      assert.equal(deleted?.status, 200, deleted?.text);
      assertError(updated, 404, 'not_found');
      assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0, 'not written back');
      assertError(await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
      assert.equal(connectionEvents(org.id, 'sso.connection_deleted').length, 1);
      assert.deepEqual(connectionEvents(org.id, 'sso.connection_deleted')[0]!.data, { connection_id: connection.id });
      assert.equal(connectionEvents(org.id, 'sso.connection_updated').length, 0);
      // The organization may connect again; the old connection's id is not reused.
      const again = await connect(h, op, org);
      assert.notEqual(again.id, connection.id);
    }
  });

  test('created while another create waits on discovery: one 201, the other 409 conflict, one connection, one event', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const { org, second } = await twoAdministrators();
      const body = { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET };
      let during: TestResponse | undefined;
      op.beforeNextDiscovery = async () => {
        during = await h.post(`/orgs/${org.id}/sso`, { ...body, jit: true }, { token: second });
      };
      const waited = await h.post(`/orgs/${org.id}/sso`, body, { token: org.owner.token });
      assert.equal(during?.status, 201, during?.text);
      assertError(waited, 409, 'conflict');
      assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 1);
      assert.equal((await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token })).body.data.jit, true, 'the first to commit is kept');
      assert.equal(connectionEvents(org.id, 'sso.connection_created').length, 1);
    }
  });

  test('deleted twice at once (one administrator twice, or two): one 200, one 404 not_found, one event', async () => {
    for (let round = 0; round < ROUNDS * 2; round += 1) {
      const { org, second } = await twoAdministrators();
      const connection = await connect(h, op, org);
      const answers = await Promise.all([
        h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token }),
        h.delete(`/orgs/${org.id}/sso`, { token: round < ROUNDS ? org.owner.token : second }),
      ]);
      assert.deepEqual(statusesOf(answers), [200, 404], texts(answers));
      assertError(answers.find((answer) => answer.status === 404)!, 404, 'not_found');
      assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0);
      assert.deepEqual(connectionEvents(org.id, 'sso.connection_deleted').map((event) => event.data), [{ connection_id: connection.id }]);
    }
  });
});
