import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Harness, STRONG_PASSWORD, TEST_DB, decodeJwt, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { CROSS_INSTANCE_DEADLINE_MS, HOST_PERMISSION, type Instance, InstancePair, type Probe } from '../helpers/instance-pair.js';
import { assertError } from '../helpers/account.js';
import { addMember, createOrg, roleIdOf, superadmin, switchOrg, type CreatedOrg } from '../helpers/orgs.js';
import { RoleRepository } from '../../src/store/organization-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

/*
 * Threat (docs/multiple-instances.md): sessions and authority are cached in process, so a
 * revocation could go on being honoured from the cache. Every revocation must be in force
 * on the instance that made it at once, and on another instance of the same database within
 * 1 s. Each test first makes both instances cache the caller's session and authority (a
 * request that succeeds), then revokes on instance A and asks again on A (at once) and on B.
 * B is a second router on the same database (helpers/instance-pair.ts).
 */

let pair: InstancePair;
let a: Instance;
let b: Instance;
before(async () => {
  pair = await InstancePair.start();
  ({ a, b } = pair);
});
after(() => pair.close());

/** Refreshes with the newest token of a session's chain, on whichever instance it is asked. */
function refreshStatus(refreshToken: string): Probe {
  let current = refreshToken;
  return async (on) => {
    const refreshed = await on.h.post('/auth/token/refresh', { refresh_token: current });
    if (refreshed.status === 200) current = refreshed.body.data.refresh_token as string;
    return refreshed.status;
  };
}
const sessionsStatus = (token: string): Probe => async (on) => (await on.h.get('/auth/sessions', { token })).status;
const hostStatus = (token: string): Probe => (on) => on.host(token);
const membersStatus = (organizationId: string, token: string): Probe => async (on) => (await on.h.get(`/orgs/${organizationId}/members`, { token })).status;
const both = (...probes: Probe[]): Probe => async (on) => {
  const statuses = new Set(await Promise.all(probes.map((probe) => probe(on))));
  return statuses.size === 1 ? [...statuses][0]! : -1;
};

async function orgWithMember(roleSlugs: string[] = ['admin']): Promise<{ org: CreatedOrg; member: SignedUpUser & { token: string } }> {
  const org = await createOrg(a.h);
  const member = await addMember(a.h, org, org.owner.token, roleSlugs);
  return { org, member };
}

async function secondSession(user: SignedUpUser): Promise<string> {
  const login = await a.h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  return login.body.data.access_token as string;
}

