import assert from 'node:assert/strict';
import { test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, type TestResponse } from '../helpers/harness.js';
import { CLIENT_ID, newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { createOrg, memberOf } from '../helpers/orgs.js';
import { addressAt, connect, ssoLogin, ssoOrg, ssoRoundTrip, StubDns, withSsoHarness } from '../helpers/sso.js';
import { MembershipRepository } from '../../src/store/organization-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';
import { WebhookRepository } from '../../src/store/webhook-repository.js';

/*
 * READ COMMITTED interleavings in single sign-on and webhooks (PostgreSQL only): a second
 * request made to commit exactly between two reads of one decision.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();
const skip = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

withSsoHarness(dns, (started) => ({ op, h } = started));

test('JIT: an invite accepted while the exchange looks up the membership waits for the organization the exchange holds; the invited roles stand', { skip }, async () => {
  const { org, domain } = await ssoOrg(h, dns, op, { jit: true, default_role: 'member' });
  const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
  const member = (roles.body.data as Array<{ slug: string; permission_keys: string[] }>).find((role) => role.slug === 'member')!;
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Reviewers', slug: 'reviewer', permission_keys: [...member.permission_keys, 'members.invite'] }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);

  // An existing, verified account at the domain, invited as reviewer (an `invited` membership row).
  const user = await h.signUp(addressAt(domain, 'invitee'));
  const invited = await h.post(`/orgs/${org.id}/invites`, { email: user.email, role_slugs: ['reviewer'] }, { token: org.owner.token });
  assert.equal(invited.status, 201, invited.text);
  const inviteToken = h.tokenFromMail(user.email, 'invite');

  const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: user.email }, { email: user.email });
  assert.ok(trip.code, `callback: ${trip.location?.href}`);

  // The exchange reads the membership (step 4: invited, so JIT joins); the invitee accepts
  // before the exchange writes the membership.
  const { outer: exchanged, inner: accepted } = await withRequestInTheWindow(
    h,
    { prototype: MembershipRepository.prototype, method: 'find', when: (organizationId, userId) => organizationId === org.id && userId === user.userId },
    () => h.post('/auth/invites/accept', { token: inviteToken }, { token: user.accessToken }),
    () => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }),
  );
  assert.equal(accepted?.status, 200, accepted?.text);
  assert.equal(exchanged.status, 200, exchanged.text);
  // The exchange holds the organization from before its lookup, so the accept comes second, as
  // in the serial order SSO then accept: the JIT join, then the accept sets the invited roles.
  const row = await memberOf(h, org.id, org.owner.token, user.userId);
  assert.equal(row.status, 'active');
  assert.deepEqual(row.roles, ['reviewer'], 'the invited roles, not the JIT default role');
  const joined = h.events.filter((event) => event.type === 'member.joined' && event.user_id === user.userId && event.organization_id === org.id);
  assert.deepEqual(
    joined.map((event) => (event.data.via === 'sso_jit' ? 'sso_jit' : 'invite')),
    ['sso_jit', 'invite'],
    JSON.stringify(joined.map((event) => event.data)),
  );
  assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: user.userId }), 1);
});

test('JIT: a removed member signs in again while an owner invites them: the join holds the organization first, no deadlock, one membership', { skip, timeout: 60_000 }, async () => {
  const { org, domain } = await ssoOrg(h, dns, op, { jit: true, default_role: 'member' });
  const account = { sub: newSubject(), email: addressAt(domain, 'rejoining') };
  const first = await ssoLogin(h, op, account, { email: account.email });
  assert.equal(first.exchanged?.status, 200, first.exchanged?.text);
  const userId: string = first.exchanged!.body.data.user.id;
  const removed = await h.delete(`/orgs/${org.id}/members/${userId}`, { token: org.owner.token });
  assert.equal(removed.status, 200, removed.text);
  const trip = await ssoRoundTrip(h, op, account, { email: account.email });
  assert.ok(trip.code, `callback: ${trip.location?.href}`);

  // The exchange holds the linked account (decide); the invite holds the organization and then
  // wants the account for its `invited` row, while the exchange's join wants the organization.
  const { answer, deadlocks } = await countingDeadlocks(() =>
    withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'findByIdForUpdate', when: (id) => id === userId },
      () => h.post(`/orgs/${org.id}/invites`, { email: account.email, role_slugs: ['admin'] }, { token: org.owner.token }),
      () => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }),
    ),
  );
  const { outer: exchanged, inner: invited } = answer;
  assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
  assert.equal(exchanged.status, 200, exchanged.text);
  // The exchange first (the invite waits for the organization): the invite then finds a member.
  assert.equal(invited?.status, 409, invited?.text);
  const row = await memberOf(h, org.id, org.owner.token, userId);
  assert.equal(row.status, 'active');
  assert.deepEqual(row.roles, ['member']);
  assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: userId }), 1);
});

test('connection: a token_endpoint_auth_method changed while another update re-discovers is kept', { skip }, async () => {
  const org = await createOrg(h);
  await connect(h, op, org, { token_endpoint_auth_method: 'client_secret_basic' });
  let other: TestResponse | undefined;
  op.beforeNextDiscovery = async () => {
    other = await h.patch(`/orgs/${org.id}/sso`, { token_endpoint_auth_method: 'client_secret_post' }, { token: org.owner.token });
  };
  // The same client id, given again: discovery runs, nothing else is asked to change.
  const patched = await h.patch(`/orgs/${org.id}/sso`, { client_id: CLIENT_ID }, { token: org.owner.token });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(other?.status, 200, other?.text);
  assert.equal(other.body.data.token_endpoint_auth_method, 'client_secret_post');
  const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
  assert.equal(read.body.data.token_endpoint_auth_method, 'client_secret_post', 'the other update\'s method is not written back');
});

test('JIT: an invite accepted and the member suspended between the exchange\'s membership lookup and its write: the suspension stands', { skip }, async () => {
  const { org, domain } = await ssoOrg(h, dns, op, { jit: true, default_role: 'member' });
  const user = await h.signUp(addressAt(domain, 'suspended'));
  const invited = await h.post(`/orgs/${org.id}/invites`, { email: user.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(invited.status, 201, invited.text);
  const inviteToken = h.tokenFromMail(user.email, 'invite');
  const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email: user.email }, { email: user.email });
  assert.ok(trip.code, `callback: ${trip.location?.href}`);

  let accepted: TestResponse | undefined;
  let suspended: TestResponse | undefined;
  const { outer: exchanged } = await withRequestInTheWindow(
    h,
    { prototype: MembershipRepository.prototype, method: 'find', when: (organizationId, userId) => organizationId === org.id && userId === user.userId },
    async () => {
      accepted = await h.post('/auth/invites/accept', { token: inviteToken }, { token: user.accessToken });
      suspended = await h.patch(`/orgs/${org.id}/members/${user.userId}`, { status: 'suspended' }, { token: org.owner.token });
    },
    () => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }),
  );
  assert.equal(accepted?.status, 200, accepted?.text);
  assert.equal(suspended?.status, 200, suspended?.text);
  // Serially: SSO, accept, suspend ends suspended; accept, suspend, SSO is refused (sso_member_suspended).
  const row = await memberOf(h, org.id, org.owner.token, user.userId);
  assert.equal(row.status, 'suspended', `the exchange answered ${exchanged.status} ${exchanged.text.slice(0, 200)}`);
});

test('webhooks: a PATCH {status: active} whose webhook is disabled after its first read still passes the guard again', { skip }, async () => {
  const hookDns = new StubDns();
  const wh = await Harness.start({ dns: hookDns.adapter, config: { webhooks: { enabled: true, allowHttp: true } } });
  try {
    const org = await createOrg(wh);
    hookDns.answers.set('hooks.example.test', ['93.184.216.34']);
    const created = await wh.post(`/orgs/${org.id}/webhooks`, { url: 'https://hooks.example.test/hook', events: ['*'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const id = created.body.data.id as string;
    // The name now points at the router's own network: the guard refuses it.
    hookDns.answers.set('hooks.example.test', ['127.0.0.1']);

    const { outer: enabled, inner: disabled } = await withRequestInTheWindow(
      wh,
      { prototype: WebhookRepository.prototype, method: 'findInOrganization', when: (_organizationId, webhookId) => webhookId === id },
      () => wh.patch(`/orgs/${org.id}/webhooks/${id}`, { status: 'disabled' }, { token: org.owner.token }),
      () => wh.patch(`/orgs/${org.id}/webhooks/${id}`, { status: 'active' }, { token: org.owner.token }),
    );
    assert.equal(disabled?.status, 200, disabled?.text);
    assert.equal(disabled.body.data.status, 'disabled');
    // Serially: disable then enable is refused by the guard (422); enable (no change) then disable leaves it disabled.
    const read = await wh.get(`/orgs/${org.id}/webhooks/${id}`, { token: org.owner.token });
    assert.equal(read.body.data.status, 'disabled', `re-enabled without the guard: PATCH answered ${enabled.status} ${enabled.text.slice(0, 200)}`);
  } finally {
    await wh.close();
  }
});
