import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { OrganizationRepository } from '../../src/store/organization-repository.js';

// A key's creation on PostgreSQL (READ COMMITTED) beside a member write of its organization: the
// creation takes the organization's row before the account's and the session's, as the member
// write does (docs/database.md), so one waits for the other instead of deadlocking with it.

const SKIP = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('a member creates a key while being removed: the creation waits for the organization, no deadlock, no live key is left', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['admin']);
  // The removal holds the organization, then revokes the member's sessions; a creation holding the
  // member's session while its key's insert waits for the organization would close the cycle.
  const { answer, deadlocks } = await countingDeadlocks(() =>
    withRequestInTheWindow(
      h,
      { prototype: OrganizationRepository.prototype, method: 'lockActive', when: (id) => id === org.id },
      () => h.post(`/orgs/${org.id}/api-keys`, { name: 'made while removed', permission_keys: ['org.read'] }, { token: member.token }),
      () => h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token }),
    ),
  );
  const { outer: removed, inner: created } = answer;
  assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
  assert.equal(removed.status, 200, removed.text);
  // The removal first: the creation then finds the session ended (401) or the membership gone (403).
  assert.ok(created && [401, 403].includes(created.status), `${created?.status} ${created?.text}`);
  const live = await h.knex(`${h.tablePrefix}api_keys`).where({ organization_id: org.id, user_id: member.userId }).whereNull('revoked_at').count({ count: '*' });
  assert.equal(Number(live[0]?.count), 0);
});
