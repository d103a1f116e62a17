import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, TEST_DB, decodeJwt, uniqueEmail } from '../helpers/harness.js';
import { addMember, createOrg, memberOf, switchOrg } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { links: { acceptInvite: 'https://app.example.test/invites/accept?token={token}' } } });
});
after(async () => {
  await h.close();
});

test('POST invites: 201 body, token only in the mail (hashed at rest), member.invited without the token', async () => {
  const org = await createOrg(h, { name: 'Invite Org' });
  const email = uniqueEmail('invitee');
  const response = await h.post(`/orgs/${org.id}/invites`, { email: email.toUpperCase(), role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(response.status, 201, response.text);
  assert.deepEqual(Object.keys(response.body.data).sort(), ['email', 'expires_at', 'id', 'role_slugs']);
  assert.equal(response.body.data.email, email);
  assert.deepEqual(response.body.data.role_slugs, ['member']);
  // tokens.inviteTtl defaults to 7 days.
  assert.equal(Date.parse(response.body.data.expires_at), h.clock.now() + 7 * 24 * 3600 * 1000);

  const mail = h.lastMail(email, 'invite');
  assert.ok(mail);
  const token = String(mail.context.token);
  assert.match(token, /^[A-Za-z0-9_-]{43}$/);
  assert.equal(mail.context.url, `https://app.example.test/invites/accept?token=${encodeURIComponent(token)}`);
  assert.equal(mail.context.organization_name, 'Invite Org');
  assert.equal(mail.context.inviter_email, org.owner.email);
  assert.equal(mail.context.expires_at, response.body.data.expires_at);
  assert.ok(mail.context.app_name);
  assert.ok(!response.text.includes(token));

  const event = h.eventsOfType('member.invited').find((e) => e.data.invite_id === response.body.data.id);
  assert.ok(event);
  assert.equal(event.organization_id, org.id);
  assert.ok(!JSON.stringify(event).includes(token));
  // Threat: a database leak handing out live invite tokens.
  const rows = await h.knex(`${h.tablePrefix}invites`).where({ id: response.body.data.id });
  assert.notEqual(rows[0].token_hash, token);
  assert.ok(!JSON.stringify(rows).includes(token));
});

test('POST invites: 409 for an active member, 422 invalid_state for a suspended one, 422 unknown role, 403 without members.invite', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  const active = await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(active.status, 409);
  assert.equal(active.body.error, 'conflict');
  assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
  const suspended = await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(suspended.status, 422);
  assert.equal(suspended.body.error, 'invalid_state');
  const unknownRole = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail(), role_slugs: ['ghost'] }, { token: org.owner.token });
  assert.equal(unknownRole.status, 422);
  const badEmail = await h.post(`/orgs/${org.id}/invites`, { email: 'not-an-email', role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(badEmail.status, 422);
  const plain = await addMember(h, org, org.owner.token);
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail(), role_slugs: ['member'] }, { token: plain.token })).status, 403);
  assert.equal((await h.get(`/orgs/${org.id}/invites`, { token: plain.token })).status, 403);
});

test('re-inviting rotates the token and extends the expiry (one pending invite per address)', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  const first = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  const oldToken = h.tokenFromMail(invitee.email, 'invite');
  h.clock.advance(60);
  const second = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token });
  assert.equal(second.status, 201);
  assert.equal(second.body.data.id, first.body.data.id);
  assert.ok(Date.parse(second.body.data.expires_at) > Date.parse(first.body.data.expires_at));
  const newToken = h.tokenFromMail(invitee.email, 'invite');
  assert.notEqual(newToken, oldToken);
  const pending = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
  assert.equal(pending.body.data.filter((i: any) => i.email === invitee.email).length, 1);

  const login = await h.post('/auth/login', { email: invitee.email, password: invitee.password });
  const token = login.body.data.access_token;
  const stale = await h.post('/auth/invites/accept', { token: oldToken }, { token });
  assert.equal(stale.status, 400);
  assert.equal(stale.body.error, 'invalid_token');
  const accepted = await h.post('/auth/invites/accept', { token: newToken }, { token });
  assert.equal(accepted.status, 200);
  assert.deepEqual(accepted.body, { data: { organization_id: org.id } });
  const scoped = await switchOrg(h, token, org.id);
  assert.deepEqual(decodeJwt(scoped).roles, ['admin']);
});

