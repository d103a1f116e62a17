import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { type Harness, TEST_DB, type TestResponse } from '../helpers/harness.js';
import { SsoIdentityRepository } from '../../src/store/sso-repository.js';
import { callRouterCallback, CLIENT_ID, CLIENT_SECRET, newSubject, socialConfig, TestOpenIdProvider } from '../helpers/oidc.js';
import { createOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns, withSsoHarness } from '../helpers/sso.js';

/*
 * docs/sso.md, and the attacks on single sign-on it lists:
 * - SSRF through the provider URL (better-auth CVE-2026-53513): an organization admin points
 *   its connection at the router's own network. Every refusal is proven by a listener on
 *   127.0.0.1 that counts TCP connections: it must see none.
 * - Account lookup that ignores the provider (CVE-2026-110863): a copied issuer asserting a
 *   victim's subject, or an address of another organization's verified domain.
 * - Replayed and cross-connection state.
 * - On PostgreSQL, two concurrent first sign-ins of one user.
 */

/** A loopback HTTP server that counts connections and answers discovery as the test sets it. */
class FakeIdp {
  connections = 0;
  discovery: ((origin: string) => { status: number; body?: unknown; headers?: Record<string, string> }) | undefined;
  origin!: string;
  port!: number;
  private server!: Server;

