import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, uniqueEmail } from '../helpers/harness.js';
import { newSubject, TestOpenIdProvider } from '../helpers/oidc.js';
import { addMember, createOrg, memberOf, roleIdOf, superadmin, switchOrg } from '../helpers/orgs.js';
import { addressAt, ssoLogin, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function superadminRoleId(): Promise<string> {
  const row = await h.knex(`${h.tablePrefix}roles`).whereNull('organization_id').where({ slug: 'superadmin' }).first('id');
  return String(row.id);
}

test('the global superadmin role is unreachable through organization paths: role id 404, role slug 422', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const id = await superadminRoleId();
  const patch = await h.patch(`/orgs/${org.id}/roles/${id}`, { name: 'Mine' }, { token: org.owner.token });
  assert.equal(patch.status, 404, patch.text);
  assert.equal(patch.body.error, 'not_found');
  const del = await h.delete(`/orgs/${org.id}/roles/${id}`, { token: org.owner.token });
  assert.equal(del.status, 404, del.text);
  const grant = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['superadmin'] }, { token: org.owner.token });
  assert.equal(grant.status, 422, grant.text);
  const invite = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('sa'), role_slugs: ['superadmin'] }, { token: org.owner.token });
  assert.equal(invite.status, 422, invite.text);
  const create = await h.post(`/orgs/${org.id}/roles`, { name: 'S', slug: 'superadmin', permission_keys: [] }, { token: org.owner.token });
  assert.equal(create.status, 422, create.text);
  const usersKeys = await h.post(`/orgs/${org.id}/roles`, { name: 'U', slug: 'u', permission_keys: ['users.manage'] }, { token: org.owner.token });
  assert.equal(usersKeys.status, 422, usersKeys.text);
});

test('another organization\'s invites, roles and members are not reachable by id from one\'s own organization', async () => {
  const a = await createOrg(h);
  const b = await createOrg(h);
  const bMember = await addMember(h, b, b.owner.token, ['member']);
  const bInvite = await h.post(`/orgs/${b.id}/invites`, { email: uniqueEmail('b-invitee'), role_slugs: ['member'] }, { token: b.owner.token });
  assert.equal(bInvite.status, 201);
  const bRole = await roleIdOf(h, b.id, b.owner.token, 'admin');
  // A's owner names B's objects under A's path.
  assert.equal((await h.delete(`/orgs/${a.id}/invites/${bInvite.body.data.id}`, { token: a.owner.token })).status, 404);
  assert.equal((await h.patch(`/orgs/${a.id}/roles/${bRole}`, { permission_keys: [] }, { token: a.owner.token })).status, 404);
  assert.equal((await h.delete(`/orgs/${a.id}/roles/${bRole}`, { token: a.owner.token })).status, 404);
  assert.equal((await h.patch(`/orgs/${a.id}/members/${bMember.userId}/roles`, { role_slugs: ['admin'] }, { token: a.owner.token })).status, 404);
  assert.equal((await h.patch(`/orgs/${a.id}/members/${bMember.userId}`, { status: 'suspended' }, { token: a.owner.token })).status, 404);
  assert.equal((await h.delete(`/orgs/${a.id}/members/${bMember.userId}`, { token: a.owner.token })).status, 404);
  // ... and under B's path with A's token: 403 before anything is looked up.
  for (const [method, path] of [
    ['GET', `/orgs/${b.id}/members`],
    ['GET', `/orgs/${b.id}/invites`],
    ['GET', `/orgs/${b.id}/roles`],
    ['GET', `/orgs/${b.id}/audit-log`],
    ['DELETE', `/orgs/${b.id}/invites/${bInvite.body.data.id}`],
  ] as const) {
    const response = await h.request(method, path, { token: a.owner.token });
    assert.equal(response.status, 403, `${method} ${path}`);
    assert.equal(response.body.error, 'forbidden');
  }
  // B's objects are untouched.
  assert.equal((await memberOf(h, b.id, b.owner.token, bMember.userId)).status, 'active');
  const pending = await h.get(`/orgs/${b.id}/invites`, { token: b.owner.token });
  assert.ok((pending.body.data as any[]).some((invite) => invite.id === bInvite.body.data.id));
});

