import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PasswordHasher } from '../../src/crypto/password-hasher.js';
import { FailedAttemptSlot } from '../../src/services/limits/lockout.js';
import { MfaFactorRepository } from '../../src/store/mfa-repository.js';
import { assertError } from '../helpers/account.js';
import { Harness, type SignedUpUser, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { nextTotpCode, loginForTicket, signUpWithTotp } from '../helpers/mfa.js';
import { superadmin } from '../helpers/orgs.js';
import { newSubject, PROVIDER_ID, socialLogin, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';

/*
 * Threat: a sign-in decides on the account as it read it, and writes its session after a
 * bcrypt comparison (tens of milliseconds, seconds under a login storm). An owner who resets or
 * changes a stolen password, or an administrator who disables the account, in that window must
 * not leave the thief a session that outlives "every session is revoked" (SPEC: password reset,
 * password change, user disable). A session is written only beside an account that may still
 * sign in and, for a password, still holds the hash that was compared
 * (`SessionRepository.insert`, docs/security.md).
 */
const NEW_PASSWORD = 'a brand new passphrase 42';

let h: Harness;
let admin: SignedUpUser;
before(async () => {
  h = await Harness.start();
  admin = await superadmin(h);
});
after(async () => {
  await h.close();
});

async function liveSessions(userId: string): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: userId }).whereNull('revoked_at').count({ count: '*' });
  return Number(row?.count ?? 0);
}

async function logins(userId: string): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: userId, type: 'user.logged_in' }).count({ count: '*' });
  return Number(row?.count ?? 0);
}

/** The `data` of the newest user.login_failed of `userId`. */
function lastLoginFailure(userId: string): unknown {
  return h.eventsOfType('user.login_failed').filter((event) => event.user_id === userId).at(-1)?.data;
}

async function lockoutState(userId: string): Promise<[number, number]> {
  const account = await h.knex(`${h.tablePrefix}users`).where({ id: userId }).first();
  return [Number(account.failed_login_count), Number(account.attempts_in_flight)];
}

