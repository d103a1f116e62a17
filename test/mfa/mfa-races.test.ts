import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { enrollTotp, lastSmsCode, loginForTicket, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { MfaFactorRepository } from '../../src/store/mfa-repository.js';
import { SessionService } from '../../src/services/sessions/session-service.js';

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

  // The MFA gate reads the factors (or, for a password login on PostgreSQL, trusts the account's
  // statement), then the session is written. A factor confirmed in between must not be skipped:
  // the session's write checks again and opens nothing, and the sign-in goes back through the gate.
  test('a factor confirmed after the MFA gate looked and before the session is written: the login asks for it', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const { factor_id: factorId, secret } = enrolled.body.data;
    // Between the gate's answer and the write's transaction (on SQLite the confirmation could
    // not commit while the write held the one connection).
    const open = SessionService.prototype.openSignedIn;
    let confirmedUnderTheLogin = false;
    SessionService.prototype.openSignedIn = async function (this: SessionService, ...args: Parameters<typeof open>) {
      if (!confirmedUnderTheLogin && args[0].id === user.userId) {
        confirmedUnderTheLogin = true;
        const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: user.accessToken });
        assert.equal(confirmed.status, 200, confirmed.text);
      }
      return open.apply(this, args);
    };
    try {
      const sessionsBefore = await sessionCount(user.userId);
      assert.equal((await h.post('/auth/login', { email: user.email, password: 'not the password 123' })).status, 401);
      const login = await h.post('/auth/login', { email: user.email, password: user.password });
      assert.ok(confirmedUnderTheLogin);
      assert.equal(login.status, 200, login.text);
      assert.equal(login.body.data.mfa_required, true, login.text);
      assert.equal(login.body.data.access_token, undefined);
      assert.equal(await sessionCount(user.userId), sessionsBefore, 'no session was opened');
      const events = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: user.userId, type: 'user.logged_in' }).count({ count: '*' }).first();
      assert.equal(Number(events!.count), 1, 'only the sign-up’s login is recorded');
      // Nor did the refused write end the earlier failure or give the slot back twice: the sign-in has not completed.
      const account = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).first();
      assert.deepEqual([Number(account.failed_login_count), Number(account.attempts_in_flight)], [1, 0]);
      // And the ticket it answered completes with the factor.
      const verified = await h.post('/auth/mfa/verify', { factor_id: factorId, code: nextTotpCode(h, secret) }, { token: login.body.data.mfa_token });
      assert.equal(verified.status, 200, verified.text);
    } finally {
      SessionService.prototype.openSignedIn = open;
    }
  });

  test('a sign-in whose session write is refused on every pass answers 429 and opens nothing', async () => {
    // The gate is passed at most three times (MfaService.throughLoginGate): an account whose
    // factors change under every pass gets a retry, not an endless loop.
    const user = await h.signUp();
    const open = SessionService.prototype.openSignedIn;
    let passes = 0;
    SessionService.prototype.openSignedIn = async function (this: SessionService, ...args: Parameters<typeof open>) {
      if (args[0].id !== user.userId) return open.apply(this, args);
      passes += 1;
      return undefined;
    };
    try {
      const sessionsBefore = await sessionCount(user.userId);
      const login = await h.post('/auth/login', { email: user.email, password: user.password });
      assert.equal(login.status, 429, login.text);
      assert.equal(login.body.error, 'rate_limited');
      assert.equal(login.headers.get('retry-after'), '1');
      assert.equal(passes, 3);
      assert.equal(await sessionCount(user.userId), sessionsBefore);
      const account = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).first();
      assert.equal(Number(account.attempts_in_flight), 0, 'the slot went back');
    } finally {
      SessionService.prototype.openSignedIn = open;
    }
  });

  test('a password login without factors on PostgreSQL does not read them again after the hash', async () => {
    const user = await h.signUp();
    const listConfirmed = MfaFactorRepository.prototype.listConfirmed;
    let factorReads = 0;
    MfaFactorRepository.prototype.listConfirmed = function (this: MfaFactorRepository, userId: string) {
      if (userId === user.userId) factorReads += 1;
      return listConfirmed.call(this, userId);
    };
    try {
      const login = await h.post('/auth/login', { email: user.email, password: user.password });
      assert.equal(login.status, 200, login.text);
      assert.ok(login.body.data.access_token);
      // The account's statement read them on PostgreSQL; SQLite reads the account alone.
      assert.equal(factorReads, TEST_DB === 'pg' ? 0 : 1);
    } finally {
      MfaFactorRepository.prototype.listConfirmed = listConfirmed;
    }
  });
});
