import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg, memberOf, roleIdOf, superadmin } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { permissions: [{ key: 'invoices.read', description: 'Read invoices' }] } });
});
after(async () => {
  await h.close();
});

const ORG_KEYS = ['audit.read', 'invoices.read', 'members.invite', 'members.read', 'members.remove', 'members.update', 'org.delete', 'org.read', 'org.update', 'roles.manage', 'roles.read', 'webhooks.manage'];

test('GET roles: the cloned system templates with spec 2.13 keys; superadmin role never listed', async () => {
  const org = await createOrg(h);
  await superadmin(h);
  const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
  assert.equal(roles.status, 200);
  const bySlug = new Map((roles.body.data as any[]).map((r) => [r.slug, r]));
  assert.deepEqual([...bySlug.keys()].sort(), ['admin', 'member', 'owner']);
  for (const role of roles.body.data) assert.deepEqual(Object.keys(role).sort(), ['description', 'id', 'is_system', 'name', 'permission_keys', 'slug']);
  assert.deepEqual(bySlug.get('owner').permission_keys, ORG_KEYS);
  assert.deepEqual(bySlug.get('admin').permission_keys, ORG_KEYS.filter((k) => k !== 'org.delete'));
  assert.deepEqual(bySlug.get('member').permission_keys, ['members.read', 'org.read', 'roles.read']);
  assert.ok([...bySlug.values()].every((r) => r.is_system === true));
  const member = await addMember(h, org, org.owner.token);
  assert.equal((await h.get(`/orgs/${org.id}/roles`, { token: member.token })).status, 200);
});

test('POST roles: 201 role, role.created, 409 duplicate slug, 422 unknown or global key, 403 key not held', async () => {
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Billing', slug: 'billing', description: 'Invoices', permission_keys: ['invoices.read', 'org.read'] }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  assert.deepEqual({ ...created.body.data, id: undefined }, { id: undefined, slug: 'billing', name: 'Billing', description: 'Invoices', is_system: false, permission_keys: ['invoices.read', 'org.read'] });
  assert.ok(h.eventsOfType('role.created').some((e) => e.organization_id === org.id && e.data.slug === 'billing'));

  const duplicate = await h.post(`/orgs/${org.id}/roles`, { name: 'Billing 2', slug: 'billing', permission_keys: [] }, { token: org.owner.token });
  assert.equal(duplicate.status, 409);
  const systemSlug = await h.post(`/orgs/${org.id}/roles`, { name: 'Owner 2', slug: 'owner', permission_keys: [] }, { token: org.owner.token });
  assert.equal(systemSlug.status, 409);
  const unknown = await h.post(`/orgs/${org.id}/roles`, { name: 'X', slug: 'x', permission_keys: ['nope.read'] }, { token: org.owner.token });
  assert.equal(unknown.status, 422);
  assert.ok(Array.isArray(unknown.body.errors));
  const global = await h.post(`/orgs/${org.id}/roles`, { name: 'X', slug: 'x', permission_keys: ['users.manage'] }, { token: org.owner.token });
  assert.equal(global.status, 422);
  const reserved = await h.post(`/orgs/${org.id}/roles`, { name: 'X', slug: 'superadmin', permission_keys: [] }, { token: org.owner.token });
  assert.equal(reserved.status, 422);
  for (const body of [{ name: 'X', slug: 'Bad Slug', permission_keys: [] }, { name: 'X', permission_keys: [] }, { name: 'X', slug: 'x' }]) {
    assert.equal((await h.post(`/orgs/${org.id}/roles`, body, { token: org.owner.token })).status, 422, JSON.stringify(body));
  }
  // Threat: an admin minting a role with a key it lacks (escalation).
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const escalate = await h.post(`/orgs/${org.id}/roles`, { name: 'Deleter', slug: 'deleter', permission_keys: ['org.delete'] }, { token: admin.token });
  assert.equal(escalate.status, 403);
  const fine = await h.post(`/orgs/${org.id}/roles`, { name: 'Reader', slug: 'reader', permission_keys: ['org.read'] }, { token: admin.token });
  assert.equal(fine.status, 201);
  const plain = await addMember(h, org, org.owner.token, ['member']);
  assert.equal((await h.post(`/orgs/${org.id}/roles`, { name: 'R', slug: 'r', permission_keys: [] }, { token: plain.token })).status, 403);
});

