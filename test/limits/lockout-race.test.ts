/*
 * Issue 10: parallel guesses cannot beat the cap, and exhausted second-factor state
 * answers 422 invalid_code (docs/security.md). The race is meaningful on PostgreSQL:
 *   node scripts/run-tests.mjs --pg-only test/limits/lockout-race.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, STRONG_PASSWORD, TEST_DB } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { enrollSms, lastSmsCode, loginForTicket, signUpWithTotp, uniquePhone } from '../helpers/mfa.js';
import { servicesOf } from '../../src/create-identity-router.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

describe('parallel password guesses', () => {
  test('of 20 concurrent guesses with threshold 5, at most threshold + 2 are compared', async () => {
    // Threat (Zitadel GHSA-7h8m): the cap was checked after the comparison, so 20 parallel
    // guesses were all compared and the right one won every time.
    const user = await h.signUp();
    const hasher = servicesOf(h.identity).context.hasher;
    const verify = hasher.verify.bind(hasher);
    const row = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).first('password_hash');
    // Only comparisons against the account's real hash count (a locked login burns a dummy hash).
    let compared = 0;
    hasher.verify = async (password: string, hash: string) => {
      if (hash === row.password_hash) compared += 1;
      return verify(password, hash);
    };
    try {
      const guesses = Array.from({ length: 20 }, (_, index) => (index === 17 ? STRONG_PASSWORD : `wrong guess number ${index}`));
      const answers = await Promise.all(guesses.map((password) => h.post('/auth/login', { email: user.email, password })));
      assert.ok(compared <= 5 + 2, `${compared} guesses were compared on ${TEST_DB}`);
      for (const answer of answers) assert.ok(answer.status === 401 || answer.status === 200, answer.text);
    } finally {
      hasher.verify = verify;
    }
  });
});

describe('exhausted second-factor state answers 422 invalid_code', () => {
  test('a code sent with an exhausted ticket is invalid_code, whatever the code', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    for (let attempt = 0; attempt < 5; attempt += 1) {
      assertError(await h.post('/auth/mfa/verify', { type: 'recovery', code: `WRONG-${attempt}` }, { token: ticket }), 422, 'invalid_code');
    }
    // Unlock (a password reset clears the count) so only the ticket's exhaustion decides.
    await servicesOf(h.identity).context.store.repos.users.clearFailedLogins(user.userId);
    assertError(await h.post('/auth/mfa/verify', { type: 'recovery', code: user.recoveryCodes[0] }, { token: ticket }), 422, 'invalid_code', 'exhausted ticket');
  });

  test('a code sent to a challenge burned by 5 failures is invalid_code', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    const { ticket } = await loginForTicket(h, user);
    h.clock.advance(120); // past the enrollment's resend cooldown
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket })).status, 200);
    const code = lastSmsCode(h, phone);
    const wrong = code === '000000' ? '111111' : '000000';
    for (let attempt = 0; attempt < 5; attempt += 1) {
      assertError(await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code: wrong }, { token: ticket }), 422, 'invalid_code');
    }
    await servicesOf(h.identity).context.store.repos.users.clearFailedLogins(user.userId);
    assertError(await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code }, { token: ticket }), 422, 'invalid_code', 'burned challenge');
  });
});
