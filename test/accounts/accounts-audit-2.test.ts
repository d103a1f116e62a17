import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { Harness, STRONG_PASSWORD, type SignedUpUser, TEST_DB, type TestResponse, uniqueEmail } from '../helpers/harness.js';
import { countingDeadlocks, withRequestInTheWindow } from '../helpers/interleaving.js';
import { TestOpenIdProvider } from '../helpers/oidc.js';
import { addressAt, assertSsoRequiredBy, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import { OneTimeTokenRepository } from '../../src/store/session-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

/*
 * Accounts audit, second pass: what the account routes tell an attacker who has no credential.
 * CONTRACT 12.6: at an enforcing domain the answer "comes from the domain alone ... and never
 * depends on whether the account exists"; superadmins are exempt "only with a right
 * credential". Threat: a superadmin's address (the most valuable one to phish or guess) found
 * out by asking forgot, or by locking it and watching the login answer change.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();
let setup: Awaited<ReturnType<typeof ssoOrg>>;
let employee: SignedUpUser;
let root: SignedUpUser;
/** A superadmin at the domain whose account has no password (a social or passwordless sign-up). */
let rootWithoutPassword: SignedUpUser;

before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSsoHarness(op, dns);
  setup = await ssoOrg(h, dns, op);
  employee = await h.signUp(addressAt(setup.domain, 'employee'));
  root = await h.signUp(addressAt(setup.domain, 'root'));
  await h.identity.service.grantSuperadmin(root.userId);
  rootWithoutPassword = await h.signUp(addressAt(setup.domain, 'root-nopw'));
  await h.identity.service.grantSuperadmin(rootWithoutPassword.userId);
  await h.knex(`${h.tablePrefix}users`).where({ id: rootWithoutPassword.userId }).update({ password_hash: null });
  const enforced = await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: setup.org.owner.token });
  assert.equal(enforced.status, 200, enforced.text);
});
after(async () => {
  await h.close();
  await op.close();
});

function assertSsoRequired(response: TestResponse, context: string): void {
  assertSsoRequiredBy(response, setup.org.slug, 403, context);
}

describe('a superadmin at an enforcing domain answers like anyone there without a right credential', () => {
  test('POST /auth/password/forgot: the same 403 sso_required for a superadmin, an employee and nobody; no mail', async () => {
    const mails = h.mail.length;
    const answers: string[] = [];
    for (const [email, who] of [
      [addressAt(setup.domain, 'nobody'), 'nobody'],
      [employee.email, 'employee'],
      [root.email, 'superadmin'],
    ] as const) {
      const response = await h.post('/auth/password/forgot', { email });
      assertSsoRequired(response, who);
      answers.push(response.text);
    }
    assert.equal(new Set(answers).size, 1, 'one answer for all three');
    assert.equal(h.mail.length, mails, 'nothing sent');
  });

  test('POST /auth/login of a locked superadmin: 403 sso_required, as before the lock and as for anyone', async () => {
    for (let attempt = 0; attempt < 5; attempt += 1) {
      assertSsoRequired(await h.post('/auth/login', { email: root.email, password: 'not the password at all' }), `wrong password ${attempt}`);
    }
    const [row] = await h.knex(`${h.tablePrefix}users`).where({ id: root.userId });
    assert.ok(Number(row.locked_until) > h.clock.now(), 'five wrong passwords locked the superadmin');
    assertSsoRequired(await h.post('/auth/login', { email: root.email, password: 'not the password at all' }), 'locked, wrong password');
    assertSsoRequired(await h.post('/auth/login', { email: root.email, password: root.password }), 'locked, right password');
    assertSsoRequired(await h.post('/auth/login', { email: addressAt(setup.domain, 'nobody'), password: STRONG_PASSWORD }), 'nobody');
  });

  test('POST /auth/login of a superadmin without a password: 403 sso_required, as for anyone', async () => {
    assertSsoRequired(await h.post('/auth/login', { email: rootWithoutPassword.email, password: STRONG_PASSWORD }), 'superadmin without a password');
  });
});

const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

/*
 * A password reset and the account's deletion meet on two rows: the reset link's and the
 * account's. The deletion takes the account, then removes the links; a reset that took its link
 * first and then wanted the account closed the cycle: PostgreSQL broke the deadlock after its
 * deadlock_timeout and ran the loser again (docs/database.md: every decision locks the account first).
 */
