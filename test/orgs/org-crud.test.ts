import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, decodeJwt, uniqueEmail } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin, switchOrg } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('POST /orgs creates an organization with the caller as sole owner and emits org.created', async () => {
  const owner = await h.signUp();
  const response = await h.post('/orgs', { name: 'Acme Corp.' }, { token: owner.accessToken });
  assert.equal(response.status, 201, response.text);
  const { id, name, slug, role } = response.body.data;
  assert.deepEqual(Object.keys(response.body.data).sort(), ['id', 'name', 'role', 'slug']);
  assert.equal(name, 'Acme Corp.');
  assert.match(slug, /^acme-corp(-\d+)?$/);
  assert.equal(role, 'owner');
  const event = h.eventsOfType('org.created').find((e) => e.organization_id === id);
  assert.ok(event);
  assert.equal(event.actor_id, owner.userId);

  const token = await switchOrg(h, owner.accessToken, id);
  const members = await h.get(`/orgs/${id}/members`, { token });
  assert.equal(members.status, 200);
  assert.deepEqual(members.body.data, [{ user_id: owner.userId, email: owner.email, display_name: null, status: 'active', roles: ['owner'] }]);
  const roles = await h.get(`/orgs/${id}/roles`, { token });
  assert.deepEqual((roles.body.data as any[]).map((r) => r.slug).sort(), ['admin', 'member', 'owner']);
});

test('POST /orgs derives unique slugs and refuses a taken explicit slug with 409', async () => {
  const owner = await h.signUp();
  const name = `Dup Name ${Date.now()}`;
  const first = await h.post('/orgs', { name }, { token: owner.accessToken });
  const second = await h.post('/orgs', { name }, { token: owner.accessToken });
  const third = await h.post('/orgs', { name }, { token: owner.accessToken });
  assert.equal(first.status, 201);
  assert.equal(second.body.data.slug, `${first.body.data.slug}-2`);
  assert.equal(third.body.data.slug, `${first.body.data.slug}-3`);
  const taken = await h.post('/orgs', { name: 'Other', slug: first.body.data.slug }, { token: owner.accessToken });
  assert.equal(taken.status, 409);
  assert.equal(taken.body.error, 'conflict');
  const explicit = await h.post('/orgs', { name: 'Other', slug: `explicit-${Date.now()}` }, { token: owner.accessToken });
  assert.equal(explicit.status, 201);
});

test('POST /orgs validates name and slug (422)', async () => {
  const owner = await h.signUp();
  for (const body of [{}, { name: '' }, { name: 'x'.repeat(161) }, { name: 'ok', slug: 'Bad Slug' }, { name: 'ok', slug: 'a'.repeat(161) }]) {
    const response = await h.post('/orgs', body, { token: owner.accessToken });
    assert.equal(response.status, 422, JSON.stringify(body));
    assert.ok(Array.isArray(response.body.errors));
  }
});

test('POST /orgs needs a verified e-mail (403 email_unverified) and a bearer token (401)', async () => {
  const unverified = await h.signUp(uniqueEmail(), undefined, { verify: false });
  const response = await h.post('/orgs', { name: 'Nope' }, { token: unverified.accessToken });
  assert.equal(response.status, 403);
  assert.equal(response.body.error, 'email_unverified');
  const anonymous = await h.post('/orgs', { name: 'Nope' });
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.body.error, 'unauthorized');
});

test('GET /orgs lists active memberships only', async () => {
  const org = await createOrg(h);
  const other = await createOrg(h);
  const member = await addMember(h, other, other.owner.token);
  const mine = await h.get('/orgs', { token: org.owner.token });
  assert.equal(mine.status, 200);
  assert.deepEqual(mine.body.data.map((o: any) => o.id), [org.id]);
  assert.deepEqual(Object.keys(mine.body.data[0]).sort(), ['id', 'name', 'slug']);
  const theirs = await h.get('/orgs', { token: member.token });
  assert.deepEqual(theirs.body.data.map((o: any) => o.id), [other.id]);
  const suspended = await h.patch(`/orgs/${other.id}/members/${member.userId}`, { status: 'suspended' }, { token: other.owner.token });
  assert.equal(suspended.status, 200);
  const fresh = await h.post('/auth/login', { email: member.email, password: member.password });
  const afterSuspension = await h.get('/orgs', { token: fresh.body.data.access_token });
  assert.deepEqual(afterSuspension.body.data, []);
});