test('GET invites lists pending ones only, with created_at and invited_by, paged by cursor', async () => {
  const org = await createOrg(h);
  const emails = [uniqueEmail(), uniqueEmail(), uniqueEmail()];
  const ids: string[] = [];
  for (const email of emails) ids.push((await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token })).body.data.id);
  assert.equal((await h.delete(`/orgs/${org.id}/invites/${ids[2]}`, { token: org.owner.token })).status, 200);

  const list = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
  assert.equal(list.status, 200);
  assert.ok(Array.isArray(list.body.data));
  assert.deepEqual(list.body.data.map((i: any) => i.id).sort(), [ids[0], ids[1]].sort());
  const invite = list.body.data[0];
  assert.deepEqual(Object.keys(invite).sort(), ['created_at', 'email', 'expires_at', 'id', 'invited_by', 'role_slugs']);
  assert.equal(invite.invited_by, org.owner.userId);
  assert.equal(invite.created_at, new Date(h.clock.now()).toISOString());

  const page1 = await h.get(`/orgs/${org.id}/invites?limit=1`, { token: org.owner.token });
  assert.equal(page1.body.data.length, 1);
  const cursor = page1.headers.get('x-next-cursor');
  assert.ok(cursor);
  const page2 = await h.get(`/orgs/${org.id}/invites?limit=1&cursor=${cursor}`, { token: org.owner.token });
  assert.equal(page2.body.data.length, 1);
  assert.equal(page2.headers.get('x-next-cursor'), null);
  assert.notEqual(page2.body.data[0].id, page1.body.data[0].id);

  // Expired invites are no longer pending.
  h.clock.advance(7 * 24 * 3600 + 1);
  const relogin = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  const token = await switchOrg(h, relogin.body.data.access_token, org.id);
  assert.deepEqual((await h.get(`/orgs/${org.id}/invites`, { token })).body.data, []);
});

test('DELETE invites: revoked answer, token dead, 404 for unknown or already revoked', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  const invite = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal((await memberOf(h, org.id, org.owner.token, invitee.userId))?.status, 'invited');
  const revoked = await h.delete(`/orgs/${org.id}/invites/${invite.body.data.id}`, { token: org.owner.token });
  assert.equal(revoked.status, 200);
  assert.deepEqual(revoked.body, { data: { status: 'revoked' } });
  assert.equal(await memberOf(h, org.id, org.owner.token, invitee.userId), undefined);
  assert.equal((await h.delete(`/orgs/${org.id}/invites/${invite.body.data.id}`, { token: org.owner.token })).status, 404);
  assert.equal((await h.delete(`/orgs/${org.id}/invites/00000000-0000-0000-0000-000000000000`, { token: org.owner.token })).status, 404);
  const accept = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken });
  assert.equal(accept.status, 400);
  // Another organization's invite is not addressable here.
  const other = await createOrg(h);
  const foreign = await h.post(`/orgs/${other.id}/invites`, { email: uniqueEmail(), role_slugs: ['member'] }, { token: other.owner.token });
  assert.equal((await h.delete(`/orgs/${org.id}/invites/${foreign.body.data.id}`, { token: org.owner.token })).status, 404);
});

