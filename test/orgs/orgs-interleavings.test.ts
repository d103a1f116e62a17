import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg, memberOf, roleIdOf, superadmin, switchOrg } from '../helpers/orgs.js';
import { UserRepository } from '../../src/store/user-repository.js';
import { InviteRepository, MembershipRepository, RoleRepository } from '../../src/store/organization-repository.js';

// Interleavings of the organization services on PostgreSQL (READ COMMITTED: each statement sees
// what committed before it). Each test runs a whole second request inside one service's window
// between two reads, by wrapping a repository method. SQLite runs one write transaction at a time.
// A second request that needs a row lock the first holds cannot finish inside the window: it is
// started, seen waiting, and the first goes on, so the outcome is that of the two in series.

/** A second session of the owner: a request under it does not wait for the first session's row lock. */
async function secondSession(owner: { email: string; password: string }, organizationId: string): Promise<string> {
  const login = await h.post('/auth/login', { email: owner.email, password: owner.password });
  assert.equal(login.status, 200, login.text);
  return switchOrg(h, login.body.data.access_token, organizationId);
}

/** The last error the router logged (a 500's cause: code only, docs/security.md). */
function lastError(): string {
  return JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
}

const SKIP = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('a re-invite committed between accept\'s token lookup and its consume: the old token stops working', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('rotated'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 201);
  const oldToken = h.tokenFromMail(invitee.email, 'invite');
  const { outer: accepted, inner: reinvite } = await withRequestInTheWindow(
    h,
    { prototype: InviteRepository.prototype, method: 'findByTokenHash' },
    () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token }),
    () => h.post('/auth/invites/accept', { token: oldToken }, { token: invitee.accessToken }),
  );
  assert.equal(reinvite?.status, 201, reinvite?.text);
  assert.equal(accepted.status, 400, `old token after rotation: ${accepted.status} ${accepted.text}; member now ${JSON.stringify(await memberOf(h, org.id, org.owner.token, invitee.userId))}`);
});

test('an accept arriving between invite creation\'s membership read and its writes waits: the re-invite rotates the token, the accept is refused', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('joined'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const token = h.tokenFromMail(invitee.email, 'invite');
  const { outer: second, inner: accepted } = await withRequestInTheWindow(
    h,
    { prototype: MembershipRepository.prototype, method: 'find', when: (_organizationId, userId) => userId === invitee.userId },
    () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken }),
    () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token }),
  );
  const member = await memberOf(h, org.id, org.owner.token, invitee.userId);
  const pending = await countRows(h, 'invites', { organization_id: org.id, pending_email: invitee.email });
  assert.equal(second.status, 201, `${second.text} ${lastError()}`);
  assert.equal(accepted?.status, 400, `accept of a token rotated meanwhile: ${accepted?.status} ${accepted?.text}; member ${JSON.stringify(member)}; pending invites ${pending}`);
  assert.equal(member?.status, 'invited');
  assert.deepEqual(member.roles, ['admin']);
  assert.equal(pending, 1);
});

test('a revoke arriving between invite creation\'s membership read and its writes waits: the re-invite succeeds, then the revoke ends it', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('revoked'));
  const first = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(first.status, 201);
  const otherAdmin = await secondSession(org.owner, org.id);
  const { outer: second, inner: revoked } = await withRequestInTheWindow(
    h,
    { prototype: MembershipRepository.prototype, method: 'find', when: (_organizationId, userId) => userId === invitee.userId },
    () => h.delete(`/orgs/${org.id}/invites/${first.body.data.id}`, { token: otherAdmin }),
    () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token }),
  );
  assert.equal(second.status, 201, `${second.text} ${lastError()}`);
  // The re-invite rotated the same invite, so the revoke that waited for it ends it, with its invited entry.
  assert.equal(second.body.data.id, first.body.data.id);
  assert.equal(revoked?.status, 200, revoked?.text);
  assert.equal(await memberOf(h, org.id, org.owner.token, invitee.userId), undefined);
  assert.equal(await countRows(h, 'invites', { organization_id: org.id, pending_email: invitee.email }), 0);
});

test('a custom role deletion arriving between accept\'s role lookup and its grant waits: the member joins, then loses the role', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal(role.status, 201, role.text);
  const invitee = await h.signUp(uniqueEmail('auditor'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member', 'auditor'] }, { token: org.owner.token })).status, 201);
  const token = h.tokenFromMail(invitee.email, 'invite');
  const roleId = await roleIdOf(h, org.id, org.owner.token, 'auditor');
  const { outer: accepted, inner: deleted } = await withRequestInTheWindow(
    h,
    { prototype: RoleRepository.prototype, method: 'findBySlugs', when: (_organizationId, slugs) => slugs.includes('auditor') },
    () => h.delete(`/orgs/${org.id}/roles/${roleId}`, { token: org.owner.token }),
    () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken }),
  );
  assert.equal(deleted?.status, 200, deleted?.text);
  assert.equal(accepted.status, 200, `${accepted.text} ${lastError()}`);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, invitee.userId))?.roles, ['member']);
});

