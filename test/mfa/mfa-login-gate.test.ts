import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { rateLimitHeaders } from '../helpers/account.js';
import { decodeJwt, decodeJwtHeader, Harness } from '../helpers/harness.js';
import { enrollEmail, enrollSms, enrollTotp, lastMailCode, lastSmsCode, loginForTicket, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';

let h: Harness;
/** Every secret the tests saw, to prove none of them reached an event payload. */
const secretsSeen = new Set<string>();
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 50 } } } });
});
after(async () => {
  await h.close();
});

const wrongCodeFor = (code: string) => (code === '000000' ? '111111' : '000000');

describe('POST /auth/login with a confirmed factor', () => {
  test('opens no session and answers mfa_required, a login_mfa ticket and the masked factors', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    h.clock.advance(1); // factors are listed oldest first
    const phone = '+15550109876';
    const sms = await enrollSms(h, user.accessToken, phone);
    await h.patch(`/auth/mfa/factors/${sms.factorId}`, { label: 'Work phone' }, { token: user.accessToken });
    const sessionsBefore = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: user.userId }).count({ count: '*' }).first();
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    assert.deepEqual(Object.keys(login.body.data).sort(), ['factors', 'mfa_required', 'mfa_token']);
    assert.equal(login.body.data.mfa_required, true);
    assert.deepEqual(login.body.data.factors, [
      { id: totp.factorId, type: 'totp', default: true },
      { id: sms.factorId, type: 'sms', default: false, label: 'Work phone', destination: '+*******9876' },
    ]);
    const ticket = login.body.data.mfa_token;
    secretsSeen.add(ticket);
    assert.equal(decodeJwtHeader(ticket).typ, 'mfa+jwt');
    const claims = decodeJwt(ticket);
    assert.equal(claims.purpose, 'login_mfa');
    assert.equal(claims.sub, user.userId);
    assert.equal(claims.exp - claims.iat, 300);
    const sessionsAfter = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: user.userId }).count({ count: '*' }).first();
    assert.equal(Number(sessionsAfter!.count), Number(sessionsBefore!.count), 'no session opened');
    assert.equal(h.eventsOfType('user.logged_in').filter((event) => event.user_id === user.userId && event.data.mfa === true).length, 0);
  });

  test('the ticket is refused everywhere but challenge and verify; an access token is refused as a ticket', async () => {
    // Threat: a half-authenticated caller (password only) using the ticket as a session.
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    for (const [method, path] of [['GET', '/auth/me'], ['GET', '/auth/sessions'], ['GET', '/auth/mfa/factors'], ['POST', '/auth/mfa/totp/enroll'], ['POST', '/auth/mfa/step-up']]) {
      const response = await h.request(method!, path!, { token: ticket, ...(method === 'GET' ? {} : { body: {} }) });
      assert.equal(response.status, 401, `${method} ${path}`);
      assert.equal(response.body.error, 'unauthorized');
    }
    for (const path of ['/auth/mfa/challenge', '/auth/mfa/verify']) {
      const withAccessToken = await h.post(path, { factor_id: 'x', code: '123456' }, { token: user.accessToken });
      assert.equal(withAccessToken.status, 401, path);
      assert.equal(withAccessToken.body.error, 'unauthorized');
      assert.match(withAccessToken.headers.get('www-authenticate') ?? '', /^Bearer/);
      const without = await h.post(path, { factor_id: 'x', code: '123456' });
      assert.equal(without.status, 401);
      const garbage = await h.post(path, { factor_id: 'x', code: '123456' }, { token: `${ticket.slice(0, -4)}AAAA` });
      assert.equal(garbage.status, 401);
    }
  });

  test('TOTP verify mints a session with mfa=true, amr [pwd, otp] and a fresh auth_time; the ticket is single-use', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const code = nextTotpCode(h, totp.secret);
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    assert.deepEqual(Object.keys(verified.body.data).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type']);
    assert.equal(verified.body.data.token_type, 'Bearer');
    assert.equal(verified.body.data.expires_in, 900);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.equal(claims.mfa, true);
    assert.deepEqual(claims.amr, ['pwd', 'otp']);
    assert.equal(claims.auth_time, Math.floor(h.clock.now() / 1000));
    secretsSeen.add(verified.body.data.access_token).add(verified.body.data.refresh_token).add(totp.secret).add(code);
    const me = await h.get('/auth/me', { token: verified.body.data.access_token });
    assert.equal(me.status, 200);
    const verifiedEvents = h.eventsOfType('mfa.verified').filter((event) => event.user_id === user.userId);
    assert.equal(verifiedEvents.length, 1);
    assert.equal(verifiedEvents[0]!.data.method, 'totp');
    const loggedIn = h.eventsOfType('user.logged_in').filter((event) => event.user_id === user.userId && event.data.mfa === true);
    assert.equal(loggedIn.length, 1);
    // Single use.
    const again = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
    assert.equal(again.status, 401);
    assert.equal(again.body.error, 'unauthorized');
    // mfa, amr and auth_time survive refresh.
    h.clock.advance(60);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: verified.body.data.refresh_token });
    const refreshedClaims = decodeJwt(refreshed.body.data.access_token);
    assert.equal(refreshedClaims.mfa, true);
    assert.deepEqual(refreshedClaims.amr, ['pwd', 'otp']);
    assert.equal(refreshedClaims.auth_time, claims.auth_time);
  });

  test('a TOTP code of an already accepted time-step is a replay (422 invalid_code)', async () => {
    // Threat: a shoulder-surfed or intercepted code reused within its 90-second window.
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const usedAtConfirm = totpCodeAt(h, totp.secret);
    const { ticket } = await loginForTicket(h, user);
    const replay = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: usedAtConfirm }, { token: ticket });
    assert.equal(replay.status, 422);
    assert.equal(replay.body.error, 'invalid_code');
    // The previous step's code is inside the window but at or before the accepted step: still a replay.
    h.clock.advance(30);
    const older = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret, -1) }, { token: ticket });
    assert.equal(older.status, 422);
    const fresh = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: ticket });
    assert.equal(fresh.status, 200, fresh.text);
  });

  test('an expired ticket is 401 unauthorized', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    h.clock.advance(301);
    const late = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: ticket });
    assert.equal(late.status, 401);
    assert.equal(late.body.error, 'unauthorized');
  });
});