test('accept: e-mail must match (403), single use and unexpired (400), exactly the invited roles, member.joined', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  const stranger = await h.signUp();
  const custom = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['audit.read', 'org.read'] }, { token: org.owner.token });
  assert.equal(custom.status, 201);
  await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member', 'auditor'] }, { token: org.owner.token });
  const token = h.tokenFromMail(invitee.email, 'invite');

  // Threat: a forwarded or intercepted invite link used by another account.
  const mismatch = await h.post('/auth/invites/accept', { token }, { token: stranger.accessToken });
  assert.equal(mismatch.status, 403);
  assert.equal(mismatch.body.error, 'forbidden');
  const garbage = await h.post('/auth/invites/accept', { token: 'x'.repeat(43) }, { token: invitee.accessToken });
  assert.equal(garbage.status, 400);
  assert.equal(garbage.body.error, 'invalid_token');
  assert.equal((await h.post('/auth/invites/accept', {}, { token: invitee.accessToken })).status, 422);
  assert.equal((await h.post('/auth/invites/accept', { token })).status, 401);

  const accepted = await h.post('/auth/invites/accept', { token }, { token: invitee.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
  const joined = h.eventsOfType('member.joined').find((e) => e.user_id === invitee.userId);
  assert.equal(joined?.organization_id, org.id);
  assert.deepEqual(joined?.data.role_slugs, ['auditor', 'member']);
  const member = await memberOf(h, org.id, org.owner.token, invitee.userId);
  assert.deepEqual(member, { user_id: invitee.userId, email: invitee.email, display_name: null, status: 'active', roles: ['auditor', 'member'] });

  const replay = await h.post('/auth/invites/accept', { token }, { token: invitee.accessToken });
  assert.equal(replay.status, 400);
  assert.equal(replay.body.error, 'invalid_token');
});

test('accept: an expired invite answers 400; an account created after the invite can accept', async () => {
  const org = await createOrg(h);
  const lateEmail = uniqueEmail('late');
  await h.post(`/orgs/${org.id}/invites`, { email: lateEmail, role_slugs: ['member'] }, { token: org.owner.token });
  const lateToken = h.tokenFromMail(lateEmail, 'invite');
  const late = await h.signUp(lateEmail);
  const accepted = await h.post('/auth/invites/accept', { token: lateToken }, { token: late.accessToken });
  assert.equal(accepted.status, 200, accepted.text);

  const expiringEmail = uniqueEmail('expiring');
  const expiring = await h.signUp(expiringEmail);
  await h.post(`/orgs/${org.id}/invites`, { email: expiringEmail, role_slugs: ['member'] }, { token: org.owner.token });
  const token = h.tokenFromMail(expiringEmail, 'invite');
  h.clock.advance(7 * 24 * 3600 + 1);
  const login = await h.post('/auth/login', { email: expiring.email, password: expiring.password });
  const expired = await h.post('/auth/invites/accept', { token }, { token: login.body.data.access_token });
  assert.equal(expired.status, 400);
  assert.equal(expired.body.error, 'invalid_token');
  const rows = await h.knex(`${h.tablePrefix}invites`).where({ organization_id: org.id, email: expiringEmail });
  assert.equal(rows[0].status, 'expired');
});

test('twenty concurrent accepts of one invite give one membership', async () => {
  // Threat: a double-spend of a single-use token racing itself into duplicate memberships or events.
  const org = await createOrg(h);
  const invitee = await h.signUp();
  await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  const token = h.tokenFromMail(invitee.email, 'invite');
  const joinedBefore = h.eventsOfType('member.joined').length;
  const results = await Promise.all(Array.from({ length: 20 }, () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken })));
  const statuses = results.map((r) => r.status);
  assert.equal(statuses.filter((s) => s === 200).length, 1, `statuses: ${statuses.join(',')} on ${TEST_DB}`);
  assert.ok(statuses.every((s) => s === 200 || s === 400), statuses.join(','));
  const rows = await h.knex(`${h.tablePrefix}memberships`).where({ organization_id: org.id, user_id: invitee.userId });
  assert.equal(rows.length, 1);
  assert.equal(rows[0].status, 'active');
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(h.eventsOfType('member.joined').length, joinedBefore + 1);
});
