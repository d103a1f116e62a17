/*
 * The account lifecycle and user administration, attacked by theme (docs/security.md "Deleted
 * users", spec 4.4, CONTRACT 5 and 9.8): what an account deletion leaves behind, what attaches to
 * an address registered again, what the host's `identity.service` methods do to deleted and
 * disabled accounts, mass assignment through PATCH /users/{id}, and races between administrators.
 * Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/accounts/lifecycle-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, type Harness, harnessesClosedAfterFile, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { HOST_PERMISSION, InstancePair } from '../helpers/instance-pair.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { newSubject, socialRoundTrip, type TestOpenIdProvider, withSocialHarness } from '../helpers/oidc.js';
import { addMember, createOrg, type OrgMember } from '../helpers/orgs.js';
import { addressAt, ssoLogin, ssoOrg, StubDns, withSsoHarness } from '../helpers/sso.js';
import { signUpSuperadmin, tableOf } from '../helpers/users.js';
import { InviteRepository } from '../../src/store/organization-repository.js';
import { SessionRepository } from '../../src/store/session-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

const PG_ONLY = { skip: TEST_DB !== 'pg' && 'SQLite serialises writers; the race only means something on PostgreSQL' };
const startHarness = harnessesClosedAfterFile();

/** Every row of `table` naming `userId`. */
async function rowsOf(h: Harness, table: string, userId: string): Promise<Array<Record<string, unknown>>> {
  return h.knex(tableOf(h, table)).where({ user_id: userId });
}

describe('an account deletion leaves no single sign-on identity behind', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  const dns = new StubDns();
  withSsoHarness(dns, (started) => ({ op, h } = started));

  // Threat: the IdP link of a deleted account kept pointing at its tombstone. The row kept the
  // address in clear (the tombstone is meant to hold nothing that identifies the person), and the
  // (connection, subject) pair stayed taken: the person's next sign-in through the IdP, or that of
  // the account registered again at the address, resolved to the tombstone and was refused
  // (account_disabled) for good, each refusal a new `user.login_failed` with an IP under the
  // deleted account's id. CONTRACT 9.8: deleting a user deletes their links; 12 reuses 9.
  test('the identity goes with the account; the same IdP subject signs in afterwards as a new account', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'leaver');
    const subject = newSubject();
    const first = await ssoLogin(h, op, { sub: subject, email, email_verified: true }, { email });
    assert.equal(first.exchanged!.status, 200, first.exchanged!.text);
    const userId = first.exchanged!.body.data.user.id as string;
    assert.equal((await rowsOf(h, 'ssoIdentities', userId)).length, 1);

    const deleted = await h.delete(`/users/${userId}`, { token: first.exchanged!.body.data.access_token });
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal((await rowsOf(h, 'ssoIdentities', userId)).length, 0, 'no identity is left on the tombstone');
    const withAddress = await h.knex(tableOf(h, 'ssoIdentities')).where({ email });
    assert.deepEqual(withAddress, [], 'no row keeps the address');
    const eventsOfTombstone = h.events.filter((event) => event.user_id === userId).length;

    // The same person comes back through the IdP: a new account, a new membership.
    const again = await ssoLogin(h, op, { sub: subject, email, email_verified: true }, { organization_slug: org.slug });
    assert.ok(!again.trip.error, `social_error=${again.trip.error}`);
    assert.equal(again.exchanged!.status, 200, again.exchanged!.text);
    assert.equal(again.exchanged!.body.data.is_new_user, true);
    assert.notEqual(again.exchanged!.body.data.user.id, userId);
    assert.equal(h.events.filter((event) => event.user_id === userId).length, eventsOfTombstone, 'nothing more is recorded under the deleted id');
  });
});

