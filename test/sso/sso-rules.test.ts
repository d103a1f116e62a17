import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import type { Harness } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';
import { CLIENT_ID, CLIENT_SECRET, newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { addMember, createOrg, superadmin, switchOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns, uniqueDomain, withSsoHarness } from '../helpers/sso.js';

/*
 * docs/sso.md and the start-up checks of section 2, for single sign-on:
 * - no escalation through the JIT default role: an administrator holding sso.manage but not
 *   some permission would otherwise grant it to everyone the IdP vouches for;
 * - an administrator who loses sso.manage while a change waits on DNS or discovery (seconds,
 *   under the caller's control) would otherwise still write it: the grant is re-checked in
 *   the transaction;
 * - two verifies racing for one domain (one organization twice, or two organizations) never
 *   answer 500 and never leave two verified owners;
 * - the private-network exemption of the outbound guard is announced at start-up;
 * - a refused single sign-on leaves its trace in the audit trail like a refused password.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();

withSsoHarness(dns, (started) => ({ op, h } = started));

async function createRole(orgId: string, token: string, slug: string, permissionKeys: string[]): Promise<void> {
  const created = await h.post(`/orgs/${orgId}/roles`, { name: slug, slug, permission_keys: permissionKeys }, { token });
  assert.equal(created.status, 201, created.text);
}

function connectionBody(body: Record<string, unknown> = {}) {
  return { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET, ...body };
}

describe('default_role: no escalation', () => {
  test('an administrator holding sso.manage cannot make a role with permissions they lack the JIT default: 403, nothing stored or changed', async () => {
    const org = await createOrg(h);
    await createRole(org.id, org.owner.token, 'sso-admin', ['sso.manage', 'org.read']);
    await createRole(org.id, org.owner.token, 'inviter', ['members.invite']);
    await createRole(org.id, org.owner.token, 'reader', ['org.read']);
    const admin = await addMember(h, org, org.owner.token, ['sso-admin']);

    assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'inviter' }), { token: admin.token }), 403, 'forbidden');
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0, 'nothing stored');

    const created = await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'reader' }), { token: admin.token });
    assert.equal(created.status, 201, created.text);
    assertError(await h.patch(`/orgs/${org.id}/sso`, { default_role: 'inviter' }, { token: admin.token }), 403, 'forbidden');
    const read = await h.get(`/orgs/${org.id}/sso`, { token: admin.token });
    assert.equal(read.body.data.default_role, 'reader', 'unchanged');

    // Whoever holds the permissions may grant them: the owner, and a superadmin.
    const byOwner = await h.patch(`/orgs/${org.id}/sso`, { default_role: 'inviter' }, { token: org.owner.token });
    assert.equal(byOwner.status, 200, byOwner.text);
    const root = await superadmin(h);
    const rootToken = await switchOrg(h, root.accessToken, org.id);
    const byRoot = await h.patch(`/orgs/${org.id}/sso`, { default_role: 'reader' }, { token: rootToken });
    assert.equal(byRoot.status, 200, byRoot.text);
  });
});

describe('sso.manage re-checked inside the transaction', () => {
  // Each change is admitted, then the owner removes the administrator's sso.manage while the
  // request waits on DNS or discovery, before its unit of work: the write is refused as a new
  // request would be, and nothing is written.
  async function demotableAdmin() {
    const org = await createOrg(h);
    await createRole(org.id, org.owner.token, 'sso-admin', ['sso.manage', 'org.read']);
    await createRole(org.id, org.owner.token, 'reader', ['org.read']);
    const admin = await addMember(h, org, org.owner.token, ['sso-admin']);
    const setRoles = async (roleSlugs: string[]) => {
      const changed = await h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: roleSlugs }, { token: org.owner.token });
      assert.equal(changed.status, 200, changed.text);
    };
    return { org, admin, setRoles };
  }

  test('a domain verification whose actor lost sso.manage during the TXT lookup: 403 forbidden, the domain stays pending', async () => {
    const { org, admin, setRoles } = await demotableAdmin();
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain('recheck') }, { token: admin.token });
    assert.equal(added.status, 201, added.text);
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    dns.duringNextTxt(() => setRoles(['member']));

    assertError(await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: admin.token }), 403, 'forbidden');
    assert.equal(await countRows(h, 'org_domains', { id: added.body.data.id, status: 'pending' }), 1, 'still pending');
    assert.equal(h.events.filter((event) => event.type === 'org.domain_verified' && event.organization_id === org.id).length, 0);
    // The same answer admission gives now.
    assertError(await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: admin.token }), 403, 'forbidden');
  });

  test('a connection created or changed by an actor who lost sso.manage during discovery: 403 forbidden, nothing stored or changed', async () => {
    const { org, admin, setRoles } = await demotableAdmin();
    // The member role still holds org.read, so the default role alone would not refuse.
    op.beforeNextDiscovery = () => setRoles(['member']);
    assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'reader' }), { token: admin.token }), 403, 'forbidden');
    assert.equal(op.beforeNextDiscovery, undefined, 'the change happened during discovery');
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0, 'nothing stored');
    assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'reader' }), { token: admin.token }), 403, 'forbidden');

    await setRoles(['sso-admin']);
    const created = await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'reader' }), { token: admin.token });
    assert.equal(created.status, 201, created.text);
    // A new client secret is discovered again; meanwhile the administrator is demoted.
    op.beforeNextDiscovery = () => setRoles(['member']);
    assertError(await h.patch(`/orgs/${org.id}/sso`, { client_secret: 'another-secret', jit: false }, { token: admin.token }), 403, 'forbidden');
    assert.equal(op.beforeNextDiscovery, undefined, 'the change happened during discovery');
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.equal(read.body.data.jit, true, 'unchanged');
    assert.equal(h.events.filter((event) => event.type === 'sso.connection_updated' && event.organization_id === org.id).length, 0);
  });
});

describe('the credential gate re-checked inside the transaction', () => {
  // Threat: discovery takes seconds, under the caller's control (their IdP answers slowly). A
  // change admitted with a fresh sign-in, or a verified address, would otherwise be written
  // after the sign-in went stale or the address stopped being proven. The write is refused as
  // a new request would be, and nothing is written or announced.
  const STALE = 301; // one second past security.stepUp.maxAge (300 s), well within the access token's life
  const connectionEvents = (orgId: string) => h.events.filter((event) => event.organization_id === orgId && event.type.startsWith('sso.connection_'));
  const unverify = async (userId: string) => {
    await h.knex(`${h.tablePrefix}users`).where({ id: userId }).update({ email_verified: false });
  };

  const changesDuringDiscovery = [
    {
      what: 'a sign-in that goes stale',
      change: async (_userId: string) => h.clock.advance(STALE),
      status: 401,
      code: 'reauthentication_required',
      update: () => ({ client_secret: 'another-secret', jit: false }),
    },
    { what: 'an address that stops being verified', change: unverify, status: 403, code: 'email_unverified', update: () => ({ issuer: op.issuer, jit: false }) },
  ];

  for (const { what, change, status, code, update } of changesDuringDiscovery) {
    test(`${what} during discovery: create and update answer ${status} ${code}, nothing stored or changed`, async () => {
      const org = await createOrg(h);
      op.beforeNextDiscovery = () => change(org.owner.userId);
      assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true }), { token: org.owner.token }), status, code);
      assert.equal(op.beforeNextDiscovery, undefined, 'the change happened during discovery');
      assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0, 'nothing stored');
      assert.deepEqual(connectionEvents(org.id), []);

      const other = await createOrg(h);
      const created = await h.post(`/orgs/${other.id}/sso`, connectionBody({ jit: true }), { token: other.owner.token });
      assert.equal(created.status, 201, created.text);
      op.beforeNextDiscovery = () => change(other.owner.userId);
      assertError(await h.patch(`/orgs/${other.id}/sso`, update(), { token: other.owner.token }), status, code);
      assert.equal(op.beforeNextDiscovery, undefined, 'the change happened during discovery');
      assert.equal(await countRows(h, 'sso_connections', { organization_id: other.id, jit: true }), 1, 'unchanged');
      assert.deepEqual(connectionEvents(other.id).map((event) => event.type), ['sso.connection_created']);
    });
  }

  test('with a confirmed factor, a session that goes stale during discovery answers 401 step_up_required', async () => {
    const org = await createOrg(h);
    await enrollTotp(h, org.owner.token);
    op.beforeNextDiscovery = async () => h.clock.advance(STALE);
    assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody(), { token: org.owner.token }), 401, 'step_up_required');
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0, 'nothing stored');
    assert.deepEqual(connectionEvents(org.id), []);
  });

  test('a verify, which needs no fresh authentication, still succeeds when the sign-in goes stale during the TXT lookup', async () => {
    const org = await createOrg(h);
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain('stale') }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    dns.duringNextTxt(async () => h.clock.advance(STALE));
    const verified = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(verified.body.data.status, 'verified');
  });
});

describe('concurrent connection updates', () => {
  test('a change made while another update waits on discovery is kept: the later write changes only its own fields', async () => {
    const org = await createOrg(h);
    const created = await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true, default_role: 'member' }), { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.data.enabled, true);
    // While the new secret is discovered, another update turns the connection off and JIT with it.
    op.beforeNextDiscovery = async () => {
      const other = await h.patch(`/orgs/${org.id}/sso`, { enabled: false, jit: false }, { token: org.owner.token });
      assert.equal(other.status, 200, other.text);
    };
    const rotated = await h.patch(`/orgs/${org.id}/sso`, { client_secret: 'another-secret' }, { token: org.owner.token });
    assert.equal(rotated.status, 200, rotated.text);
    assert.equal(op.beforeNextDiscovery, undefined, 'the other update happened during discovery');
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.equal(read.body.data.enabled, false, 'the other update\'s enabled is not written back');
    assert.equal(read.body.data.jit, false, 'nor its jit');
  });
});

describe('concurrent domain verification', () => {
  test('two organizations verifying one domain at once: one 200, the other 409 domain_taken, never 500', async () => {
    for (let round = 0; round < 3; round += 1) {
      const first = await createOrg(h);
      const second = await createOrg(h);
      const domain = uniqueDomain('race');
      const a = await h.post(`/orgs/${first.id}/domains`, { domain }, { token: first.owner.token });
      const b = await h.post(`/orgs/${second.id}/domains`, { domain }, { token: second.owner.token });
      // Both records published: each organization proves control, and both pass every check before either writes.
      dns.txt.set(a.body.data.txt_name, [[a.body.data.txt_value], [b.body.data.txt_value]]);
      dns.holdTxt(2);
      const answers = await Promise.all([
        h.post(`/orgs/${first.id}/domains/${a.body.data.id}/verify`, {}, { token: first.owner.token }),
        h.post(`/orgs/${second.id}/domains/${b.body.data.id}/verify`, {}, { token: second.owner.token }),
      ]);
      const statuses = answers.map((answer) => answer.status).sort();
      assert.deepEqual(statuses, [200, 409], answers.map((answer) => answer.text).join(' | '));
      assertError(answers.find((answer) => answer.status === 409)!, 409, 'domain_taken');
      assert.equal(await countRows(h, 'org_domains', { domain, status: 'verified' }), 1);
      assert.equal(h.events.filter((event) => event.type === 'org.domain_verified' && event.data.domain === domain).length, 1);
    }
  });

  test('one domain verified twice at once by its organization: both 200 verified, one event', async () => {
    for (let round = 0; round < 3; round += 1) {
      const org = await createOrg(h);
      const domain = uniqueDomain('twice');
      const added = await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token });
      dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
      dns.holdTxt(2);
      const path = `/orgs/${org.id}/domains/${added.body.data.id}/verify`;
      const answers = await Promise.all([h.post(path, {}, { token: org.owner.token }), h.post(path, {}, { token: org.owner.token })]);
      for (const answer of answers) {
        assert.equal(answer.status, 200, answer.text);
        assert.equal(answer.body.data.status, 'verified');
      }
      assert.equal(h.events.filter((event) => event.type === 'org.domain_verified' && event.data.domain === domain).length, 1);
    }
  });
});

describe('start-up warning for sso.allowPrivateNetworks', () => {
  const warnings = (harness: Harness) => harness.logs.filter((line) => line.level === 'warn' && /^sso: allowPrivateNetworks/.test(line.msg));

  test('true warns once; a list warns once naming its origins; off says nothing', async () => {
    assert.equal(warnings(h).length, 1);
    assert.ok(warnings(h)[0]!.msg.includes(op.issuer));
    const open = await startSsoHarness(undefined, new StubDns(), { sso: { allowPrivateNetworks: true } });
    const closed = await startSsoHarness(undefined, new StubDns());
    try {
      assert.equal(warnings(open).length, 1);
      assert.equal(warnings(closed).length, 0);
    } finally {
      await open.close();
      await closed.close();
    }
  });
});

describe('refused single sign-ons are recorded as user.login_failed', () => {
  const failures = (userId: string) => h.events.filter((event) => event.type === 'user.login_failed' && event.user_id === userId);

  test('at the callback: a suspended member, a non-member with JIT off, a disabled account; an unknown address only logs', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op);
    const member = await addMember(h, org, org.owner.token, ['member'], await h.signUp(addressAt(domain, 'member')));
    const subject = newSubject();
    assert.equal((await ssoLogin(h, op, { sub: subject, email: member.email }, { email: member.email })).exchanged!.status, 200);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
    assert.equal((await ssoRoundTrip(h, op, { sub: subject, email: member.email }, { email: member.email })).error, 'sso_member_suspended');
    const [suspended] = failures(member.userId);
    assert.ok(suspended, 'a refused callback is recorded');
    assert.deepEqual(suspended.data, { method: 'sso', connection_id: connection.id, reason: 'sso_member_suspended' });
    assert.equal(suspended.organization_id, org.id);

    const outsider = await h.signUp(addressAt(domain, 'outsider'));
    assert.equal((await ssoRoundTrip(h, op, { sub: newSubject(), email: outsider.email }, { email: outsider.email })).error, 'sso_not_member');
    assert.deepEqual(failures(outsider.userId).map((event) => event.data.reason), ['sso_not_member']);

    const unknown = addressAt(domain, 'unknown');
    const before = h.events.length;
    assert.equal((await ssoRoundTrip(h, op, { sub: newSubject(), email: unknown }, { email: unknown })).error, 'sso_not_member');
    assert.equal(h.events.slice(before).filter((event) => event.type === 'user.login_failed').length, 0, 'no user to tie it to');
    assert.ok(h.logs.some((line) => line.level === 'warn' && line.msg === 'single sign-on refused' && (line.meta as any)?.reason === 'sso_not_member'));
    assert.ok(!JSON.stringify(h.events).includes(subject), 'no event carries the IdP subject');
  });

  test('at the callback: a disabled account, and a linked identity asserting an address outside the verified domains', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'linked');
    const subject = newSubject();
    const first = await ssoLogin(h, op, { sub: subject, email }, { email });
    assert.equal(first.exchanged!.status, 200, first.exchanged!.text);
    const userId = first.exchanged!.body.data.user.id as string;
    const outside = await ssoRoundTrip(h, op, { sub: subject, email: addressAt(uniqueDomain('elsewhere')) }, { organization_slug: org.slug });
    assert.equal(outside.error, 'sso_email_outside_domain');
    assert.deepEqual(failures(userId).map((event) => event.data.reason), ['sso_email_outside_domain']);

    const root = await superadmin(h);
    assert.equal((await h.post(`/users/${userId}/disable`, {}, { token: root.accessToken })).status, 200);
    assert.equal((await ssoRoundTrip(h, op, { sub: subject, email }, { email })).error, 'account_disabled');
    assert.deepEqual(failures(userId).map((event) => event.data.reason), ['sso_email_outside_domain', 'account_disabled']);
  });

  test('at the exchange: a member suspended between the callback and the exchange gets 403 and the event', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op);
    const member = await addMember(h, org, org.owner.token, ['member'], await h.signUp(addressAt(domain, 'late')));
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: member.email }, { email: member.email });
    assert.ok(trip.code, trip.error ?? '');
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }), 403, 'sso_member_suspended');
    assert.deepEqual(failures(member.userId).map((event) => event.data), [{ method: 'sso', connection_id: connection.id, reason: 'sso_member_suspended' }]);
  });
});



describe('off without an sso config; validated with every problem listed', () => {
  test('without sso every single sign-on route answers 404 and no owner holds sso.manage; with sso alone the exchange is served', async () => {
    const { Harness } = await import('../helpers/harness.js');
    const plain = await Harness.start();
    try {
      const org = await createOrg(plain);
      const challenge = { handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' };
      assertError(await plain.get(`/orgs/${org.id}/domains`, { token: org.owner.token }), 404, 'not_found');
      assertError(await plain.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token }), 404, 'not_found');
      assertError(await plain.get(`/orgs/${org.id}/sso`, { token: org.owner.token }), 404, 'not_found');
      assertError(await plain.post('/auth/sso/authorize', { email: 'a@acme.test', ...challenge }), 404, 'not_found');
      assertError(await plain.get(`/auth/sso/${org.id}/callback?state=x&code=y`), 404, 'not_found');
      const roles = await plain.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
      const owner = (roles.body.data as any[]).find((role) => role.slug === 'owner');
      assert.ok(owner && !owner.permission_keys.includes('sso.manage'), JSON.stringify(owner));
    } finally {
      await plain.close();
    }
    const org = await createOrg(h);
    const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
    assert.ok((roles.body.data as any[]).find((role) => role.slug === 'owner').permission_keys.includes('sso.manage'));
    // This harness has sso and no social: the exchange answers as a route, not 404.
    assertError(await h.post('/auth/social/exchange', { code: 'c'.repeat(43), handoff_verifier: 'v'.repeat(43) }), 400, 'invalid_token');
  });

  test('a bad sso block lists every problem at construction', async () => {
    const { createIdentityRouter } = await import('../../src/index.js');
    const { IdentityConfigError } = await import('../../src/config/schema.js');
    let problems: string[] = [];
    try {
      createIdentityRouter(
        {
          database: { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true },
          secret: 'test-secret-that-is-at-least-32-characters-long',
          issuer: 'https://id.example.test',
          sso: {
            redirectBase: 'http://api.example.com/identity',
            returnUrls: ['https://app.example.com/auth/sso?x=1'],
            errorUrl: 'https://evil.example/error',
            allowPrivateNetworks: ['http://127.0.0.1:8080/path'],
            unknownKey: true,
          },
        } as never,
        { logger: { info() {}, warn() {}, error() {} } },
      );
    } catch (error) {
      assert.ok(error instanceof IdentityConfigError, String(error));
      problems = error.problems;
    }
    for (const pattern of [/unknownKey.*not allowed/, /sso\.redirectBase.*https/, /sso\.returnUrls\[0\].*query or fragment/, /sso\.errorUrl.*covered by/, /sso\.allowPrivateNetworks\[0\].*origin/]) {
      assert.ok(problems.some((problem) => pattern.test(problem)), `${pattern} not in:\n${problems.join('\n')}`);
    }
  });
});

describe('callback refusals the other files leave out', () => {
  test('no e-mail from the IdP: social_email_required, nothing created', async () => {
    const { org } = await ssoOrg(h, dns, op, { jit: true });
    const before = await countRows(h, 'users');
    const trip = await ssoRoundTrip(h, op, { sub: newSubject() }, { organization_slug: org.slug });
    assert.equal(trip.error, 'social_email_required');
    assert.equal(await countRows(h, 'users'), before);
  });

  test('a superadmin account at the domain is never linked by address: account_link_required, no identity', async () => {
    // Threat: whoever runs the organization's IdP asserts a superadmin's address and becomes them.
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const root = await h.signUp(addressAt(domain, 'root'));
    await h.identity.service.grantSuperadmin(root.userId);
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: root.email, email_verified: true }, { email: root.email });
    assert.equal(trip.error, 'account_link_required');
    assert.equal(await countRows(h, 'sso_identities', { user_id: root.userId }), 0);
    assert.deepEqual(h.events.filter((event) => event.type === 'user.login_failed' && event.user_id === root.userId).map((event) => event.data.reason), ['account_link_required']);
  });
});

describe('fresh authentication for domain and connection changes', () => {
  test('past stepUp.maxAge a user without a factor gets 401 reauthentication_required; reading and verifying need none', async () => {
    const org = await createOrg(h);
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    h.clock.advance(6 * 60);
    assertError(await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token }), 401, 'reauthentication_required');
    assertError(await h.post(`/orgs/${org.id}/sso`, connectionBody(), { token: org.owner.token }), 401, 'reauthentication_required');
    assertError(await h.delete(`/orgs/${org.id}/domains/${added.body.data.id}`, { token: org.owner.token }), 401, 'reauthentication_required');
    assert.equal((await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token })).status, 200);
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    assert.equal((await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token })).status, 200);
    assert.equal(await countRows(h, 'sso_connections', { organization_id: org.id }), 0);
  });
});

describe('domains: IDNA, exact domains only, events', () => {
  test('a Unicode domain is stored as its A-label; an address at a subdomain is not covered', async () => {
    const org = await createOrg(h);
    const label = `bücher${Math.random().toString(36).slice(2, 7)}`;
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: `${label.toUpperCase()}.test` }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    assert.match(added.body.data.domain, /^xn--[a-z0-9-]+\.test$/);
    assert.ok(h.events.some((event) => event.type === 'org.domain_added' && event.data.domain_id === added.body.data.id && event.data.domain === added.body.data.domain));

    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const challenge = { handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' };
    assertError(await h.post('/auth/sso/authorize', { email: addressAt(`mail.${domain}`), ...challenge }), 404, 'sso_not_configured');
    assert.equal((await h.post('/auth/sso/authorize', { email: addressAt(domain), ...challenge })).status, 200);
  });

  test('removing a domain and the connection emit their events; none carries the client secret', async () => {
    const { org, connection } = await ssoOrg(h, dns, op);
    const [domain] = (await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token })).body.data.domains;
    assert.equal((await h.delete(`/orgs/${org.id}/domains/${domain.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await h.delete(`/orgs/${org.id}/sso`, { token: org.owner.token })).status, 200);
    const mine = h.events.filter((event) => event.organization_id === org.id);
    assert.deepEqual(mine.find((event) => event.type === 'org.domain_removed')?.data, { domain_id: domain.id, domain: domain.domain });
    assert.deepEqual(mine.find((event) => event.type === 'sso.connection_created')?.data, { connection_id: connection.id });
    assert.deepEqual(mine.find((event) => event.type === 'sso.connection_deleted')?.data, { connection_id: connection.id });
    assert.ok(!JSON.stringify(h.events).includes(CLIENT_SECRET));
  });
});

describe('sso.manage is owner-equivalent (CONTRACT 12.1)', () => {
  test('creating a role holding it needs step-up, like one holding roles.manage', async () => {
    // Threat: whoever controls the IdP signs in as anyone at the domain, owners included.
    const { enrollTotp } = await import('../helpers/mfa.js');
    const org = await createOrg(h);
    await enrollTotp(h, org.owner.token);
    h.clock.advance(6 * 60);
    assertError(await h.post(`/orgs/${org.id}/roles`, { name: 'IdP admins', slug: 'idp-admins', permission_keys: ['sso.manage'] }, { token: org.owner.token }), 401, 'step_up_required');
    const plain = await h.post(`/orgs/${org.id}/roles`, { name: 'Readers', slug: 'readers', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(plain.status, 201, plain.text);
  });
});

describe('enforcement leaves API keys alone; a locked account stays locked', () => {
  test('an API key made before enforcement keeps working while its owner must sign in through the IdP', async () => {
    const express = (await import('express')).default;
    const domain = uniqueDomain();
    const owner = await h.signUp(addressAt(domain, 'owner'));
    const org = await createOrg(h, { owner });
    const key = await h.post(`/orgs/${org.id}/api-keys`, { name: 'export', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(key.status, 201, key.text);
    const app = express();
    app.get('/whoami', h.identity.authenticate({ apiKeys: true }), (req, res) => void res.json({ data: h.identity.caller(req) }));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      await addVerifiedDomain(h, dns, org, domain);
      await connect(h, op, org, { enforce: true });
      assertError(await h.post('/auth/login', { email: owner.email, password: owner.password }), 403, 'sso_required');
      const answer = await fetch(`${base}/whoami`, { headers: { authorization: `Bearer ${key.body.data.key}` } });
      assert.equal(answer.status, 200, await answer.clone().text());
      assert.equal(((await answer.json()) as { data: { kind: string } }).data.kind, 'api_key');
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  test('a locked account gets invalid_credentials at the callback, as at password login', async () => {
    const { org, domain } = await ssoOrg(h, dns, op);
    const member = await addMember(h, org, org.owner.token, ['member'], await h.signUp(addressAt(domain, 'locked')));
    for (let attempt = 0; attempt < 20 && !h.events.some((event) => event.type === 'user.locked' && event.user_id === member.userId); attempt += 1) {
      await h.post('/auth/login', { email: member.email, password: 'not the password at all' });
    }
    assert.ok(h.events.some((event) => event.type === 'user.locked' && event.user_id === member.userId), 'locked');
    const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: member.email }, { email: member.email });
    assert.equal(trip.error, 'invalid_credentials');
    assert.equal(await countRows(h, 'sso_identities', { user_id: member.userId }), 0);
  });
});

describe('docs/openapi.yaml describes every single sign-on answer', () => {
  test('domains, the connection, authorize, the callback and the exchange match their documented schemas', async () => {
    const { validateResponse } = await import('../helpers/openapi.js');
    const problems: string[] = [];
    const check = (method: string, path: string, response: { status: number; body: unknown }) => problems.push(...validateResponse(method, path, response.status, response.body));
    const org = await createOrg(h);
    const token = { token: org.owner.token };
    const domain = uniqueDomain();
    const added = await h.post(`/orgs/${org.id}/domains`, { domain }, token);
    check('POST', `/orgs/${org.id}/domains`, added);
    check('POST', `/orgs/${org.id}/domains`, await h.post(`/orgs/${org.id}/domains`, { domain }, token));
    check('POST', `/orgs/${org.id}/domains`, await h.post(`/orgs/${org.id}/domains`, { domain: 'gmail.com' }, token));
    const verifyPath = `/orgs/${org.id}/domains/${added.body.data.id}/verify`;
    check('POST', verifyPath, await h.post(verifyPath, {}, token));
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    check('POST', verifyPath, await h.post(verifyPath, {}, token));
    check('GET', `/orgs/${org.id}/domains`, await h.get(`/orgs/${org.id}/domains`, token));
    check('GET', `/orgs/${org.id}/sso`, await h.get(`/orgs/${org.id}/sso`, token));
    check('POST', `/orgs/${org.id}/sso`, await h.post(`/orgs/${org.id}/sso`, connectionBody({ issuer: 'https://127.0.0.1' }), token));
    check('POST', `/orgs/${org.id}/sso`, await h.post(`/orgs/${org.id}/sso`, connectionBody({ jit: true }), token));
    check('PATCH', `/orgs/${org.id}/sso`, await h.patch(`/orgs/${org.id}/sso`, { enforce: false }, token));
    check('GET', `/orgs/${org.id}/sso`, await h.get(`/orgs/${org.id}/sso`, token));
    const email = addressAt(domain);
    const challenge = { handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' };
    check('POST', '/auth/sso/authorize', await h.post('/auth/sso/authorize', { email, ...challenge }));
    check('POST', '/auth/sso/authorize', await h.post('/auth/sso/authorize', { email: addressAt(uniqueDomain()), ...challenge }));
    const { trip, exchanged } = await ssoLogin(h, op, { sub: newSubject(), email }, { email });
    check('POST', '/auth/social/exchange', exchanged!);
    // Replayed: the state is spent, so the callback answers its documented 400.
    check('GET', trip.callbackPath, await h.get(trip.callbackPath));
    check('DELETE', `/orgs/${org.id}/domains/${added.body.data.id}`, await h.delete(`/orgs/${org.id}/domains/${added.body.data.id}`, token));
    check('DELETE', `/orgs/${org.id}/sso`, await h.delete(`/orgs/${org.id}/sso`, token));
    assert.deepEqual(problems, []);
  });
});
