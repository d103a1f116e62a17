/*
 * Organizations attacked across their own boundaries. Threats:
 * - IDOR: one person administers two organizations, A and B. With a token scoped to A, they name
 *   B's objects (member, role, invite, API key, webhook, delivery) under A's path, or B's role
 *   slugs in A's grants, hoping the object is looked up by id alone. Every one must be 404 (or
 *   422 for a slug) and leave B untouched; B's own path with A's token is 403 even for B's owner.
 * - Page cursors lifted from another organization's list, or from another route, must page only
 *   the path's organization and never answer 500.
 * - A role that is not owner-equivalent (everything but org.delete, roles.manage, sso.manage)
 *   must not reach owner-equivalent authority: no grant, invite or SSO default role with one, no
 *   change to an owner.
 * - The last active owner must stay, whatever the path: member removal, role change,
 *   suspension, account deletion (self or superadmin); an owner role that is only invited, or
 *   held by a suspended member, counts for nothing.
 * - A pending invite confers nothing before acceptance.
 * - Organization slugs and path ids with odd characters are 422 or 404, never 500.
 * Frozen clock; the webhook receiver is a real server on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { activeOwners, addMember, createOrg, type CreatedOrg, memberOf, roleIdOf, superadmin, switchOrg } from '../helpers/orgs.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

let h: Harness;
let receiver: WebhookReceiver;
before(async () => {
  receiver = await WebhookReceiver.start();
  h = await Harness.start({
    clockStart: Date.now(),
    config: {
      webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true },
      events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } },
    },
  });
});
after(async () => {
  await h.close();
  await receiver.close();
});

/** One owner of two organizations: `a.owner.token` is scoped to A, `b.owner.token` to B (same session). */
async function twoOrganizationsOneOwner(): Promise<{ a: CreatedOrg; b: CreatedOrg }> {
  const a = await createOrg(h);
  const b = await createOrg(h, { owner: a.owner });
  return { a, b };
}

