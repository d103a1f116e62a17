import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import {
  addMember,
  countRowsOf,
  createOrganizationOwnedBy,
  insertConfirmedTotpFactor,
  insertPendingInvite,
  insertSecondFactorData,
  signUpSuperadmin,
  tableOf,
} from '../helpers/users.js';

// docs/security.md DELETE /users/{id} and the "deleted tombstone" rows of docs/security.md.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';
const TOMBSTONE_EMAIL = /^[0-9a-f]{64}@deleted\.invalid$/;

async function userRow(userId: string) {
  return h.knex(tableOf(h, 'users')).where({ id: userId }).first();
}

async function liveSessionCount(userId: string): Promise<number> {
  const row = await h.knex(tableOf(h, 'sessions')).where({ user_id: userId }).whereNull('revoked_at').count({ count: '*' }).first();
  return Number(row?.count ?? 0);
}

describe('DELETE /users/{id}: the anonymizing tombstone', () => {
  // Threat: personal data surviving an account deletion (e-mail, name, credentials, second
  // factors, pending links), or a deleted account still being usable.
  test('self-deletion removes every identifying and secret datum; the row and audit ids remain', async () => {
    const admin = await signUpSuperadmin(h);
    const user = await h.signUp();
    await h.patch(`/users/${user.userId}`, { display_name: 'Grace Hopper' }, { token: user.accessToken });
    const secondSession = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(secondSession.status, 200);
    assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    assert.ok((await countRowsOf(h, 'oneTimeTokens', user.userId)) > 0);
    await insertConfirmedTotpFactor(h, user.userId);
    await insertSecondFactorData(h, user.userId);
    const auditIdsBefore = (await h.knex(tableOf(h, 'auditEvents')).where({ user_id: user.userId }).orderBy('seq').pluck('id')) as string[];
    assert.ok(auditIdsBefore.length >= 3);

    const response = await h.delete(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { status: 'deleted' } });

    const row = await userRow(user.userId);
    assert.ok(row, 'the record remains');
    assert.match(row.email, TOMBSTONE_EMAIL);
    assert.equal(row.display_name, null);
    assert.equal(row.password_hash, null);
    assert.equal(row.status, 'disabled');
    assert.ok(Number(row.deleted_at) > 0);
    for (const table of ['mfaFactors', 'recoveryCodes', 'otpChallenges', 'mfaTickets', 'oneTimeTokens']) {
      assert.equal(await countRowsOf(h, table, user.userId), 0, `${table} emptied`);
    }
    assert.equal(await liveSessionCount(user.userId), 0);

    // Audit events keep their ids, and none of them (before or after) carries the address.
    const auditRows = await h.knex(tableOf(h, 'auditEvents')).select('*');
    const auditIdsAfter = auditRows.filter((event) => event.user_id === user.userId).map((event) => event.id as string);
    for (const id of auditIdsBefore) assert.ok(auditIdsAfter.includes(id), `audit event ${id} kept`);
    for (const event of auditRows) assert.equal(JSON.stringify(event).includes(user.email), false, `audit ${event.type} holds no e-mail`);

    const deleted = h.eventsOfType('user.deleted').filter((event) => event.user_id === user.userId);
    assert.equal(deleted.length, 1);
    assert.equal(deleted[0]!.actor_id, user.userId);
    assert.equal(deleted[0]!.data.self, true);
    assert.equal(deleted[0]!.data.sessions_revoked, 2);
    assert.equal(JSON.stringify(deleted[0]).includes(user.email), false);

    // Neither token nor refresh token nor password opens anything.
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 401);
    const refresh = await h.post('/auth/token/refresh', { refresh_token: secondSession.body.data.refresh_token });
    assert.equal(refresh.status, 401);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 401);
    assert.equal(login.body.error, 'invalid_credentials');
    const tombstoneLogin = await h.post('/auth/login', { email: row.email, password: user.password });
    assert.equal(tombstoneLogin.status, 401);

    // An administrator sees the tombstone as a disabled record without the old profile.
    const read = await h.get(`/users/${user.userId}`, { token: admin.accessToken });
    assert.equal(read.status, 200, read.text);
    assert.deepEqual(read.body.data, { id: user.userId, email: row.email, display_name: null, status: 'disabled' });
  });

  test('the same address can register again afterwards: 202, a new verification mail, a new user id', async () => {
    const user = await h.signUp();
    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);
    const mailsBefore = h.mail.filter((message) => message.to === user.email && message.template === 'verify_email').length;

    const registered = await h.post('/auth/register', { email: user.email, password: user.password });
    assert.equal(registered.status, 202, registered.text);
    const verifyMails = h.mail.filter((message) => message.to === user.email && message.template === 'verify_email');
    assert.equal(verifyMails.length, mailsBefore + 1);
    assert.equal((await h.post('/auth/email/verify', { token: h.tokenFromMail(user.email, 'verify_email') })).status, 200);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    assert.notEqual(login.body.data.user.id, user.userId);
    assert.match((await userRow(user.userId)).email, TOMBSTONE_EMAIL);
  });

  test('a superadmin deletes another user (actor is the admin); the deleted superadmin grant goes too', async () => {
    const admin = await signUpSuperadmin(h);
    const otherAdmin = await signUpSuperadmin(h);
    const response = await h.delete(`/users/${otherAdmin.userId}`, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { status: 'deleted' } });
    const event = h.eventsOfType('user.deleted').find((candidate) => candidate.user_id === otherAdmin.userId);
    assert.equal(event?.actor_id, admin.userId);
    assert.equal(event?.data.self, false);
    assert.equal(await countRowsOf(h, 'globalRoleGrants', otherAdmin.userId), 0);
    assert.equal((await h.get('/auth/me', { token: otherAdmin.accessToken })).status, 401);
  });

  // Threat: a regular user deleting someone else's account, or probing ids with DELETE.
  test('without users.manage: the same 403 for another user and an unknown id; a superadmin gets 404', async () => {
    const admin = await signUpSuperadmin(h);
    const caller = await h.signUp();
    const other = await h.signUp();
    const foreign = await h.delete(`/users/${other.userId}`, { token: caller.accessToken });
    const unknown = await h.delete(`/users/${UNKNOWN_ID}`, { token: caller.accessToken });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error, 'forbidden');
    assert.equal(unknown.status, 403);
    assert.deepEqual(unknown.body, foreign.body);
    assert.equal((await userRow(other.userId)).deleted_at, null);
    const missing = await h.delete(`/users/${UNKNOWN_ID}`, { token: admin.accessToken });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error, 'not_found');
  });

  test('a tombstone: enable 409, disable 409, PATCH 409; deleting it again changes nothing', async () => {
    const admin = await signUpSuperadmin(h);
    const user = await h.signUp();
    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);
    const before = await userRow(user.userId);

    const enable = await h.post(`/users/${user.userId}/enable`, undefined, { token: admin.accessToken });
    assert.equal(enable.status, 409);
    assert.equal(enable.body.error, 'conflict');
    const disable = await h.post(`/users/${user.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(disable.status, 409);
    const patch = await h.patch(`/users/${user.userId}`, { display_name: 'Back again' }, { token: admin.accessToken });
    assert.equal(patch.status, 409);
    const again = await h.delete(`/users/${user.userId}`, { token: admin.accessToken });
    assert.equal(again.status, 200);
    assert.deepEqual(await userRow(user.userId), before);
    assert.equal(h.eventsOfType('user.deleted').filter((event) => event.user_id === user.userId).length, 1);
    assert.equal(h.eventsOfType('user.enabled').filter((event) => event.user_id === user.userId).length, 0);
  });

  test('step-up: deleting with a confirmed factor and a stale auth_time is 401 step_up_required', async () => {
    const user = await h.signUp();
    await insertConfirmedTotpFactor(h, user.userId);
    h.clock.advance(301);
    const response = await h.delete(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(response.status, 401);
    assert.equal(response.body.error, 'step_up_required');
    assert.equal(response.body.step_up, '/auth/mfa/step-up');
    assert.equal(response.headers.get('www-authenticate'), 'Bearer error="step_up_required"');
    assert.equal((await userRow(user.userId)).deleted_at, null);
  });
});

describe('DELETE /users/{id}: memberships and ownership', () => {
  // Threat: an organization left without any owner (docs/organizations.md invariant 3), even through an
  // account deletion.
  test('the last active owner of an organization cannot delete the account (409), a co-owned one can', async () => {
    const first = await h.signUp();
    const second = await h.signUp();
    const { organizationId } = await createOrganizationOwnedBy(h, [first]);

    const refused = await h.delete(`/users/${first.userId}`, { token: first.accessToken });
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.body.error, 'conflict');
    assert.equal((await userRow(first.userId)).deleted_at, null);
    assert.equal((await h.get('/auth/me', { token: first.accessToken })).status, 200);

    await addMember(h, organizationId, second.userId, 'owner');
    const accepted = await h.delete(`/users/${first.userId}`, { token: first.accessToken });
    assert.equal(accepted.status, 200, accepted.text);
    assert.equal(await countRowsOf(h, 'memberships', first.userId), 0);
    const orphanRoles = await h
      .knex(tableOf(h, 'memberRoles'))
      .whereNotIn('membership_id', h.knex(tableOf(h, 'memberships')).select('id'))
      .count({ count: '*' })
      .first();
    assert.equal(Number(orphanRoles?.count ?? 0), 0);
    const removed = h.eventsOfType('member.removed').filter((event) => event.user_id === first.userId);
    assert.equal(removed.length, 1);
    assert.equal(removed[0]!.organization_id, organizationId);
    assert.equal(removed[0]!.data.reason, 'user_deleted');

    // Now the second owner is the last one.
    const last = await h.delete(`/users/${second.userId}`, { token: second.accessToken });
    assert.equal(last.status, 409);
  });

  test('a superadmin cannot delete the last owner either', async () => {
    const admin = await signUpSuperadmin(h);
    const owner = await h.signUp();
    await createOrganizationOwnedBy(h, [owner]);
    const response = await h.delete(`/users/${owner.userId}`, { token: admin.accessToken });
    assert.equal(response.status, 409);
    assert.equal(response.body.error, 'conflict');
  });

  test('a suspended owner does not count as an active owner', async () => {
    const owner = await h.signUp();
    const suspended = await h.signUp();
    const { organizationId } = await createOrganizationOwnedBy(h, [owner]);
    await addMember(h, organizationId, suspended.userId, 'owner', 'suspended');
    assert.equal((await h.delete(`/users/${owner.userId}`, { token: owner.accessToken })).status, 409);
  });

  test('a plain member leaves every organization; pending invites to the old address are revoked', async () => {
    const owner = await h.signUp();
    const member = await h.signUp();
    const { organizationId } = await createOrganizationOwnedBy(h, [owner]);
    await addMember(h, organizationId, member.userId, 'member');
    const other = await createOrganizationOwnedBy(h, [owner]);
    const inviteId = await insertPendingInvite(h, other.organizationId, member.email);
    const unrelatedInviteId = await insertPendingInvite(h, other.organizationId, uniqueEmail('bystander'));

    const response = await h.delete(`/users/${member.userId}`, { token: member.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(await countRowsOf(h, 'memberships', member.userId), 0);
    const invite = await h.knex(tableOf(h, 'invites')).where({ id: inviteId }).first();
    assert.equal(invite.status, 'revoked');
    assert.equal(invite.pending_email, null);
    assert.match(invite.email, /@deleted\.invalid$/, 'no copy of the old address stays on the invite');
    const unrelated = await h.knex(tableOf(h, 'invites')).where({ id: unrelatedInviteId }).first();
    assert.equal(unrelated.status, 'pending');
    assert.equal(h.eventsOfType('user.deleted').find((event) => event.user_id === member.userId)?.data.invites_revoked, 1);
  });

  // Threat: two co-owners deleting their accounts at the same moment, each seeing the other
  // as the remaining owner, leave the organization ownerless. Only PostgreSQL runs the two
  // transactions concurrently; SQLite serialises them (the sequential case is above).
  test('two co-owners deleting at once: exactly one succeeds', { skip: TEST_DB !== 'pg' && 'SQLite serialises writers; the race only means something on PostgreSQL' }, async () => {
    for (let round = 0; round < 5; round += 1) {
      const first = await h.signUp();
      const second = await h.signUp();
      const { organizationId } = await createOrganizationOwnedBy(h, [first, second]);
      const responses = await Promise.all([
        h.delete(`/users/${first.userId}`, { token: first.accessToken }),
        h.delete(`/users/${second.userId}`, { token: second.accessToken }),
      ]);
      assert.deepEqual(responses.map((response) => response.status).sort(), [200, 409], responses.map((response) => response.text).join(' | '));
      const owners = await h
        .knex(`${tableOf(h, 'memberships')} as m`)
        .join(`${tableOf(h, 'memberRoles')} as mr`, 'mr.membership_id', 'm.id')
        .join(`${tableOf(h, 'roles')} as r`, 'r.id', 'mr.role_id')
        .where({ 'm.organization_id': organizationId, 'm.status': 'active', 'r.slug': 'owner' })
        .count({ count: '*' })
        .first();
      assert.equal(Number(owners?.count ?? 0), 1);
    }
  });
});
