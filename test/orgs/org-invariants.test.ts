import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { addMember, createOrg, memberOf, superadmin } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function activeOwnerCount(orgId: string): Promise<number> {
  const t = h.tablePrefix;
  const rows = await h.knex(`${t}memberships as m`)
    .join(`${t}member_roles as mr`, 'mr.membership_id', 'm.id')
    .join(`${t}roles as r`, 'r.id', 'mr.role_id')
    .where({ 'm.organization_id': orgId, 'm.status': 'active', 'r.slug': 'owner' })
    .select('m.user_id');
  return rows.length;
}

test('invariant 1, no escalation: an admin cannot grant owner or invite with it; superadmin exempt', async () => {
  // Threat: an admin promoting itself or an accomplice to owner (gaining org.delete).
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const self = await h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['admin', 'owner'] }, { token: admin.token });
  assert.equal(self.status, 403);
  const other = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: admin.token });
  assert.equal(other.status, 403);
  const custom = await h.post(`/orgs/${org.id}/roles`, { name: 'Deleter', slug: 'deleter', permission_keys: ['org.delete'] }, { token: org.owner.token });
  assert.equal(custom.status, 201);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['deleter'] }, { token: admin.token })).status, 403);
  const invite = await h.post(`/orgs/${org.id}/invites`, { email: 'accomplice@example.com', role_slugs: ['owner'] }, { token: admin.token });
  assert.equal(invite.status, 403);
  // What the admin holds can be granted.
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: admin.token })).status, 200);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, admin.userId)).roles, ['admin']);
  // A superadmin is exempt (it holds everything).
  const root = await superadmin(h);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['deleter'] }, { token: root.accessToken })).status, 200);
});

test('invariant 2, owner protection: only an owner or superadmin may modify, suspend or remove an owner', async () => {
  const org = await createOrg(h);
  const coOwner = await addMember(h, org, org.owner.token, ['owner']);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  for (const [method, path, body] of [
    ['PATCH', `/orgs/${org.id}/members/${coOwner.userId}/roles`, { role_slugs: ['member'] }],
    ['PATCH', `/orgs/${org.id}/members/${coOwner.userId}`, { status: 'suspended' }],
    ['DELETE', `/orgs/${org.id}/members/${coOwner.userId}`, undefined],
  ] as const) {
    const response = await h.request(method, path, { token: admin.token, ...(body ? { body } : {}) });
    assert.equal(response.status, 403, `${method} ${path}`);
    assert.equal(response.body.error, 'forbidden');
  }
  assert.equal((await memberOf(h, org.id, org.owner.token, coOwner.userId)).status, 'active');
  // An owner may.
  assert.equal((await h.patch(`/orgs/${org.id}/members/${coOwner.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  // A superadmin may.
  const root = await superadmin(h);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${coOwner.userId}`, { status: 'active' }, { token: root.accessToken })).status, 200);
  assert.equal((await h.delete(`/orgs/${org.id}/members/${coOwner.userId}`, { token: root.accessToken })).status, 200);
});

test('invariant 3, last owner: cannot be demoted, suspended or removed (409), even by a superadmin', async () => {
  const org = await createOrg(h);
  const root = await superadmin(h);
  for (const token of [org.owner.token, root.accessToken]) {
    const demote = await h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token });
    assert.equal(demote.status, 409);
    assert.equal(demote.body.error, 'conflict');
    assert.equal((await h.patch(`/orgs/${org.id}/members/${org.owner.userId}`, { status: 'suspended' }, { token })).status, 409);
    assert.equal((await h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token })).status, 409);
  }
  assert.equal(await activeOwnerCount(org.id), 1);
  // With a second active owner, the first may step down; a suspended owner does not count.
  const second = await addMember(h, org, org.owner.token, ['owner']);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 409);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'active' }, { token: org.owner.token })).status, 200);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 200);
  assert.equal(await activeOwnerCount(org.id), 1);
});

test('invariant 3 under concurrency: two owners demoting each other always leave an owner (20 rounds)', async () => {
  // Threat: a check-then-act race (READ COMMITTED) letting two simultaneous demotions remove every owner.
  const org = await createOrg(h);
  const second = await addMember(h, org, org.owner.token, ['owner']);
  const rounds = TEST_DB === 'pg' ? 20 : 5;
  for (let round = 0; round < rounds; round += 1) {
    // Both are owners at the start of each round.
    const ownersAtStart = await activeOwnerCount(org.id);
    if (ownersAtStart < 2) {
      const remaining = (await memberOf(h, org.id, org.owner.token, org.owner.userId))?.roles.includes('owner') ? org.owner : second;
      const demoted = remaining === org.owner ? second : org.owner;
      const restore = await h.patch(`/orgs/${org.id}/members/${demoted.userId}/roles`, { role_slugs: ['owner'] }, { token: remaining.token });
      assert.equal(restore.status, 200, restore.text);
    }
    assert.equal(await activeOwnerCount(org.id), 2);
    const [a, b] = await Promise.all([
      h.patch(`/orgs/${org.id}/members/${second.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }),
      h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: second.token }),
    ]);
    const statuses = [a.status, b.status].sort();
    assert.equal(await activeOwnerCount(org.id), 1, `round ${round}: statuses ${statuses}`);
    assert.ok(statuses[0] === 200 && [403, 409].includes(statuses[1]!), `round ${round}: statuses ${statuses}`);
  }
});

test('invariant 3 under concurrency: two owners suspending each other always leave an active owner', async () => {
  const org = await createOrg(h);
  const second = await addMember(h, org, org.owner.token, ['owner']);
  const [a, b] = await Promise.all([
    h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: org.owner.token }),
    h.patch(`/orgs/${org.id}/members/${org.owner.userId}`, { status: 'suspended' }, { token: second.token }),
  ]);
  assert.equal(await activeOwnerCount(org.id), 1, `statuses ${a.status} ${b.status}`);
  assert.equal([a.status, b.status].filter((s) => s === 200).length, 1);
});
