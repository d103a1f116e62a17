import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, harnessesClosedAfterFile, uniqueEmail } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { addMember, createOrg, memberOf, roleIdOf, superadmin, switchOrg } from '../helpers/orgs.js';

// Conformance, to the letter, of SPEC.md 2.9-2.13, 3 (organization and member status), 4.3 and
// 4.4, with the events (6) and limits (8) those routes emit or obey. Each test names the
// sentence it proves.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const start = harnessesClosedAfterFile();

const ASTRAL = '\u{1F600}'; // one character, two UTF-16 code units

test('2.9 / 8: an organization name is 1-160 characters, counted as characters (not UTF-16 code units)', async () => {
  const owner = await h.signUp();
  const name160 = ASTRAL.repeat(160);
  const created = await h.post('/orgs', { name: name160 }, { token: owner.accessToken });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.data.name, name160);
  const tooLong = await h.post('/orgs', { name: ASTRAL.repeat(161) }, { token: owner.accessToken });
  assert.equal(tooLong.status, 422, tooLong.text);

  const token = await switchOrg(h, owner.accessToken, created.body.data.id);
  const renamed = await h.patch(`/orgs/${created.body.data.id}`, { name: `${'é'.repeat(10)}${ASTRAL.repeat(150)}` }, { token });
  assert.equal(renamed.status, 200, renamed.text);
  const renamedTooLong = await h.patch(`/orgs/${created.body.data.id}`, { name: ASTRAL.repeat(161) }, { token });
  assert.equal(renamedTooLong.status, 422, renamedTooLong.text);
});

test('2.9: a name with surrounding spaces is a valid 1-160 character name (trimmed), not a 422; a blank one is 422', async () => {
  const owner = await h.signUp();
  const created = await h.post('/orgs', { name: '  Spaced Corp  ' }, { token: owner.accessToken });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.data.name, 'Spaced Corp');
  assert.equal((await h.post('/orgs', { name: '   ' }, { token: owner.accessToken })).status, 422);
  const token = await switchOrg(h, owner.accessToken, created.body.data.id);
  const renamed = await h.patch(`/orgs/${created.body.data.id}`, { name: ' Renamed ' }, { token });
  assert.equal(renamed.status, 200, renamed.text);
  assert.equal(renamed.body.data.name, 'Renamed');
  const role = await h.post(`/orgs/${created.body.data.id}/roles`, { name: ` ${ASTRAL.repeat(160)} `, slug: 'wide', description: ' Reads things ', permission_keys: ['org.read'] }, { token });
  assert.equal(role.status, 201, role.text);
  assert.equal(role.body.data.name, ASTRAL.repeat(160));
  assert.equal(role.body.data.description, 'Reads things');
});

test('2.9 / 8: a slug is [a-z0-9-], at most 160 characters, unique (409 conflict), derived from the name when omitted', async () => {
  const owner = await h.signUp();
  const slug = `s${Math.random().toString(36).slice(2, 8)}-`.padEnd(160, 'x');
  const created = await h.post('/orgs', { name: 'Max slug', slug }, { token: owner.accessToken });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.data.slug, slug);
  assertError(await h.post('/orgs', { name: 'Again', slug }, { token: owner.accessToken }), 409, 'conflict');
  const derived = await h.post('/orgs', { name: 'Ünïcode Name!!' }, { token: owner.accessToken });
  assert.equal(derived.status, 201, derived.text);
  assert.match(derived.body.data.slug, /^[a-z0-9-]{1,160}$/);
});

