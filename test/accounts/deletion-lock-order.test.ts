import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg, memberOf } from '../helpers/orgs.js';
import { OrganizationRepository } from '../../src/store/organization-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

/*
 * An account's deletion takes its locks in every decision's order (docs/database.md): the
 * organizations it belongs to, then the account, then the caller's session. A request that
 * holds one of those organizations and then wants the account or the session (an owner change,
 * an invite's acceptance) makes the deletion wait; it does not deadlock with it. A deadlock
 * would still end in a serial outcome (Store.transaction runs the loser again), but only after
 * PostgreSQL's deadlock_timeout, so each test counts them (`countingDeadlocks`).
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

/** The last error the router logged (a 500's cause). */
function lastError(): string {
  return JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
}

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

describe(`account deletion's lock order on ${TEST_DB}`, () => {
  test('an owner demotes the other owner while deleting their own account: the deletion waits for the organization, no deadlock, an owner stays', PG_ONLY, async () => {
    const org = await createOrg(h);
    const coOwner = await addMember(h, org, org.owner.token, ['owner']);
    // One session for both requests: the demotion holds the organization, then wants the session;
    // a deletion that took the account and the session before the organization would close the cycle.
    const { answer, deadlocks } = await countingDeadlocks(() =>
      withRequestInTheWindow(
        h,
        { prototype: OrganizationRepository.prototype, method: 'lockActive', when: (id) => id === org.id },
        () => h.delete(`/users/${org.owner.userId}`, { token: org.owner.accessToken }),
        () => h.patch(`/orgs/${org.id}/members/${coOwner.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }),
      ),
    );
    const { outer: demoted, inner: deleted } = answer;
    assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
    // The serial order the locks impose: the demotion, then the deletion of the last owner (409).
    assert.equal(demoted.status, 200, `${demoted.text} ${lastError()}`);
    assert.equal(deleted?.status, 409, `${deleted?.status} ${deleted?.text} ${lastError()}`);
    const owner = await memberOf(h, org.id, org.owner.token, org.owner.userId);
    assert.equal(owner?.status, 'active');
    assert.deepEqual(owner.roles, ['owner']);
    assert.deepEqual((await memberOf(h, org.id, org.owner.token, coOwner.userId))?.roles, ['member']);
  });

  test('an invitation accepted while the invitee deletes their account: the deletion waits for the organization, no deadlock, no membership is left', PG_ONLY, async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('accepting'));
    // An invite to an existing account makes an `invited` row: the deletion locks that organization.
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 201);
    const token = h.tokenFromMail(invitee.email, 'invite');
    const { answer, deadlocks } = await countingDeadlocks(() =>
      withRequestInTheWindow(
        h,
        { prototype: OrganizationRepository.prototype, method: 'lockActive', when: (id) => id === org.id },
        () => h.delete(`/users/${invitee.userId}`, { token: invitee.accessToken }),
        () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken }),
      ),
    );
    const { outer: accepted, inner: deleted } = answer;
    assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
    assert.equal(accepted.status, 200, `${accepted.text} ${lastError()}`);
    assert.equal(deleted?.status, 200, `${deleted?.status} ${deleted?.text} ${lastError()}`);
    assert.equal(await countRows(h, 'memberships', { user_id: invitee.userId }), 0);
    const owner = await memberOf(h, org.id, org.owner.token, org.owner.userId);
    assert.deepEqual(owner?.roles, ['owner']);
  });

  test('an organization created between the deletion\'s first read of memberships and its account lock is locked and counted: 409, it keeps its owner', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('founding'));
    const { answer, deadlocks } = await countingDeadlocks(() =>
      withRequestInTheWindow(
        h,
        { prototype: UserRepository.prototype, method: 'memberOrganizationIds', when: (userId) => userId === user.userId },
        () => h.post('/orgs', { name: 'Founded meanwhile' }, { token: user.accessToken }),
        () => h.delete(`/users/${user.userId}`, { token: user.accessToken }),
      ),
    );
    const { outer: deleted, inner: created } = answer;
    assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
    assert.equal(created?.status, 201, `${created?.status} ${created?.text}`);
    // The membership read again under the account's lock finds the new organization, of which the account is the only owner.
    assert.equal(deleted.status, 409, `${deleted.text} ${lastError()}`);
    assert.equal(await countRows(h, 'memberships', { user_id: user.userId, organization_id: created.body.data.id, status: 'active' }), 1);
  });
});