describe(`revocations reach the access cache (${TEST_DB})`, () => {
  test('logout', async () => {
    const { org, member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(sessionsStatus(member.token), hostStatus(member.token), refreshStatus(member.refreshToken)), async () => {
      assert.equal((await a.h.post('/auth/logout', {}, { token: member.token })).status, 200);
    }, 401);
    assert.ok(org.id);
  });

  test('logout-all', async () => {
    const { member } = await orgWithMember();
    const other = await switchOrg(a.h, await secondSession(member), decodeJwt(member.token).org);
    await pair.assertRevokedEverywhere(both(sessionsStatus(other), hostStatus(other)), async () => {
      assert.equal((await a.h.post('/auth/logout-all', {}, { token: member.token })).status, 200);
    }, 401);
  });

  test('session delete', async () => {
    const { member } = await orgWithMember();
    const other = await switchOrg(a.h, await secondSession(member), decodeJwt(member.token).org);
    await pair.assertRevokedEverywhere(both(sessionsStatus(other), hostStatus(other)), async () => {
      assert.equal((await a.h.delete(`/auth/sessions/${decodeJwt(other).sid}`, { token: member.token })).status, 200);
    }, 401);
  });

  test('password change', async () => {
    const { member } = await orgWithMember();
    const other = await switchOrg(a.h, await secondSession(member), decodeJwt(member.token).org);
    await pair.assertRevokedEverywhere(both(sessionsStatus(other), hostStatus(other)), async () => {
      const changed = await a.h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'a completely new passphrase 9' }, { token: member.token });
      assert.equal(changed.status, 200, changed.text);
    }, 401);
  });

  test('password reset', async () => {
    const { member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(sessionsStatus(member.token), hostStatus(member.token)), async () => {
      assert.equal((await a.h.post('/auth/password/forgot', { email: member.email })).status, 202);
      const reset = await a.h.post('/auth/password/reset', { token: a.h.tokenFromMail(member.email, 'password_reset'), new_password: 'a completely new passphrase 9' });
      assert.equal(reset.status, 200, reset.text);
    }, 401);
  });

  test('user disable', async () => {
    const { member } = await orgWithMember();
    const root = await superadmin(a.h);
    await pair.assertRevokedEverywhere(both(sessionsStatus(member.token), hostStatus(member.token), refreshStatus(member.refreshToken)), async () => {
      const disabled = await a.h.post(`/users/${member.userId}/disable`, undefined, { token: root.accessToken });
      assert.equal(disabled.status, 200, disabled.text);
    }, 401);
  });

  test('user delete', async () => {
    const { member } = await orgWithMember();
    const other = await switchOrg(a.h, await secondSession(member), decodeJwt(member.token).org);
    await pair.assertRevokedEverywhere(both(sessionsStatus(other), hostStatus(other)), async () => {
      const deleted = await a.h.delete(`/users/${member.userId}`, { token: member.token });
      assert.equal(deleted.status, 200, deleted.text);
    }, 401);
  });

  test('lockout: the host middleware refuses and /auth/me reads locked', async () => {
    const { member } = await orgWithMember();
    const meStatus: Probe = async (on) => {
      const me = await on.h.get('/auth/me', { token: member.token });
      return me.body.data.status === 'locked' ? 423 : me.status;
    };
    await pair.assertRevokedEverywhere(both(hostStatus(member.token), async (on) => ((await meStatus(on)) === 423 ? 401 : 200)), async () => {
      for (let attempt = 1; attempt <= 5; attempt += 1) {
        assert.equal((await a.h.post('/auth/login', { email: member.email, password: `wrong password ${attempt}` })).status, 401);
      }
    }, 401);
  });

  test('member suspend', async () => {
    const { org, member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(membersStatus(org.id, member.token), hostStatus(member.token)), async () => {
      const suspended = await a.h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
      assert.equal(suspended.status, 200, suspended.text);
      // Suspension also ends the sessions scoped to the organization: 401, not 403.
    }, 401);
  });

  test('member remove', async () => {
    const { org, member } = await orgWithMember();
    await pair.assertRevokedEverywhere(both(membersStatus(org.id, member.token), hostStatus(member.token)), async () => {
      const removed = await a.h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
      assert.equal(removed.status, 200, removed.text);
    }, 401);
  });

  test('role change', async () => {
    const { org, member } = await orgWithMember(['admin']);
    // The member template holds no host key: demotion ends reports.read.
    await pair.assertRevokedEverywhere(hostStatus(member.token), async () => {
      const changed = await a.h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
      assert.equal(changed.status, 200, changed.text);
    }, 403);
  });

  // Not a revocation, but the same cache (issue 28): the first member page is kept there too.
  test('a member page cached on both instances shows a role change', async () => {
    const { org, member } = await orgWithMember(['admin']);
    const rolesOnPage = async (on: Instance) => {
      const page = await on.h.get(`/orgs/${org.id}/members`, { token: org.owner.token });
      assert.equal(page.status, 200, page.text);
      return (page.body.data as Array<{ user_id: string; roles: string[] }>).find((entry) => entry.user_id === member.userId)?.roles;
    };
    for (const on of [a, b, a, b]) assert.deepEqual(await rolesOnPage(on), ['admin']);
    const changed = await a.h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(changed.status, 200, changed.text);
    assert.deepEqual(await rolesOnPage(a), ['member'], 'on the instance that changed it, at once');
    assert.deepEqual(await pair.onOtherInstance(rolesOnPage, ['member']), ['member'], `on another instance within ${CROSS_INSTANCE_DEADLINE_MS} ms`);
  });

  test('role edit', async () => {
    const { org, member } = await orgWithMember(['admin']);
    const adminRoleId = await roleIdOf(a.h, org.id, org.owner.token, 'admin');
    const role = await a.h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
    const keys = (role.body.data as any[]).find((entry) => entry.id === adminRoleId).permission_keys as string[];
    await pair.assertRevokedEverywhere(hostStatus(member.token), async () => {
      const edited = await a.h.patch(`/orgs/${org.id}/roles/${adminRoleId}`, { permission_keys: keys.filter((key) => key !== HOST_PERMISSION) }, { token: org.owner.token });
      assert.equal(edited.status, 200, edited.text);
    }, 403);
  });

  test('organization delete', async () => {
    const { org, member } = await orgWithMember();
    await pair.assertRevokedEverywhere(hostStatus(member.token), async () => {
      const deleted = await a.h.delete(`/orgs/${org.id}`, { token: org.owner.token });
      assert.equal(deleted.status, 200, deleted.text);
    }, 401);
  });

  test('organization require_mfa', async () => {
    const { org, member } = await orgWithMember();
    // A member with no confirmed factor is under grace enrollment once the organization requires MFA.
    await pair.assertRevokedEverywhere(sessionsStatus(member.token), async () => {
      const updated = await a.h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
      assert.equal(updated.status, 200, updated.text);
    }, 403);
  });

  test('superadmin revoke', async () => {
    const root = await superadmin(a.h);
    const org = await createOrg(a.h);
    const probe: Probe = async (on) => (await on.h.get(`/orgs/${org.id}/members`, { token: root.accessToken })).status;
    await pair.assertRevokedEverywhere(probe, () => a.h.identity.service.revokeSuperadmin(root.userId), 403);
  });

  // A login's token takes its authority through the access cache (SessionService.signOpened),
  // as a refresh's does: a login after the revocation must not be signed with the cached grant.
  test('superadmin revoke: a login afterwards is signed without it', async () => {
    const root = await superadmin(a.h);
    const signedWithGrant: Probe = async (on) => {
      const login = await on.h.post('/auth/login', { email: root.email, password: root.password });
      assert.equal(login.status, 200, login.text);
      return (decodeJwt(login.body.data.access_token).scope as string[]).length > 0 ? 1 : 0;
    };
    await pair.assertRevokedEverywhere(signedWithGrant, () => a.h.identity.service.revokeSuperadmin(root.userId), 0, 1);
    // And granted again: the next login carries it at once.
    await a.h.identity.service.grantSuperadmin(root.userId);
    assert.equal(await signedWithGrant(a), 1);
    assert.equal(await pair.onOtherInstance(signedWithGrant, 1), 1);
  });

  // On PostgreSQL the password login reads the grant in its account statement, before the hash
  // (UserRepository.findByEmailReservingAttempt), and keeps it for the token signed after
  // commit. A revocation that commits in between must still win, on the instance that made it.
  test('superadmin revoke while a login compares its password: the token is signed without it', async () => {
    const root = await superadmin(a.h);
    const read = UserRepository.prototype.findByEmailReservingAttempt;
    let revoked = false;
    UserRepository.prototype.findByEmailReservingAttempt = async function (this: UserRepository, ...args: Parameters<typeof read>) {
      const found = await read.apply(this, args);
      if (!revoked && found?.user.id === root.userId) {
        revoked = true;
        if (TEST_DB === 'pg') assert.equal(found.read?.superadmin, true, 'the statement read the grant');
        await a.h.identity.service.revokeSuperadmin(root.userId);
      }
      return found;
    };
    try {
      const login = await a.h.post('/auth/login', { email: root.email, password: root.password });
      assert.equal(login.status, 200, login.text);
      assert.ok(revoked);
      assert.deepEqual(decodeJwt(login.body.data.access_token).scope, []);
      assert.deepEqual(decodeJwt(login.body.data.access_token).roles, []);
    } finally {
      UserRepository.prototype.findByEmailReservingAttempt = read;
    }
  });

  test('a password login on PostgreSQL signs its token with the grant its account statement read, and reads it no more', async () => {
    const root = await superadmin(a.h);
    const grantRead = RoleRepository.prototype.isSuperadmin;
    let grantReads = 0;
    RoleRepository.prototype.isSuperadmin = function (this: RoleRepository, userId: string) {
      if (userId === root.userId) grantReads += 1;
      return grantRead.call(this, userId);
    };
    try {
      const login = await a.h.post('/auth/login', { email: root.email, password: root.password });
      assert.equal(login.status, 200, login.text);
      assert.ok((decodeJwt(login.body.data.access_token).roles as string[]).includes('superadmin'));
      // SQLite reads the account alone (its statements cost no round trip), and the grant after commit.
      assert.equal(grantReads, TEST_DB === 'pg' ? 0 : 1);
    } finally {
      RoleRepository.prototype.isSuperadmin = grantRead;
    }
  });
});

