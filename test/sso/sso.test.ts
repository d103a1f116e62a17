import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { decodeJwt, type Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns, uniqueDomain, withSsoHarness } from '../helpers/sso.js';

// docs/sso.md: single sign-on per organization against a real oidc-provider playing the
// organization's IdP; DNS is a stub adapter. Attacks and enforcement are in sso-attacks.test.ts.

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();

withSsoHarness(dns, (started) => ({ op, h } = started));

describe('domains and TXT verification', () => {
  test('add answers 201 pending with txt_name and a random txt_value; verify reads the TXT record', async () => {
    const org = await createOrg(h);
    const domain = uniqueDomain();
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: `  ${domain.toUpperCase()}. ` }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    assert.equal(added.body.data.domain, domain);
    assert.equal(added.body.data.status, 'pending');
    assert.equal(added.body.data.txt_name, `_identity-router.${domain}`);
    assert.ok(added.body.data.txt_value.length >= 32);
    assert.equal(added.body.data.verified_at, null);

    // No record, a wrong record: 422 domain_not_verified, still pending.
    assertError(await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token }), 422, 'domain_not_verified');
    dns.txt.set(added.body.data.txt_name, [['v=spf1 -all'], ['identity-router-verification=wrong']]);
    assertError(await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token }), 422, 'domain_not_verified');

    // The value split in chunks is joined.
    const value = added.body.data.txt_value as string;
    dns.txt.set(added.body.data.txt_name, [['v=spf1 -all'], [value.slice(0, 10), value.slice(10)]]);
    const verified = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(verified.body.data.status, 'verified');
    assert.ok(verified.body.data.verified_at);
    assert.ok(h.events.some((event) => event.type === 'org.domain_verified' && event.data.domain === domain));

    // Verified stays verified without asking DNS again.
    const queries = dns.txtQueries;
    dns.txt.delete(added.body.data.txt_name);
    const again = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(again.status, 200);
    assert.equal(again.body.data.status, 'verified');
    assert.equal(dns.txtQueries, queries);

    const listed = await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body.data.domains.map((entry: any) => entry.domain), [domain]);
  });

  test('invalid domains are 422 invalid_domain: public suffixes, consumer mail, IP literals, single labels, tombstone', async () => {
    const org = await createOrg(h);
    for (const domain of ['co.uk', 'github.io', 'com', 'gmail.com', 'outlook.com', '127.0.0.1', '0x7f000001', '[::1]', 'localhost', 'deleted.invalid', 'bad_label.example', '-x.example', `${'a'.repeat(64)}.example`]) {
      assertError(await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token }), 422, 'invalid_domain', domain);
    }
  });

  test("another organization's token does not verify; a domain verified elsewhere is domain_taken; twice in one organization is conflict", async () => {
    const first = await createOrg(h);
    const second = await createOrg(h);
    const domain = uniqueDomain();
    const a = await h.post(`/orgs/${first.id}/domains`, { domain }, { token: first.owner.token });
    const b = await h.post(`/orgs/${second.id}/domains`, { domain }, { token: second.owner.token });
    assert.equal(b.status, 201, 'several organizations may hold a domain pending');
    assert.notEqual(a.body.data.txt_value, b.body.data.txt_value);
    assertError(await h.post(`/orgs/${first.id}/domains`, { domain }, { token: first.owner.token }), 409, 'conflict');
    // The record holds the first organization's token: the second cannot verify with it.
    dns.txt.set(a.body.data.txt_name, [[a.body.data.txt_value]]);
    assertError(await h.post(`/orgs/${second.id}/domains/${b.body.data.id}/verify`, {}, { token: second.owner.token }), 422, 'domain_not_verified');
    assert.equal((await h.post(`/orgs/${first.id}/domains/${a.body.data.id}/verify`, {}, { token: first.owner.token })).status, 200);
    dns.txt.set(b.body.data.txt_name, [[a.body.data.txt_value], [b.body.data.txt_value]]);
    assertError(await h.post(`/orgs/${second.id}/domains/${b.body.data.id}/verify`, {}, { token: second.owner.token }), 409, 'domain_taken');
    const third = await createOrg(h);
    assertError(await h.post(`/orgs/${third.id}/domains`, { domain }, { token: third.owner.token }), 409, 'domain_taken');
    // Another organization's domain id is 404; deleting releases the domain.
    assertError(await h.post(`/orgs/${second.id}/domains/${a.body.data.id}/verify`, {}, { token: second.owner.token }), 404, 'not_found');
    const removed = await h.delete(`/orgs/${first.id}/domains/${a.body.data.id}`, { token: first.owner.token });
    assert.equal(removed.status, 200, removed.text);
    assert.deepEqual(removed.body.data, { status: 'deleted' });
    assert.equal((await h.post(`/orgs/${second.id}/domains/${b.body.data.id}/verify`, {}, { token: second.owner.token })).status, 200);
  });

  test('sso.manage: owners hold it, admins do not; another organization is 403', async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    assertError(await h.get(`/orgs/${org.id}/domains`, { token: admin.token }), 403, 'forbidden');
    const other = await createOrg(h);
    assertError(await h.get(`/orgs/${org.id}/domains`, { token: other.owner.token }), 403, 'forbidden');
  });
});