/** Sends `request`, and runs `change` once, right after `user`'s password has been compared (rightly) and before anything is written. */
async function whileComparing(user: SignedUpUser, change: () => Promise<void>, request: () => ReturnType<Harness['post']>) {
  const verify = PasswordHasher.prototype.verify;
  let changed = false;
  PasswordHasher.prototype.verify = async function (this: PasswordHasher, ...args: Parameters<typeof verify>) {
    const right = await verify.apply(this, args);
    if (!changed && args[0] === user.password) {
      changed = true;
      assert.equal(right, true, 'the password compared was the account’s');
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

const loginWhile = (user: SignedUpUser, change: () => Promise<void>) => whileComparing(user, change, () => h.post('/auth/login', { email: user.email, password: user.password }));

const resetPassword = async (user: SignedUpUser) => {
  assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
  const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: NEW_PASSWORD });
  assert.equal(reset.status, 200, reset.text);
};

describe(`the account changing while a sign-in is under way, on ${TEST_DB}`, () => {
  test('a password reset committed while a login compares the old password: 401 invalid_credentials and no session', async () => {
    const user = await h.signUp();
    assert.equal((await h.post('/auth/login', { email: user.email, password: 'not the password 123' })).status, 401);
    const loginsBefore = await logins(user.userId);
    const login = await loginWhile(user, () => resetPassword(user));
    assertError(login, 401, 'invalid_credentials');
    assert.equal(await liveSessions(user.userId), 0, 'every session stays revoked');
    assert.equal(await logins(user.userId), loginsBefore, 'no user.logged_in');
    assert.deepEqual(lastLoginFailure(user.userId), { reason: 'password_changed' });
    // The reset cleared the earlier failure; the stale comparison gave its slot back and counted nothing.
    assert.deepEqual(await lockoutState(user.userId), [0, 0]);
    const withNew = await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD });
    assert.equal(withNew.status, 200, withNew.text);
    assert.ok(withNew.body.data.access_token);
  });

  test('a password reset committed while a login of a user with a factor compares the old password: 401 and no MFA ticket to finish', async () => {
    const user = await signUpWithTotp(h);
    const ticketsBefore = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ user_id: user.userId }).count({ count: '*' });
    const login = await loginWhile(user, () => resetPassword(user));
    // Before, it answered mfa_required with a ticket the reset had not ended: one second factor from a session.
    assertError(login, 401, 'invalid_credentials');
    const ticketsAfter = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ user_id: user.userId }).count({ count: '*' });
    assert.equal(Number(ticketsAfter[0]!.count), Number(ticketsBefore[0]!.count), 'no ticket was written');
    assert.equal(await liveSessions(user.userId), 0);
  });

  test('a password change committed while a login compares the old password: 401 and no session; the changing session stays', async () => {
    const user = await h.signUp();
    const login = await loginWhile(user, async () => {
      const change = await h.post('/auth/password/change', { current_password: user.password, new_password: NEW_PASSWORD }, { token: user.accessToken });
      assert.equal(change.status, 200, change.text);
    });
    assertError(login, 401, 'invalid_credentials');
    assert.deepEqual(lastLoginFailure(user.userId), { reason: 'password_changed' });
    assert.equal(await liveSessions(user.userId), 1, 'only the session that changed the password');
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  });

  test('a password reset committed while a password change compares the old password: 403, and the reset’s password stays', async () => {
    // Threat: a thief holding a session and the old password keeps changes in flight; the
    // owner's reset must not be overwritten by one that was comparing when it committed.
    const user = await h.signUp();
    const change = await whileComparing(
      user,
      () => resetPassword(user),
      () => h.post('/auth/password/change', { current_password: user.password, new_password: 'the thief chose this one' }, { token: user.accessToken }),
    );
    assertError(change, 403, 'invalid_credentials');
    assert.equal((await h.post('/auth/login', { email: user.email, password: 'the thief chose this one' })).status, 401);
    assert.equal((await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD })).status, 200);
  });

  test('the owner’s logout-all committed while a password change compares: 401, and the password stays', async () => {
    const user = await h.signUp();
    const owner = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(owner.status, 200, owner.text);
    const change = await whileComparing(
      user,
      async () => assert.equal((await h.post('/auth/logout-all', undefined, { token: owner.body.data.access_token })).status, 200),
      () => h.post('/auth/password/change', { current_password: user.password, new_password: 'the thief chose this one' }, { token: user.accessToken }),
    );
    assertError(change, 401, 'unauthorized');
    assert.equal((await h.post('/auth/login', { email: user.email, password: 'the thief chose this one' })).status, 401);
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  });

  test('a user disabled while a login compares its password: 403 account_disabled, and enabling it revives no session', async () => {
    const user = await h.signUp();
    const login = await loginWhile(user, async () => {
      const disabled = await h.post(`/users/${user.userId}/disable`, undefined, { token: admin.accessToken });
      assert.equal(disabled.status, 200, disabled.text);
    });
    assertError(login, 403, 'account_disabled');
    assert.deepEqual(lastLoginFailure(user.userId), { reason: 'account_disabled' });
    assert.equal(await liveSessions(user.userId), 0);
    assert.deepEqual(await lockoutState(user.userId), [0, 0], 'the slot went back');
    assert.equal((await h.post(`/users/${user.userId}/enable`, undefined, { token: admin.accessToken })).status, 200);
    assert.equal(await liveSessions(user.userId), 0, 'no session written after the disable comes back with the account');
  });

  test('a user disabled between an MFA ticket’s check and its session: 403 account_disabled, no session, the ticket not spent', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const sessionsBefore = await liveSessions(user.userId);
    const reserve = FailedAttemptSlot.reserve;
    let disabledUnderTheVerify = false;
    FailedAttemptSlot.reserve = async function (...args: Parameters<typeof reserve>) {
      const slot = await reserve.apply(this, args);
      if (!disabledUnderTheVerify && args[2] === user.userId) {
        disabledUnderTheVerify = true;
        const disabled = await h.post(`/users/${user.userId}/disable`, undefined, { token: admin.accessToken });
        assert.equal(disabled.status, 200, disabled.text);
      }
      return slot;
    };
    try {
      const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
      assert.ok(disabledUnderTheVerify);
      assertError(verified, 403, 'account_disabled');
    } finally {
      FailedAttemptSlot.reserve = reserve;
    }
    assert.equal(await liveSessions(user.userId), 0, `none of the ${sessionsBefore} sessions before, and no new one`);
    const stored = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ user_id: user.userId }).whereNull('consumed_at').count({ count: '*' });
    assert.ok(Number(stored[0]!.count) >= 1, 'the refused verify rolled back: its ticket is not consumed');
  });

  test(
    'the disable holds the account when the login writes: the write waits for it, then opens nothing',
    { skip: TEST_DB !== 'pg' && 'SQLite runs one writer at a time; the lock order only means something on PostgreSQL' },
    async () => {
      const user = await h.signUp();
      const table = (name: string) => `${h.tablePrefix}${name}`;
      let commit!: () => void;
      const committed = new Promise<void>((resolve) => (commit = resolve));
      let transaction!: Promise<void>;
      const login = loginWhile(user, async () => {
        // A disable in progress, as `UserAdminService.disable` writes it: the account first, then its sessions.
        let locked!: () => void;
        const accountLocked = new Promise<void>((resolve) => (locked = resolve));
        transaction = h.knex.transaction(async (trx) => {
          await trx(table('users')).where({ id: user.userId }).update({ status: 'disabled' });
          locked();
          await committed;
          await trx(table('sessions')).where({ user_id: user.userId }).whereNull('revoked_at').update({ revoked_at: Date.now(), revoked_reason: 'user_disabled' });
        });
        await accountLocked;
      });
      // The login's write waits on the account's row until the disable commits (a row lock's wait
      // shows as a wait on the holder's transaction id).
      const waitingOnALock = async () => Number((await h.knex.raw('select count(*)::int as n from pg_locks where not granted')).rows[0].n);
      try {
        for (let attempt = 0; attempt < 2000 && (await waitingOnALock()) === 0; attempt += 1) await new Promise((resolve) => setImmediate(resolve));
        assert.equal(await waitingOnALock(), 1, 'the login’s write waits for the account');
      } finally {
        commit();
        await transaction;
      }
      assertError(await login, 403, 'account_disabled');
      assert.equal(await liveSessions(user.userId), 0);
    },
  );
});