describe('POST /auth/mfa/challenge', () => {
  test('sends an SMS login code bound to the ticket; verify with it mints the session', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    assert.deepEqual(challenge.body.data, { channel: 'sms', destination: `+${'*'.repeat(phone.length - 5)}${phone.slice(-4)}` });
    const code = lastSmsCode(h, phone);
    secretsSeen.add(code);
    const row = await h.knex(`${h.tablePrefix}otp_challenges`).where({ factor_id: sms.factorId, purpose: 'login_mfa' }).first();
    assert.equal(row.bound_to, decodeJwt(ticket).jti);
    // Under the resend cooldown: 429 too_many_requests with Retry-After.
    const again = await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket });
    assert.equal(again.status, 429);
    assert.equal(again.body.error, 'too_many_requests');
    assert.equal(again.headers.get('retry-after'), '30');
    assert.deepEqual(rateLimitHeaders(again), { limit: '1', remaining: '0', reset: String(Math.ceil(h.clock.now() / 1000) + 30) });
    // The code is bound to this ticket: another login's ticket cannot use it.
    const other = await loginForTicket(h, user);
    const crossTicket = await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code }, { token: other.ticket });
    assert.equal(crossTicket.status, 422);
    const verified = await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(decodeJwt(verified.body.data.access_token).mfa, true);
  });

  test('e-mail factor: the otp_code mail has purpose login_mfa', async () => {
    const user = await h.signUp();
    const email = await enrollEmail(h, user);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    assert.equal(challenge.body.data.channel, 'email');
    assert.equal(challenge.body.data.destination, `${user.email[0]}***@example.com`);
    assert.equal(h.lastMail(user.email, 'otp_code')!.context.purpose, 'login_mfa');
    const verified = await h.post('/auth/mfa/verify', { factor_id: email.factorId, code: lastMailCode(h, user.email) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
  });

  test('a TOTP factor is 422 unsupported_factor; unknown, foreign and pending factors are 404', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const pending = await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken });
    const stranger = await h.signUp();
    const strangerSms = await enrollSms(h, stranger.accessToken, uniquePhone());
    const { ticket } = await loginForTicket(h, user);
    const unsupported = await h.post('/auth/mfa/challenge', { factor_id: totp.factorId }, { token: ticket });
    assert.equal(unsupported.status, 422);
    assert.equal(unsupported.body.error, 'unsupported_factor');
    for (const factorId of ['00000000-0000-0000-0000-000000000000', pending.body.data.factor_id, strangerSms.factorId]) {
      const missing = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
      assert.equal(missing.status, 404);
      assert.equal(missing.body.error, 'not_found');
    }
    assert.equal((await h.post('/auth/mfa/challenge', {}, { token: ticket })).status, 422);
  });
});

