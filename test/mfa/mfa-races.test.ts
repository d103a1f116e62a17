import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { enrollTotp, lastSmsCode, loginForTicket, totpCodeAt, uniquePhone } from '../helpers/mfa.js';

/*
 * Threat: single-use things used twice by concurrent requests (a code, a recovery code,
 * a ticket) and attempt caps outrun by parallel guesses. These only race for real on
 * PostgreSQL (SQLite serialises writers); on SQLite the same requests still run and the
 * same outcome is required.
 */
let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } } });
});
after(async () => {
  await h.close();
});

const parallel = <T>(count: number, make: (index: number) => Promise<T>) => Promise.all(Array.from({ length: count }, (_, index) => make(index)));

async function sessionCount(userId: string): Promise<number> {
  const row = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: userId }).count({ count: '*' }).first();
  return Number(row!.count);
}

describe(`concurrent MFA on ${TEST_DB}`, () => {
  test('ten concurrent verifies of one SMS code on one ticket: exactly one session', async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    await h.post('/auth/mfa/sms/confirm', { factor_id: enrolled.body.data.factor_id, code: lastSmsCode(h, phone) }, { token: user.accessToken });
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    await h.post('/auth/mfa/challenge', { factor_id: enrolled.body.data.factor_id }, { token: ticket });
    const code = lastSmsCode(h, phone);
    const sessionsBefore = await sessionCount(user.userId);
    const responses = await parallel(10, () => h.post('/auth/mfa/verify', { factor_id: enrolled.body.data.factor_id, code }, { token: ticket }));
    assert.equal(responses.filter((response) => response.status === 200).length, 1, responses.map((response) => response.status).join(','));
    assert.equal(await sessionCount(user.userId), sessionsBefore + 1);
  });

  test('one TOTP code on ten different tickets: exactly one succeeds (the time-step guard, not the ticket)', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const tickets = await Promise.all(Array.from({ length: 10 }, async () => (await loginForTicket(h, user)).ticket));
    h.clock.advance(30);
    const code = totpCodeAt(h, totp.secret);
    const sessionsBefore = await sessionCount(user.userId);
    const responses = await parallel(10, (index) => h.post('/auth/mfa/verify', { factor_id: totp.factorId, code }, { token: tickets[index]! }));
    assert.equal(responses.filter((response) => response.status === 200).length, 1, responses.map((response) => response.status).join(','));
    assert.ok(responses.every((response) => response.status === 200 || response.body.error === 'invalid_code'));
    assert.equal(await sessionCount(user.userId), sessionsBefore + 1);
  });

  test('ten concurrent uses of one recovery code on ten tickets: exactly one succeeds', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const tickets = await Promise.all(Array.from({ length: 10 }, async () => (await loginForTicket(h, user)).ticket));
    const [code] = totp.recoveryCodes;
    const responses = await parallel(10, (index) => h.post('/auth/mfa/verify', { code }, { token: tickets[index]! }));
    assert.equal(responses.filter((response) => response.status === 200).length, 1, responses.map((response) => response.status).join(','));
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.recovery_codes_remaining, 9);
  });

  test('ten concurrent step-ups with one recovery code: exactly one succeeds', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const [code] = totp.recoveryCodes;
    const responses = await parallel(10, () => h.post('/auth/mfa/step-up', { code }, { token: user.accessToken }));
    assert.equal(responses.filter((response) => response.status === 200).length, 1, responses.map((response) => response.status).join(','));
  });

  test('twenty concurrent wrong guesses on one challenge: at most otp.maxAttempts are evaluated', async () => {
    // The step-up path takes no per-user lock, so only the guarded attempt counter holds the cap.
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const factorId = enrolled.body.data.factor_id;
    await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: user.accessToken });
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken })).status, 200);
    const code = lastSmsCode(h, phone);
    const wrong = (index: number) => {
      const guess = String(index).padStart(6, '0');
      return guess === code ? '999999' : guess;
    };
    const responses = await parallel(20, (index) => h.post('/auth/mfa/step-up', { factor_id: factorId, code: wrong(index) }, { token: user.accessToken }));
    assert.ok(responses.every((response) => response.status === 422), responses.map((response) => response.status).join(','));
    const row = await h.knex(`${h.tablePrefix}otp_challenges`).where({ factor_id: factorId, purpose: 'step_up' }).first();
    assert.equal(Number(row.attempts), 5, 'only five guesses got an attempt');
    const burned = await h.post('/auth/mfa/step-up', { factor_id: factorId, code }, { token: user.accessToken });
    assert.equal(burned.status, 422, 'the challenge is burned');
  });
});
