import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TEST_DB, decodeJwt, uniqueEmail } from '../helpers/harness.js';
import { HOST_PERMISSION, type Instance, InstancePair, type Probe } from '../helpers/instance-pair.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg, type CreatedOrg, type OrgMember } from '../helpers/orgs.js';
import { servicesOf } from '../../src/create-identity-router.js';
import type { AccessScope } from '../../src/services/shared/access-cache.js';
import { SessionRepository } from '../../src/store/session-repository.js';

/*
 * Audit of CONTRACT 7 (docs/multiple-instances.md): the revocations that
 * test/access/access-cache-revocation.test.ts does not make, and the ways a revocation could be
 * lost between two instances of one database: an API key that a second instance keeps in its
 * cache, a session ended by a refresh replay, an MFA enforcement, a role deleted, a listening
 * connection that drops, and a cache fill read before the revocation committed.
 * B is a second router on the same database, given half the contract's 1 s
 * (helpers/instance-pair.ts).
 */

let pair: InstancePair;
let a: Instance;
let b: Instance;
before(async () => {
  pair = await InstancePair.start();
  ({ a, b } = pair);
});
after(() => pair.close());

const hostStatus = (credential: string): Probe => (on) => on.host(credential);
const whoamiStatus = (credential: string): Probe => (on) => on.whoami(credential);
const both = (...probes: Probe[]): Probe => async (on) => {
  const statuses = new Set(await Promise.all(probes.map((probe) => probe(on))));
  return statuses.size === 1 ? [...statuses][0]! : -1;
};

async function orgWithMember(roleSlugs: string[] = ['admin']): Promise<{ org: CreatedOrg; member: OrgMember }> {
  const org = await createOrg(a.h);
  const member = await addMember(a.h, org, org.owner.token, roleSlugs);
  return { org, member };
}

async function createKey(orgId: string, token: string): Promise<{ id: string; key: string }> {
  const created = await a.h.post(`/orgs/${orgId}/api-keys`, { name: 'audit', permission_keys: [HOST_PERMISSION] }, { token });
  assert.equal(created.status, 201, created.text);
  return { id: created.body.data.id as string, key: created.body.data.key as string };
}

describe(`revocations beyond the access-cache suite reach every instance (${TEST_DB})`, () => {
  test('API key revoked by its owner: 401 on A at once and on B within 500 ms', async () => {
    const { org } = await orgWithMember();
    const { id, key } = await createKey(org.id, org.owner.token);
    await pair.assertRevokedEverywhere(hostStatus(key), async () => {
      const revoked = await a.h.delete(`/orgs/${org.id}/api-keys/${id}`, { token: org.owner.token });
      assert.equal(revoked.status, 200, revoked.text);
    }, 401);
  });

  test("API key of a member removed from the organization: the key stops on A at once and on B", async () => {
    const { org, member } = await orgWithMember(['admin']);
    const { key } = await createKey(org.id, member.token);
    await pair.assertRevokedEverywhere(hostStatus(key), async () => {
      const removed = await a.h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
      assert.equal(removed.status, 200, removed.text);
    }, 401);
  });

  test('API key of an organization deleted on A stops on B', async () => {
    const { org } = await orgWithMember();
    const { key } = await createKey(org.id, org.owner.token);
    await pair.assertRevokedEverywhere(hostStatus(key), async () => {
      const deleted = await a.h.delete(`/orgs/${org.id}`, { token: org.owner.token });
      assert.equal(deleted.status, 200, deleted.text);
    }, 401);
  });

  test('a refresh replay on A ends the session: its access token is refused by both middlewares on A and B', async () => {
    const { member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(hostStatus(member.token), whoamiStatus(member.token)), async () => {
      const first = await a.h.post('/auth/token/refresh', { refresh_token: member.refreshToken });
      assert.equal(first.status, 200, first.text);
      const replay = await a.h.post('/auth/token/refresh', { refresh_token: member.refreshToken });
      assert.equal(replay.status, 401, replay.text);
    }, 401);
  });

  test('MFA enforced on a user (service API): grace enrollment binds the host middleware on A and B', async () => {
    const { member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(hostStatus(member.token), whoamiStatus(member.token)), () => a.h.identity.service.setMfaEnforced(member.userId, true), 403);
  });

  test('role deleted: the permission it gave ends on A at once and on B', async () => {
    const { org, member } = await orgWithMember(['member']);
    const role = await a.h.post(`/orgs/${org.id}/roles`, { name: 'Reporter', slug: `reporter-${Math.random().toString(36).slice(2, 8)}`, permission_keys: [HOST_PERMISSION] }, { token: org.owner.token });
    assert.equal(role.status, 201, role.text);
    const assigned = await a.h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', role.body.data.slug] }, { token: org.owner.token });
    assert.equal(assigned.status, 200, assigned.text);
    await pair.assertRevokedEverywhere(hostStatus(member.token), async () => {
      const deleted = await a.h.delete(`/orgs/${org.id}/roles/${role.body.data.id}`, { token: org.owner.token });
      assert.equal(deleted.status, 200, deleted.text);
    }, 403);
  });

  test('member suspended: authenticate() answers 403 for a token of that organization on A and B, though its session lives on in another', async () => {
    const { org, member } = await orgWithMember();
    // The session moves on to an organization of the user's own, so the suspension does not end it (CONTRACT 6).
    const other = await createOrg(a.h, { owner: member });
    assert.ok(other.id);
    await pair.assertRevokedEverywhere(whoamiStatus(member.token), async () => {
      const suspended = await a.h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
      assert.equal(suspended.status, 200, suspended.text);
    }, 403);
    assert.equal(await whoamiStatus(other.owner.token)(b), 200, 'the session scoped to the other organization lives on');
  });
});

