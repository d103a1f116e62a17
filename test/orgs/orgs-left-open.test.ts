import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, uniqueEmail } from '../helpers/harness.js';
import { addMember, createOrg, memberOf } from '../helpers/orgs.js';

/*
 * docs/organizations.md, invites whose sender leaves. The spec and CONTRACT are silent; account
 * deletion already revokes every invite the account sent. The threat: an administrator removed
 * from an organization (say, on leaving the company) keeps letting people in through the invites
 * already in their outbox, granting roles nobody now present chose. Removal revokes the invites
 * the member sent in that organization (and the `invited` member rows they made), as deletion
 * does; a demotion leaves them: the invite was the organization's decision when it was made,
 * and the remaining administrators can revoke it.
 */

let h: Harness;

before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function invite(orgId: string, token: string, email: string): Promise<string> {
  const response = await h.post(`/orgs/${orgId}/invites`, { email, role_slugs: ['member'] }, { token });
  assert.equal(response.status, 201, response.text);
  return response.body.data.id;
}

async function pendingInviteIds(orgId: string, token: string): Promise<string[]> {
  const response = await h.get(`/orgs/${orgId}/invites`, { token });
  assert.equal(response.status, 200, response.text);
  return (response.body.data as any[]).map((entry) => entry.id);
}

test("removing a member revokes the invites they sent in that organization (their invited rows too), and only those", async () => {
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  // The same administrator in another organization: those invites are that organization's business.
  const other = await createOrg(h);
  const adminThere = await addMember(h, other, other.owner.token, ['admin'], admin);
  const withAccount = await h.signUp(uniqueEmail('invitee'));
  const sentWithAccount = await invite(org.id, admin.token, withAccount.email);
  const sentWithoutAccount = await invite(org.id, admin.token, uniqueEmail('newcomer'));
  const sentByOwner = await invite(org.id, org.owner.token, uniqueEmail('owners-pick'));
  const sentElsewhere = await invite(other.id, adminThere.token, uniqueEmail('elsewhere'));
  assert.equal((await memberOf(h, org.id, org.owner.token, withAccount.userId))?.status, 'invited');

  const removed = await h.delete(`/orgs/${org.id}/members/${admin.userId}`, { token: org.owner.token });
  assert.equal(removed.status, 200, removed.text);

  assert.deepEqual(await pendingInviteIds(org.id, org.owner.token), [sentByOwner], 'the removed member\'s invites are no longer pending');
  assert.ok(!(await pendingInviteIds(org.id, org.owner.token)).includes(sentWithAccount));
  assert.ok(!(await pendingInviteIds(org.id, org.owner.token)).includes(sentWithoutAccount));
  assert.equal(await memberOf(h, org.id, org.owner.token, withAccount.userId), undefined, 'the invited entry went with its invite');
  const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(withAccount.email, 'invite') }, { token: withAccount.accessToken });
  assert.equal(accepted.status, 400, accepted.text);
  assert.deepEqual(await pendingInviteIds(other.id, other.owner.token), [sentElsewhere], 'another organization keeps the invites sent there');
  const event = h.eventsOfType('member.removed').find((candidate) => candidate.organization_id === org.id && candidate.user_id === admin.userId);
  assert.equal(event?.data.sent_invites_revoked, 2);
});

test('demoting a member leaves the invites they sent: they stay the organization\'s, and acceptable', async () => {
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const invitee = await h.signUp(uniqueEmail('invitee'));
  const sent = await invite(org.id, admin.token, invitee.email);
  const demoted = await h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(demoted.status, 200, demoted.text);
  assert.deepEqual(await pendingInviteIds(org.id, org.owner.token), [sent]);
  const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
});
