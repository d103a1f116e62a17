import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { ApiKeyRepository } from '../../src/store/api-key-repository.js';

/*
 * Interleavings of the API-key write paths on PostgreSQL (READ COMMITTED): a second request
 * starts inside one request's window, by a wrapped repository method, and commits there unless a
 * lock makes it wait. Each test asks for an answer some serial order of the two would give.
 * (test/api-keys/api-key-interleavings.test.ts: a creation while its member is removed.)
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