test('GET and PATCH /orgs/:orgId: profile, settings.require_mfa, org.updated, permission 403', async () => {
  const org = await createOrg(h, { name: 'Profile Org' });
  const read = await h.get(`/orgs/${org.id}`, { token: org.owner.token });
  assert.equal(read.status, 200);
  assert.deepEqual(read.body.data, { id: org.id, name: 'Profile Org', slug: org.slug, status: 'active', settings: { require_mfa: false } });

  const renamed = await h.patch(`/orgs/${org.id}`, { name: 'Renamed' }, { token: org.owner.token });
  assert.equal(renamed.status, 200, renamed.text);
  assert.deepEqual(renamed.body.data, { id: org.id, name: 'Renamed', slug: org.slug, status: 'active', settings: { require_mfa: false } });
  const event = h.eventsOfType('org.updated').find((e) => e.organization_id === org.id);
  assert.deepEqual(event?.data, { changes: { name: 'Renamed' } });
  assert.equal((await h.get(`/orgs/${org.id}`, { token: org.owner.token })).body.data.name, 'Renamed');

  const invalid = await h.patch(`/orgs/${org.id}`, { name: '' }, { token: org.owner.token });
  assert.equal(invalid.status, 422);
  const empty = await h.patch(`/orgs/${org.id}`, {}, { token: org.owner.token });
  assert.equal(empty.status, 422);

  const member = await addMember(h, org, org.owner.token);
  assert.equal((await h.get(`/orgs/${org.id}`, { token: member.token })).status, 200);
  const refused = await h.patch(`/orgs/${org.id}`, { name: 'Hijacked' }, { token: member.token });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error, 'forbidden');

  // Last: with require_mfa on, members without a factor are held at enrollment (MFA area).
  const mfaOn = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
  assert.equal(mfaOn.status, 200, mfaOn.text);
  assert.deepEqual(mfaOn.body.data.settings, { require_mfa: true });
  assert.deepEqual(h.eventsOfType('org.updated').filter((e) => e.organization_id === org.id).at(-1)?.data, { changes: { require_mfa: true } });
});

test('the path organization must be the token org (403) unless superadmin; unknown org 404', async () => {
  const org = await createOrg(h);
  const other = await createOrg(h);
  // Threat: a member of one organization addressing another one by id.
  const crossed = await h.get(`/orgs/${other.id}`, { token: org.owner.token });
  assert.equal(crossed.status, 403);
  assert.equal(crossed.body.error, 'forbidden');
  // A token with no org at all.
  const unscoped = await h.get(`/orgs/${org.id}`, { token: org.owner.accessToken });
  assert.equal(unscoped.status, 403);

  const root = await superadmin(h);
  const asRoot = await h.get(`/orgs/${other.id}`, { token: root.accessToken });
  assert.equal(asRoot.status, 200, asRoot.text);
  const unknown = await h.get('/orgs/00000000-0000-0000-0000-000000000000', { token: root.accessToken });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error, 'not_found');
});

test('claims are never the authority: a demoted admin is refused at once with the same token', async () => {
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  assert.equal((await h.patch(`/orgs/${org.id}`, { name: 'By admin' }, { token: admin.token })).status, 200);
  const demoted = await h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(demoted.status, 200);
  assert.ok(decodeJwt(admin.token).scope.includes('org.update'), 'the old token still claims org.update');
  const refused = await h.patch(`/orgs/${org.id}`, { name: 'Again' }, { token: admin.token });
  assert.equal(refused.status, 403);
});

test('DELETE /orgs/:orgId soft-deletes: 404 everywhere, sessions revoked, invites die, org.deleted', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  const invitee = await h.signUp();
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const inviteToken = h.tokenFromMail(invitee.email, 'invite');

  const refused = await h.delete(`/orgs/${org.id}`, { token: member.token });
  assert.equal(refused.status, 403);
  const deleted = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
  assert.equal(deleted.status, 200, deleted.text);
  assert.deepEqual(deleted.body, { data: { deleted: true } });
  assert.ok(h.eventsOfType('org.deleted').some((e) => e.organization_id === org.id && e.actor_id === org.owner.userId));

  // Sessions scoped to the organization are revoked.
  assert.equal((await h.get('/auth/me', { token: org.owner.token })).status, 401);
  assert.equal((await h.get('/auth/me', { token: member.token })).status, 401);
  const refresh = await h.post('/auth/token/refresh', { refresh_token: member.refreshToken });
  assert.equal(refresh.status, 401);

  // The organization reads as 404 everywhere.
  const root = await superadmin(h);
  assert.equal((await h.get(`/orgs/${org.id}`, { token: root.accessToken })).status, 404);
  assert.equal((await h.get(`/orgs/${org.id}/members`, { token: root.accessToken })).status, 404);
  const relogin = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  const switched = await h.post('/auth/switch-org', { organization_id: org.id }, { token: relogin.body.data.access_token });
  assert.equal(switched.status, 404);
  assert.deepEqual((await h.get('/orgs', { token: relogin.body.data.access_token })).body.data, []);

  // Pending invites die.
  const accept = await h.post('/auth/invites/accept', { token: inviteToken }, { token: invitee.accessToken });
  assert.equal(accept.status, 400);
  assert.equal(accept.body.error, 'invalid_token');
});