  static async start(): Promise<FakeIdp> {
    const idp = new FakeIdp();
    idp.server = createServer((req, res) => {
      const answer = idp.discovery?.(idp.origin) ?? { status: 404 };
      res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
      res.end(answer.body === undefined ? '' : JSON.stringify(answer.body));
      void req;
    });
    idp.server.on('connection', () => {
      idp.connections += 1;
    });
    await new Promise<void>((resolve) => idp.server.listen(0, '127.0.0.1', () => resolve()));
    idp.port = (idp.server.address() as AddressInfo).port;
    idp.origin = `http://127.0.0.1:${idp.port}`;
    return idp;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function discoveryDocument(issuer: string, endpoints: Record<string, string> = {}) {
  return {
    issuer,
    authorization_endpoint: `${issuer}/auth`,
    token_endpoint: `${issuer}/token`,
    jwks_uri: `${issuer}/jwks`,
    userinfo_endpoint: `${issuer}/me`,
    response_types_supported: ['code'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: ['RS256'],
    ...endpoints,
  };
}

describe('SSRF: private addresses refused in every spelling, nothing reached', () => {
  let h: Harness;
  let idp: FakeIdp;
  const dns = new StubDns();
  before(async () => {
    idp = await FakeIdp.start();
    idp.discovery = (origin) => ({ status: 200, body: discoveryDocument(origin) });
    h = await startSsoHarness(undefined, dns);
  });
  after(async () => {
    await h.close();
    await idp.close();
  });

  test('loopback, private, link-local, CGNAT and IPv6 forms: 422 invalid_issuer private_address; no connection, nothing stored', async () => {
    const org = await createOrg(h);
    const port = idp.port;
    dns.answers.set('internal.example.com', ['10.0.0.7']);
    dns.answers.set('loopback.example.com', ['127.0.0.1']);
    dns.answers.set('metadata.example.com', ['169.254.169.254']);
    dns.answers.set('mixed.example.com', ['93.184.216.34', '127.0.0.1']);
    dns.answers.set('mapped.example.com', ['::ffff:127.0.0.1']);
    const issuers = [
      `https://127.0.0.1:${port}`,
      `https://2130706433:${port}`,
      `https://0x7f.1:${port}`,
      `https://0177.0.0.1:${port}`,
      `https://127.1:${port}`,
      `https://[::1]:${port}`,
      `https://[::ffff:127.0.0.1]:${port}`,
      `https://[64:ff9b::7f00:1]:${port}`,
      'https://100.64.0.1',
      'https://169.254.169.254',
      `https://internal.example.com:${port}`,
      `https://loopback.example.com:${port}`,
      'https://metadata.example.com',
      `https://mixed.example.com:${port}`,
      `https://mapped.example.com:${port}`,
    ];
    for (const issuer of issuers) {
      const response = await h.post(`/orgs/${org.id}/sso`, { issuer, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
      assertError(response, 422, 'invalid_issuer', issuer);
      assert.equal(response.body.reason, 'private_address', issuer);
    }
    assert.equal(idp.connections, 0, 'no request reached the listener');
    assert.equal(await countRows(h, 'sso_connections'), 0, 'nothing stored');
  });

  test('http: outside an exempt origin is insecure_scheme; userinfo, query and fragment are refused', async () => {
    const org = await createOrg(h);
    const http = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assertError(http, 422, 'invalid_issuer');
    assert.equal(http.body.reason, 'insecure_scheme');
    for (const issuer of [`https://user:pw@idp.example.com`, 'https://idp.example.com/?x=1', 'https://idp.example.com/#f']) {
      assertError(await h.post(`/orgs/${org.id}/sso`, { issuer, client_id: 'c', client_secret: 's' }, { token: org.owner.token }), 422, 'invalid_issuer', issuer);
    }
    assert.equal(idp.connections, 0);
  });
});

describe('SSRF with exempt origins (the test and private-deployment allowance)', () => {
  let h: Harness;
  let idp: FakeIdp;
  let target: FakeIdp;
  const dns = new StubDns();
  before(async () => {
    idp = await FakeIdp.start();
    target = await FakeIdp.start();
    dns.answers.set('idp.rebind.test', ['127.0.0.1']);
    h = await startSsoHarness(undefined, dns, { sso: { allowPrivateNetworks: [idp.origin, `http://idp.rebind.test:${idp.port}`] } });
  });
  after(async () => {
    await h.close();
    await idp.close();
    await target.close();
  });

  test('a redirect answer fails discovery (discovery_failed) and is never followed', async () => {
    const org = await createOrg(h);
    idp.discovery = () => ({ status: 302, headers: { location: `${target.origin}/.well-known/openid-configuration` } });
    const response = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assertError(response, 422, 'invalid_issuer');
    assert.equal(response.body.reason, 'discovery_failed');
    assert.equal(target.connections, 0, 'the redirect target was never contacted');
  });

  test('a discovery answer over 1 MB fails discovery (discovery_failed); nothing stored', async () => {
    const org = await createOrg(h);
    idp.discovery = (origin) => ({ status: 200, body: { ...discoveryDocument(origin), padding: 'x'.repeat(1024 * 1024) } });
    const response = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assertError(response, 422, 'invalid_issuer');
    assert.equal(response.body.reason, 'discovery_failed');
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0);
  });

  test('a discovery document naming another issuer is issuer_mismatch', async () => {
    const org = await createOrg(h);
    idp.discovery = () => ({ status: 200, body: discoveryDocument('https://accounts.example.com') });
    const response = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
    assertError(response, 422, 'invalid_issuer');
    assert.equal(response.body.reason, 'issuer_mismatch');
  });

  test('an endpoint on another origin is checked on its own: a private token or JWKS endpoint, or an http: authorization endpoint, is refused', async () => {
    const org = await createOrg(h);
    for (const endpoints of [
      { token_endpoint: 'http://10.1.2.3/token' } as Record<string, string>,
      { jwks_uri: `${target.origin}/jwks` },
      { userinfo_endpoint: 'http://169.254.169.254/latest/meta-data' },
      // CONTRACT 12.2 "every endpoint": the browser's one too, over http: or at a private address.
      { authorization_endpoint: 'http://idp.example.com/authorize' },
      { authorization_endpoint: 'https://10.1.2.3/authorize' },
    ]) {
      idp.discovery = (origin) => ({ status: 200, body: discoveryDocument(origin, endpoints) });
      const response = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.origin, client_id: 'c', client_secret: 's' }, { token: org.owner.token });
      assertError(response, 422, 'invalid_issuer', JSON.stringify(endpoints));
      assert.ok(['private_address', 'insecure_scheme'].includes(response.body.reason), response.text);
    }
    assert.equal(target.connections, 0);
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0);
  });

  test('link-local stays refused even for an exempt origin; DNS rebinding at sign-in reaches nothing', async () => {
    const org = await createOrg(h);
    await addVerifiedDomain(h, dns, org);
    const issuer = `http://idp.rebind.test:${idp.port}`;
    idp.discovery = () => ({ status: 200, body: discoveryDocument(issuer) });
    const created = await connect(h, { issuer } as TestOpenIdProvider, org);
    assert.equal(created.status, 'active');
    // The name now answers the cloud metadata address; the connection changes, so discovery runs again.
    dns.answers.set('idp.rebind.test', ['169.254.169.254']);
    assert.equal((await h.patch(`/orgs/${org.id}/sso`, { jit: true }, { token: org.owner.token })).status, 200);
    const before = idp.connections;
    const response = await h.post('/auth/sso/authorize', { organization_slug: org.slug, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' });
    assertError(response, 502, 'provider_unavailable');
    assert.equal(idp.connections, before, 'the rebound name reached nothing');
  });
});

describe('issuer and subject confusion, foreign domains, state', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  const dns = new StubDns();
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await startSsoHarness(op, dns, { config: { social: socialConfig(op) } });
  });
  after(async () => {
    await h.close();
    await op.close();
  });

  test("a copied issuer asserting the victim's sub signs in someone else, never the victim", async () => {
    const victimOrg = await ssoOrg(h, dns, op, { jit: true });
    const victimEmail = addressAt(victimOrg.domain, 'victim');
    const victimSub = newSubject();
    const victim = await ssoLogin(h, op, { sub: victimSub, email: victimEmail }, { email: victimEmail });
    assert.equal(victim.exchanged!.status, 200, victim.exchanged!.text);
    const victimId = victim.exchanged!.body.data.user.id;

    // The attacker's organization connects the very same issuer and client, and asserts the victim's sub.
    const attacker = await ssoOrg(h, dns, op, { jit: true });
    const attackerEmail = addressAt(attacker.domain, 'attacker');
    const asserted = await ssoLogin(h, op, { sub: victimSub, email: attackerEmail }, { email: attackerEmail });
    assert.equal(asserted.exchanged!.status, 200, asserted.exchanged!.text);
    assert.notEqual(asserted.exchanged!.body.data.user.id, victimId, 'the (connection, sub) key keeps the identities apart');
    assert.equal(asserted.exchanged!.body.data.organization_id, attacker.org.id);
  });

  test("a provider asserting an address of another organization's verified domain: sso_email_outside_domain, on every login", async () => {
    const victimOrg = await ssoOrg(h, dns, op, { jit: true });
    const victim = await h.signUp(addressAt(victimOrg.domain, 'victim'));
    const attacker = await ssoOrg(h, dns, op, { jit: true });
    let trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: victim.email, email_verified: true }, { organization_slug: attacker.org.slug });
    assert.equal(trip.error, 'sso_email_outside_domain');
    assert.equal(trip.code, null);
    // A linked identity whose IdP later asserts an outside address is refused too.
    const insider = addressAt(attacker.domain, 'insider');
    const sub = newSubject();
    assert.equal((await ssoLogin(h, op, { sub, email: insider }, { email: insider })).exchanged!.status, 200);
    trip = await ssoRoundTrip(h, op, { sub, email: victim.email }, { organization_slug: attacker.org.slug });
    assert.equal(trip.error, 'sso_email_outside_domain');
    assert.equal(await countRows(h, 'sso_identities', { user_id: victim.userId }), 0);
  });

  test('a replayed state, and a state carried to another connection or to a social callback, are social_state_invalid', async () => {
    const first = await ssoOrg(h, dns, op, { jit: true });
    const second = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(first.domain);
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assert.ok(trip.code);
    const replay = await callRouterCallback(h, trip.callbackPath);
    assertError(replay.response, 400, 'social_state_invalid');

    // A fresh flow of the first connection, its callback sent to the second connection: burned.
    op.use({ sub: newSubject(), email });
    const started = await h.post('/auth/sso/authorize', { email, handoff_challenge: trip.handoff.challenge, handoff_challenge_method: 'S256' });
    const { authorizeAtProvider } = await import('../helpers/oidc.js');
    const callbackPath = await authorizeAtProvider(started.body.data.authorization_url);
    const crossed = callbackPath.replace(first.connection.id, second.connection.id);
    assertError((await callRouterCallback(h, crossed)).response, 400, 'social_state_invalid');
    assertError((await callRouterCallback(h, callbackPath)).response, 400, 'social_state_invalid', 'burned by the crossed attempt');

    // And to the social provider's callback.
    op.use({ sub: newSubject(), email });
    const third = await h.post('/auth/sso/authorize', { email, handoff_challenge: trip.handoff.challenge, handoff_challenge_method: 'S256' });
    const path = await authorizeAtProvider(third.body.data.authorization_url);
    const query = path.slice(path.indexOf('?'));
    assertError((await callRouterCallback(h, `/auth/social/test/callback${query}`)).response, 400, 'social_state_invalid');
  });

  test("a social provider's state carried to a connection's callback is social_state_invalid, and burned", async () => {
    const { domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    op.use({ sub: newSubject(), email: addressAt(domain), email_verified: true });
    const { startLogin, authorizeAtProvider } = await import('../helpers/oidc.js');
    const started = await startLogin(h);
    const path = await authorizeAtProvider(started.authorizationUrl);
    const query = path.slice(path.indexOf('?'));
    assertError((await callRouterCallback(h, `/auth/sso/${connection.id}/callback${query}`)).response, 400, 'social_state_invalid');
    assertError((await callRouterCallback(h, path)).response, 400, 'social_state_invalid', 'burned by the crossed attempt');
  });

  test('an exchange code is single-use and bound to the tab (handoff verifier)', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain);
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: 'w'.repeat(43) }), 400, 'invalid_token');
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }), 400, 'invalid_token', 'burned');
  });
});