test('a custom role deletion arriving between invite creation\'s role lookup and its writes waits: 201, then the invited entry loses the role', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal(role.status, 201, role.text);
  const roleId = role.body.data.id as string;
  const invitee = await h.signUp(uniqueEmail('auditor2'));
  const otherAdmin = await secondSession(org.owner, org.id);
  const { outer: invited, inner: deleted } = await withRequestInTheWindow(
    h,
    { prototype: RoleRepository.prototype, method: 'findBySlugs', when: (_organizationId, slugs) => slugs.includes('auditor') },
    () => h.delete(`/orgs/${org.id}/roles/${roleId}`, { token: otherAdmin }),
    () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member', 'auditor'] }, { token: org.owner.token }),
  );
  assert.equal(invited.status, 201, `${invited.text} ${lastError()}`);
  assert.equal(deleted?.status, 200, deleted?.text);
  assert.deepEqual((await memberOf(h, org.id, org.owner.token, invitee.userId))?.roles, ['member']);
});

test('a re-invite committed inside an accept of the expired invite: the new invite keeps its invited entry', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const invitee = await h.signUp(uniqueEmail('expired'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const oldToken = h.tokenFromMail(invitee.email, 'invite');
  h.clock.advance(7 * 24 * 3600 + 1);
  const ownerLogin = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  const ownerToken = await switchOrg(h, ownerLogin.body.data.access_token, org.id);
  const inviteeLogin = await h.post('/auth/login', { email: invitee.email, password: invitee.password });
  const inviteeToken = inviteeLogin.body.data.access_token as string;
  const { outer: accepted, inner: reinvite } = await withRequestInTheWindow(
    h,
    { prototype: InviteRepository.prototype, method: 'findByTokenHash' },
    () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: ownerToken }),
    () => h.post('/auth/invites/accept', { token: oldToken }, { token: inviteeToken }),
  );
  assert.equal(reinvite?.status, 201, reinvite?.text);
  assert.equal(accepted.status, 400, accepted.text);
  assert.equal(await countRows(h, 'invites', { organization_id: org.id, pending_email: invitee.email, status: 'pending' }), 1);
  const entry = await memberOf(h, org.id, ownerToken, invitee.userId);
  assert.equal(entry?.status, 'invited', `pending re-invite without its invited entry: ${JSON.stringify(entry)}`);
});

test('an organization deletion arriving between invite creation\'s checks and its insert waits: the invite is revoked with the rest', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  // A superadmin's session is not scoped to the organization, so the deletion does not wait for it.
  const root = await superadmin(h);
  const email = uniqueEmail('orphan');
  const { outer: invited, inner: deleted } = await withRequestInTheWindow(
    h,
    { prototype: UserRepository.prototype, method: 'findByEmail', when: (address) => address === email },
    () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }),
    () => h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: root.accessToken }),
  );
  assert.equal(invited.status, 201, `${invited.text} ${lastError()}`);
  assert.equal(deleted?.status, 200, deleted?.text);
  const pending = await countRows(h, 'invites', { organization_id: org.id, status: 'pending' });
  assert.equal(pending, 0, `pending invites in an organization deleted after the invite: ${pending}`);
});

test('an admin sends an invite while their account is being deleted: the invite waits for the organization, and the two run one after the other', { skip: SKIP, timeout: 60_000 }, async () => {
  // The deletion takes the organization's row before the account's and the session's, as the
  // invite does: the invite, started once the deletion holds them all, waits for it.
  // (test/accounts/deletion-lock-order.test.ts counts the deadlocks the opposite order made.)
  const org = await createOrg(h);
  const admin = await addMember(h, org, org.owner.token, ['admin']);
  const { outer: deleted, inner } = await withRequestInTheWindow(
    h,
    { prototype: UserRepository.prototype, method: 'organizationsWhereLastActiveOwner', when: (userId) => userId === admin.userId, at: 'before' },
    () => h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('sent-while-deleted'), role_slugs: ['member'] }, { token: admin.token }),
    () => h.delete(`/users/${admin.userId}`, { token: admin.accessToken }),
  );
  const invited = inner!;
  assert.equal(deleted.status, 200, `${deleted.text} ${lastError()}`);
  // Either order: the invite first (201; the deletion then revokes it with the rest the account
  // sent), or the deletion first (the admin's membership and session have ended: 403 or 401).
  assert.ok([201, 401, 403].includes(invited.status), `${invited.status} ${invited.text} ${lastError()}`);
  assert.equal(await countRows(h, 'invites', { organization_id: org.id, invited_by: admin.userId, status: 'pending' }), 0);
});