test('the cache serves: a cached session answers without reading its row', async () => {
  const user = await a.h.signUp(uniqueEmail('cached'));
  assert.equal((await a.h.get('/auth/sessions', { token: user.accessToken })).status, 200);
  // Revoked behind the router's back (no event, no notification): the cache still holds it,
  // which shows it is in use. This is not a supported way to revoke; the expiry bounds it.
  await a.h.knex(`${a.h.tablePrefix}sessions`).where({ id: decodeJwt(user.accessToken).sid }).update({ revoked_at: a.h.clock.now() });
  assert.equal((await a.h.get('/auth/sessions', { token: user.accessToken })).status, 200);
});

test('a refresh never moves a session revoked behind the cache', async () => {
  const user = await a.h.signUp(uniqueEmail('refresh-cached'));
  assert.equal((await a.h.get('/auth/sessions', { token: user.accessToken })).status, 200);
  // As above: the cache still holds the session, and the conditional update refuses it.
  await a.h.knex(`${a.h.tablePrefix}sessions`).where({ id: decodeJwt(user.accessToken).sid }).update({ revoked_at: a.h.clock.now() });
  assert.equal((await a.h.get('/auth/sessions', { token: user.accessToken })).status, 200);
  assertError(await a.h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
});

// A refresh reads the session through the access cache, and refreshes do not invalidate it:
// B keeps generation 0 while A moves the session on.
test('B, keeping a session at an older generation, refreshes the newer token and refuses the older one as a replay', async () => {
  const user = await a.h.signUp(uniqueEmail('refresh-generations'));
  const sessionId = decodeJwt(user.accessToken).sid as string;
  assert.equal((await b.h.get('/auth/sessions', { token: user.accessToken })).status, 200);
  const onA = await a.h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(onA.status, 200, onA.text);
  const onB = await b.h.post('/auth/token/refresh', { refresh_token: onA.body.data.refresh_token });
  assert.equal(onB.status, 200, onB.text);
  assertError(await b.h.post('/auth/token/refresh', { refresh_token: onA.body.data.refresh_token }), 401, 'invalid_grant', 'the older token again, on B');
  const reuse = (h: Harness) => h.eventsOfType('auth.refresh_reuse_detected').filter((event) => (event.data as { session_id?: string }).session_id === sessionId);
  assert.equal(reuse(a.h).length + reuse(b.h).length, 1, 'auth.refresh_reuse_detected, once');
  const newest = await a.h.post('/auth/token/refresh', { refresh_token: onB.body.data.refresh_token });
  assert.equal(newest.status, 401, 'the family is revoked: the newest token dies too');
});