describe('an account deletion leaves no passwordless challenge behind', () => {
  // Threat: the passwordless challenges of a deleted account outlived it, each holding the
  // tombstone's id beside a keyed hash of the address (and the code's and link's hashes). The
  // tombstone's own address is a hash of its id, never of the address, so that nothing ties it to
  // the person; these rows did, for anyone holding the secret (docs/security.md: pending tokens
  // are deleted with the account).
  test('every challenge of the account is deleted with it; a code mailed before opens nothing', async () => {
    const h = await startHarness({ config: { passwordless: {} } });
    const user = await h.signUp();
    const started = await h.post('/auth/passwordless/start', { email: user.email });
    assert.equal(started.status, 202, started.text);
    assert.equal((await rowsOf(h, 'passwordlessChallenges', user.userId)).length, 1);

    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);
    assert.equal((await rowsOf(h, 'passwordlessChallenges', user.userId)).length, 0);
    const { code } = h.lastMail(user.email, 'login_code')!.context as Record<string, string>;
    const refused = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code });
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.body.error, 'invalid_code');
  });
});

describe("the host's identity.service on deleted and disabled accounts", () => {
  // Threat: the host's code changing a tombstone. PATCH /users/{id} answers 409 for it (its
  // `mfa_enforced` included), and grantSuperadmin 404; setMfaEnforced wrote the flag and recorded
  // `user.mfa_enforcement_changed` about the deleted account, as if it were still one.
  test('setMfaEnforced on a tombstone changes nothing and answers as grantSuperadmin does', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);
    const before = await h.knex(tableOf(h, 'users')).where({ id: user.userId }).first();
    const service = h.identity.service;

    await assert.rejects(service.grantSuperadmin(user.userId), (error: any) => error.code === 'not_found');
    await assert.rejects(service.setMfaEnforced(user.userId, true), (error: any) => error.code === 'not_found');
    assert.deepEqual(await h.knex(tableOf(h, 'users')).where({ id: user.userId }).first(), before);
    assert.equal(h.eventsOfType('user.mfa_enforcement_changed').filter((event) => event.user_id === user.userId).length, 0);
    // Revoking what a tombstone no longer holds is a no-op, as for anyone without it.
    await service.revokeSuperadmin(user.userId);
  });

  test('on a disabled account they apply, and none of them brings it back: no session, login 403', async () => {
    const h = await startHarness();
    const admin = await signUpSuperadmin(h);
    const user = await h.signUp();
    assert.equal((await h.post(`/users/${user.userId}/disable`, {}, { token: admin.accessToken })).status, 200);
    await h.identity.service.setMfaEnforced(user.userId, true);
    await h.identity.service.grantSuperadmin(user.userId);
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 401);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 403, login.text);
    assert.equal(login.body.error, 'account_disabled');
    await h.identity.service.revokeSuperadmin(user.userId);
  });
});

describe('PATCH /users/{id}: only display_name (and, for users.manage, mfa_enforced) is writable', () => {
  // Threat: mass assignment. A user sends the columns of their own record (status, email,
  // email_verified, superadmin, password_hash, deleted_at...) beside display_name.
  test('every other field is dropped, for oneself and for a superadmin alike', async () => {
    const h = await startHarness();
    const admin = await signUpSuperadmin(h);
    const user = await h.signUp(undefined, undefined, { verify: false });
    const before = await h.knex(tableOf(h, 'users')).where({ id: user.userId }).first();
    const hostile = {
      display_name: 'Mallory',
      email: uniqueEmail('taken-over'),
      email_verified: true,
      status: 'active',
      superadmin: true,
      roles: ['superadmin'],
      password_hash: '$2b$04$abcdefghijklmnopqrstuuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY',
      deleted_at: null,
      locked_until: null,
      failed_login_count: 0,
      id: admin.userId,
      __proto__: { mfa_enforced: false },
      constructor: { prototype: { superadmin: true } },
    };
    for (const token of [user.accessToken, admin.accessToken]) {
      const patched = await h.patch(`/users/${user.userId}`, hostile, { token });
      assert.equal(patched.status, 200, patched.text);
      assert.deepEqual(Object.keys(patched.body.data).sort(), ['display_name', 'email', 'id', 'status']);
      assert.equal(patched.body.data.id, user.userId);
      assert.equal(patched.body.data.email, user.email);
    }
    const after = await h.knex(tableOf(h, 'users')).where({ id: user.userId }).first();
    assert.deepEqual({ ...after, display_name: before.display_name, updated_at: before.updated_at }, before);
    assert.equal(after.display_name, 'Mallory');
    assert.equal((await h.knex(tableOf(h, 'globalRoleGrants')).where({ user_id: user.userId })).length, 0);
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.email_verified, false);
    assert.deepEqual(me.body.data.roles, []);
    assert.equal(decodeJwt(user.accessToken).sub, user.userId);
  });
});