describe(`a password reset and the account's deletion on ${TEST_DB}`, () => {
  let plain: Harness;
  before(async () => {
    plain = await Harness.start();
  });
  after(async () => {
    await plain.close();
  });

  test('a deletion started while a reset spends its link: no deadlock; 401 and a tombstone, or the reset then the deletion', PG_ONLY, async () => {
    const user = await plain.signUp(uniqueEmail('reset-deleted'));
    assert.equal((await plain.post('/auth/password/forgot', { email: user.email })).status, 202);
    const token = plain.tokenFromMail(user.email, 'password_reset');
    const { answer, deadlocks } = await countingDeadlocks(() =>
      withRequestInTheWindow(
        plain,
        { prototype: OneTimeTokenRepository.prototype, method: 'consume' },
        () => plain.delete(`/users/${user.userId}`, { token: user.accessToken }),
        () => plain.post('/auth/password/reset', { token, new_password: 'a brand new passphrase 42' }),
      ),
    );
    const { outer: reset, inner: deleted } = answer;
    assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
    assert.ok(reset.status === 200 || reset.status === 401, `${reset.status} ${reset.text}`);
    const [row] = await plain.knex(`${plain.tablePrefix}users`).where({ id: user.userId });
    if (deleted?.status === 200) {
      assert.ok(row.deleted_at !== null, 'a tombstone');
      assert.equal(row.password_hash, null, 'the tombstone holds no password, the reset’s included');
    } else {
      // The reset revoked the session the deletion came with: it comes too late.
      assert.equal(reset.status, 200, reset.text);
      assert.equal(deleted?.status, 401, `${deleted?.status} ${deleted?.text}`);
    }
  });

  test('a deletion started while forgot retires the earlier link: no deadlock; the account is deleted and no live link is left for it', PG_ONLY, async () => {
    const user = await plain.signUp(uniqueEmail('forgot-deleted'));
    // An earlier link, still outstanding: the new request retires it (its row locked) before it writes its own.
    assert.equal((await plain.post('/auth/password/forgot', { email: user.email })).status, 202);
    const { answer, deadlocks } = await countingDeadlocks(() =>
      withRequestInTheWindow(
        plain,
        { prototype: OneTimeTokenRepository.prototype, method: 'expireOutstanding' },
        () => plain.delete(`/users/${user.userId}`, { token: user.accessToken }),
        () => plain.post('/auth/password/forgot', { email: user.email }),
      ),
    );
    const { outer: forgot, inner: deleted } = answer;
    assert.equal(deadlocks, 0, `deadlocks broken by PostgreSQL: ${deadlocks}`);
    assert.equal(forgot.status, 202, forgot.text);
    assert.equal(deleted?.status, 200, `${deleted?.status} ${deleted?.text}`);
    const links = await plain.knex(`${plain.tablePrefix}one_time_tokens`).where({ user_id: user.userId });
    assert.deepEqual(links, [], 'a deleted account keeps no link');
  });

  test('a deletion committed while resend looks the address up: no verification link is written or mailed for the tombstone', PG_ONLY, async () => {
    const user = await plain.signUp(uniqueEmail('resend-deleted'), undefined, { verify: false });
    const mails = plain.mail.length;
    const { outer: resent, inner: deleted } = await withRequestInTheWindow(
      plain,
      { prototype: UserRepository.prototype, method: 'findByEmailForUpdate', when: (email) => email === user.email, at: 'before' },
      () => plain.delete(`/users/${user.userId}`, { token: user.accessToken }),
      () => plain.post('/auth/email/verify/resend', { email: user.email }),
    );
    assert.equal(resent.status, 202, resent.text);
    assert.equal(deleted?.status, 200, `${deleted?.status} ${deleted?.text}`);
    assert.deepEqual(
      plain.mail.slice(mails).map((message) => message.template),
      [],
      'nothing is mailed to the address of an account deleted before the link was written',
    );
    assert.deepEqual(await plain.knex(`${plain.tablePrefix}one_time_tokens`).where({ user_id: user.userId }), [], 'a deleted account keeps no link');
  });
});

describe('a reset link outstanding when the account is disabled', () => {
  test('changes nothing while the account is disabled: 401 invalid_token, the password as it was; after enable a new link works', async () => {
    const { signUpSuperadmin } = await import('../helpers/users.js');
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    assert.equal((await h.post('/auth/password/forgot', { email: target.email })).status, 202);
    const token = h.tokenFromMail(target.email, 'password_reset');
    assert.equal((await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken })).status, 200);
    const [before] = await h.knex(`${h.tablePrefix}users`).where({ id: target.userId });

    assertError(await h.post('/auth/password/reset', { token, new_password: 'a new strong passphrase 42' }), 401, 'invalid_token');
    const [afterReset] = await h.knex(`${h.tablePrefix}users`).where({ id: target.userId });
    assert.equal(afterReset.password_hash, before.password_hash, 'the password is unchanged');

    assert.equal((await h.post(`/users/${target.userId}/enable`, undefined, { token: admin.accessToken })).status, 200);
    assert.equal((await h.post('/auth/password/forgot', { email: target.email })).status, 202);
    const fresh = h.tokenFromMail(target.email, 'password_reset');
    assert.equal((await h.post('/auth/password/reset', { token: fresh, new_password: 'a new strong passphrase 42' })).status, 200);
  });
});
