import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import type { Harness } from '../helpers/harness.js';
import { CLIENT_ID, CLIENT_SECRET, handoffPair, newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, ssoOrg, StubDns, uniqueDomain, withSsoHarness } from '../helpers/sso.js';

/*
 * CONTRACT 12 taken sentence by sentence (docs/sso.md): the points the other single sign-on
 * files leave implicit. Threats: answers whose shape drifts from the contract (a client secret
 * or an extra field leaking into a view), a connection left active or routable after the domain
 * that makes it authoritative is gone, an organization managing another's domains, routing by
 * a subdomain the organization never proved. A real oidc-provider plays the IdP; DNS is a stub.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();

withSsoHarness(dns, (started) => ({ op, h } = started));

const DOMAIN_KEYS = ['created_at', 'domain', 'id', 'status', 'txt_name', 'txt_value', 'verified_at'];
const CONNECTION_KEYS = ['client_id', 'created_at', 'default_role', 'enabled', 'enforce', 'id', 'issuer', 'jit', 'redirect_uri', 'scopes', 'status', 'token_endpoint_auth_method', 'updated_at'];

async function authorize(body: Record<string, unknown>) {
  return h.post('/auth/sso/authorize', { handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256', ...body });
}

describe('12.3 answers', () => {
  test('domain and connection objects carry exactly the contract fields; the domain list is {domains}; events carry their contract data', async () => {
    const org = await createOrg(h);
    const domain = uniqueDomain();
    const added = await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    assert.deepEqual(Object.keys(added.body.data).sort(), DOMAIN_KEYS);
    assert.ok(Buffer.byteLength(added.body.data.txt_value) >= 22, 'at least 128 bits of randomness');
    assert.deepEqual(h.eventsOfType('org.domain_added').at(-1)?.data, { domain_id: added.body.data.id, domain });
    const listed = await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
    assert.deepEqual(Object.keys(listed.body.data), ['domains']);
    assert.deepEqual(Object.keys(listed.body.data.domains[0]).sort(), DOMAIN_KEYS);
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    const verified = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(verified.status, 200, verified.text);
    assert.deepEqual(Object.keys(verified.body.data).sort(), DOMAIN_KEYS);
    assert.equal(verified.body.data.verified_at, new Date(h.clock.now()).toISOString());
    assert.deepEqual(h.eventsOfType('org.domain_verified').at(-1)?.data, { domain_id: added.body.data.id, domain });

    const created = await h.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(Object.keys(created.body.data).sort(), CONNECTION_KEYS);
    assert.equal(created.body.data.status, 'active');
    assert.deepEqual(h.eventsOfType('sso.connection_created').at(-1)?.data, { connection_id: created.body.data.id });
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.deepEqual(Object.keys(read.body.data).sort(), CONNECTION_KEYS);
    const patched = await h.patch(`/orgs/${org.id}/sso`, { token_endpoint_auth_method: 'client_secret_post' }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual(Object.keys(patched.body.data).sort(), CONNECTION_KEYS);
    assert.equal(patched.body.data.token_endpoint_auth_method, 'client_secret_post');
    assert.deepEqual(h.eventsOfType('sso.connection_updated').at(-1)?.data, { connection_id: created.body.data.id, changed: ['token_endpoint_auth_method'] });
    // `changed` names what changed: values sent as they already were (the secret included) are not in it, and alone they emit nothing.
    const updates = h.eventsOfType('sso.connection_updated').length;
    const same = await h.patch(`/orgs/${org.id}/sso`, { token_endpoint_auth_method: 'client_secret_post', client_secret: CLIENT_SECRET, jit: created.body.data.jit }, { token: org.owner.token });
    assert.equal(same.status, 200, same.text);
    assert.equal(h.eventsOfType('sso.connection_updated').length, updates, 'nothing changed, no event');
    const mixed = await h.patch(`/orgs/${org.id}/sso`, { client_id: CLIENT_ID, jit: !created.body.data.jit }, { token: org.owner.token });
    assert.equal(mixed.status, 200, mixed.text);
    assert.deepEqual(h.eventsOfType('sso.connection_updated').at(-1)?.data, { connection_id: created.body.data.id, changed: ['jit'] });
    const removed = await h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.deepEqual(removed.body.data, { status: 'deleted' });
    assert.deepEqual(h.eventsOfType('sso.connection_deleted').at(-1)?.data, { connection_id: created.body.data.id });
    const domainRemoved = await h.delete(`/orgs/${org.id}/domains/${added.body.data.id}`, { token: org.owner.token });
    assert.deepEqual(domainRemoved.body.data, { status: 'deleted' });
    assert.deepEqual(h.eventsOfType('org.domain_removed').at(-1)?.data, { domain_id: added.body.data.id, domain });
  });

  test('without a connection GET, PATCH and DELETE are 404 not_found; a PATCH that breaks a rule is 422 and changes nothing', async () => {
    const org = await createOrg(h);
    assertError(await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
    assertError(await h.patch(`/orgs/${org.id}/sso`, { jit: true }, { token: org.owner.token }), 404, 'not_found');
    assertError(await h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
    const connection = await connect(h, op, org);
    for (const body of [{ scopes: ['openid', 'profile'] }, { scopes: ['email'] }, { token_endpoint_auth_method: 'private_key_jwt' }, { default_role: 'owner' }, { default_role: 'no-such-role' }]) {
      const response = await h.patch(`/orgs/${org.id}/sso`, body, { token: org.owner.token });
      assert.equal(response.status, 422, `${JSON.stringify(body)}: ${response.text}`);
    }
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.deepEqual(read.body.data, connection, 'nothing changed');
  });

  test('a custom role holding sso.manage is never a JIT default role (422)', async () => {
    const org = await createOrg(h);
    const role = await h.post(`/orgs/${org.id}/roles`, { slug: 'idp-admin', name: 'IdP admin', permission_keys: ['sso.manage'] }, { token: org.owner.token });
    assert.equal(role.status, 201, role.text);
    const response = await h.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET, default_role: 'idp-admin' }, { token: org.owner.token });
    assert.equal(response.status, 422, response.text);
    assertError(await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
  });

  test("another organization's path is 403 forbidden on every route; another organization's domain id is 404 on verify", async () => {
    const mine = await createOrg(h);
    const theirs = await createOrg(h);
    const theirDomain = await h.post(`/orgs/${theirs.id}/domains`, { domain: uniqueDomain() }, { token: theirs.owner.token });
    assert.equal(theirDomain.status, 201);
    const token = mine.owner.token;
    for (const [what, response] of [
      ['add domain', await h.post(`/orgs/${theirs.id}/domains`, { domain: uniqueDomain() }, { token })],
      ['list domains', await h.get(`/orgs/${theirs.id}/domains`, { token })],
      ['verify', await h.post(`/orgs/${theirs.id}/domains/${theirDomain.body.data.id}/verify`, {}, { token })],
      ['delete domain', await h.delete(`/orgs/${theirs.id}/domains/${theirDomain.body.data.id}`, { token })],
      ['create connection', await h.post(`/orgs/${theirs.id}/sso`, { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET }, { token })],
      ['read connection', await h.get(`/orgs/${theirs.id}/sso`, { token })],
    ] as const) {
      assertError(response, 403, 'forbidden', what);
    }
    dns.txt.set(theirDomain.body.data.txt_name, [[theirDomain.body.data.txt_value]]);
    assertError(await h.post(`/orgs/${mine.id}/domains/${theirDomain.body.data.id}/verify`, {}, { token }), 404, 'not_found');
    const listed = await h.get(`/orgs/${theirs.id}/domains`, { token: theirs.owner.token });
    assert.deepEqual(listed.body.data.domains.map((entry: any) => entry.status), ['pending'], 'nothing verified through another organization');
    // An admin does not hold sso.manage (the admin template lacks it).
    const admin = await addMember(h, theirs, theirs.owner.token, ['admin']);
    assertError(await h.get(`/orgs/${theirs.id}/domains`, { token: admin.token }), 403, 'forbidden');
  });
});

describe('12.4 domains', () => {
  test('the same domain twice in one organization is 409 conflict, pending or verified', async () => {
    const org = await createOrg(h);
    const domain = uniqueDomain();
    const first = await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token });
    assert.equal(first.status, 201);
    assertError(await h.post(`/orgs/${org.id}/domains`, { domain: domain.toUpperCase() }, { token: org.owner.token }), 409, 'conflict');
    dns.txt.set(first.body.data.txt_name, [[first.body.data.txt_value]]);
    assert.equal((await h.post(`/orgs/${org.id}/domains/${first.body.data.id}/verify`, {}, { token: org.owner.token })).status, 200);
    assertError(await h.post(`/orgs/${org.id}/domains`, { domain: `${domain}.` }, { token: org.owner.token }), 409, 'conflict');
  });

  test('a DNS failure is 422 domain_not_verified and the domain stays pending', async () => {
    const org = await createOrg(h);
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
    dns.duringNextTxt(async () => {
      dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
      throw Object.assign(new Error('queryTxt ETIMEOUT'), { code: 'ETIMEOUT' });
    });
    assertError(await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token }), 422, 'domain_not_verified');
    const listed = await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
    assert.equal(listed.body.data.domains[0].status, 'pending');
    assert.equal(listed.body.data.domains[0].verified_at, null);
  });

  test('when the last verified domain goes the connection turns inactive and sign-in is 404 sso_not_configured; a disabled connection is inactive too', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op);
    assert.equal(connection.status, 'active');
    const second = await addVerifiedDomain(h, dns, org);
    const [first] = (await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token })).body.data.domains.filter((entry: any) => entry.domain === domain);
    assert.equal((await h.delete(`/orgs/${org.id}/domains/${first.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token })).body.data.status, 'active', 'another verified domain remains');
    assertError(await authorize({ email: addressAt(domain) }), 404, 'sso_not_configured');
    assert.equal((await authorize({ email: addressAt(second.domain) })).status, 200);
    assert.equal((await h.delete(`/orgs/${org.id}/domains/${second.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token })).body.data.status, 'inactive');
    assertError(await authorize({ organization_slug: org.slug }), 404, 'sso_not_configured');

    const other = await createOrg(h);
    await addVerifiedDomain(h, dns, other);
    const disabled = await connect(h, op, other, { enabled: false });
    assert.equal(disabled.enabled, false);
    assert.equal(disabled.status, 'inactive');
    assertError(await authorize({ organization_slug: other.slug }), 404, 'sso_not_configured');
  });
});

describe('12.5 identifier-first routing', () => {
  test('by slug: the connection redirect_uri and no login_hint; by e-mail the domain after the last @, normalised; a subdomain is not covered', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    const bySlug = await authorize({ organization_slug: org.slug });
    assert.equal(bySlug.status, 200, bySlug.text);
    assert.deepEqual(Object.keys(bySlug.body.data).sort(), ['authorization_url', 'expires_in']);
    const url = new URL(bySlug.body.data.authorization_url);
    assert.equal(url.searchParams.get('redirect_uri'), connection.redirect_uri);
    assert.equal(url.searchParams.get('login_hint'), null);
    assert.equal(url.searchParams.get('client_id'), CLIENT_ID);

    const mixedCase = `Ada@${domain.toUpperCase()}`;
    const byEmail = await authorize({ email: mixedCase });
    assert.equal(byEmail.status, 200, byEmail.text);
    assert.ok(new URL(byEmail.body.data.authorization_url).searchParams.get('login_hint'), 'login_hint with an e-mail');
    assertError(await authorize({ email: `ada@eu.${domain}` }), 404, 'sso_not_configured');

    // The flow started by slug completes, and the session opens with org null.
    const email = addressAt(domain);
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email }, { organization_slug: org.slug });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.organization_id, org.id);
    const claims = JSON.parse(Buffer.from(exchanged!.body.data.access_token.split('.')[1], 'base64url').toString('utf8'));
    assert.equal(claims.org, null);
    assert.equal(claims.mfa, false);
    assert.deepEqual(claims.amr, ['fed']);
  });
});