describe('races between an account deletion and what names the account (PostgreSQL)', () => {
  // Threat: an invitation made while its invitee deletes the account. The invitation read the
  // account, the deletion committed (it found no invitation and no `invited` row to end), then the
  // invitation wrote an `invited` membership for the tombstone: a deleted account listed as invited
  // in the organization for good (an accept by the address registered again makes a row of its
  // own, and a revoke finds the new account, not the tombstone). In series neither order leaves one.
  test('an invitation made while its invitee deletes the account leaves no membership on the tombstone', PG_ONLY, async () => {
    const h = await startHarness();
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('invitee'));
    const { outer: invited, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: InviteRepository.prototype, method: 'findPendingForEmail', when: (_organizationId, email) => email === invitee.email },
      () => h.delete(`/users/${invitee.userId}`, { token: invitee.accessToken }),
      () => h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token }),
    );
    assert.equal(deleted?.status, 200, deleted?.text);
    assert.equal(invited.status, 201, invited.text);
    assert.deepEqual(await rowsOf(h, 'memberships', invitee.userId), [], 'the tombstone holds no membership');
    const members = await h.get(`/orgs/${org.id}/members?limit=100`, { token: org.owner.token });
    assert.equal(members.status, 200, members.text);
    assert.deepEqual((members.body.data as Array<{ user_id: string }>).map((member) => member.user_id), [org.owner.userId]);
    // In series: the invitation first (revoked with the account) or the deletion first (an
    // invitation to an address with no account, accepted by whoever registers it next).
    const invite = await h.knex(tableOf(h, 'invites')).where({ id: invited.body.data.id }).first();
    if (invite.status === 'pending') {
      assert.equal(invite.email, invitee.email);
      const again = await h.signUp(invitee.email);
      const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: again.accessToken });
      assert.equal(accepted.status, 200, accepted.text);
      assert.deepEqual(await rowsOf(h, 'memberships', invitee.userId), []);
    } else {
      assert.equal(invite.status, 'revoked');
      assert.match(invite.email, /@deleted\.invalid$/);
    }
  });

  // Threat: two superadmins disabling (or deleting) each other at once, each admitted while the
  // other was still active. Each locked its target's account, then its own session (the recheck),
  // then wanted the target's sessions, which the other held: a deadlock every time, paid with
  // PostgreSQL's deadlock_timeout, and a 500 when the rerun met the other again (three in a row).
  // Both accounts are now locked in one order before any session: the second to commit finds its
  // own session ended (401), whatever the order, and nobody is left disabled by a request that
  // was itself refused.
  for (const [first, second] of [['disable', 'disable'], ['delete', 'delete'], ['disable', 'delete']] as const) {
    test(`two superadmins, one ${first}s the other as the other ${second}s them: exactly one succeeds, no deadlock`, PG_ONLY, async () => {
      const h = await startHarness();
      const act = (kind: 'disable' | 'delete', targetId: string, token: string) =>
        kind === 'disable' ? h.post(`/users/${targetId}/disable`, {}, { token }) : h.delete(`/users/${targetId}`, { token });
      const a = await signUpSuperadmin(h);
      const b = await signUpSuperadmin(h);
      // The inner request starts once the outer holds its target's account and its own session.
      const { answer, deadlocks } = await countingDeadlocks(() =>
        withRequestInTheWindow(
          h,
          { prototype: SessionRepository.prototype, method: 'revokeAllForUser', at: 'before', when: (userId) => userId === b.userId },
          () => act(second, a.userId, b.accessToken),
          () => act(first, b.userId, a.accessToken),
        ),
      );
      const { outer, inner } = answer;
      const errors = JSON.stringify(h.logs.filter((line) => line.level === 'error'));
      assert.deepEqual([outer.status, inner?.status].sort(), [200, 401], `${outer.text} | ${inner?.text} ${errors}`);
      assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
      const rows = await h.knex(tableOf(h, 'users')).whereIn('id', [a.userId, b.userId]).select('id', 'status', 'deleted_at');
      const changed = rows.filter((row) => row.status !== 'active');
      assert.equal(changed.length, 1, JSON.stringify(rows));
      assert.equal(changed[0].id, outer.status === 200 ? b.userId : a.userId);
    });
  }
});