test('4.3: response shapes of POST /orgs, GET /orgs, GET /orgs/{id} and GET /permissions', async () => {
  const org = await createOrg(h, { name: 'Shapes Inc' });
  const list = await h.get('/orgs', { token: org.owner.token });
  assert.equal(list.status, 200);
  assert.ok(Array.isArray(list.body.data));
  for (const entry of list.body.data) assert.deepEqual(Object.keys(entry).sort(), ['id', 'name', 'slug']);
  assert.deepEqual(list.body.data.find((entry: any) => entry.id === org.id), { id: org.id, name: 'Shapes Inc', slug: org.slug });

  const one = await h.get(`/orgs/${org.id}`, { token: org.owner.token });
  assert.equal(one.status, 200);
  assert.equal(one.body.data.id, org.id);
  assert.equal(one.body.data.name, 'Shapes Inc');
  assert.equal(one.body.data.slug, org.slug);
  assert.equal(one.body.data.status, 'active');

  const catalog = await h.get('/permissions', { token: org.owner.token });
  assert.equal(catalog.status, 200);
  assert.ok(Array.isArray(catalog.body.data));
  for (const entry of catalog.body.data) {
    assert.deepEqual(Object.keys(entry).sort(), ['description', 'key']);
    assert.equal(typeof entry.key, 'string');
    assert.equal(typeof entry.description, 'string');
  }
  const keys = catalog.body.data.map((entry: any) => entry.key);
  for (const core of ['org.read', 'org.update', 'org.delete', 'members.read', 'members.invite', 'members.update', 'members.remove', 'roles.read', 'roles.manage', 'users.read', 'users.manage', 'audit.read']) {
    assert.ok(keys.includes(core), core);
  }
});

test('2.13: role templates: owner every org-scoped key, admin all but org.delete, member org.read/members.read/roles.read', async () => {
  const org = await createOrg(h);
  const roles = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
  assert.equal(roles.status, 200);
  const bySlug = new Map((roles.body.data as any[]).map((role) => [role.slug, role]));
  for (const role of roles.body.data) assert.deepEqual(Object.keys(role).sort(), ['description', 'id', 'is_system', 'name', 'permission_keys', 'slug']);
  const owner = bySlug.get('owner');
  const admin = bySlug.get('admin');
  const member = bySlug.get('member');
  assert.ok(owner && admin && member);
  for (const role of [owner, admin, member]) assert.equal(role.is_system, true);
  assert.ok(!owner.permission_keys.includes('users.read') && !owner.permission_keys.includes('users.manage'));
  for (const key of ['org.read', 'org.update', 'org.delete', 'members.read', 'members.invite', 'members.update', 'members.remove', 'roles.read', 'roles.manage', 'audit.read']) {
    assert.ok(owner.permission_keys.includes(key), `owner ${key}`);
  }
  assert.deepEqual([...admin.permission_keys].sort(), owner.permission_keys.filter((key: string) => key !== 'org.delete').sort());
  assert.deepEqual([...member.permission_keys].sort(), ['members.read', 'org.read', 'roles.read']);
  assert.ok(!bySlug.has('superadmin'));
});

test('6: org.created, org.updated, org.deleted carry the organization and the actor', async () => {
  const org = await createOrg(h);
  const created = h.eventsOfType('org.created').find((event) => event.organization_id === org.id);
  assert.ok(created);
  assert.equal(created.actor_id, org.owner.userId);
  assert.equal(typeof created.id, 'string');
  assert.ok(!Number.isNaN(Date.parse(created.occurred_at)));

  assert.equal((await h.patch(`/orgs/${org.id}`, { name: 'Renamed' }, { token: org.owner.token })).status, 200);
  const updated = h.eventsOfType('org.updated').find((event) => event.organization_id === org.id);
  assert.ok(updated);
  assert.equal(updated.actor_id, org.owner.userId);

  const deleted = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
  assert.equal(deleted.status, 200, deleted.text);
  assert.deepEqual(deleted.body, { data: { deleted: true } });
  const event = h.eventsOfType('org.deleted').find((e) => e.organization_id === org.id);
  assert.ok(event);
  assert.equal(event.actor_id, org.owner.userId);
});