test('IDOR: the owner of two organizations names B\'s members, roles, invites and API keys under A\'s path: 404, B untouched', async () => {
  const { a, b } = await twoOrganizationsOneOwner();
  const bMember = await addMember(h, b, b.owner.token, ['member']);
  const bRole = await h.post(`/orgs/${b.id}/roles`, { name: 'B only', slug: 'b-only', permission_keys: ['members.read'] }, { token: b.owner.token });
  assert.equal(bRole.status, 201, bRole.text);
  const bInvite = await h.post(`/orgs/${b.id}/invites`, { email: uniqueEmail('b-invitee'), role_slugs: ['member'] }, { token: b.owner.token });
  assert.equal(bInvite.status, 201, bInvite.text);
  // The caller's own API key in B: "the key's owner" may revoke it, but only through B's path.
  const bKey = await h.post(`/orgs/${b.id}/api-keys`, { name: 'b key', permission_keys: ['members.read'] }, { token: b.owner.token });
  assert.equal(bKey.status, 201, bKey.text);
  const aMember = await addMember(h, a, a.owner.token, ['member']);

  const token = a.owner.token;
  assertError(await h.patch(`/orgs/${a.id}/members/${bMember.userId}/roles`, { role_slugs: ['admin'] }, { token }), 404, 'not_found');
  assertError(await h.patch(`/orgs/${a.id}/members/${bMember.userId}`, { status: 'suspended' }, { token }), 404, 'not_found');
  assertError(await h.delete(`/orgs/${a.id}/members/${bMember.userId}`, { token }), 404, 'not_found');
  assertError(await h.patch(`/orgs/${a.id}/roles/${bRole.body.data.id}`, { permission_keys: ['org.read', 'members.read', 'audit.read'] }, { token }), 404, 'not_found');
  assertError(await h.delete(`/orgs/${a.id}/roles/${bRole.body.data.id}`, { token }), 404, 'not_found');
  assertError(await h.delete(`/orgs/${a.id}/invites/${bInvite.body.data.id}`, { token }), 404, 'not_found');
  assertError(await h.delete(`/orgs/${a.id}/api-keys/${bKey.body.data.id}`, { token }), 404, 'not_found');
  // B's custom role slug is no role of A: not grantable, not invitable.
  const grant = await h.patch(`/orgs/${a.id}/members/${aMember.userId}/roles`, { role_slugs: ['b-only'] }, { token });
  assert.equal(grant.status, 422, grant.text);
  const invite = await h.post(`/orgs/${a.id}/invites`, { email: uniqueEmail('x'), role_slugs: ['b-only'] }, { token });
  assert.equal(invite.status, 422, invite.text);
  // Under B's path with the token scoped to A: 403 before anything is looked up, though the caller owns B.
  for (const [method, path, body] of [
    ['GET', `/orgs/${b.id}/members`, undefined],
    ['PATCH', `/orgs/${b.id}/members/${bMember.userId}/roles`, { role_slugs: ['admin'] }],
    ['DELETE', `/orgs/${b.id}/roles/${bRole.body.data.id}`, undefined],
    ['DELETE', `/orgs/${b.id}/api-keys/${bKey.body.data.id}`, undefined],
    ['GET', `/orgs/${b.id}/api-keys`, undefined],
    ['GET', `/orgs/${b.id}/webhooks`, undefined],
  ] as const) {
    assertError(await h.request(method, path, { token, ...(body ? { body } : {}) }), 403, 'forbidden', `${method} ${path}`);
  }

  // Nothing of B changed, nothing was emitted for B by the attempts.
  assert.deepEqual((await memberOf(h, b.id, b.owner.token, bMember.userId)).roles, ['member']);
  assert.equal((await memberOf(h, b.id, b.owner.token, bMember.userId)).status, 'active');
  const bRoles = (await h.get(`/orgs/${b.id}/roles`, { token: b.owner.token })).body.data as any[];
  assert.deepEqual(bRoles.find((role) => role.slug === 'b-only').permission_keys, ['members.read']);
  const pending = (await h.get(`/orgs/${b.id}/invites`, { token: b.owner.token })).body.data as any[];
  assert.ok(pending.some((entry) => entry.id === bInvite.body.data.id));
  const keys = (await h.get(`/orgs/${b.id}/api-keys`, { token: b.owner.token })).body.data.keys as any[];
  assert.ok(keys.some((key) => key.id === bKey.body.data.id));
  assert.equal(h.eventsOfType('api_key.revoked').filter((event) => event.organization_id === b.id).length, 0);
  assert.equal(h.eventsOfType('role.updated').filter((event) => event.organization_id === b.id).length, 0);
});

test('IDOR: B\'s webhook and delivery named under A\'s path (rotate, test, replay, deliveries): 404, nothing sent or rotated', async () => {
  const { a, b } = await twoOrganizationsOneOwner();
  const hookA = await h.post(`/orgs/${a.id}/webhooks`, { url: receiver.url('/a'), events: ['*'] }, { token: a.owner.token });
  assert.equal(hookA.status, 201, hookA.text);
  const hookB = await h.post(`/orgs/${b.id}/webhooks`, { url: receiver.url('/b'), events: ['*'] }, { token: b.owner.token });
  assert.equal(hookB.status, 201, hookB.text);
  const testB = await h.post(`/orgs/${b.id}/webhooks/${hookB.body.data.id}/test`, undefined, { token: b.owner.token });
  assert.equal(testB.status, 202, testB.text);
  const deliveryB = testB.body.data.delivery_id as string;
  const rotatedBefore = h.eventsOfType('webhook.secret_rotated').length;
  const testsBefore = h.eventsOfType('webhook.test').length;

  const token = a.owner.token;
  const hookBId = hookB.body.data.id as string;
  assertError(await h.post(`/orgs/${a.id}/webhooks/${hookBId}/rotate-secret`, {}, { token }), 404, 'not_found');
  assertError(await h.post(`/orgs/${a.id}/webhooks/${hookBId}/test`, undefined, { token }), 404, 'not_found');
  assertError(await h.get(`/orgs/${a.id}/webhooks/${hookBId}/deliveries`, { token }), 404, 'not_found');
  assertError(await h.post(`/orgs/${a.id}/webhooks/${hookBId}/deliveries/${deliveryB}/replay`, undefined, { token }), 404, 'not_found');
  // A's own webhook, B's delivery: the delivery is looked up under the webhook, so 404 too.
  assertError(await h.post(`/orgs/${a.id}/webhooks/${hookA.body.data.id}/deliveries/${deliveryB}/replay`, undefined, { token }), 404, 'not_found');
  assert.equal(h.eventsOfType('webhook.secret_rotated').length, rotatedBefore);
  assert.equal(h.eventsOfType('webhook.test').length, testsBefore);
  // A's delivery list shows none of B's deliveries.
  const listedA = await h.get(`/orgs/${a.id}/webhooks/${hookA.body.data.id}/deliveries`, { token });
  assert.equal(listedA.status, 200, listedA.text);
  assert.ok(!(listedA.body.data.deliveries as any[]).some((delivery) => delivery.id === deliveryB));
});