test('DELETE /orgs/:orgId needs step-up when the owner has a confirmed factor', async () => {
  const org = await createOrg(h);
  // A confirmed e-mail factor makes step-up apply; move past the freshness window.
  const enroll = await h.post('/auth/mfa/email/enroll', {}, { token: org.owner.token });
  assert.equal(enroll.status, 200, enroll.text);
  const code = String(h.lastMail(org.owner.email, 'otp_code')?.context.code);
  const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: enroll.body.data.factor_id, code }, { token: org.owner.token });
  assert.equal(confirmed.status, 200, confirmed.text);
  h.clock.advance(301);
  const stale = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
  assert.equal(stale.status, 401);
  assert.equal(stale.body.error, 'step_up_required');
});

test('GET /orgs/:orgId/audit-log pages newest first with audit.read', async () => {
  const org = await createOrg(h);
  for (let i = 0; i < 3; i += 1) assert.equal((await h.patch(`/orgs/${org.id}`, { name: `Name ${i}` }, { token: org.owner.token })).status, 200);
  const first = await h.get(`/orgs/${org.id}/audit-log?limit=2`, { token: org.owner.token });
  assert.equal(first.status, 200, first.text);
  assert.equal(first.body.data.events.length, 2);
  assert.deepEqual(first.body.data.events.map((e: any) => e.data.changes?.name), ['Name 2', 'Name 1']);
  assert.ok(first.body.data.next_cursor);
  const second = await h.get(`/orgs/${org.id}/audit-log?limit=2&cursor=${first.body.data.next_cursor}`, { token: org.owner.token });
  assert.equal(second.status, 200);
  assert.equal(second.body.data.events[0].data.changes?.name, 'Name 0');
  const member = await addMember(h, org, org.owner.token);
  assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: member.token })).status, 403);
});

test('POST /auth/switch-org: scoped token, session re-pointed, 404/403/401, auth.org_switched', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['admin']);
  const claims = decodeJwt(member.token);
  assert.equal(claims.org, org.id);
  assert.deepEqual(claims.roles, ['admin']);
  assert.ok(claims.scope.includes('members.invite'));
  assert.ok(!claims.scope.includes('org.delete'));
  assert.ok(h.eventsOfType('auth.org_switched').some((e) => e.user_id === member.userId && e.organization_id === org.id));

  // The session is re-pointed: a refresh stays scoped to the organization.
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: member.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  assert.equal(decodeJwt(refreshed.body.data.access_token).org, org.id);

  const unknown = await h.post('/auth/switch-org', { organization_id: '00000000-0000-0000-0000-000000000000' }, { token: member.token });
  assert.equal(unknown.status, 404);
  const other = await createOrg(h);
  const notMember = await h.post('/auth/switch-org', { organization_id: other.id }, { token: member.token });
  assert.equal(notMember.status, 403);

  // A suspended member is not an active member.
  const outsider = await addMember(h, org, org.owner.token);
  assert.equal((await h.patch(`/orgs/${org.id}/members/${outsider.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  const relogin = await h.post('/auth/login', { email: outsider.email, password: outsider.password });
  const suspendedSwitch = await h.post('/auth/switch-org', { organization_id: org.id }, { token: relogin.body.data.access_token });
  assert.equal(suspendedSwitch.status, 403);

  // A revoked session cannot switch.
  const loggedIn = await h.post('/auth/login', { email: member.email, password: member.password });
  const token = loggedIn.body.data.access_token;
  assert.equal((await h.post('/auth/logout', {}, { token })).status, 200);
  const ended = await h.post('/auth/switch-org', { organization_id: org.id }, { token });
  assert.equal(ended.status, 401);
});

test('switch-org into a require_mfa organization with an mfa=false session answers 403 mfa_required', async () => {
  const org = await createOrg(h);
  assert.equal((await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token })).status, 200);
  // A superadmin is not a member (so no enrollment hold) but still needs MFA to enter.
  const root = await superadmin(h);
  await enrollTotp(h, root.accessToken);
  const refused = await h.post('/auth/switch-org', { organization_id: org.id }, { token: root.accessToken });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error, 'mfa_required');
});

// switch-org takes the enrollment branch of every other route scoped to a require_mfa
// organization (docs/mfa.md): a caller with no confirmed factor is told to enroll one, since
// "complete a second-factor check" is something they cannot do.
test('switch-org into a require_mfa organization without a confirmed factor answers 403 mfa_enrollment_required, as the organization\'s routes do', async () => {
  const org = await createOrg(h);
  assert.equal((await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token })).status, 200);
  const root = await superadmin(h);
  const refused = await h.post('/auth/switch-org', { organization_id: org.id }, { token: root.accessToken });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error, 'mfa_enrollment_required');
  // The same caller on a route of that organization hears the same.
  const scoped = await h.get(`/orgs/${org.id}`, { token: root.accessToken });
  assert.equal(scoped.status, 403);
  assert.equal(scoped.body.error, 'mfa_enrollment_required');
});