describe('POST /auth/mfa/verify failures', () => {
  test('an SMS code without a challenge is refused', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    const { ticket } = await loginForTicket(h, user);
    const response = await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code: lastSmsCode(h, phone) }, { token: ticket });
    assert.equal(response.status, 422);
    assert.equal(response.body.error, 'invalid_code');
  });

  test('every failure is 422 and emits mfa.verify_failed; after five the ticket is dead even for the right code', async () => {
    // Threat: brute force of a second factor after a password leak.
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    h.clock.advance(30);
    const good = totpCodeAt(h, totp.secret);
    for (let i = 0; i < 5; i += 1) {
      const failed = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongCodeFor(good) }, { token: ticket });
      assert.equal(failed.status, 422);
      assert.equal(failed.body.error, 'invalid_code');
    }
    const failures = h.eventsOfType('mfa.verify_failed').filter((event) => event.user_id === user.userId);
    assert.equal(failures.length, 5);
    assert.equal(failures[0]!.data.factor_id, totp.factorId);
    // docs/mfa.md (docs/openapi.yaml "exhausted"): an exhausted ticket answers 422 invalid_code, whatever the code.
    const dead = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: good }, { token: ticket });
    assert.equal(dead.status, 422);
    assert.equal(dead.body.error, 'invalid_code');
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: totp.factorId }, { token: ticket });
    assert.equal(challenge.status, 422);
    // A new login gives a new ticket.
    const { ticket: fresh } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: good }, { token: fresh })).status, 200);
  });

  test('a failed challenge code counts against the challenge: five failures burn it', async () => {
    const local = await Harness.start({ config: { auth: { lockout: { threshold: 50 } }, otp: { maxAttempts: 5 } } });
    try {
      const user = await local.signUp();
      const phone = uniquePhone();
      const sms = await enrollSms(local, user.accessToken, phone);
      local.clock.advance(31);
      const { ticket } = await loginForTicket(local, user);
      await local.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket });
      const code = lastSmsCode(local, phone);
      for (let i = 0; i < 4; i += 1) assert.equal((await local.post('/auth/mfa/verify', { factor_id: sms.factorId, code: wrongCodeFor(code) }, { token: ticket })).status, 422);
      const row = await local.knex(`${local.tablePrefix}otp_challenges`).where({ factor_id: sms.factorId, purpose: 'login_mfa' }).first();
      assert.equal(Number(row.attempts), 4);
      // The fifth attempt with the right code still succeeds: four failures are under the cap.
      assert.equal((await local.post('/auth/mfa/verify', { factor_id: sms.factorId, code }, { token: ticket })).status, 200);
    } finally {
      await local.close();
    }
  });

  test('second-factor failures count toward the account lockout', async () => {
    const local = await Harness.start({ config: { auth: { lockout: { threshold: 3, window: 900, duration: 900 } } } });
    try {
      const user = await local.signUp();
      const totp = await enrollTotp(local, user.accessToken);
      const { ticket } = await loginForTicket(local, user);
      local.clock.advance(30);
      const good = totpCodeAt(local, totp.secret);
      for (let i = 0; i < 3; i += 1) await local.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongCodeFor(good) }, { token: ticket });
      assert.equal(local.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
      const login = await local.post('/auth/login', { email: user.email, password: user.password });
      assert.equal(login.status, 401);
      assert.equal(login.body.error, 'invalid_credentials');
      // The still-open ticket is refused too while the lock lasts.
      assert.equal((await local.post('/auth/mfa/verify', { factor_id: totp.factorId, code: good }, { token: ticket })).status, 401);
    } finally {
      await local.close();
    }
  });
});