test('cursors lifted from another organization\'s pages, or from another route, page only the path\'s organization and never answer 500', async () => {
  const { a, b } = await twoOrganizationsOneOwner();
  for (let n = 0; n < 3; n += 1) {
    await addMember(h, a, a.owner.token, ['member']);
    await addMember(h, b, b.owner.token, ['member']);
    assert.equal((await h.post(`/orgs/${a.id}/invites`, { email: uniqueEmail('a-pending'), role_slugs: ['member'] }, { token: a.owner.token })).status, 201);
    assert.equal((await h.post(`/orgs/${b.id}/invites`, { email: uniqueEmail('b-pending'), role_slugs: ['member'] }, { token: b.owner.token })).status, 201);
  }
  const aMembers = new Set(((await h.get(`/orgs/${a.id}/members?limit=100`, { token: a.owner.token })).body.data as any[]).map((member) => member.user_id));
  const aInvites = new Set(((await h.get(`/orgs/${a.id}/invites?limit=100`, { token: a.owner.token })).body.data as any[]).map((invite) => invite.id));
  const aEvents = new Set(((await h.get(`/orgs/${a.id}/audit-log?limit=100`, { token: a.owner.token })).body.data.events as any[]).map((event) => event.id));

  // B's first-page cursors.
  const bMembersPage = await h.get(`/orgs/${b.id}/members?limit=1`, { token: b.owner.token });
  const bInvitesPage = await h.get(`/orgs/${b.id}/invites?limit=1`, { token: b.owner.token });
  const bAuditPage = await h.get(`/orgs/${b.id}/audit-log?limit=1`, { token: b.owner.token });
  const bMembersCursor = bMembersPage.headers.get('x-next-cursor');
  const bInvitesCursor = bInvitesPage.headers.get('x-next-cursor');
  const bAuditCursor = bAuditPage.body.data.next_cursor as string;
  assert.ok(bMembersCursor && bInvitesCursor && bAuditCursor);

  // Used on A's lists: only A's rows come back.
  const members = await h.get(`/orgs/${a.id}/members?limit=100&cursor=${bMembersCursor}`, { token: a.owner.token });
  assert.equal(members.status, 200, members.text);
  for (const member of members.body.data as any[]) assert.ok(aMembers.has(member.user_id), `member ${member.user_id} is not A's`);
  const invites = await h.get(`/orgs/${a.id}/invites?limit=100&cursor=${bInvitesCursor}`, { token: a.owner.token });
  assert.equal(invites.status, 200, invites.text);
  for (const invite of invites.body.data as any[]) assert.ok(aInvites.has(invite.id), `invite ${invite.id} is not A's`);
  const events = await h.get(`/orgs/${a.id}/audit-log?limit=100&cursor=${bAuditCursor}`, { token: a.owner.token });
  assert.equal(events.status, 200, events.text);
  for (const event of events.body.data.events as any[]) {
    assert.equal(event.organization_id, a.id);
    assert.ok(aEvents.has(event.id));
  }

  // Another route's cursor, and values at the edges of what a cursor may hold.
  const encode = (parts: unknown[]) => Buffer.from(JSON.stringify(parts), 'utf8').toString('base64url');
  const cases: Array<[string, string]> = [
    ['members', bAuditCursor],
    ['invites', bAuditCursor],
    ['audit-log', bMembersCursor],
    ['members', encode([Number.MAX_SAFE_INTEGER])],
    ['audit-log', encode([Number.MAX_SAFE_INTEGER])],
    ['audit-log', encode([-Number.MAX_SAFE_INTEGER])],
    ['audit-log', encode([0])],
    ['audit-log', encode(['9223372036854775808'])],
    ['members', encode(['z'.repeat(64)])],
    ['members', encode([b.owner.userId, b.owner.userId])],
    ['invites', encode(['%'])],
    ['members', 'not base64 at all!'],
  ];
  for (const [list, cursor] of cases) {
    const response = await h.get(`/orgs/${a.id}/${list}?cursor=${encodeURIComponent(cursor)}`, { token: a.owner.token });
    assert.ok(response.status === 200 || response.status === 422, `${list} ${cursor}: ${response.status} ${response.text}`);
    if (response.status === 200) {
      const rows = (list === 'audit-log' ? response.body.data.events : response.body.data) as any[];
      if (list === 'members') for (const row of rows) assert.ok(aMembers.has(row.user_id));
      if (list === 'invites') for (const row of rows) assert.ok(aInvites.has(row.id));
      if (list === 'audit-log') for (const row of rows) assert.equal(row.organization_id, a.id);
    }
  }
});

