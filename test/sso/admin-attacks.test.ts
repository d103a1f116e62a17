import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { type Harness, TEST_DB } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { authorizeAtProvider, callRouterCallback, handoffPair, newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { createOrg, memberOf } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns, withSsoHarness } from '../helpers/sso.js';
import { OrgDomainRepository } from '../../src/store/sso-repository.js';

/*
 * Single sign-on administration attacked (docs/sso.md, CONTRACT 12):
 * - an administrator's change committed while a sign-in's exchange is under way (PostgreSQL):
 *   the exchange must decide by the connection as it is once it holds the organization, not as
 *   it read it a moment before (a deleted connection, a disabled one, JIT turned off, another
 *   default role);
 * - an IdP whose discovery document changes after the connection was checked: the endpoint the
 *   browser is sent to is checked at every sign-in as at configuration;
 * - a domain another organization verified, claimed in another spelling; a public suffix or a
 *   consumer-mail domain in another spelling; a TXT record that only looks like the proof;
 * - the organization or its last domain removed while a sign-in is in flight;
 * - the client secret in any answer, event, audit entry or log, a refused one included.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();

withSsoHarness(dns, (started) => ({ op, h } = started));

const skipUnlessPg = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

describe('an administrator changes the connection while a first sign-in is exchanged (PostgreSQL)', { skip: skipUnlessPg }, () => {
  /**
   * A JIT first sign-in up to its callback, then its exchange with `change` committed in the
   * exchange's window: after it looked the connection up, before its transaction.
   */
  async function exchangeWith(change: (org: { id: string; owner: { token: string } }) => Promise<{ status: number; text: string }>, body: Record<string, unknown> = {}) {
    const { org, domain, connection } = await ssoOrg(h, dns, op, { jit: true, ...body });
    const email = addressAt(domain, 'racing');
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assert.ok(trip.code, `callback: ${trip.location?.href}`);
    let armed = false;
    const { outer: exchanged, inner: changed } = await withRequestInTheWindow(
      h,
      // The last read of the connection's lookup (an active connection holds a verified domain).
      { prototype: OrgDomainRepository.prototype, method: 'hasVerified', when: (organizationId) => armed && organizationId === org.id },
      () => change(org),
      () => {
        armed = true;
        return h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
      },
    );
    assert.ok(changed, 'the change ran inside the window');
    assert.equal(changed.status, 200, changed.text);
    return { org, email, connection, exchanged };
  }

  test('the connection deleted: the exchange is refused as for a deleted connection (400), never a 500; nothing created', async () => {
    const { email, exchanged } = await exchangeWith((org) => h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token }));
    assertError(exchanged, 400, 'invalid_token');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('the connection disabled: no session opens through it; nothing created', async () => {
    const { email, exchanged } = await exchangeWith((org) => h.patch(`/orgs/${org.id}/sso`, { enabled: false }, { token: org.owner.token }));
    assertError(exchanged, 400, 'invalid_token');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('JIT turned off: the newcomer is not made a user and member (sso_not_member)', async () => {
    const { email, exchanged } = await exchangeWith((org) => h.patch(`/orgs/${org.id}/sso`, { jit: false }, { token: org.owner.token }));
    assertError(exchanged, 403, 'sso_not_member');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('the default role changed: the newcomer joins with the new one, not the one the administrator just replaced', async () => {
    const { org, exchanged } = await exchangeWith(async (org) => {
      const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
      const member = (roles.body.data as Array<{ slug: string; permission_keys: string[] }>).find((role) => role.slug === 'member')!;
      const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Guests', slug: 'guest', permission_keys: member.permission_keys.slice(0, 1) }, { token: org.owner.token });
      assert.equal(created.status, 201, created.text);
      return h.patch(`/orgs/${org.id}/sso`, { default_role: 'guest' }, { token: org.owner.token });
    });
    assert.equal(exchanged.status, 200, exchanged.text);
    const row = await memberOf(h, org.id, org.owner.token, exchanged.body.data.user.id);
    assert.deepEqual(row.roles, ['guest']);
  });
});

/** A loopback IdP whose discovery document the test rewrites between sign-ins. */
class ChangingIdp {
  document: Record<string, unknown> = {};
  origin!: string;
  private server!: Server;

  static async start(): Promise<ChangingIdp> {
    const idp = new ChangingIdp();
    idp.server = createServer((req, res) => {
      const found = req.url === '/.well-known/openid-configuration';
      res.writeHead(found ? 200 : 404, { 'content-type': 'application/json' });
      res.end(found ? JSON.stringify(idp.document) : '{}');
    });
    await new Promise<void>((resolve) => idp.server.listen(0, '127.0.0.1', () => resolve()));
    idp.origin = `http://127.0.0.1:${(idp.server.address() as AddressInfo).port}`;
    idp.document = idp.discovery();
    return idp;
  }

  discovery(endpoints: Record<string, string> = {}): Record<string, unknown> {
    return {
      issuer: this.origin,
      authorization_endpoint: `${this.origin}/auth`,
      token_endpoint: `${this.origin}/token`,
      jwks_uri: `${this.origin}/jwks`,
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256'],
      ...endpoints,
    };
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('a discovery document that changes after the connection was checked', () => {
  let idp: ChangingIdp;
  let hi: Harness;
  const idpDns = new StubDns();
  before(async () => {
    idp = await ChangingIdp.start();
    hi = await startSsoHarness(undefined, idpDns, { sso: { allowPrivateNetworks: [idp.origin] } });
  });
  after(async () => {
    await hi.close();
    await idp.close();
  });

  const authorize = (email: string) => hi.post('/auth/sso/authorize', { email, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' });

  for (const [what, endpoint] of [
    ['an http: authorization endpoint', 'http://idp.example.com/authorize'],
    ['a private-address authorization endpoint', 'https://10.1.2.3/authorize'],
    ['a javascript: authorization endpoint', 'javascript:alert(document.domain)//'],
  ] as const) {
    test(`${what}, refused at configuration, is refused at sign-in too: 502 provider_unavailable, no URL handed out`, async () => {
      idp.document = idp.discovery();
      const org = await createOrg(hi);
      const { domain } = await addVerifiedDomain(hi, idpDns, org);
      const created = await hi.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
      assert.equal(created.status, 201, created.text);
      // The same document is refused at configuration.
      idp.document = idp.discovery({ authorization_endpoint: endpoint });
      assertError(await hi.patch(`/orgs/${org.id}/sso`, { issuer: idp.origin }, { token: org.owner.token }), 422, 'invalid_issuer');
      const started = await authorize(addressAt(domain));
      assertError(started, 502, 'provider_unavailable');
      assert.equal(started.body.data, undefined);
    });
  }

  test('a document without an authorization endpoint is refused at configuration (422 discovery_failed), not stored to fail every sign-in', async () => {
    const org = await createOrg(hi);
    await addVerifiedDomain(hi, idpDns, org);
    const { authorization_endpoint: _left, ...document } = idp.discovery();
    idp.document = document;
    const created = await hi.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assertError(created, 422, 'invalid_issuer');
    assert.equal(created.body.reason, 'discovery_failed');
    assert.equal(await countRows(hi, 'sso_connections', { organization_id: org.id }), 0);
  });

  test('a document that changes after a sign-in cached it is checked again once the cache expires', async () => {
    idp.document = idp.discovery();
    const org = await createOrg(hi);
    const { domain } = await addVerifiedDomain(hi, idpDns, org);
    const created = await hi.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const first = await authorize(addressAt(domain));
    assert.equal(first.status, 200, first.text);
    assert.ok(first.body.data.authorization_url.startsWith(`${idp.origin}/auth?`));
    idp.document = idp.discovery({ authorization_endpoint: 'http://idp.example.com/authorize' });
    hi.clock.advance(60 * 60 + 1);
    assertError(await authorize(addressAt(domain)), 502, 'provider_unavailable');
    // And a document naming another issuer, likewise.
    idp.document = { ...idp.discovery(), issuer: 'https://other.example.com' };
    hi.clock.advance(60 * 60 + 1);
    assertError(await authorize(addressAt(domain)), 502, 'provider_unavailable');
  });
});

describe('a domain claimed in another spelling', () => {
  test("another organization's verified domain, written in Unicode, upper case, full-width letters or with a trailing dot: 409 domain_taken on add", async () => {
    const label = `bücher${Math.random().toString(36).slice(2, 8)}`;
    const holder = await createOrg(h);
    const verified = await addVerifiedDomain(h, dns, holder, `${label}.test`);
    assert.match(verified.domain, /^xn--/);
    const claimant = await createOrg(h);
    const fullWidth = [...`${label}.test`].map((character) => (/[a-z]/.test(character) ? String.fromCharCode(character.charCodeAt(0) + 0xfee0) : character)).join('');
    for (const spelling of [`${label}.test`, `${label.toUpperCase()}.TEST`, `${verified.domain}.`, verified.domain.toUpperCase(), fullWidth, ` ${label}.test. `]) {
      const added = await h.post(`/orgs/${claimant.id}/domains`, { domain: spelling }, { token: claimant.owner.token });
      assertError(added, 409, 'domain_taken', spelling);
    }
    assert.equal(await countRows(h, 'org_domains', { organization_id: claimant.id }), 0);
  });

  test('a public suffix of the private section and a consumer-mail domain are refused in every spelling', async () => {
    const org = await createOrg(h);
    for (const spelling of ['GitHub.IO.', 'ｇｉｔｈｕｂ.io', 'GMAIL.com.', 'ｇｍａｉｌ．ｃｏｍ', ' Outlook.Com ', 'CO.UK.']) {
      assertError(await h.post(`/orgs/${org.id}/domains`, { domain: spelling }, { token: org.owner.token }), 422, 'invalid_domain', spelling);
    }
  });
});

describe('the organization or its domain removed while a sign-in is in flight', () => {
  test('the organization deleted between the callback and the exchange: 400 invalid_token, nothing created', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'inflight');
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assert.ok(trip.code, `callback: ${trip.location?.href}`);
    assert.equal((await h.delete(`/orgs/${org.id}`, { token: org.owner.token })).status, 200);
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }), 400, 'invalid_token');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('the last verified domain deleted between authorize and the callback: social_state_invalid; between the callback and the exchange: 400; nothing created', async () => {
    for (const when of ['before the callback', 'before the exchange'] as const) {
      const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
      const [verified] = (await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token })).body.data.domains;
      const email = addressAt(domain, 'inflight');
      const removeDomain = async () => assert.equal((await h.delete(`/orgs/${org.id}/domains/${verified.id}`, { token: org.owner.token })).status, 200);
      op.use({ sub: newSubject(), email });
      const handoff = handoffPair();
      const started = await h.post('/auth/sso/authorize', { email, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
      assert.equal(started.status, 200, started.text);
      const callbackPath = await authorizeAtProvider(started.body.data.authorization_url);
      if (when === 'before the callback') {
        await removeDomain();
        const back = await callRouterCallback(h, callbackPath);
        assert.equal(back.code, null, when);
        assertError(back.response, 400, 'social_state_invalid');
      } else {
        const back = await callRouterCallback(h, callbackPath);
        assert.ok(back.code, `callback: ${back.location?.href}`);
        await removeDomain();
        assertError(await h.post('/auth/social/exchange', { code: back.code, handoff_verifier: handoff.verifier }), 400, 'invalid_token');
      }
      assert.equal(await countRows(h, 'users', { email }), 0, when);
    }
  });
});

describe('TXT verification not fooled', () => {
  test('the value split across two records, at the bare domain, at a subdomain, padded, or the token of another of its own domains: 422 domain_not_verified, still pending', async () => {
    const org = await createOrg(h);
    const domain = `txt${Math.random().toString(36).slice(2, 8)}.test`;
    const added = await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    const other = await h.post(`/orgs/${org.id}/domains`, { domain: `other-${domain}` }, { token: org.owner.token });
    assert.equal(other.status, 201, other.text);
    const { txt_name: name, txt_value: value, id } = added.body.data;
    const attempts: Array<[string, () => void]> = [
      ['split across records', () => dns.txt.set(name, [[value.slice(0, 12)], [value.slice(12)]])],
      ['at the bare domain', () => dns.txt.set(domain, [[value]])],
      ['at a subdomain', () => dns.txt.set(`${name.replace(domain, `www.${domain}`)}`, [[value]])],
      ['padded', () => dns.txt.set(name, [[` ${value}`], [`${value} `], [`${value}x`]])],
      ["another domain's token", () => dns.txt.set(name, [[other.body.data.txt_value]])],
    ];
    for (const [what, publish] of attempts) {
      dns.txt.delete(name);
      publish();
      assertError(await h.post(`/orgs/${org.id}/domains/${id}/verify`, {}, { token: org.owner.token }), 422, 'domain_not_verified', what);
    }
    const listed = await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
    assert.ok((listed.body.data.domains as Array<{ status: string }>).every((entry) => entry.status === 'pending'));
  });
});

describe('the client secret never leaks', () => {
  test('a rotated secret, and one the IdP refuses at its token endpoint: not in answers, events, the audit log or logs; `changed` names the field only', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    const wrong = `wrong-secret-${Math.random().toString(36).slice(2)}`;
    const patched = await h.patch(`/orgs/${org.id}/sso`, { client_secret: wrong }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    const updated = h.events.find((event) => event.type === 'sso.connection_updated' && event.data.connection_id === connection.id);
    assert.deepEqual(updated?.data.changed, ['client_secret']);
    // The IdP refuses the client (invalid_client): the callback fails without quoting anything.
    const email = addressAt(domain, 'secret');
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assert.equal(trip.code, null);
    assert.equal(trip.error, 'provider_response_invalid');
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    const audit = await h.get(`/orgs/${org.id}/audit-log?limit=100`, { token: org.owner.token });
    assert.equal(audit.status, 200, audit.text);
    const seen = JSON.stringify(h.logs) + JSON.stringify(h.events) + read.text + patched.text + audit.text + (trip.location?.href ?? '');
    for (const secret of [wrong, 'client-secret-of-the-test-provider']) assert.ok(!seen.includes(secret), secret);
    assert.ok(!seen.includes(Buffer.from(`${encodeURIComponent(connection.client_id)}:${encodeURIComponent(wrong)}`).toString('base64')), 'nor its Basic form');
  });
});