describe('PostgreSQL: two concurrent first sign-ins of one user', { skip: TEST_DB !== 'pg' }, () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  const dns = new StubDns();
  withSsoHarness(dns, (started) => ({ op, h } = started));

  test('create one user, one identity and one membership', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain);
    const account = { sub: newSubject(), email };
    const first = await ssoRoundTrip(h, op, account, { email });
    const second = await ssoRoundTrip(h, op, account, { email });
    const answers = await Promise.all([first, second].map((trip) => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier })));
    for (const answer of answers) assert.equal(answer.status, 200, answer.text);
    assert.equal(answers[0]!.body.data.user.id, answers[1]!.body.data.user.id);
    assert.equal(await countRows(h, 'users', { email }), 1);
    assert.equal(await countRows(h, 'sso_identities', { user_id: answers[0]!.body.data.user.id }), 1);
    assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: answers[0]!.body.data.user.id }), 1);
  });

  // The interleaving the test above meets only by chance: the other first sign-in commits the
  // account's link after this one looked the subject up (step 2) and before it looks the
  // address up (step 3). Step 3 then finds the account linked to this very subject, and the
  // sign-in must resolve again rather than refuse the link as another subject's.
  test('a link committed between the subject lookup and the address lookup resolves to it', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain);
    const account = { sub: newSubject(), email };
    const late = await ssoRoundTrip(h, op, account, { email });
    const early = await ssoRoundTrip(h, op, account, { email });
    const lookUp = SsoIdentityRepository.prototype.findByConnectionSubject;
    let competing: TestResponse | undefined;
    let armed = true;
    SsoIdentityRepository.prototype.findByConnectionSubject = async function (this: SsoIdentityRepository, connectionId: string, subject: string) {
      const found = await lookUp.call(this, connectionId, subject);
      // Once: the competing exchange's own lookup runs through here too.
      if (armed && subject === account.sub) {
        armed = false;
        competing = await h.post('/auth/social/exchange', { code: early.code, handoff_verifier: early.handoff.verifier });
      }
      return found;
    };
    let answer: TestResponse;
    try {
      answer = await h.post('/auth/social/exchange', { code: late.code, handoff_verifier: late.handoff.verifier });
    } finally {
      SsoIdentityRepository.prototype.findByConnectionSubject = lookUp;
    }
    assert.equal(competing?.status, 200, competing?.text);
    assert.equal(answer.status, 200, answer.text);
    const userId = competing!.body.data.user.id;
    assert.equal(answer.body.data.user.id, userId);
    assert.equal(await countRows(h, 'users', { email }), 1);
    assert.equal(await countRows(h, 'sso_identities', { user_id: userId }), 1);
    assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: userId }), 1);
  });
});

void CLIENT_ID;
void CLIENT_SECRET;