describe(`a federated sign-in while the account changes, on ${TEST_DB}`, () => {
  let op: TestOpenIdProvider;
  let social: Harness;
  let socialAdmin: SignedUpUser;
  before(async () => {
    op = await TestOpenIdProvider.start();
    social = await startSocialHarness(op);
    socialAdmin = await superadmin(social);
  });
  after(async () => {
    await social.close();
    await op.close();
  });

  test('a user disabled after the MFA gate looked at a social sign-in: 403 account_disabled and no session', async () => {
    const account = { sub: newSubject(), email: uniqueEmail('disabled-race'), email_verified: true };
    const first = await socialLogin(social, op, account);
    assert.equal(first.status, 200, first.text);
    const { user } = first.body.data;
    const listConfirmed = MfaFactorRepository.prototype.listConfirmed;
    let disabledUnderTheSignIn = false;
    MfaFactorRepository.prototype.listConfirmed = async function (this: MfaFactorRepository, userId: string) {
      const confirmed = await listConfirmed.call(this, userId);
      if (!disabledUnderTheSignIn && userId === user.id) {
        disabledUnderTheSignIn = true;
        const disabled = await social.post(`/users/${user.id}/disable`, undefined, { token: socialAdmin.accessToken });
        assert.equal(disabled.status, 200, disabled.text);
      }
      return confirmed;
    };
    try {
      const second = await socialLogin(social, op, account);
      assert.ok(disabledUnderTheSignIn);
      assertError(second, 403, 'account_disabled');
    } finally {
      MfaFactorRepository.prototype.listConfirmed = listConfirmed;
    }
    const failed = social.eventsOfType('user.login_failed').filter((event) => event.user_id === user.id);
    assert.deepEqual(failed.at(-1)?.data, { method: 'social', provider: PROVIDER_ID, reason: 'account_disabled' });
    const [row] = await social.knex(`${social.tablePrefix}sessions`).where({ user_id: user.id }).whereNull('revoked_at').count({ count: '*' });
    assert.equal(Number(row?.count ?? 0), 0);
  });
});