test('a role that is not owner-equivalent cannot reach owner-equivalent authority: no grant, invite, or change to an owner', async () => {
  const org = await createOrg(h);
  const allButOwnerKeys = ['org.read', 'org.update', 'members.read', 'members.invite', 'members.update', 'members.remove', 'roles.read', 'audit.read', 'webhooks.manage'];
  const lead = await h.post(`/orgs/${org.id}/roles`, { name: 'Ops lead', slug: 'ops-lead', permission_keys: allButOwnerKeys }, { token: org.owner.token });
  assert.equal(lead.status, 201, lead.text);
  const opsLead = await addMember(h, org, org.owner.token, ['ops-lead']);
  const coOwner = await addMember(h, org, org.owner.token, ['owner']);
  const plain = await addMember(h, org, org.owner.token, ['member']);

  for (const slugs of [['admin'], ['owner'], ['ops-lead', 'admin']]) {
    assertError(await h.patch(`/orgs/${org.id}/members/${plain.userId}/roles`, { role_slugs: slugs }, { token: opsLead.token }), 403, 'forbidden', `grant ${slugs}`);
    assertError(await h.patch(`/orgs/${org.id}/members/${opsLead.userId}/roles`, { role_slugs: slugs }, { token: opsLead.token }), 403, 'forbidden', `self-grant ${slugs}`);
    assertError(await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('accomplice'), role_slugs: slugs }, { token: opsLead.token }), 403, 'forbidden', `invite ${slugs}`);
  }
  // No roles.manage: it cannot make or widen a role either.
  assertError(await h.post(`/orgs/${org.id}/roles`, { name: 'X', slug: 'x', permission_keys: ['org.read'] }, { token: opsLead.token }), 403, 'forbidden');
  assertError(await h.patch(`/orgs/${org.id}/roles/${lead.body.data.id}`, { permission_keys: [...allButOwnerKeys, 'roles.manage'] }, { token: opsLead.token }), 403, 'forbidden');
  // Owner protection: the owners are out of its reach.
  for (const target of [org.owner.userId, coOwner.userId]) {
    assertError(await h.patch(`/orgs/${org.id}/members/${target}/roles`, { role_slugs: ['member'] }, { token: opsLead.token }), 403, 'forbidden');
    assertError(await h.patch(`/orgs/${org.id}/members/${target}`, { status: 'suspended' }, { token: opsLead.token }), 403, 'forbidden');
    assertError(await h.delete(`/orgs/${org.id}/members/${target}`, { token: opsLead.token }), 403, 'forbidden');
  }
  // A suspended owner stays out of its reach: it cannot reactivate one either.
  assert.equal((await h.patch(`/orgs/${org.id}/members/${coOwner.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  assertError(await h.patch(`/orgs/${org.id}/members/${coOwner.userId}`, { status: 'active' }, { token: opsLead.token }), 403, 'forbidden');
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, opsLead.userId)).roles, ['ops-lead']);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, plain.userId)).roles, ['member']);
  assert.equal((await memberOf(h, org.id, org.owner.token, coOwner.userId)).status, 'suspended');
  // Nor an admin the owner suspended: reactivation hands back an owner-equivalent role (admin holds
  // roles.manage), granted as every such role is: only by an actor holding its keys.
  const suspendedAdmin = await addMember(h, org, org.owner.token, ['admin']);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${suspendedAdmin.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  assertError(await h.patch(`/orgs/${org.id}/members/${suspendedAdmin.userId}`, { status: 'active' }, { token: opsLead.token }), 403, 'forbidden', 'reactivate an admin');
  assert.equal((await memberOf(h, org.id, org.owner.token, suspendedAdmin.userId)).status, 'suspended');
  // Other roles come back with no guard (SPEC 3, member status).
  assert.equal((await h.patch(`/orgs/${org.id}/members/${plain.userId}`, { status: 'suspended' }, { token: opsLead.token })).status, 200);
  const reactivated = await h.patch(`/orgs/${org.id}/members/${plain.userId}`, { status: 'active' }, { token: opsLead.token });
  assert.equal(reactivated.status, 200, reactivated.text);
});

test('the last active owner stays on every path; an owner role that is only invited, or suspended, counts for nothing', async () => {
  const org = await createOrg(h);
  const root = await superadmin(h);
  const rootToken = await switchOrg(h, root.accessToken, org.id);
  // A second owner, suspended; a third, only invited (an account with a pending owner invite).
  const suspendedOwner = await addMember(h, org, org.owner.token, ['owner']);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${suspendedOwner.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  const invitedOwner = await h.signUp(uniqueEmail('invited-owner'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitedOwner.email, role_slugs: ['owner'] }, { token: org.owner.token })).status, 201);
  assert.equal((await memberOf(h, org.id, org.owner.token, invitedOwner.userId)).status, 'invited');

  const owner = org.owner.userId;
  for (const token of [org.owner.token, rootToken]) {
    assertError(await h.patch(`/orgs/${org.id}/members/${owner}/roles`, { role_slugs: ['admin'] }, { token }), 409, 'conflict');
    assertError(await h.patch(`/orgs/${org.id}/members/${owner}/roles`, { role_slugs: [] }, { token }), 409, 'conflict');
    assertError(await h.patch(`/orgs/${org.id}/members/${owner}`, { status: 'suspended' }, { token }), 409, 'conflict');
    assertError(await h.delete(`/orgs/${org.id}/members/${owner}`, { token }), 409, 'conflict');
  }
  assertError(await h.delete(`/users/${owner}`, { token: org.owner.token }), 409, 'conflict');
  assertError(await h.delete(`/users/${owner}`, { token: root.accessToken }), 409, 'conflict');
  const still = await memberOf(h, org.id, org.owner.token, owner);
  assert.equal(still.status, 'active');
  assert.deepEqual(still.roles, ['owner']);

  // Once the invited owner accepts, there are two active owners and the first may step down.
  assert.equal((await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitedOwner.email, 'invite') }, { token: invitedOwner.accessToken })).status, 200);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${owner}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 200);
  // ... and the new one is now the last: the suspended owner still counts for nothing.
  const newOwnerToken = await switchOrg(h, invitedOwner.accessToken, org.id);
  assertError(await h.delete(`/orgs/${org.id}/members/${invitedOwner.userId}`, { token: newOwnerToken }), 409, 'conflict');
});

test('a pending invite confers nothing before acceptance: no switch, no listing, no organization route, no API key', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('pending'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 201);
  assert.equal((await memberOf(h, org.id, org.owner.token, invitee.userId)).status, 'invited');

  assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token: invitee.accessToken }), 403, 'forbidden');
  assert.deepEqual((await h.get('/orgs', { token: invitee.accessToken })).body.data, []);
  assert.deepEqual((await h.get('/auth/me', { token: invitee.accessToken })).body.data.orgs, []);
  for (const [method, path, body] of [
    ['GET', `/orgs/${org.id}`, undefined],
    ['GET', `/orgs/${org.id}/members`, undefined],
    ['POST', `/orgs/${org.id}/invites`, { email: uniqueEmail('x'), role_slugs: ['member'] }],
    ['POST', `/orgs/${org.id}/api-keys`, { name: 'k', permission_keys: ['org.read'] }],
  ] as const) {
    assertError(await h.request(method, path, { token: invitee.accessToken, ...(body ? { body } : {}) }), 403, 'forbidden', `${method} ${path}`);
  }
  // Its invited entry cannot be given roles or a status until it accepts.
  assertError(await h.patch(`/orgs/${org.id}/members/${invitee.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }), 409, 'conflict');
  assertError(await h.patch(`/orgs/${org.id}/members/${invitee.userId}`, { status: 'active' }, { token: org.owner.token }), 409, 'conflict');
});