test('a custom role manager cannot put into a role keys it lacks, nor grant it; a members.update holder grants only what it holds', async () => {
  const org = await createOrg(h);
  const mgrRole = await h.post(`/orgs/${org.id}/roles`, { name: 'Role manager', slug: 'role-mgr', permission_keys: ['roles.manage', 'roles.read', 'org.read'] }, { token: org.owner.token });
  assert.equal(mgrRole.status, 201, mgrRole.text);
  const hrRole = await h.post(`/orgs/${org.id}/roles`, { name: 'HR', slug: 'hr', permission_keys: ['members.update', 'members.read'] }, { token: org.owner.token });
  assert.equal(hrRole.status, 201, hrRole.text);
  const mgr = await addMember(h, org, org.owner.token, ['role-mgr']);
  const hr = await addMember(h, org, org.owner.token, ['hr']);
  // The role manager widens its own role, or the member role, with a key it lacks.
  assert.equal((await h.patch(`/orgs/${org.id}/roles/${mgrRole.body.data.id}`, { permission_keys: ['roles.manage', 'roles.read', 'org.read', 'members.update'] }, { token: mgr.token })).status, 403);
  const memberRoleId = await roleIdOf(h, org.id, org.owner.token, 'member');
  assert.equal((await h.patch(`/orgs/${org.id}/roles/${memberRoleId}`, { permission_keys: ['org.read', 'members.read', 'roles.read', 'audit.read'] }, { token: mgr.token })).status, 403);
  // The HR role grants itself the member role (org.read, roles.read not held) or admin.
  assert.equal((await h.patch(`/orgs/${org.id}/members/${hr.userId}/roles`, { role_slugs: ['hr', 'member'] }, { token: hr.token })).status, 403);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${hr.userId}/roles`, { role_slugs: ['hr', 'role-mgr'] }, { token: hr.token })).status, 403);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, hr.userId)).roles, ['hr']);
  const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
  assert.deepEqual((roles.body.data as any[]).find((role) => role.slug === 'member').permission_keys, ['members.read', 'org.read', 'roles.read']);
});

test('a role edit or deletion ends its holders\' authority at once on this instance', async () => {
  const org = await createOrg(h);
  const reader = await h.post(`/orgs/${org.id}/roles`, { name: 'Reader', slug: 'reader', permission_keys: ['members.read', 'audit.read'] }, { token: org.owner.token });
  assert.equal(reader.status, 201);
  const member = await addMember(h, org, org.owner.token, ['reader']);
  assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: member.token })).status, 200);
  assert.equal((await h.patch(`/orgs/${org.id}/roles/${reader.body.data.id}`, { permission_keys: ['members.read'] }, { token: org.owner.token })).status, 200);
  assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: member.token })).status, 403);
  assert.equal((await h.get(`/orgs/${org.id}/members`, { token: member.token })).status, 200);
  assert.equal((await h.delete(`/orgs/${org.id}/roles/${reader.body.data.id}`, { token: org.owner.token })).status, 200);
  assert.equal((await h.get(`/orgs/${org.id}/members`, { token: member.token })).status, 403);
});

test('a suspended member, or one whose token names an organization left, cannot act even while the session lives on elsewhere', async () => {
  const a = await createOrg(h);
  const b = await createOrg(h);
  const user = await addMember(h, a, a.owner.token, ['admin']);
  await addMember(h, b, b.owner.token, ['member'], user);
  const tokenForA = user.token; // scoped to A
  const tokenForB = await switchOrg(h, user.accessToken, b.id); // the session now points at B
  assert.equal((await h.get(`/orgs/${a.id}/members`, { token: tokenForA })).status, 200);
  assert.equal((await h.patch(`/orgs/${a.id}/members/${user.userId}`, { status: 'suspended' }, { token: a.owner.token })).status, 200);
  const refused = await h.get(`/orgs/${a.id}/members`, { token: tokenForA });
  assert.ok(refused.status === 403 || refused.status === 401, refused.text);
  assert.equal((await h.post(`/orgs/${a.id}/invites`, { email: uniqueEmail('x'), role_slugs: ['member'] }, { token: tokenForA })).status === 201, false);
  assert.equal((await h.post('/auth/switch-org', { organization_id: a.id }, { token: tokenForB })).status, 403);
  // Reactivated then removed: the same.
  assert.equal((await h.patch(`/orgs/${a.id}/members/${user.userId}`, { status: 'active' }, { token: a.owner.token })).status, 200);
  const again = await switchOrg(h, tokenForB, a.id);
  assert.equal((await h.get(`/orgs/${a.id}/members`, { token: again })).status, 200);
  const backToB = await switchOrg(h, again, b.id);
  assert.equal((await h.delete(`/orgs/${a.id}/members/${user.userId}`, { token: a.owner.token })).status, 200);
  const gone = await h.get(`/orgs/${a.id}/members`, { token: again });
  assert.ok(gone.status === 403 || gone.status === 401, gone.text);
  assert.equal((await h.get(`/orgs/${b.id}/members`, { token: backToB })).status, 200);
});

test('an invite is accepted only by the account of its address; another account cannot burn it', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('invitee'));
  const thief = await h.signUp(uniqueEmail('thief'));
  const created = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email.toUpperCase(), role_slugs: ['admin'] }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.data.email, invitee.email);
  const token = h.tokenFromMail(invitee.email, 'invite');
  const stolen = await h.post('/auth/invites/accept', { token }, { token: thief.accessToken });
  assert.equal(stolen.status, 403);
  assert.equal(stolen.body.error, 'forbidden');
  assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: thief.accessToken })).status, 403);
  const accepted = await h.post('/auth/invites/accept', { token }, { token: invitee.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
  assert.deepEqual(accepted.body.data, { organization_id: org.id });
});

test('bad input on organization routes is 422 (or 404), never a 500', async () => {
  const org = await createOrg(h);
  const root = await superadmin(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const cases: Array<[string, string, unknown, string?]> = [
    ['GET', `/orgs/${org.id}/members?limit=0`, undefined],
    ['GET', `/orgs/${org.id}/members?limit=abc`, undefined],
    ['GET', `/orgs/${org.id}/members?limit=1&limit=2`, undefined],
    ['GET', `/orgs/${org.id}/members?cursor[a]=b`, undefined],
    ['GET', `/orgs/${org.id}/invites?limit=101`, undefined],
    ['GET', `/orgs/${org.id}/audit-log?cursor=${Buffer.from('[1.5]').toString('base64url')}`, undefined],
    ['PATCH', `/orgs/${org.id}`, { settings: null }],
    ['PATCH', `/orgs/${org.id}`, { name: 'x'.repeat(161) }],
    ['PATCH', `/orgs/${org.id}`, { name: ['a'] }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: 'member' }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: [{ $ne: null }] }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['x'.repeat(161)] }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}`, { status: 'invited' }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}`, { status: 'removed' }],
    ['POST', `/orgs/${org.id}/invites`, { email: 'not-an-address', role_slugs: [] }],
    ['POST', `/orgs/${org.id}/invites`, { email: uniqueEmail('x'), role_slugs: ['nope'] }],
    ['POST', `/orgs/${org.id}/roles`, { name: 'R', slug: 'UPPER', permission_keys: [] }],
    ['POST', `/orgs/${org.id}/roles`, { name: 'R', slug: 'ok-slug', permission_keys: ['no.such.key'] }],
    ['POST', `/orgs/${org.id}/roles`, { name: 'R', slug: 'ok-slug', permission_keys: [1] }],
    ['POST', `/orgs/${org.id}/roles`, { name: 'R', slug: 'ok-slug', permission_keys: ['org.read'], description: 'd'.repeat(501) }],
    ['PATCH', `/orgs/${org.id}/roles/not-a-role`, { name: 'x' }],
    ['PATCH', `/orgs/${org.id}/roles/${'9'.repeat(64)}`, { slug: 'x' }],
    ['DELETE', `/orgs/${org.id}/members/${'z'.repeat(64)}`, undefined],
    ['DELETE', `/orgs/${org.id}/invites/%E2%80%AE`, undefined],
    ['POST', '/auth/invites/accept', { token: 'x'.repeat(513) }],
    ['POST', '/auth/invites/accept', { token: ['a'] }],
    ['POST', '/orgs', { name: 'ok', slug: '-' }],
  ];
  for (const [method, path, body] of cases) {
    for (const token of [org.owner.token, root.accessToken]) {
      const response = await h.request(method, path, { token, ...(body !== undefined ? { body } : {}) });
      assert.ok(response.status < 500, `${method} ${path} ${JSON.stringify(body)}: ${response.status} ${response.text}`);
      assert.ok(!/select |insert |update |stack|at \w+ \(/i.test(response.text), `${method} ${path}: ${response.text}`);
    }
  }
  // A superadmin names foreign ids in an organization it does not belong to.
  for (const path of [`/orgs/${org.id}/members/${'a'.repeat(64)}`, `/orgs/${org.id}/roles/${'b'.repeat(64)}`, `/orgs/${org.id}/invites/${'c'.repeat(64)}`]) {
    const response = await h.delete(path, { token: root.accessToken });
    assert.equal(response.status, 404, `${path}: ${response.text}`);
  }
});

test('a pending invite does not carry a deleted role: a later role with the same slug is not granted by it', async () => {
  // Threat: an admin invites an accomplice with a harmless custom role; the role is deleted and
  // later an owner makes a new, owner-equivalent role under the same slug (for someone else).
  // The stale invite must not hand the new role to the accomplice, which its inviter could never grant.
  const org = await createOrg(h);
  const ops = await h.post(`/orgs/${org.id}/roles`, { name: 'Ops', slug: 'ops', permission_keys: ['members.read'] }, { token: org.owner.token });
  assert.equal(ops.status, 201, ops.text);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const withAccount = await h.signUp(uniqueEmail('accomplice'));
  const withoutAccount = uniqueEmail('later');
  for (const email of [withAccount.email, withoutAccount]) {
    const invite = await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member', 'ops'] }, { token: admin.token });
    assert.equal(invite.status, 201, invite.text);
  }
  assert.equal((await h.delete(`/orgs/${org.id}/roles/${ops.body.data.id}`, { token: org.owner.token })).status, 200);
  // The pending invites no longer name it.
  const pending = (await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token })).body.data as any[];
  for (const email of [withAccount.email, withoutAccount]) assert.deepEqual(pending.find((invite) => invite.email === email)?.role_slugs, ['member'], email);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, withAccount.userId)).roles, ['member'], 'invited entry');
  const recreated = await h.post(`/orgs/${org.id}/roles`, { name: 'Ops', slug: 'ops', permission_keys: ['org.delete', 'roles.manage', 'members.update'] }, { token: org.owner.token });
  assert.equal(recreated.status, 201, recreated.text);
  const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(withAccount.email, 'invite') }, { token: withAccount.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, withAccount.userId)).roles, ['member'], 'joined with an account');
  const late = await h.signUp(withoutAccount);
  assert.equal((await h.post('/auth/invites/accept', { token: h.tokenFromMail(withoutAccount, 'invite') }, { token: late.accessToken })).status, 200);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, late.userId)).roles, ['member'], 'joined after signing up');
  const joined = h.eventsOfType('member.joined').filter((event) => event.organization_id === org.id && [withAccount.userId, late.userId].includes(event.user_id!));
  assert.equal(joined.length, 2);
  for (const event of joined) assert.deepEqual(event.data.role_slugs, ['member']);
});

describe('an invite left pending while its address joined another way', () => {
  let op: TestOpenIdProvider;
  let sso: Harness;
  const dns = new StubDns();
  before(async () => {
    op = await TestOpenIdProvider.start();
    sso = await startSsoHarness(op, dns);
  });
  after(async () => {
    await sso.close();
    await op.close();
  });

  test('accepting it later never takes the owner role from the last active owner (409 conflict); otherwise the invited roles stand', async () => {
    // Threat: an invite sent with a low role stays pending while its address joins through
    // single sign-on (JIT); the member is later made an owner, the other owner steps down, and
    // spending the stale token then replaced the roles of the last active owner, leaving none.
    const { org, domain } = await ssoOrg(sso, dns, op, { jit: true });
    const x = await sso.signUp(addressAt(domain, 'x'));
    const invite = await sso.post(`/orgs/${org.id}/invites`, { email: x.email, role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    const { exchanged } = await ssoLogin(sso, op, { sub: newSubject(), email: x.email }, { email: x.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal((await memberOf(sso, org.id, org.owner.token, x.userId)).status, 'active');
    assert.equal((await sso.patch(`/orgs/${org.id}/members/${x.userId}/roles`, { role_slugs: ['owner'] }, { token: org.owner.token })).status, 200);
    assert.equal((await sso.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 200);
    const accepted = await sso.post('/auth/invites/accept', { token: sso.tokenFromMail(x.email, 'invite') }, { token: x.accessToken });
    assert.equal(accepted.status, 409, accepted.text);
    assert.equal(accepted.body.error, 'conflict');
    assert.deepEqual((await memberOf(sso, org.id, org.owner.token, x.userId)).roles, ['owner']);
    const invites = (await sso.get(`/orgs/${org.id}/invites`, { token: org.owner.token })).body.data as any[];
    assert.ok(invites.some((pending) => pending.email === x.email), 'the invite stays pending');
    // With another active owner, the accept replaces the roles as designed (the JIT-then-accept order).
    assert.equal((await sso.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['owner'] }, { token: await switchOrg(sso, x.accessToken, org.id) })).status, 200);
    const second = await sso.post('/auth/invites/accept', { token: sso.tokenFromMail(x.email, 'invite') }, { token: x.accessToken });
    assert.equal(second.status, 200, second.text);
    assert.deepEqual((await memberOf(sso, org.id, org.owner.token, x.userId)).roles, ['member']);
    // The roles were replaced, not granted: the event keeps what they were.
    const joined = sso.events.filter((event) => event.type === 'member.joined' && event.user_id === x.userId && (event.data as any).invite_id === invite.body.data.id);
    assert.deepEqual(joined.map((event) => event.data), [{ invite_id: invite.body.data.id, role_slugs: ['member'], previous_role_slugs: ['owner'] }]);
  });

  test('the single sign-on default role cannot be made owner-equivalent by editing it, or by re-making its slug (422)', async () => {
    // Threat: docs/sso.md refuses an owner-equivalent default_role (whoever controls the IdP would
    // mint members able to take the organization over); editing that role afterwards, or deleting
    // it and creating a new one under its slug, gave every JIT sign-in roles.manage.
    const { org, domain } = await ssoOrg(sso, dns, op, { jit: true, default_role: 'member' });
    const memberRole = await roleIdOf(sso, org.id, org.owner.token, 'member');
    const widened = await sso.patch(`/orgs/${org.id}/roles/${memberRole}`, { permission_keys: ['org.read', 'members.read', 'roles.read', 'roles.manage'] }, { token: org.owner.token });
    assert.equal(widened.status, 422, widened.text);
    // A harmless key is fine.
    assert.equal((await sso.patch(`/orgs/${org.id}/roles/${memberRole}`, { permission_keys: ['org.read', 'members.read', 'roles.read', 'audit.read'] }, { token: org.owner.token })).status, 200);
    const ops = await sso.post(`/orgs/${org.id}/roles`, { name: 'Ops', slug: 'ops', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(ops.status, 201, ops.text);
    assert.equal((await sso.patch(`/orgs/${org.id}/sso`, { default_role: 'ops' }, { token: org.owner.token })).status, 200);
    assert.equal((await sso.delete(`/orgs/${org.id}/roles/${ops.body.data.id}`, { token: org.owner.token })).status, 200);
    const remade = await sso.post(`/orgs/${org.id}/roles`, { name: 'Ops', slug: 'ops', permission_keys: ['org.read', 'roles.manage'] }, { token: org.owner.token });
    assert.equal(remade.status, 422, remade.text);
    const email = addressAt(domain, 'jit');
    const { exchanged } = await ssoLogin(sso, op, { sub: newSubject(), email }, { email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    const joined = await memberOf(sso, org.id, org.owner.token, exchanged!.body.data.user.id);
    assert.equal(joined.status, 'active');
    assert.deepEqual(joined.roles, []);
  });
});