test('3 organization status: after deletion the org reads as 404 to a superadmin on every /orgs/{id} route, and leaves /auth/me', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  const roleId = await roleIdOf(h, org.id, org.owner.token, 'member');
  assert.equal((await h.delete(`/orgs/${org.id}`, { token: org.owner.token })).status, 200);
  const root = await superadmin(h);
  const token = root.accessToken;
  const calls: Array<[string, string, unknown?]> = [
    ['GET', `/orgs/${org.id}`],
    ['PATCH', `/orgs/${org.id}`, { name: 'Back' }],
    ['DELETE', `/orgs/${org.id}`],
    ['GET', `/orgs/${org.id}/members`],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }],
    ['PATCH', `/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }],
    ['DELETE', `/orgs/${org.id}/members/${member.userId}`],
    ['POST', `/orgs/${org.id}/invites`, { email: uniqueEmail(), role_slugs: ['member'] }],
    ['GET', `/orgs/${org.id}/invites`],
    ['GET', `/orgs/${org.id}/roles`],
    ['POST', `/orgs/${org.id}/roles`, { name: 'X', slug: 'x', permission_keys: [] }],
    ['PATCH', `/orgs/${org.id}/roles/${roleId}`, { name: 'Y' }],
    ['DELETE', `/orgs/${org.id}/roles/${roleId}`],
  ];
  for (const [method, path, body] of calls) {
    const response = await h.request(method, path, { token, ...(body === undefined ? {} : { body }) });
    assertError(response, 404, 'not_found', `${method} ${path}`);
  }
  const relogin = await h.post('/auth/login', { email: member.email, password: member.password });
  const me = await h.get('/auth/me', { token: relogin.body.data.access_token });
  assert.equal(me.status, 200);
  assert.ok(!(me.body.data.orgs as any[]).some((entry) => entry.id === org.id));
});

test('2.10 / 4.3 invariant 4: a member mutation answers e-mail null for a suspended member when the actor lacks members.invite', async () => {
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Moderator', slug: 'moderator', permission_keys: ['members.read', 'members.update', 'org.read'] }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  const moderator = await addMember(h, org, org.owner.token, ['moderator']);
  const target = await addMember(h, org, org.owner.token, ['member']);
  const suspended = await h.patch(`/orgs/${org.id}/members/${target.userId}`, { status: 'suspended' }, { token: moderator.token });
  assert.equal(suspended.status, 200, suspended.text);
  assert.deepEqual(Object.keys(suspended.body.data).sort(), ['display_name', 'email', 'roles', 'status', 'user_id']);
  assert.equal(suspended.body.data.status, 'suspended');
  assert.equal(suspended.body.data.email, null);
  const reactivated = await h.patch(`/orgs/${org.id}/members/${target.userId}`, { status: 'active' }, { token: moderator.token });
  assert.equal(reactivated.status, 200);
  assert.equal(reactivated.body.data.status, 'active');
  assert.equal(reactivated.body.data.email, target.email);
});

test('3 member status / 6: member.* events name the organization, the member and the actor', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  const invite = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(invite.status, 201);
  const invited = h.eventsOfType('member.invited').find((event) => event.organization_id === org.id);
  assert.ok(invited);
  assert.equal(invited.actor_id, org.owner.userId);
  assert.equal(invited.data.invite_id, invite.body.data.id);
  assert.ok(!JSON.stringify(invited).includes(h.tokenFromMail(invitee.email, 'invite')));

  const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken });
  assert.equal(accepted.status, 200);
  const joined = h.eventsOfType('member.joined').find((event) => event.organization_id === org.id);
  assert.ok(joined);
  assert.equal(joined.user_id, invitee.userId);

  assert.equal((await h.patch(`/orgs/${org.id}/members/${invitee.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 200);
  const rolesChanged = h.eventsOfType('member.roles_changed').find((event) => event.organization_id === org.id);
  assert.ok(rolesChanged);
  assert.equal(rolesChanged.user_id, invitee.userId);
  assert.equal(rolesChanged.actor_id, org.owner.userId);

  assert.equal((await h.patch(`/orgs/${org.id}/members/${invitee.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${invitee.userId}`, { status: 'active' }, { token: org.owner.token })).status, 200);
  const statusChanges = h.eventsOfType('member.status_changed').filter((event) => event.organization_id === org.id);
  assert.equal(statusChanges.length, 2);
  for (const event of statusChanges) {
    assert.equal(event.user_id, invitee.userId);
    assert.equal(event.actor_id, org.owner.userId);
  }

  const removed = await h.delete(`/orgs/${org.id}/members/${invitee.userId}`, { token: org.owner.token });
  assert.equal(removed.status, 200);
  assert.deepEqual(removed.body, { data: { status: 'removed' } });
  const removal = h.eventsOfType('member.removed').find((event) => event.organization_id === org.id);
  assert.ok(removal);
  assert.equal(removal.user_id, invitee.userId);
  assert.equal(removal.actor_id, org.owner.userId);
});

