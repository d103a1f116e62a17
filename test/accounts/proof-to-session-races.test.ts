import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, type SignedUpUser, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { assertError } from '../helpers/account.js';
import { signUpSuperadmin } from '../helpers/users.js';
import { enrollTotp, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { AccountService } from '../../src/services/accounts/account-service.js';
import { MfaTicketRepository } from '../../src/store/mfa-repository.js';
import { FederatedFlows } from '../../src/services/social/federated-flow.js';
import { exchangeCode, newSubject, socialLogin, socialRoundTrip, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';

/*
 * A sign-in whose proof and whose session are two transactions (PostgreSQL, READ COMMITTED): a
 * passwordless verify spends its code in one unit of work and opens the session (or the MFA
 * ticket) in another. A password reset or change, which ends the account's sessions, MFA tickets
 * and passwordless codes, or a disable, that commits between the two must leave nothing open:
 * in series the change came first (the code was ended: 422 invalid_code, docs/passwordless.md) or
 * last (it ended the session). The password login's equivalent is in
 * account-changes-during-sign-in.test.ts.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };
const NEW_PASSWORD = 'a-new-Passw0rd-after-the-code';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { passwordless: { allowSignup: true } } });
});
after(async () => {
  await h.close();
});

async function startCode(email: string): Promise<{ challengeId: string; code: string }> {
  const started = await h.post('/auth/passwordless/start', { email });
  assert.equal(started.status, 202, started.text);
  const message = h.lastMail(email, 'login_code');
  assert.ok(message, `no login_code mail to ${email}`);
  return { challengeId: started.body.data.challenge_id, code: String(message.context.code) };
}

async function liveSessions(userId: string): Promise<number> {
  const rows = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: userId }).whereNull('revoked_at').count({ count: '*' });
  return Number(rows[0]!.count);
}

async function openTickets(userId: string): Promise<number> {
  const rows = await h
    .knex(`${h.tablePrefix}mfa_tickets`)
    .where({ user_id: userId })
    .whereNull('consumed_at')
    .andWhere('expires_at', '>', h.clock.now())
    .count({ count: '*' });
  return Number(rows[0]!.count);
}

const lastLoginFailure = (userId: string) => h.events.filter((event) => event.type === 'user.login_failed' && event.user_id === userId).at(-1)?.data;

/** The owner's reset, its link asked for before the code is verified. */
async function resetLinkFor(user: Pick<SignedUpUser, 'email'>): Promise<() => Promise<void>> {
  const forgot = await h.post('/auth/password/forgot', { email: user.email });
  assert.equal(forgot.status, 202, forgot.text);
  const token = h.tokenFromMail(user.email, 'password_reset');
  return async () => {
    const reset = await h.post('/auth/password/reset', { token, new_password: NEW_PASSWORD });
    assert.equal(reset.status, 200, reset.text);
  };
}

/** A code verified while `change` commits after the code was spent, before the sign-in writes anything. */
function verifyWhile(challengeId: string, code: string, change: () => Promise<unknown>) {
  return withRequestInTheWindow(h, { prototype: AccountService.prototype, method: 'signIn', at: 'before' }, change, () =>
    h.post('/auth/passwordless/verify', { challenge_id: challengeId, code }),
  );
}

describe(`passwordless: proof and session in two transactions, on ${TEST_DB}`, () => {
  test('a password reset committed after the code was spent, before the session: 422 invalid_code and no session', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('p2s-reset'));
    const { challengeId, code } = await startCode(user.email);
    const reset = await resetLinkFor(user);
    const { outer: verified } = await verifyWhile(challengeId, code, reset);
    // Before: 200 with a session the reset, which ends the account's sessions and codes, never saw.
    assertError(verified, 422, 'invalid_code');
    assert.equal(await liveSessions(user.userId), 0, 'no session outlives the reset');
    assert.deepEqual(lastLoginFailure(user.userId), { method: 'email_code', reason: 'invalid_code' });
    // The reset's password signs in.
    const login = await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD });
    assert.equal(login.status, 200, login.text);
  });

  test('a password reset of an account with no password, committed after its code was spent: 422 and no session', PG_ONLY, async () => {
    // A passwordless sign-up: the account has no password until the reset gives it one.
    const email = uniqueEmail('p2s-nopw');
    const first = await startCode(email);
    const signedUp = await h.post('/auth/passwordless/verify', { challenge_id: first.challengeId, code: first.code });
    assert.equal(signedUp.status, 200, signedUp.text);
    const userId = signedUp.body.data.user.id as string;
    h.clock.advance(120);
    const { challengeId, code } = await startCode(email);
    const reset = await resetLinkFor({ email });
    const { outer: verified } = await verifyWhile(challengeId, code, reset);
    assertError(verified, 422, 'invalid_code');
    assert.equal(await liveSessions(userId), 0);
  });

  test('a password change committed after the code was spent: 422, and only the changing session stays', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('p2s-change'));
    const { challengeId, code } = await startCode(user.email);
    const { outer: verified } = await verifyWhile(challengeId, code, async () => {
      const change = await h.post('/auth/password/change', { current_password: user.password, new_password: NEW_PASSWORD }, { token: user.accessToken });
      assert.equal(change.status, 200, change.text);
    });
    assertError(verified, 422, 'invalid_code');
    assert.equal(await liveSessions(user.userId), 1, 'only the session that changed the password');
  });

  test('a password reset committed after the code of a user with a factor was spent: 422 and no MFA ticket to finish', PG_ONLY, async () => {
    const user = await signUpWithTotp(h);
    const { challengeId, code } = await startCode(user.email);
    const reset = await resetLinkFor(user);
    const { outer: verified } = await verifyWhile(challengeId, code, reset);
    // Before: mfa_required with a ticket the reset had not ended, and a TOTP code made it a session.
    assertError(verified, 422, 'invalid_code');
    assert.equal(await openTickets(user.userId), 0, 'no ticket outlives the reset');
    assert.equal(await liveSessions(user.userId), 0);
  });

  test('an administrator disables the account after the code was spent: 403 account_disabled and no session (answered before, now tested)', PG_ONLY, async () => {
    const admin = await signUpSuperadmin(h);
    const user = await h.signUp(uniqueEmail('p2s-disable'));
    const { challengeId, code } = await startCode(user.email);
    const { outer: verified } = await verifyWhile(challengeId, code, async () => {
      const disabled = await h.post(`/users/${user.userId}/disable`, undefined, { token: admin.accessToken });
      assert.equal(disabled.status, 200, disabled.text);
    });
    assertError(verified, 403, 'account_disabled');
    assert.equal(await liveSessions(user.userId), 0);
  });
});