describe('the connection', () => {
  test('create answers 201 with redirect_uri and defaults; the client secret is never returned or logged', async () => {
    const org = await createOrg(h);
    const created = await connect(h, op, org);
    assert.equal(created.issuer, op.issuer);
    assert.deepEqual(created.scopes, ['openid', 'email', 'profile']);
    assert.equal(created.token_endpoint_auth_method, 'client_secret_basic');
    assert.equal(created.redirect_uri, `http://127.0.0.1/identity/auth/sso/${created.id}/callback`);
    assert.equal(created.enabled, true);
    assert.equal(created.status, 'inactive', 'no verified domain yet');
    assert.equal(created.jit, false);
    assert.equal(created.enforce, false);
    assert.equal(created.default_role, 'member');
    assert.equal('client_secret' in created, false);
    await addVerifiedDomain(h, dns, org);
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.equal(read.status, 200);
    assert.equal(read.body.data.status, 'active');
    assertError(await h.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: 'x', client_secret: 'y' }, { token: org.owner.token }), 409, 'conflict');
    const patched = await h.patch(`/orgs/${org.id}/sso`, { jit: true, enforce: true }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body.data.jit, true);
    const updated = h.events.find((event) => event.type === 'sso.connection_updated' && event.data.connection_id === created.id);
    assert.deepEqual(updated?.data.changed, ['enforce', 'jit']);
    const secretSeen = JSON.stringify(h.logs) + JSON.stringify(h.events) + read.text + patched.text;
    assert.ok(!secretSeen.includes('client-secret-of-the-test-provider'));
    const [row] = await h.knex(`${h.tablePrefix}sso_connections`).where({ id: created.id });
    assert.ok(!String(row.client_secret_enc).includes('client-secret-of-the-test-provider'));
    const removed = await h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.deepEqual(removed.body.data, { status: 'deleted' });
    assertError(await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
  });

  test('default_role must be a role of the organization without owner-equivalent keys; scopes need openid and email', async () => {
    const org = await createOrg(h);
    for (const body of [{ default_role: 'owner' }, { default_role: 'nope' }, { scopes: ['openid', 'profile'] }]) {
      const response = await h.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: 'x', client_secret: 'y', ...body }, { token: org.owner.token });
      assert.equal(response.status, 422, JSON.stringify(body));
    }
  });
});