test('organization slugs and path ids with odd characters are 422 or 404, never 500 or another organization', async () => {
  const owner = await h.signUp(uniqueEmail('slugs'));
  for (const slug of ['A', 'é', 'a b', 'a_b', '../x', 'a/b', '%', 'x'.repeat(161), '', '\u202eabc', 'ａｂｃ']) {
    const response = await h.post('/orgs', { name: 'Odd', slug }, { token: owner.accessToken });
    assert.equal(response.status, 422, `slug ${JSON.stringify(slug)}: ${response.text}`);
  }
  for (const slug of ['-', '0', `n${'9'.repeat(159)}`]) {
    const response = await h.post('/orgs', { name: 'Odd', slug: `${slug}`.slice(0, 160) }, { token: owner.accessToken });
    assert.ok(response.status === 201 || response.status === 409, `slug ${slug}: ${response.status} ${response.text}`);
  }
  const org = await createOrg(h);
  const root = await superadmin(h);
  for (const id of ['%2e%2e', encodeURIComponent(`${org.id}/..`), encodeURIComponent(org.id.toUpperCase()), encodeURIComponent(`${org.id} `), '%E2%80%AE', 'a'.repeat(64), encodeURIComponent("' or 1=1 --")]) {
    for (const token of [org.owner.token, root.accessToken]) {
      const response = await h.get(`/orgs/${id}/members`, { token });
      assert.ok([403, 404, 422].includes(response.status), `${id}: ${response.status} ${response.text}`);
      if (token === root.accessToken) assert.notEqual(response.status, 200);
    }
  }
  assert.equal((await roleIdOf(h, org.id, org.owner.token, 'owner')).length > 0, true);
});