describe('a deleted or disabled owner\'s API key on another instance', () => {
  // Threat: an API key outliving its owner's deletion or disable on an instance that had it
  // cached (CONTRACT 7 and 10: every instance within 1 s).
  let pair: InstancePair;
  before(async () => {
    pair = await InstancePair.start();
  });
  after(() => pair.close());

  async function keyOfMember(): Promise<{ member: OrgMember; key: string }> {
    const h = pair.a.h;
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['admin']);
    const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'script', permission_keys: [HOST_PERMISSION] }, { token: member.token });
    assert.equal(created.status, 201, created.text);
    return { member, key: created.body.data.key as string };
  }

  test('deleted: the key stops on A at once and on B', async () => {
    const { member, key } = await keyOfMember();
    await pair.assertRevokedEverywhere((on) => on.host(key), async () => {
      assert.equal((await pair.a.h.delete(`/users/${member.userId}`, { token: member.token })).status, 200);
    }, 401);
  });

  test('disabled: the key stops on A at once and on B', async () => {
    const { member, key } = await keyOfMember();
    const root = await signUpSuperadmin(pair.a.h);
    await pair.assertRevokedEverywhere((on) => on.host(key), async () => {
      assert.equal((await pair.a.h.post(`/users/${member.userId}/disable`, {}, { token: root.accessToken })).status, 200);
    }, 401);
  });
});

describe('a registration racing a social sign-up of the same address (PostgreSQL)', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  withSocialHarness((started) => ({ op, h } = started));

  // Threat: a pre-hijacker registers the victim's address with a password of theirs while the
  // victim signs up through a provider: two accounts for one address, or the provider's link
  // made on the account that holds the squatter's password. One account, and whichever comes
  // first, the provider's link and a password the owner did not set never sit on it together.
  test('one account; the squatter\'s password and the provider link are never on it together', PG_ONLY, async () => {
    const email = uniqueEmail('raced');
    const subject = newSubject();
    const trip = await socialRoundTrip(h, op, { sub: subject, email, email_verified: true });
    assert.ok(trip.code, `social_error=${trip.error}`);
    const { outer: exchanged, inner: registered } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'findByEmail', when: (address) => address === email },
      () => h.post('/auth/register', { email, password: 'a squatter password of theirs' }),
      () => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }),
    );
    assert.equal(registered?.status, 202, registered?.text);
    const accounts = await h.knex(tableOf(h, 'users')).where({ email });
    assert.equal(accounts.length, 1);
    const links = await h.knex(tableOf(h, 'socialIdentities')).where({ subject });
    if (accounts[0].password_hash) {
      // The registration came first: the provider is refused, nothing is linked.
      assert.deepEqual(links, []);
      assert.equal(exchanged.status, 409, exchanged.text);
      assert.equal(exchanged.body.error, 'account_link_required');
    } else {
      assert.equal(exchanged.status, 200, exchanged.text);
      assert.equal(links.length, 1);
      assert.equal(h.lastMail(email, 'verify_email'), undefined, 'no verification mail for an address that already had an account');
    }
  });
});