test('6: role.created, role.updated, role.deleted name the organization and the actor', async () => {
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Reader', slug: 'reader', description: 'reads', permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal(created.status, 201);
  assert.deepEqual(created.body.data, { id: created.body.data.id, slug: 'reader', name: 'Reader', description: 'reads', is_system: false, permission_keys: ['org.read'] });
  const updated = await h.patch(`/orgs/${org.id}/roles/${created.body.data.id}`, { permission_keys: ['org.read', 'roles.read'] }, { token: org.owner.token });
  assert.equal(updated.status, 200);
  assert.deepEqual(updated.body.data.permission_keys, ['org.read', 'roles.read']);
  const deleted = await h.delete(`/orgs/${org.id}/roles/${created.body.data.id}`, { token: org.owner.token });
  assert.equal(deleted.status, 200);
  for (const type of ['role.created', 'role.updated', 'role.deleted'] as const) {
    const event = h.eventsOfType(type).find((e) => e.organization_id === org.id);
    assert.ok(event, type);
    assert.equal(event.actor_id, org.owner.userId, type);
  }
});

test('4.3: a suspended member no longer lists the organization in GET /orgs and cannot switch into it (403)', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  const relogin = await h.post('/auth/login', { email: member.email, password: member.password });
  const token = relogin.body.data.access_token;
  const list = await h.get('/orgs', { token });
  assert.ok(!(list.body.data as any[]).some((entry) => entry.id === org.id));
  assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token }), 403, 'forbidden');
  const current = await memberOf(h, org.id, org.owner.token, member.userId);
  assert.equal(current.status, 'suspended');
});

test('4.3 / 2.11: invite bodies: 201 {id, email, role_slugs, expires_at}; the pending list adds created_at and invited_by', async () => {
  const org = await createOrg(h);
  const email = uniqueEmail('invitee');
  const created = await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(created.status, 201);
  assert.deepEqual(Object.keys(created.body.data).sort(), ['email', 'expires_at', 'id', 'role_slugs']);
  assert.deepEqual(created.body.data.role_slugs, ['member']);
  assert.ok(!Number.isNaN(Date.parse(created.body.data.expires_at)));
  assert.ok(!JSON.stringify(created.body).includes(h.tokenFromMail(email, 'invite')));
  const pending = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
  const entry = (pending.body.data as any[]).find((invite) => invite.id === created.body.data.id);
  assert.deepEqual(Object.keys(entry).sort(), ['created_at', 'email', 'expires_at', 'id', 'invited_by', 'role_slugs']);
  assert.equal(entry.invited_by, org.owner.userId);
  const revoked = await h.delete(`/orgs/${org.id}/invites/${created.body.data.id}`, { token: org.owner.token });
  assert.deepEqual(revoked.body, { data: { status: 'revoked' } });
});

