import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PasswordHasher } from '../../src/crypto/password-hasher.js';
import { type Harness, type SignedUpUser, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { newSubject, socialLogin, socialRoundTrip, startLink, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';
import { insertPendingInvite, tableOf } from '../helpers/users.js';
import { assertError } from '../helpers/account.js';
import { superadmin } from '../helpers/orgs.js';

/*
 * Threat: the right to erasure (docs/security.md "Deleted users"). An attacker who later reads
 * the database (a backup, a replica) or the host's event stream learns what a deleted user left
 * behind; or someone who registers the freed address afterwards inherits something of the old
 * account. Every row is read straight from the database.
 */

let op: TestOpenIdProvider;
let h: Harness;
let admin: SignedUpUser;
before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSocialHarness(op);
  admin = await superadmin(h);
});
after(async () => {
  await h.close();
  await op.close();
});

const USER_AGENT = 'DeletionResidueBrowser/1.0 (residue-marker)';

/** Every row of every table of the router, as JSON text, that contains `needle`. */
async function rowsHolding(needle: string): Promise<string[]> {
  const tables = [
    'users', 'sessions', 'refreshTokens', 'oneTimeTokens', 'auditEvents', 'mfaFactors', 'otpChallenges', 'mfaTickets', 'recoveryCodes',
    'rateEvents', 'organizations', 'roles', 'memberships', 'memberRoles', 'globalRoleGrants', 'invites', 'socialIdentities', 'socialFlows',
    'rateLimitCounters', 'webauthnChallenges', 'apiKeys', 'webhooks', 'eventDeliveries', 'orgDomains', 'ssoConnections', 'ssoIdentities',
    'passwordlessChallenges',
  ];
  const found: string[] = [];
  for (const table of tables) {
    for (const row of await h.knex(tableOf(h, table)).select('*')) {
      const text = JSON.stringify(row);
      if (text.toLowerCase().includes(needle.toLowerCase())) found.push(`${table}: ${text}`);
    }
  }
  return found;
}

/** Sends `request`, and runs `change` once, right after `password` has been compared with the account's and before anything is written. */
async function whileComparing<T>(user: SignedUpUser, password: string, change: () => Promise<void>, request: () => Promise<T>): Promise<T> {
  const verify = PasswordHasher.prototype.verify;
  let changed = false;
  PasswordHasher.prototype.verify = async function (this: PasswordHasher, ...args: Parameters<typeof verify>) {
    const right = await verify.apply(this, args);
    if (!changed && args[0] === password) {
      changed = true;
      assert.equal(right, password === user.password, 'the comparison was the one expected');
      await change();
    }
    return right;
  };
  try {
    const answer = await request();
    assert.ok(changed, 'the change ran during the comparison');
    return answer;
  } finally {
    PasswordHasher.prototype.verify = verify;
  }
}