test('listings leak nothing: no hash, token, key or secret; no e-mail of another organization\'s members; gated e-mails stay null', async () => {
  const { a, b } = await twoOrganizationsOneOwner();
  const aMember = await addMember(h, a, a.owner.token, ['member']);
  const bOnly = await addMember(h, b, b.owner.token, ['member']);
  const bInvitee = uniqueEmail('b-only-invitee');
  assert.equal((await h.post(`/orgs/${b.id}/invites`, { email: bInvitee, role_slugs: ['member'] }, { token: b.owner.token })).status, 201);
  const aInvitee = await h.signUp(uniqueEmail('a-invitee'));
  assert.equal((await h.post(`/orgs/${a.id}/invites`, { email: aInvitee.email, role_slugs: ['member'] }, { token: a.owner.token })).status, 201);
  const inviteToken = h.tokenFromMail(aInvitee.email, 'invite');
  const key = await h.post(`/orgs/${a.id}/api-keys`, { name: 'k', permission_keys: ['members.read'] }, { token: a.owner.token });
  assert.equal(key.status, 201, key.text);
  const hook = await h.post(`/orgs/${a.id}/webhooks`, { url: receiver.url('/leak'), events: ['*'] }, { token: a.owner.token });
  assert.equal(hook.status, 201, hook.text);
  const suspended = await addMember(h, a, a.owner.token, ['member']);
  assert.equal((await h.patch(`/orgs/${a.id}/members/${suspended.userId}`, { status: 'suspended' }, { token: a.owner.token })).status, 200);

  const secrets: string[] = [key.body.data.key, hook.body.data.secret, inviteToken, bOnly.email, bInvitee];
  for (const table of ['users', 'invites', 'api_keys']) {
    const column = table === 'users' ? 'password_hash' : table === 'api_keys' ? 'key_hash' : 'token_hash';
    for (const value of await h.knex(`${h.tablePrefix}${table}`).whereNotNull(column).pluck(column)) secrets.push(String(value));
  }
  const webhookRow = await h.knex(`${h.tablePrefix}webhooks`).where({ id: hook.body.data.id }).first('secret_enc');
  secrets.push(String(webhookRow.secret_enc));

  const aReader = await h.post(`/orgs/${a.id}/roles`, { name: 'Reader', slug: 'reader', permission_keys: ['members.read', 'audit.read', 'roles.read', 'org.read'] }, { token: a.owner.token });
  assert.equal(aReader.status, 201, aReader.text);
  const reader = await addMember(h, a, a.owner.token, ['reader']);
  const paths = ['', '/members?limit=100', '/invites?limit=100', '/roles', '/api-keys', '/webhooks', `/webhooks/${hook.body.data.id}`, `/webhooks/${hook.body.data.id}/deliveries`, '/audit-log?limit=100'];
  for (const path of paths) {
    const response = await h.get(`/orgs/${a.id}${path}`, { token: a.owner.token });
    assert.equal(response.status, 200, `${path}: ${response.text}`);
    for (const secret of secrets) assert.ok(!response.text.includes(secret), `${path} shows ${secret.slice(0, 12)}…`);
  }
  for (const path of ['/members?limit=100', '/audit-log?limit=100', '/roles', '']) {
    const response = await h.get(`/orgs/${a.id}${path}`, { token: reader.token });
    assert.equal(response.status, 200, `${path}: ${response.text}`);
    for (const secret of secrets) assert.ok(!response.text.includes(secret), `${path} (reader) shows ${secret.slice(0, 12)}…`);
    // Without members.invite the invited and suspended addresses stay hidden, here and in the audit trail.
    for (const hidden of [aInvitee.email, suspended.email]) assert.ok(!response.text.includes(hidden), `${path} (reader) shows ${hidden}`);
  }
  const members = (await h.get(`/orgs/${a.id}/members?limit=100`, { token: reader.token })).body.data as any[];
  assert.equal(members.find((member) => member.user_id === aMember.userId).email, aMember.email);
  assert.equal(members.find((member) => member.user_id === suspended.userId).email, null);
  assert.equal(members.find((member) => member.user_id === aInvitee.userId).email, null);
});