describe(`races and lost notifications (${TEST_DB})`, { skip: TEST_DB !== 'pg' && 'LISTEN/NOTIFY and separate pools: PostgreSQL only' }, () => {
  // B reads the session, A's logout commits and B hears of it, then B keeps what it read:
  // what B read before the revocation must not be served after it.
  test('a session read on B before a logout committed on A, kept after B heard of it, is not served', async () => {
    const user = await a.h.signUp(uniqueEmail('stale-fill'));
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const { outer, inner } = await withRequestInTheWindow(
      a.h,
      { prototype: SessionRepository.prototype, method: 'findLiveWithUser', when: (id) => id === sessionId },
      async () => {
        const logout = await a.h.post('/auth/logout', {}, { token: user.accessToken });
        // Long enough for B to hear the notification before its read returns.
        await new Promise((resolve) => setTimeout(resolve, 300));
        return logout.status;
      },
      () => b.whoami(user.accessToken),
    );
    assert.equal(inner, 200, 'the logout on A');
    assert.equal(outer, 200, 'the request on B read the session before the logout');
    assert.equal(await b.whoami(user.accessToken), 401, 'on B, at once after its stale read');
  });

  test('the same on one instance: a read begun before the logout committed is not served after it', async () => {
    const user = await a.h.signUp(uniqueEmail('stale-fill-a'));
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const { outer, inner } = await withRequestInTheWindow(
      a.h,
      { prototype: SessionRepository.prototype, method: 'findLiveWithUser', when: (id) => id === sessionId },
      async () => (await a.h.post('/auth/logout', {}, { token: user.accessToken })).status,
      () => a.whoami(user.accessToken),
    );
    assert.equal(inner, 200);
    assert.equal(outer, 200);
    assert.equal(await a.whoami(user.accessToken), 401);
  });

  // The listening connections are cut while A revokes: the notification is lost. B must serve
  // nothing while deaf and forget what it held when it hears again.
  test('listening connections cut by the server: a revocation made meanwhile is in force on B, deaf and after it reconnects', async () => {
    const { org, member } = await orgWithMember();
    for (const on of [a, b, b]) assert.equal(await on.host(member.token), 200);
    const terminated = await a.h.knex.raw(`select pg_terminate_backend(pid) from pg_stat_activity where query ilike 'listen %' and pid <> pg_backend_pid()`);
    assert.ok(terminated.rows.length >= 2, 'both instances were listening');
    const removed = await a.h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
    assert.equal(removed.status, 200, removed.text);
    assert.equal(await a.host(member.token), 401, 'on A, at once');
    assert.equal(await pair.onOtherInstance(hostStatus(member.token), 401), 401, 'on B while it may be deaf');
    // Until both listen again (the first retry comes after 500 ms), then B is asked again.
    const started = performance.now();
    let listening = 0;
    while (performance.now() - started < 5_000) {
      listening = Number((await a.h.knex.raw(`select count(*)::int as n from pg_stat_activity where query ilike 'listen %'`)).rows[0].n);
      if (listening >= 2) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(listening >= 2, 'both instances listen again');
    for (let round = 0; round < 3; round += 1) assert.equal(await b.host(member.token), 401, 'on B after it reconnected');
  });

  // The listening connection stays up but a notification never arrives (a transaction-mode
  // pooler, a half-open connection): the expiry alone must end what B holds within 1 s.
  test('a notification lost on the way: B stops serving the revoked session, key and grant within 1 s of the revocation', async () => {
    const { org, member } = await orgWithMember();
    const { key } = await createKey(org.id, member.token);
    const cache = servicesOf(b.h.identity).context.accessCache;
    const apply = cache.apply;
    // What B hears from A is lost; nothing else reaches B's cache on PostgreSQL with a pool of its own.
    cache.apply = (_scopes: AccessScope[]) => undefined;
    try {
      const probe = both(hostStatus(member.token), whoamiStatus(member.token), hostStatus(key));
      for (let round = 0; round < 3; round += 1) assert.equal(await probe(b), 200, 'before the revocation');
      const revokedAt = performance.now();
      const removed = await a.h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
      assert.equal(removed.status, 200, removed.text);
      assert.equal(await probe(a), 401, 'on A, at once');
      const answer = await pair.onOtherInstance(probe, 401, 1_000 - (performance.now() - revokedAt));
      assert.equal(answer, 401, 'on B within 1 s, by the expiry alone');
    } finally {
      cache.apply = apply;
    }
  });
});

describe(`a refresh in flight at its session's idle end (${TEST_DB})`, { skip: TEST_DB !== 'pg' && 'an interleaving of two requests: PostgreSQL only' }, () => {
  // The refresh found the session live a moment before its idle end; the password reset came
  // just after that end and ended the user's sessions. The refresh's update must not bring
  // the session back: docs/multiple-instances.md, "no refresh outlives a revocation".
  test('a password reset that lands between a refresh\'s read and its update, just past the idle end, ends the session for good', async () => {
    const user = await a.h.signUp(uniqueEmail('idle-end'));
    const sessionId = decodeJwt(user.accessToken).sid as string;
    const sessions = () => a.h.knex(`${a.h.tablePrefix}sessions`).where({ id: sessionId }).first();
    a.h.clock.set(Number((await sessions()).expires_at) - 1_000);
    assert.equal((await a.h.post('/auth/password/forgot', { email: user.email })).status, 202);
    const resetToken = a.h.tokenFromMail(user.email, 'password_reset');
    const { outer: refreshed, inner: reset } = await withRequestInTheWindow(
      a.h,
      { prototype: SessionRepository.prototype, method: 'rotate', when: (id) => id === sessionId, at: 'before' },
      async () => {
        a.h.clock.advance(2);
        return (await a.h.post('/auth/password/reset', { token: resetToken, new_password: 'a completely new passphrase 9' })).status;
      },
      () => a.h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
    );
    assert.equal(reset, 200, 'the reset');
    if (refreshed.status === 200) {
      const next = await a.h.post('/auth/token/refresh', { refresh_token: refreshed.body.data.refresh_token });
      assert.equal(next.status, 401, 'the refresh token the racing refresh handed out is dead after the reset');
      assert.equal(await a.whoami(refreshed.body.data.access_token), 401, 'its access token too');
    } else {
      assert.equal(refreshed.status, 401, refreshed.text);
    }
    assert.notEqual((await sessions()).revoked_at, null, 'the session is revoked');
  });
});
