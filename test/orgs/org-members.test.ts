import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg, memberOf, superadmin, switchOrg } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('GET members: member objects, members.read required, keyset pages with X-Next-Cursor', async () => {
  const org = await createOrg(h);
  const members = [];
  for (let i = 0; i < 4; i += 1) members.push(await addMember(h, org, org.owner.token));
  const all = await h.get(`/orgs/${org.id}/members`, { token: org.owner.token });
  assert.equal(all.status, 200);
  assert.equal(all.body.data.length, 5);
  for (const member of all.body.data) assert.deepEqual(Object.keys(member).sort(), ['display_name', 'email', 'roles', 'status', 'user_id']);

  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: any = await h.get(`/orgs/${org.id}/members?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { token: members[0]!.token });
    assert.equal(page.status, 200, page.text);
    assert.ok(Array.isArray(page.body.data));
    assert.ok(page.body.data.length <= 2);
    seen.push(...page.body.data.map((m: any) => m.user_id));
    cursor = page.headers.get('x-next-cursor');
    pages += 1;
  } while (cursor);
  assert.equal(pages, 3);
  assert.equal(new Set(seen).size, 5);
  assert.deepEqual([...seen].sort(), all.body.data.map((m: any) => m.user_id).sort());

  const badCursor = await h.get(`/orgs/${org.id}/members?cursor=not-a-cursor`, { token: org.owner.token });
  assert.equal(badCursor.status, 422);
  const badLimit = await h.get(`/orgs/${org.id}/members?limit=0`, { token: org.owner.token });
  assert.equal(badLimit.status, 422);

  // A custom role without members.read.
  const noRead = await h.post(`/orgs/${org.id}/roles`, { name: 'Reader-less', slug: 'no-read', permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal(noRead.status, 201);
  const limited = await addMember(h, org, org.owner.token, ['no-read']);
  assert.equal((await h.get(`/orgs/${org.id}/members`, { token: limited.token })).status, 403);
});

test('e-mail gating: invited and suspended e-mails only for members.invite holders; active always shown', async () => {
  // Threat: a plain member harvesting the addresses of people who were invited or suspended.
  const org = await createOrg(h);
  const plain = await addMember(h, org, org.owner.token, ['member']);
  const suspended = await addMember(h, org, org.owner.token, ['member']);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${suspended.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  const invitedUser = await h.signUp();
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitedUser.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);

  const asPlain = await h.get(`/orgs/${org.id}/members`, { token: plain.token });
  const byId = new Map((asPlain.body.data as any[]).map((m) => [m.user_id, m]));
  assert.equal(byId.get(org.owner.userId).email, org.owner.email);
  assert.equal(byId.get(plain.userId).email, plain.email);
  assert.deepEqual(byId.get(suspended.userId), { user_id: suspended.userId, email: null, display_name: null, status: 'suspended', roles: ['member'] });
  assert.deepEqual(byId.get(invitedUser.userId), { user_id: invitedUser.userId, email: null, display_name: null, status: 'invited', roles: ['member'] });

  const asOwner = await h.get(`/orgs/${org.id}/members`, { token: org.owner.token });
  const ownerView = new Map((asOwner.body.data as any[]).map((m) => [m.user_id, m]));
  assert.equal(ownerView.get(suspended.userId).email, suspended.email);
  assert.equal(ownerView.get(invitedUser.userId).email, invitedUser.email);

  // The invited entry leaves the list once its invite expires.
  h.clock.advance(8 * 24 * 3600);
  const relogin = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  const token = await switchOrg(h, relogin.body.data.access_token, org.id);
  const later = await h.get(`/orgs/${org.id}/members`, { token });
  assert.equal(later.status, 200, later.text);
  assert.ok(!(later.body.data as any[]).some((m) => m.user_id === invitedUser.userId));
});

test('PATCH members/:userId/roles replaces roles, emits member.roles_changed; 404 unknown, 422 unknown role', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const changed = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin', 'member'] }, { token: org.owner.token });
  assert.equal(changed.status, 200, changed.text);
  assert.deepEqual(changed.body.data, { user_id: member.userId, email: member.email, display_name: null, status: 'active', roles: ['admin', 'member'] });
  const event = h.eventsOfType('member.roles_changed').find((e) => e.user_id === member.userId);
  assert.deepEqual(event?.data, { from: ['member'], to: ['admin', 'member'] });
  assert.equal(event?.actor_id, org.owner.userId);

  const unknownRole = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['nope'] }, { token: org.owner.token });
  assert.equal(unknownRole.status, 422);
  const unknownUser = await h.patch(`/orgs/${org.id}/members/00000000-0000-0000-0000-000000000000/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(unknownUser.status, 404);
  const missing = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, {}, { token: org.owner.token });
  assert.equal(missing.status, 422);
  // Without members.update.
  const plain = await addMember(h, org, org.owner.token, ['member']);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: [] }, { token: plain.token })).status, 403);
  // The superadmin role cannot be granted through an organization path.
  const viaSlug = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['superadmin'] }, { token: org.owner.token });
  assert.equal(viaSlug.status, 422);
});

test('granting the owner role needs step-up when the actor has a confirmed factor', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const enroll = await h.post('/auth/mfa/email/enroll', {}, { token: org.owner.token });
  assert.equal(enroll.status, 200, enroll.text);
  const code = String(h.lastMail(org.owner.email, 'otp_code')?.context.code);
  assert.equal((await h.post('/auth/mfa/email/confirm', { factor_id: enroll.body.data.factor_id, code }, { token: org.owner.token })).status, 200);
  h.clock.advance(301);
  const stale = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: org.owner.token });
  assert.equal(stale.status, 401);
  assert.equal(stale.body.error, 'step_up_required');
  // The admin template holds roles.manage: owner-equivalent, so it needs step-up too (docs/organizations.md).
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).body.error, 'step_up_required');
  // Other role changes need no step-up.
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: [] }, { token: org.owner.token })).status, 200);
});