describe('recovery codes at the gate', () => {
  test('accepted once, case-insensitively and without the dash; emits mfa.recovery_used', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    totp.recoveryCodes.forEach((code) => secretsSeen.add(code).add(code.replace('-', '')));
    const [first, second] = totp.recoveryCodes;
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { code: first!.replace('-', '').toUpperCase() }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    assert.deepEqual(decodeJwt(verified.body.data.access_token).amr, ['pwd', 'otp']);
    const used = h.eventsOfType('mfa.recovery_used').filter((event) => event.user_id === user.userId);
    assert.equal(used.length, 1);
    assert.equal(used[0]!.data.remaining, 9);
    assert.equal(h.eventsOfType('mfa.verified').filter((event) => event.user_id === user.userId).at(-1)!.data.method, 'recovery');
    const me = await h.get('/auth/me', { token: verified.body.data.access_token });
    assert.equal(me.body.data.recovery_codes_remaining, 9);
    // Spent: refused on a new ticket.
    const next = await loginForTicket(h, user);
    const reused = await h.post('/auth/mfa/verify', { code: first }, { token: next.ticket });
    assert.equal(reused.status, 422);
    assert.equal(reused.body.error, 'invalid_code');
    // type: recovery forces the recovery path even with a factor id.
    const forced = await h.post('/auth/mfa/verify', { type: 'recovery', factor_id: totp.factorId, code: second }, { token: next.ticket });
    assert.equal(forced.status, 200, forced.text);
  });

  test('codes are stored as keyed hashes', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const rows = await h.knex(`${h.tablePrefix}recovery_codes`).where({ user_id: user.userId });
    assert.equal(rows.length, 10);
    const dump = JSON.stringify(rows);
    for (const code of totp.recoveryCodes) {
      assert.ok(!dump.includes(code) && !dump.includes(code.replace('-', '')));
    }
    for (const row of rows) assert.match(row.code_hash, /^[0-9a-f]{64}$/);
  });
});

test('no code, secret or token appears in any event payload or audit row', async () => {
  // Threat: event listeners and audit logs are wider-read than the database secrets.
  assert.ok(secretsSeen.size > 10);
  const sms = h.sms.map((message) => /^(\d+) /.exec(message.message)?.[1]).filter((code): code is string => Boolean(code));
  const mailCodes = h.mail.filter((message) => message.template === 'otp_code').map((message) => String(message.context.code));
  const all = [...secretsSeen, ...sms, ...mailCodes];
  const events = JSON.stringify(h.events.map((event) => event.data));
  const audit = JSON.stringify(await h.knex(`${h.tablePrefix}audit_events`).select('data'));
  for (const secret of all) {
    assert.ok(!events.includes(secret), `event data holds ${secret.slice(0, 8)}…`);
    assert.ok(!audit.includes(secret), `audit data holds ${secret.slice(0, 8)}…`);
  }
});