describe('identifier-first sign-in', () => {
  test('by e-mail: login_hint, the connection redirect_uri, JIT user and membership, amr fed, organization_id', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain);
    const subject = newSubject();
    const { trip, exchanged } = await ssoLogin(h, op, { sub: subject, email, email_verified: false, name: 'Grace' }, { email });
    const url = new URL(trip.authorizationUrl);
    assert.equal(url.searchParams.get('login_hint'), email);
    assert.equal(url.searchParams.get('redirect_uri'), connection.redirect_uri);
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.is_new_user, true);
    assert.equal(exchanged!.body.data.organization_id, org.id);
    assert.equal(exchanged!.body.data.user.email_verified, true);
    const claims = decodeJwt(exchanged!.body.data.access_token);
    assert.deepEqual(claims.amr, ['fed']);
    assert.equal(claims.org, null);
    const userId = exchanged!.body.data.user.id;
    assert.ok(h.events.some((event) => event.type === 'member.joined' && event.user_id === userId && event.data.via === 'sso_jit'));
    assert.ok(h.events.some((event) => event.type === 'user.registered' && event.user_id === userId && event.data.method === 'sso'));
    assert.ok(h.events.some((event) => event.type === 'user.logged_in' && event.user_id === userId && event.data.method === 'sso' && event.data.connection_id === connection.id));
    assert.ok(!JSON.stringify(h.events).includes(subject), 'no event carries the IdP subject');
    // Second sign-in: the same user, no new membership.
    const again = await ssoLogin(h, op, op.accounts.get(op.current!.sub)!, { organization_slug: org.slug });
    assert.equal(again.exchanged!.status, 200, again.exchanged!.text);
    assert.equal(again.exchanged!.body.data.user.id, userId);
    assert.equal(again.exchanged!.body.data.is_new_user, false);
    assert.equal(await countRows(h, 'memberships', { user_id: userId }), 1);
  });

  test('no active connection: 404 sso_not_configured, the same whether or not an account exists', async () => {
    const org = await createOrg(h);
    const domain = (await addVerifiedDomain(h, dns, org)).domain;
    const existing = addressAt(domain);
    await h.signUp(existing);
    for (const body of [{ email: existing }, { email: addressAt(domain) }, { email: uniqueEmail('nobody') }, { organization_slug: org.slug }, { organization_slug: 'no-such-org' }]) {
      const response = await h.post('/auth/sso/authorize', { ...body, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' });
      assertError(response, 404, 'sso_not_configured', JSON.stringify(body));
    }
  });

  test('JIT off: an unknown user and a non-member get sso_not_member; a member signs in; a suspended member is refused', async () => {
    const { org, domain } = await ssoOrg(h, dns, op);
    const stranger = addressAt(domain);
    let trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: stranger }, { email: stranger });
    assert.equal(trip.error, 'sso_not_member');
    assert.equal(await countRows(h, 'users', { email: stranger }), 0);

    const member = await addMember(h, org, org.owner.token, ['member'], await h.signUp(addressAt(domain, 'member')));
    const signedIn = await ssoLogin(h, op, { sub: newSubject(), email: member.email }, { email: member.email });
    assert.equal(signedIn.exchanged!.status, 200, signedIn.exchanged!.text);
    assert.equal(signedIn.exchanged!.body.data.user.id, member.userId);
    assert.ok(h.events.some((event) => event.type === 'user.sso_linked' && event.user_id === member.userId && event.data.method === 'email_domain'));

    const suspended = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
    assert.equal(suspended.status, 200, suspended.text);
    trip = await ssoRoundTrip(h, op, op.current!, { email: member.email });
    assert.equal(trip.error, 'sso_member_suspended');
  });

  test('an unverified local account at the domain is not linked: account_link_required', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain);
    await h.post('/auth/register', { email, password: STRONG_PASSWORD });
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
    assert.equal(trip.error, 'account_link_required');
  });
});

describe('MFA after single sign-on', () => {
  test('a user with a confirmed factor gets the MFA gate from the exchange; the IdP amr never satisfies it', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const member = await h.signUp(addressAt(domain, 'mfa'));
    const { enrollTotp } = await import('../helpers/mfa.js');
    await enrollTotp(h, member.accessToken);
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: member.email }, { email: member.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.mfa_required, true);
    assert.equal(exchanged!.body.data.access_token, undefined);
  });

  test("require_mfa: a JIT join counts at once; the session is under grace enrollment in the organization", async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const strict = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
    assert.equal(strict.status, 200, strict.text);
    const email = addressAt(domain);
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email }, { email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    const token = exchanged!.body.data.access_token;
    assert.equal(decodeJwt(token).mfa, false);
    assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token }), 403, 'mfa_enrollment_required');
    assert.equal((await h.get('/auth/mfa/factors', { token })).status, 200);
  });
});

describe('organization deletion', () => {
  test('releases its domains and removes its connection', async () => {
    const { org, domain } = await ssoOrg(h, dns, op);
    const removed = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
    assert.equal(removed.status, 200, removed.text);
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0);
    const next = await createOrg(h);
    const added = await h.post(`/orgs/${next.id}/domains`, { domain }, { token: next.owner.token });
    assert.equal(added.status, 201, added.text);
  });
});

describe('sso.manage for organizations created before sso was configured', () => {
  test('their owner roles are granted it at start-up', async () => {
    const { Harness } = await import('../helpers/harness.js');
    const plain = await Harness.start();
    try {
      const org = await createOrg(plain);
      const withSso = await startSsoHarness(op, dns, { shareDatabaseWith: plain });
      try {
        const listed = await withSso.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
        assert.equal(listed.status, 200, listed.text);
      } finally {
        await withSso.close();
      }
    } finally {
      await plain.close();
    }
  });
});