describe(`the MFA ticket's second step, on ${TEST_DB}`, () => {
  test('a password reset committed while a ticket is verified (after the ticket was read): 401 and no session (answered before, now tested)', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('p2s-ticket'));
    const totp = await enrollTotp(h, user.accessToken);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    const ticket = login.body.data.mfa_token as string;
    assert.ok(ticket, login.text);
    const reset = await resetLinkFor(user);
    const { outer: verified } = await withRequestInTheWindow(h, { prototype: MfaTicketRepository.prototype, method: 'findById', at: 'after' }, reset, () =>
      h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket }),
    );
    assert.equal(verified.status, 401, verified.text);
    assert.equal(await liveSessions(user.userId), 0);
  });
});

describe(`social login: the exchange's proof and its session in two transactions, on ${TEST_DB}`, () => {
  let op: TestOpenIdProvider;
  let hs: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    hs = await startSocialHarness(op, { config: { passwordless: {} } });
  });
  after(async () => {
    await hs?.close();
    await op?.close();
  });

  test("the owner's first proof of the address commits after a squatter's provider link was resolved, before its session: no squatter session survives", PG_ONLY, async () => {
    // A squatter signs up at the owner's address through a provider that does not vouch for it.
    const email = uniqueEmail('p2s-squat');
    const squatter = { sub: newSubject(), email, email_verified: false };
    const squatted = await socialLogin(hs, op, squatter);
    assert.equal(squatted.status, 200, squatted.text);
    const userId = squatted.body.data.user.id as string;
    // The owner asks for a code; the squatter has a second exchange ready.
    const started = await hs.post('/auth/passwordless/start', { email });
    assert.equal(started.status, 202, started.text);
    const code = String(hs.lastMail(email, 'login_code')!.context.code);
    const trip = await socialRoundTrip(hs, op, squatter);
    const { outer: exchanged, inner: owner } = await withRequestInTheWindow(
      hs,
      { prototype: FederatedFlows.prototype, method: 'openSession', at: 'before' },
      () => hs.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code }),
      () => exchangeCode(hs, trip),
    );
    assert.equal(owner?.status, 200, owner?.text);
    // The first proof evicted the link and ended every session: in series the exchange came first
    // (its session ended) or second (the link is gone: 409 account_link_required).
    assertError(exchanged, 409, 'account_link_required');
    assert.equal(hs.events.filter((event) => event.type === 'user.login_failed' && event.user_id === userId).at(-1)?.data.reason, 'account_link_required');
    const rows = await hs.knex(`${hs.tablePrefix}sessions`).where({ user_id: userId }).whereNull('revoked_at').count({ count: '*' });
    assert.equal(Number(rows[0]!.count), 1, "only the owner's session");
  });
});