test('8: POST /auth/invites/accept counts in token_consume (10 per 300 s per IP), before authentication; 429 carries Retry-After and X-RateLimit-*', async () => {
  const limited = await start({ rateLimits: true });
  const user = await limited.signUp(); // its e-mail verification is the group's first request
  for (let attempt = 0; attempt < 4; attempt += 1) assert.equal((await limited.post('/auth/invites/accept', { token: 'nope' })).status, 401);
  for (let attempt = 0; attempt < 5; attempt += 1) assertError(await limited.post('/auth/invites/accept', { token: 'nope' }, { token: user.accessToken }), 400, 'invalid_token');
  const eleventh = await limited.post('/auth/invites/accept', { token: 'nope' }, { token: user.accessToken });
  assertError(eleventh, 429, 'rate_limited');
  assert.ok(Number(eleventh.headers.get('retry-after')) > 0);
  assert.equal(eleventh.headers.get('x-ratelimit-limit'), '10');
  assert.equal(eleventh.headers.get('x-ratelimit-remaining'), '0');
  // The organization routes are not in that group.
  const created = await limited.post('/orgs', { name: 'Still fine' }, { token: user.accessToken });
  assert.equal(created.status, 201);
});

test('8: the authenticated budget (per user id) covers the organization routes', async () => {
  const limited = await start({ rateLimits: true, config: { auth: { rateLimits: { authenticated: { limit: 3, windowSec: 60 } } } } });
  const user = await limited.signUp();
  const other = await limited.signUp();
  for (let attempt = 0; attempt < 3; attempt += 1) assert.equal((await limited.get('/orgs', { token: user.accessToken })).status, 200);
  assertError(await limited.get('/permissions', { token: user.accessToken }), 429, 'rate_limited');
  assert.equal((await limited.get('/permissions', { token: other.accessToken })).status, 200);
});

test('4.4 / 6: user administration events name the target and the admin; the body is {id, email, display_name, status}', async () => {
  const root = await superadmin(h);
  const target = await h.signUp();
  const read = await h.get(`/users/${target.userId}`, { token: root.accessToken });
  assert.equal(read.status, 200);
  assert.deepEqual(read.body.data, { id: target.userId, email: target.email, display_name: null, status: 'active' });
  const disabled = await h.post(`/users/${target.userId}/disable`, {}, { token: root.accessToken });
  assert.equal(disabled.status, 200);
  assert.equal(disabled.body.data.status, 'disabled');
  const enabled = await h.post(`/users/${target.userId}/enable`, {}, { token: root.accessToken });
  assert.equal(enabled.status, 200);
  assert.equal(enabled.body.data.status, 'active');
  const deleted = await h.delete(`/users/${target.userId}`, { token: root.accessToken });
  assert.equal(deleted.status, 200);
  for (const type of ['user.disabled', 'user.enabled', 'user.deleted'] as const) {
    const event = h.eventsOfType(type).find((e) => e.user_id === target.userId);
    assert.ok(event, type);
    assert.equal(event.actor_id, root.userId, type);
  }
  // 2.4: the tombstone remains, disabled, with the e-mail replaced at a reserved invalid domain and the profile nulled.
  const tombstone = await h.get(`/users/${target.userId}`, { token: root.accessToken });
  assert.equal(tombstone.status, 200);
  assert.equal(tombstone.body.data.status, 'disabled');
  assert.equal(tombstone.body.data.display_name, null);
  assert.match(tombstone.body.data.email, /@[^@]+\.invalid$/);
  assert.ok(!tombstone.body.data.email.includes(target.email.split('@')[0]!));
  assertError(await h.post(`/users/${target.userId}/enable`, {}, { token: root.accessToken }), 409, 'conflict');
});

test('4.4: display_name is at most 120 characters, counted as characters', async () => {
  const user = await h.signUp();
  const ok = await h.patch(`/users/${user.userId}`, { display_name: ASTRAL.repeat(120) }, { token: user.accessToken });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.body.data.display_name, ASTRAL.repeat(120));
  assert.equal((await h.patch(`/users/${user.userId}`, { display_name: ASTRAL.repeat(121) }, { token: user.accessToken })).status, 422);
});