test('the last two owners ending each other\'s ownership at once, by different paths, always leave exactly one active owner', async () => {
  // Threat: a check-then-act race (READ COMMITTED on PostgreSQL) in which two requests each count
  // two owners and each end one of them through a different path (removal, suspension,
  // self-demotion, account deletion), leaving the organization without an owner.
  type Pair = (org: CreatedOrg, second: Awaited<ReturnType<typeof addMember>>) => [Promise<{ status: number }>, Promise<{ status: number }>];
  const pairs: Array<[string, Pair]> = [
    ['removal against removal', (org, second) => [
      h.delete(`/orgs/${org.id}/members/${second.userId}`, { token: org.owner.token }),
      h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token: second.token }),
    ]],
    ['suspension against removal', (org, second) => [
      h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: org.owner.token }),
      h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token: second.token }),
    ]],
    ['self-demotion against account deletion', (org, second) => [
      h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token }),
      h.delete(`/users/${second.userId}`, { token: second.token }),
    ]],
    ['leaving against self-suspension', (org, second) => [
      h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token: org.owner.token }),
      h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: second.token }),
    ]],
  ];
  const rounds = TEST_DB === 'pg' ? 4 : 1;
  for (const [name, pair] of pairs) {
    for (let round = 0; round < rounds; round += 1) {
      const org = await createOrg(h);
      const second = await addMember(h, org, org.owner.token, ['owner']);
      assert.equal((await activeOwners(h, org.id)).length, 2);
      const answers = await Promise.all(pair(org, second));
      const statuses = answers.map((answer) => answer.status);
      assert.equal((await activeOwners(h, org.id)).length, 1, `${name}, round ${round}: statuses ${statuses}`);
      assert.equal(statuses.filter((status) => status === 200).length, 1, `${name}, round ${round}: statuses ${statuses}`);
      for (const status of statuses) assert.ok([200, 401, 403, 404, 409].includes(status), `${name}, round ${round}: statuses ${statuses}`);
    }
  }
});
