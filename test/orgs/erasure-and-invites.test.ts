import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, uniqueEmail } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { addMember, createOrg, memberOf } from '../helpers/orgs.js';

// Issue 10: what a deletion erases, invite send budgets, and what an `invited` entry shows.

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { invites: { sendBudget: { perOrganization: { limit: 4, windowSec: 3600 }, perAddress: { limit: 2, windowSec: 86400 } } } } });
});
after(async () => {
  await h.close();
});

const table = (name: string) => `${h.tablePrefix}${name}`;

test('invite events carry invite_id and never an e-mail address', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  const stranger = uniqueEmail('stranger');
  for (const email of [invitee.email, stranger]) {
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  }
  const invited = h.eventsOfType('member.invited').filter((event) => event.organization_id === org.id);
  assert.equal(invited.length, 2);
  for (const event of invited) {
    assert.equal(typeof event.data.invite_id, 'string');
    assert.ok(!JSON.stringify(event).includes('@'), JSON.stringify(event.data));
  }
  const rows = await h.knex(table('audit_events')).where({ organization_id: org.id, type: 'member.invited' }).pluck('data');
  for (const data of rows) assert.ok(!String(data).includes('@'), String(data));
});

test('deleting a user erases IP and user agent from their sessions and audit rows, and revokes the invites they sent', async () => {
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const invitee = await h.signUp();
  const sent = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: admin.token });
  assert.equal(sent.status, 201, sent.text);
  const inviteToken = h.tokenFromMail(invitee.email, 'invite');
  assert.equal((await memberOf(h, org.id, org.owner.token, invitee.userId))?.status, 'invited');
  assert.ok(Number((await h.knex(table('sessions')).where({ user_id: admin.userId }).whereNotNull('ip').count({ count: '*' }).first())!.count) > 0, 'sessions recorded an IP');
  const ownerEventsBefore = await h.knex(table('audit_events')).where({ actor_id: org.owner.userId }).whereNotNull('ip').count({ count: '*' }).first();

  const deleted = await h.delete(`/users/${admin.userId}`, { token: admin.accessToken });
  assert.equal(deleted.status, 200, deleted.text);

  const sessions = await h.knex(table('sessions')).where({ user_id: admin.userId }).select('ip', 'user_agent');
  assert.ok(sessions.length > 0);
  for (const session of sessions) assert.deepEqual(session, { ip: null, user_agent: null });
  const theirEvents = await h.knex(table('audit_events')).where({ actor_id: admin.userId }).select('type', 'ip');
  assert.ok(theirEvents.some((event) => event.type === 'user.deleted'), 'the deletion event itself is among them');
  for (const event of theirEvents) assert.equal(event.ip, null, event.type);
  const ownerEventsAfter = await h.knex(table('audit_events')).where({ actor_id: org.owner.userId }).whereNotNull('ip').count({ count: '*' }).first();
  assert.equal(Number(ownerEventsAfter!.count), Number(ownerEventsBefore!.count), 'other actors keep their IPs');

  assertError(await h.post('/auth/invites/accept', { token: inviteToken }, { token: invitee.accessToken }), 400, 'invalid_token');
  assert.equal(await memberOf(h, org.id, org.owner.token, invitee.userId), undefined, 'the invited entry is gone');
  const invites = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
  assert.ok(!invites.body.data.some((invite: { id: string }) => invite.id === sent.body.data.id));
  assert.equal(h.eventsOfType('user.deleted').at(-1)?.data.sent_invites_revoked, 1);
});

test('an invited entry carries no display_name; the active member does', async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp();
  assert.equal((await h.patch(`/users/${invitee.userId}`, { display_name: 'Ada Lovelace' }, { token: invitee.accessToken })).status, 200);
  await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  const invited = await memberOf(h, org.id, org.owner.token, invitee.userId);
  assert.equal(invited.status, 'invited');
  assert.equal(invited.display_name, null);
  await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken });
  assert.equal((await memberOf(h, org.id, org.owner.token, invitee.userId)).display_name, 'Ada Lovelace');
});

test('invite sends are budgeted per address (across organizations) and per organization: 429 rate_limited', async () => {
  const org = await createOrg(h);
  const target = uniqueEmail('bombed');
  const invite = (orgId: string, token: string, email: string) => h.post(`/orgs/${orgId}/invites`, { email, role_slugs: ['member'] }, { token });
  assert.equal((await invite(org.id, org.owner.token, target)).status, 201);
  assert.equal((await invite(org.id, org.owner.token, target)).status, 201, 'a re-invite is a send too');
  const overAddress = await invite(org.id, org.owner.token, target);
  assertError(overAddress, 429, 'rate_limited');
  assert.ok(Number(overAddress.headers.get('retry-after')) > 0);
  const other = await createOrg(h);
  assertError(await invite(other.id, other.owner.token, target), 429, 'rate_limited');

  assert.equal((await invite(org.id, org.owner.token, uniqueEmail('a'))).status, 201);
  assert.equal((await invite(org.id, org.owner.token, uniqueEmail('b'))).status, 201);
  assertError(await invite(org.id, org.owner.token, uniqueEmail('c')), 429, 'rate_limited');
  h.clock.advance(3601);
  const relogin = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  const token = (await h.post('/auth/switch-org', { organization_id: org.id }, { token: relogin.body.data.access_token })).body.data.access_token;
  assert.equal((await invite(org.id, token, uniqueEmail('d'))).status, 201, 'the organization budget refills');
});

test('migration 003-hardening removes the address from member.invited events written before it', async () => {
  const { up } = await import('../../src/store/migrations/003-hardening.js');
  const { tableNames } = await import('../../src/store/table-names.js');
  const id = crypto.randomUUID();
  await h.knex(table('audit_events')).insert({ id, type: 'member.invited', occurred_at: h.clock.now(), data: JSON.stringify({ invite_id: 'i-1', email: 'old@example.com', role_slugs: ['member'], reinvite: false }) });
  await up(tableNames(h.tablePrefix))(h.knex);
  const row = await h.knex(table('audit_events')).where({ id }).first();
  assert.deepEqual(JSON.parse(row.data), { invite_id: 'i-1', role_slugs: ['member'], reinvite: false });
});
