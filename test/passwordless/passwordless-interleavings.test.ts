import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { PasswordlessChallengeRepository } from '../../src/store/passwordless-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

/*
 * Interleavings of passwordless sign-in on PostgreSQL (READ COMMITTED): a second request starts
 * inside a verify's window, by a wrapped repository method, and commits there unless a lock makes
 * it wait. Each test asks for an answer some serial order of the two would give.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

/** The last error the router logged (a 500's cause). */
function lastError(): string {
  return JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
}

async function start(email: string): Promise<{ challengeId: string; code: string }> {
  const started = await h.post('/auth/passwordless/start', { email });
  assert.equal(started.status, 202, started.text);
  const message = h.lastMail(email, 'login_code');
  assert.ok(message, `no login_code mail to ${email}`);
  return { challengeId: started.body.data.challenge_id, code: String(message.context.code) };
}

const wrongCode = (code: string) => (code === '000000' ? '111111' : '000000');

let h: Harness;
before(async () => {
  // One failed verify spends an address's budget: the next answers 429 whatever the code.
  h = await Harness.start({ config: { passwordless: { allowSignup: true }, otp: { verifyBudget: { limit: 1, windowSec: 900 } } } });
});
after(async () => {
  await h.close();
});

describe(`passwordless interleavings on ${TEST_DB}`, () => {
  test("two wrong codes at once for an address with no account, one failure left in its verify budget: 422, then 429", PG_ONLY, async () => {
    const email = uniqueEmail('pl-budget');
    const { challengeId, code } = await start(email);
    const guess = () => h.post('/auth/passwordless/verify', { challenge_id: challengeId, code: wrongCode(code) });
    // The second verify starts once the first holds its attempt, before its failure commits.
    const { outer: first, inner: second } = await withRequestInTheWindow(h, { prototype: PasswordlessChallengeRepository.prototype, method: 'claimAttempt', when: (id) => id === challengeId }, guess, guess);
    assert.equal(first.status, 422, `${first.text} ${lastError()}`);
    // In series the second finds the budget spent by the first and compares nothing.
    assert.equal(second?.status, 429, `${second?.text} ${lastError()}`);
  });

  test('an account registered at a sign-up\'s address is deleted while the verify proves it: the sign-up creates the account, the tombstone proves nothing', PG_ONLY, async () => {
    const email = uniqueEmail('pl-signup-deleted');
    const { challengeId, code } = await start(email);
    // Someone registers the address (unverified) after the start: the code would prove it for them.
    const squatter = await h.signUp(email, undefined, { verify: false });
    const { outer: verified, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'findByEmail', when: (address) => address === squatter.email },
      () => h.delete(`/users/${squatter.userId}`, { token: squatter.accessToken }),
      () => h.post('/auth/passwordless/verify', { challenge_id: challengeId, code }),
    );
    assert.equal(deleted?.status, 200, `${deleted?.text} ${lastError()}`);
    // In series the verify comes first (the account proven, then deleted) or second (the address is free: a new account).
    const proofs = h.events.filter((event) => event.type === 'user.email_verified' && event.user_id === squatter.userId).map((event) => event.type);
    assert.equal(verified.status, 200, `${verified.text} ${lastError()}`);
    if (verified.body.data.user.id === squatter.userId) {
      assert.equal(verified.body.data.is_new_user, false);
    } else {
      assert.equal(verified.body.data.is_new_user, true, verified.text);
      assert.deepEqual(proofs, [], 'the deleted account was proven after its deletion');
      const account = await h.knex(`${h.tablePrefix}users`).where({ email: squatter.email }).first();
      assert.equal(account?.id, verified.body.data.user.id);
      assert.ok(account?.email_verified);
    }
  });

  test("an account deleted between the verify's account read and its lock: 422 invalid_code, as after the deletion, and nothing for the tombstone", PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('pl-deleted'));
    const { challengeId, code } = await start(user.email);
    const { outer: verified, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'findById', when: (id) => id === user.userId },
      () => h.delete(`/users/${user.userId}`, { token: user.accessToken }),
      () => h.post('/auth/passwordless/verify', { challenge_id: challengeId, code }),
    );
    assert.equal(deleted?.status, 200, `${deleted?.text} ${lastError()}`);
    // In series: the verify first signs in (200), or the deletion first leaves no account to open (422).
    assert.equal(verified.status, 422, `${verified.text} ${lastError()}`);
    assert.equal(verified.body.error, 'invalid_code', verified.text);
    const events = h.events.filter((event) => event.user_id === user.userId).map((event) => event.type);
    assert.equal(events.at(-1), 'user.deleted', `events of the account: ${events.join(', ')}`);
  });
});