describe(`what a deleted user leaves behind, on ${TEST_DB}`, () => {
  test('no row of any table holds the deleted user’s address, name, factor destination or user agent', async () => {
    const user = await h.signUp();
    const name = `Residue Person ${newSubject()}`;
    assert.equal((await h.patch(`/users/${user.userId}`, { display_name: name }, { token: user.accessToken })).status, 200);
    const signedIn = await h.post('/auth/login', { email: user.email, password: user.password }, { headers: { 'user-agent': USER_AGENT } });
    assert.equal(signedIn.status, 200, signedIn.text);
    assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    // A social link whose provider account has its own address.
    const providerEmail = uniqueEmail('provider');
    const linked = await socialRoundTrip(h, op, { sub: newSubject(), email: providerEmail, email_verified: true, name }, startLink(h, user.accessToken));
    assert.equal((await h.post('/auth/social/exchange', { code: linked.code, handoff_verifier: linked.handoff.verifier }, { token: user.accessToken })).status, 200);
    // An organization the user was invited to and joined.
    const org = await h.post('/orgs', { name: `Residue org ${newSubject()}` }, { token: admin.accessToken });
    assert.equal(org.status, 201, org.text);
    await insertPendingInvite(h, org.body.data.id, user.email);
    assert.ok((await rowsHolding(user.email)).length > 0);
    assert.ok((await rowsHolding(USER_AGENT)).length > 0);

    const deleted = await h.delete(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(deleted.status, 200, deleted.text);

    assert.deepEqual(await rowsHolding(user.email), [], 'the address');
    assert.deepEqual(await rowsHolding(providerEmail), [], 'the provider’s address');
    assert.deepEqual(await rowsHolding(name), [], 'the display name');
    assert.deepEqual(await rowsHolding(USER_AGENT), [], 'the user agent');
  });

  test('a link flow under way when the account is deleted: its provider claims stay sealed (and pruned after a day), its exchange links nothing', async () => {
    const user = await h.signUp();
    const pendingEmail = uniqueEmail('pending');
    // The callback has sealed the provider's claims (subject, e-mail, name) on the flow; the exchange has not run yet.
    const trip = await socialRoundTrip(h, op, { sub: newSubject(), email: pendingEmail, email_verified: true, name: 'Pending Link' }, startLink(h, user.accessToken));
    assert.ok(trip.code, trip.error ?? trip.response.text);

    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);

    assert.deepEqual(await rowsHolding(pendingEmail), [], 'the provider’s address is nowhere in plain text');
    assert.deepEqual(await rowsHolding('Pending Link'), []);
    const exchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }, { token: user.accessToken });
    assertError(exchanged, 401, 'session_ended');
    assert.equal(await h.knex(tableOf(h, 'socialIdentities')).where({ user_id: user.userId }).first(), undefined, 'nothing linked to the tombstone');
  });

  for (const [label, passwordOf] of [
    ['right', (user: SignedUpUser) => user.password],
    ['wrong', () => 'not the password at all 123'],
  ] as const) {
    test(`a sign-in whose ${label} password was compared before the deletion leaves no session, and no IP on the tombstone’s audit rows or events`, async () => {
      const user = await h.signUp();
      const password = passwordOf(user);
      const login = await whileComparing(
        user,
        password,
        async () => {
          const deleted = await h.delete(`/users/${user.userId}`, { token: user.accessToken });
          assert.equal(deleted.status, 200, deleted.text);
        },
        () => h.post('/auth/login', { email: user.email, password }, { headers: { 'user-agent': USER_AGENT } }),
      );
      assert.notEqual(login.status, 200, login.text);
      const live = await h.knex(tableOf(h, 'sessions')).where({ user_id: user.userId }).whereNull('revoked_at');
      assert.deepEqual(live, [], 'no session for the tombstone');
      // The refused sign-in is recorded (a failed login about the account, with no actor): like
      // every such event of the account, it says not where it came from.
      const failures = await h.knex(tableOf(h, 'auditEvents')).where({ user_id: user.userId, type: 'user.login_failed' });
      assert.ok(failures.length >= 1, 'the refused sign-in is recorded');
      const withIp = await h.knex(tableOf(h, 'auditEvents')).where({ user_id: user.userId }).whereNull('actor_id').whereNotNull('ip');
      assert.deepEqual(withIp, [], 'no audit row about the tombstone keeps an IP');
      const events = h.eventsOfType('user.login_failed').filter((event) => event.user_id === user.userId);
      assert.ok(events.length >= 1);
      assert.deepEqual(events.map((event) => event.ip), events.map(() => null), 'nor does the event the host received');
      assert.deepEqual(await rowsHolding(USER_AGENT), []);
    });
  }

  test('the freed address registered again by someone else inherits nothing: no membership, invite, API key, link or session', async () => {
    const owner = await h.signUp();
    const org = await h.post('/orgs', { name: `Inherit org ${newSubject()}` }, { token: owner.accessToken });
    assert.equal(org.status, 201, org.text);
    const organizationId = org.body.data.id as string;
    const user = await h.signUp();
    const sub = newSubject();
    const linkTrip = await socialRoundTrip(h, op, { sub, email: user.email, email_verified: true }, startLink(h, user.accessToken));
    assert.equal((await h.post('/auth/social/exchange', { code: linkTrip.code, handoff_verifier: linkTrip.handoff.verifier }, { token: user.accessToken })).status, 200);
    await insertPendingInvite(h, organizationId, user.email);
    const oldRefresh = user.refreshToken;

    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);

    const newcomer = await h.signUp(user.email, 'another strong passphrase 77');
    assert.notEqual(newcomer.userId, user.userId);
    const me = await h.get('/auth/me', { token: newcomer.accessToken });
    assert.equal(me.status, 200, me.text);
    assert.equal(me.body.data.id, newcomer.userId);
    // Nothing of the old account names the new one.
    for (const table of ['memberships', 'socialIdentities', 'apiKeys', 'mfaFactors', 'globalRoleGrants', 'ssoIdentities']) {
      assert.equal((await h.knex(tableOf(h, table)).where({ user_id: newcomer.userId })).length, 0, table);
    }
    const pending = await h.knex(tableOf(h, 'invites')).where({ organization_id: organizationId, email: user.email, status: 'pending' });
    assert.deepEqual(pending, [], 'the old invitation does not wait for the newcomer');
    // The old refresh token opens nothing.
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: oldRefresh })).status >= 400, true);
    // The old provider subject signs in as a new link of the newcomer's (rule 3: both addresses
    // verified) or is refused, never as the tombstone.
    const socialAgain = await socialLogin(h, op, { sub, email: user.email, email_verified: true });
    if (socialAgain.status === 200) assert.notEqual(socialAgain.body.data.user?.id, user.userId);
    const tombstone = await h.knex(tableOf(h, 'users')).where({ id: user.userId }).first();
    assert.ok(tombstone.deleted_at);
    assert.equal(tombstone.status, 'disabled');
    assert.equal((await h.knex(tableOf(h, 'socialIdentities')).where({ user_id: user.userId })).length, 0, 'the subject never returns to the tombstone');
    assert.equal((await h.knex(tableOf(h, 'sessions')).where({ user_id: user.userId }).whereNull('revoked_at')).length, 0);
  });
});