test('PATCH members/:userId suspends and reactivates; suspension revokes org-scoped sessions; member.status_changed', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['admin']);
  const suspended = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
  assert.equal(suspended.status, 200, suspended.text);
  assert.equal(suspended.body.data.status, 'suspended');
  assert.equal(suspended.body.data.email, member.email);
  const event = h.eventsOfType('member.status_changed').find((e) => e.user_id === member.userId);
  assert.deepEqual(event?.data, { from: 'active', to: 'suspended' });
  // The member's session scoped to this organization is revoked.
  assert.equal((await h.get('/auth/me', { token: member.token })).status, 401);
  // A fresh session has no authority there.
  const relogin = await h.post('/auth/login', { email: member.email, password: member.password });
  assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: relogin.body.data.access_token })).status, 403);

  const reactivated = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'active' }, { token: org.owner.token });
  assert.equal(reactivated.status, 200);
  assert.equal(reactivated.body.data.status, 'active');
  assert.equal(h.eventsOfType('member.status_changed').filter((e) => e.user_id === member.userId).length, 2);
  assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: relogin.body.data.access_token })).status, 200);

  const invalid = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'invited' }, { token: org.owner.token });
  assert.equal(invalid.status, 422);
});

test('suspending (or activating) an invited member is 409 conflict', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const suspend = await h.patch(`/orgs/${org.id}/members/${invitee.userId}`, { status: 'suspended' }, { token: org.owner.token });
  assert.equal(suspend.status, 409);
  assert.equal(suspend.body.error, 'conflict');
  assert.equal((await memberOf(h, org.id, org.owner.token, invitee.userId)).status, 'invited');
});

test('DELETE members/:userId removes, ends authority at once, emits member.removed', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['admin']);
  const removed = await h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
  assert.equal(removed.status, 200, removed.text);
  assert.deepEqual(removed.body, { data: { status: 'removed' } });
  assert.ok(h.eventsOfType('member.removed').some((e) => e.user_id === member.userId && e.organization_id === org.id));
  assert.equal(await memberOf(h, org.id, org.owner.token, member.userId), undefined);
  assert.equal((await h.get(`/orgs/${org.id}`, { token: member.token })).status, 401);
  assert.equal((await h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token })).status, 404);

  // Removing an invited member also revokes the invitation.
  const invitee = await h.signUp();
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  assert.equal((await h.delete(`/orgs/${org.id}/members/${invitee.userId}`, { token: org.owner.token })).status, 200);
  const accept = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken });
  assert.equal(accept.status, 400);
  // members.remove is required.
  const plain = await addMember(h, org, org.owner.token, ['member']);
  const other = await addMember(h, org, org.owner.token, ['member']);
  assert.equal((await h.delete(`/orgs/${org.id}/members/${other.userId}`, { token: plain.token })).status, 403);
});

test('a superadmin manages members of any organization without membership', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const root = await superadmin(h);
  const list = await h.get(`/orgs/${org.id}/members`, { token: root.accessToken });
  assert.equal(list.status, 200);
  assert.ok(!(list.body.data as any[]).some((m) => m.user_id === root.userId));
  const promoted = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: root.accessToken });
  assert.equal(promoted.status, 200, promoted.text);
  assert.deepEqual(promoted.body.data.roles, ['owner']);
  await h.identity.service.revokeSuperadmin(root.userId);
  assert.equal((await h.get(`/orgs/${org.id}/members`, { token: root.accessToken })).status, 403);
});

// Issue 28: the first page is kept in the access cache. Every change to what it shows must
// reach the next answer at once: through the organization's events, or its members' users'.
test('the first member page shows each change at once: roles, status, profile, invites, deletion', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  const page = async () => {
    const response = await h.get(`/orgs/${org.id}/members`, { token: org.owner.token });
    assert.equal(response.status, 200, response.text);
    return response.body.data as Array<{ user_id: string; display_name: string | null; status: string; roles: string[] }>;
  };
  const entryOf = async (userId: string) => (await page()).find((entry) => entry.user_id === userId);
  assert.deepEqual((await entryOf(member.userId))?.roles, ['member']);
  assert.deepEqual((await entryOf(member.userId))?.roles, ['member']);

  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 200);
  assert.deepEqual((await entryOf(member.userId))?.roles, ['admin']);

  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  assert.equal((await entryOf(member.userId))?.status, 'suspended');
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'active' }, { token: org.owner.token })).status, 200);
  assert.equal((await entryOf(member.userId))?.status, 'active');

  // A change to the member's own account, which names no organization. (Suspension ended their session.)
  const login = await h.post('/auth/login', { email: member.email, password: member.password });
  assert.equal(login.status, 200, login.text);
  const memberToken = login.body.data.access_token;
  const renamed = await h.patch(`/users/${member.userId}`, { display_name: 'Renamed Member' }, { token: memberToken });
  assert.equal(renamed.status, 200, renamed.text);
  assert.equal((await entryOf(member.userId))?.display_name, 'Renamed Member');

  const deleted = await h.delete(`/users/${member.userId}`, { token: memberToken });
  assert.equal(deleted.status, 200, deleted.text);
  assert.equal(await entryOf(member.userId), undefined);

  const invitee = await h.signUp();
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  assert.equal((await entryOf(invitee.userId))?.status, 'invited');
});
