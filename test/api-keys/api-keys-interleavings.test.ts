import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { ApiKeyRepository } from '../../src/store/api-key-repository.js';
import { OrganizationRepository } from '../../src/store/organization-repository.js';

/*
 * Interleavings of the API-key write paths on PostgreSQL (READ COMMITTED): a second request
 * starts inside one request's window, by a wrapped repository method, and commits there unless a
 * lock makes it wait. Each test asks for an answer some serial order of the two would give. A
 * key's creation takes the organization's row before the account's and the session's, as a
 * member write does (docs/database.md), so one waits for the other instead of deadlocking.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

const NEW_PASSWORD = 'an0ther-Strong-passphrase!';

/** The last error the router logged (a 500's cause). */
function lastError(): string {
  return JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
}

function revokedEventsOf(keyId: string): string[] {
  return h.events.filter((event) => event.type === 'api_key.revoked' && event.data?.api_key_id === keyId).map((event) => String(event.data?.reason));
}

async function createKey(orgId: string, token: string): Promise<string> {
  const created = await h.post(`/orgs/${orgId}/api-keys`, { name: 'nightly', permission_keys: ['org.read'] }, { token });
  assert.equal(created.status, 201, created.text);
  return created.body.data.id as string;
}

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

describe(`API-key interleavings on ${TEST_DB}`, () => {
  test('a member creates a key while being removed: the creation waits for the organization, no deadlock, no live key is left', PG_ONLY, async () => {
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

  test('an admin revokes a key while its owner is removed from the organization: one api_key.revoked for the key', PG_ONLY, async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const keyId = await createKey(org.id, member.token);
    // The revocation holds the key's row; the removal reads the member's live keys, then waits for it.
    const { outer: revoked, inner: removed } = await withRequestInTheWindow(
      h,
      { prototype: ApiKeyRepository.prototype, method: 'findInOrganization', when: (_orgId, id) => id === keyId },
      () => h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token }),
      () => h.delete(`/orgs/${org.id}/api-keys/${keyId}`, { token: admin.token }),
    );
    assert.equal(revoked.status, 200, `${revoked.text} ${lastError()}`);
    assert.equal(removed?.status, 200, `${removed?.text} ${lastError()}`);
    // Either order revokes the key once: by the admin, or with the membership.
    const reasons = revokedEventsOf(keyId);
    assert.equal(reasons.length, 1, `api_key.revoked reasons: ${reasons.join(', ')}`);
  });

  test('an admin revokes a key while its owner resets their password: one api_key.revoked for the key', PG_ONLY, async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const keyId = await createKey(org.id, member.token);
    assert.equal((await h.post('/auth/password/forgot', { email: member.email })).status, 202);
    const resetToken = h.tokenFromMail(member.email, 'password_reset');
    const { outer: revoked, inner: reset } = await withRequestInTheWindow(
      h,
      { prototype: ApiKeyRepository.prototype, method: 'findInOrganization', when: (_orgId, id) => id === keyId },
      () => h.post('/auth/password/reset', { token: resetToken, new_password: NEW_PASSWORD }),
      () => h.delete(`/orgs/${org.id}/api-keys/${keyId}`, { token: admin.token }),
    );
    assert.equal(revoked.status, 200, `${revoked.text} ${lastError()}`);
    assert.equal(reset?.status, 200, `${reset?.text} ${lastError()}`);
    const reasons = revokedEventsOf(keyId);
    assert.equal(reasons.length, 1, `api_key.revoked reasons: ${reasons.join(', ')}`);
  });
});