test('PATCH roles: name/description/keys, role.updated, slug immutable, owner role 409, escalation 403', async () => {
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Support', slug: 'support', permission_keys: ['org.read'] }, { token: org.owner.token });
  const roleId = created.body.data.id;
  const updated = await h.patch(`/orgs/${org.id}/roles/${roleId}`, { name: 'Support team', description: 'Helps', permission_keys: ['org.read', 'members.read'] }, { token: org.owner.token });
  assert.equal(updated.status, 200, updated.text);
  assert.deepEqual(updated.body.data, { id: roleId, slug: 'support', name: 'Support team', description: 'Helps', is_system: false, permission_keys: ['members.read', 'org.read'] });
  assert.ok(h.eventsOfType('role.updated').some((e) => e.data.role_id === roleId));
  const slugChange = await h.patch(`/orgs/${org.id}/roles/${roleId}`, { slug: 'other' }, { token: org.owner.token });
  assert.equal(slugChange.status, 422);

  const ownerId = await roleIdOf(h, org.id, org.owner.token, 'owner');
  const ownerEdit = await h.patch(`/orgs/${org.id}/roles/${ownerId}`, { name: 'Boss' }, { token: org.owner.token });
  assert.equal(ownerEdit.status, 409);
  assert.equal(ownerEdit.body.error, 'conflict');

  // The member template may be edited, but only with keys the actor holds.
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const memberId = await roleIdOf(h, org.id, org.owner.token, 'member');
  const escalate = await h.patch(`/orgs/${org.id}/roles/${memberId}`, { permission_keys: ['org.read', 'org.delete'] }, { token: admin.token });
  assert.equal(escalate.status, 403);
  const allowed = await h.patch(`/orgs/${org.id}/roles/${memberId}`, { permission_keys: ['org.read', 'members.read', 'roles.read', 'audit.read'] }, { token: admin.token });
  assert.equal(allowed.status, 200, allowed.text);
  assert.equal((await h.patch(`/orgs/${org.id}/roles/00000000-0000-0000-0000-000000000000`, { name: 'x' }, { token: org.owner.token })).status, 404);
});

test('DELETE roles: custom only (system 409), detached from members, role.deleted', async () => {
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Temp', slug: 'temp', permission_keys: ['audit.read'] }, { token: org.owner.token });
  const holder = await addMember(h, org, org.owner.token, ['member', 'temp']);
  assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: holder.token })).status, 200);
  const deleted = await h.delete(`/orgs/${org.id}/roles/${created.body.data.id}`, { token: org.owner.token });
  assert.equal(deleted.status, 200, deleted.text);
  assert.deepEqual(deleted.body, { data: { status: 'deleted' } });
  assert.ok(h.eventsOfType('role.deleted').some((e) => e.data.role_id === created.body.data.id && e.data.members_detached === 1));
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, holder.userId)).roles, ['member']);
  // Detached at once: the holder's next request is refused.
  assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: holder.token })).status, 403);
  assert.equal((await h.delete(`/orgs/${org.id}/roles/${created.body.data.id}`, { token: org.owner.token })).status, 404);
  for (const slug of ['owner', 'admin', 'member']) {
    const system = await h.delete(`/orgs/${org.id}/roles/${await roleIdOf(h, org.id, org.owner.token, slug)}`, { token: org.owner.token });
    assert.equal(system.status, 409, slug);
  }
  // Another organization's role is not addressable here.
  const other = await createOrg(h);
  const foreign = await roleIdOf(h, other.id, other.owner.token, 'member');
  assert.equal((await h.delete(`/orgs/${org.id}/roles/${foreign}`, { token: org.owner.token })).status, 404);
});
