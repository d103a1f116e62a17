import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import express from 'express';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig } from '../../src/index.js';
import { assertError } from '../helpers/account.js';
import { type Harness, harnessesClosedAfterFile, uniqueEmail } from '../helpers/harness.js';
import { listening } from '../helpers/host-app.js';
import { enrollSms, lastSmsCode, loginForTicket, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { createOrg, switchOrg } from '../helpers/orgs.js';

/*
 * Lifetimes, expiry boundaries and the clock (docs/security.md, CONTRACT 2 and 3: the injected
 * clock drives every expiry). Each time-bounded thing is taken to its exact end: a millisecond
 * before it still works, the instant it is reached it does not (and step-up, `now - auth_time <=
 * max_age`, is inclusive). Then the clock is moved the other way, as an NTP step on one instance
 * would: nothing accepted once is accepted again, and nothing issued under a clock far ahead
 * lives past what its lifetime allows. Last, config lifetimes at their extremes.
 */

const SECOND = 1000;
const startHarness = harnessesClosedAfterFile();

describe('each lifetime at its exact end', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });

  test('an e-mail verification link works 1 ms before tokens.emailVerifyTtl and not at it', async () => {
    const early = uniqueEmail('verify-early');
    const late = uniqueEmail('verify-late');
    const t0 = h.clock.now();
    for (const email of [early, late]) assert.equal((await h.post('/auth/register', { email, password: 'correct horse battery staple' })).status, 202);
    h.clock.set(t0 + 24 * 3600 * SECOND - 1);
    assert.equal((await h.post('/auth/email/verify', { token: h.tokenFromMail(early, 'verify_email') })).status, 200);
    h.clock.set(t0 + 24 * 3600 * SECOND);
    assertError(await h.post('/auth/email/verify', { token: h.tokenFromMail(late, 'verify_email') }), 400, 'invalid_token', 'at its end');
    // Idempotent re-verification is for an unexpired link only (CONTRACT 5).
    assertError(await h.post('/auth/email/verify', { token: h.tokenFromMail(early, 'verify_email') }), 400, 'invalid_token', 'the used link at its end');
  });

  test('a password reset link works 1 ms before tokens.passwordResetTtl and not at it', async () => {
    const early = await h.signUp(uniqueEmail('reset-early'));
    const late = await h.signUp(uniqueEmail('reset-late'));
    const t0 = h.clock.now();
    for (const user of [early, late]) assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    h.clock.set(t0 + 3600 * SECOND - 1);
    assert.equal((await h.post('/auth/password/reset', { token: h.tokenFromMail(early.email, 'password_reset'), new_password: 'another horse battery staple' })).status, 200);
    h.clock.set(t0 + 3600 * SECOND);
    assertError(await h.post('/auth/password/reset', { token: h.tokenFromMail(late.email, 'password_reset'), new_password: 'another horse battery staple' }), 401, 'invalid_token');
    assert.equal((await h.post('/auth/login', { email: late.email, password: 'correct horse battery staple' })).status, 200, 'the old password stays');
  });

  test('an invitation can be accepted 1 ms before tokens.inviteTtl and not at it', async () => {
    const org = await createOrg(h);
    const early = await h.signUp(uniqueEmail('invite-early'));
    const late = await h.signUp(uniqueEmail('invite-late'));
    const t0 = h.clock.now();
    for (const user of [early, late]) assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: user.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
    const freshToken = async (user: { email: string; password: string }) => (await h.post('/auth/login', { email: user.email, password: user.password })).body.data.access_token as string;
    h.clock.set(t0 + 7 * 24 * 3600 * SECOND - 1);
    const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(early.email, 'invite') }, { token: await freshToken(early) });
    assert.equal(accepted.status, 200, accepted.text);
    h.clock.set(t0 + 7 * 24 * 3600 * SECOND);
    assertError(await h.post('/auth/invites/accept', { token: h.tokenFromMail(late.email, 'invite') }, { token: await freshToken(late) }), 400, 'invalid_token');
  });

  test('an MFA ticket opens a session 1 ms before tokens.mfaTicketTtl and not at it', async () => {
    const user = await signUpWithTotp(h);
    // A whole second: the ticket's `exp` is in seconds, counted from the second it was issued in.
    h.clock.set(Math.ceil(h.clock.now() / SECOND) * SECOND + 60 * SECOND);
    const early = await loginForTicket(h, user);
    h.clock.set(h.clock.now() + 300 * SECOND - 1);
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: early.ticket });
    assert.equal(verified.status, 200, verified.text);
    h.clock.set(h.clock.now() + 60 * SECOND + 1);
    const late = await loginForTicket(h, user);
    h.clock.advance(300);
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: late.ticket }), 401, 'unauthorized', 'a ticket at its end');
  });

  test('step-up is fresh while now - auth_time <= security.stepUp.maxAge, to the millisecond', async () => {
    const user = await signUpWithTotp(h);
    h.clock.advance(60);
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    const signedInAt = h.clock.now();
    const token = verified.body.data.access_token as string;
    h.clock.set(signedInAt + 300 * SECOND);
    const atTheEnd = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token });
    assert.equal(atTheEnd.status, 200, `inclusive at max_age: ${atTheEnd.text}`);
    h.clock.set(signedInAt + 300 * SECOND + 1);
    assertError(await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token }), 401, 'step_up_required', '1 ms past max_age');
  });

  test('an SMS code works 1 ms before otp.ttl and not at it', async () => {
    const user = await h.signUp(uniqueEmail('sms-ttl'));
    const phone = uniquePhone();
    const { factorId } = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(60);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    const signedIn = await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket });
    assert.equal(signedIn.status, 200, signedIn.text);
    const token = signedIn.body.data.access_token as string;
    // Step-up codes on the live session (a login code's ticket ends with it, and would answer 401 first).
    const challenge = async () => {
      const challenged = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token });
      assert.equal(challenged.status, 200, challenged.text);
      return { sentAt: h.clock.now(), code: lastSmsCode(h, phone) };
    };
    h.clock.advance(30); // otp.resendCooldown since the login's code
    const early = await challenge();
    h.clock.set(early.sentAt + 300 * SECOND - 1);
    const steppedUp = await h.post('/auth/mfa/step-up', { factor_id: factorId, code: early.code }, { token });
    assert.equal(steppedUp.status, 200, `1 ms before its end: ${steppedUp.text}`);
    h.clock.advance(1);
    const late = await challenge();
    h.clock.set(late.sentAt + 300 * SECOND);
    assertError(await h.post('/auth/mfa/step-up', { factor_id: factorId, code: late.code }, { token }), 422, 'invalid_code', 'a code at its end');
  });

  test('failed attempts during a lock do not lengthen it; the lock ends exactly at auth.lockout.duration', async () => {
    const user = await h.signUp(uniqueEmail('lock'));
    for (let attempt = 0; attempt < 5; attempt += 1) assertError(await h.post('/auth/login', { email: user.email, password: 'wrong horse battery staple' }), 401, 'invalid_credentials');
    const lockedAt = h.clock.now();
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
    // The attacker keeps guessing through the lock, up to its last millisecond.
    for (const at of [1, 600, 899]) {
      h.clock.set(lockedAt + at * SECOND);
      assertError(await h.post('/auth/login', { email: user.email, password: 'wrong horse battery staple' }), 401, 'invalid_credentials');
    }
    h.clock.set(lockedAt + 900 * SECOND - 1);
    assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials', 'still locked 1 ms before its end');
    h.clock.set(lockedAt + 900 * SECOND);
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200, 'the lock ends at its duration, guesses during it counted for nothing');
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1, 'locked once');
  });
});

describe('the clock stepped back (an NTP step on one instance)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });

  test('a TOTP code, or an older one, is not accepted again once the clock goes back', async () => {
    const user = await signUpWithTotp(h);
    h.clock.advance(90);
    const acceptedAt = h.clock.now();
    const code = totpCodeAt(h, user.secret);
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    const token = verified.body.data.access_token as string;
    h.clock.set(acceptedAt - 30 * SECOND);
    // The same code (still inside the window of the earlier clock) and the code the earlier clock shows.
    for (const [label, candidate] of [
      ['the accepted code', code],
      ['the code of the stepped-back clock', totpCodeAt(h, user.secret)],
    ] as const) {
      const again = await loginForTicket(h, user);
      assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: candidate }, { token: again.ticket }), 422, 'invalid_code', label);
    }
    h.clock.set(acceptedAt + 30 * SECOND);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: verified.body.data.refresh_token });
    assert.equal(refreshed.status, 200, refreshed.text);
    const stepUp = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: refreshed.body.data.access_token ?? token });
    assert.equal(stepUp.status, 200, `the next time-step works once the clock is back: ${stepUp.text}`);
  });

  test('an API key created while the clock was far ahead does not outlive the longest lifetime a key can have', async () => {
    const org = await createOrg(h);
    const app = express();
    app.get('/whoami', h.identity.authenticate({ apiKeys: true }), (req, res) => void res.json({ data: h.identity.caller(req) }));
    const host = await listening(app);
    try {
    const call = (key: string) => fetch(`${host.base}/whoami`, { headers: { authorization: `Bearer ${key}` } });

    // A key made at the right time works, and keeps working across a small step back.
    const right = await h.post(`/orgs/${org.id}/api-keys`, { name: 'right', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(right.status, 201, right.text);
    const realNow = h.clock.now();
    h.clock.set(realNow - 30 * SECOND);
    assert.equal((await call(right.body.data.key)).status, 200, 'a key made now survives a 30 s step back');
    h.clock.set(realNow);

    // The clock jumps ten years ahead (a bad RTC, a mistyped date) and the owner makes a key.
    h.clock.set(realNow + 10 * 365 * 24 * 3600 * SECOND);
    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    const ahead = await switchOrg(h, login.body.data.access_token, org.id);
    const made = await h.post(`/orgs/${org.id}/api-keys`, { name: 'ahead', permission_keys: ['org.read'] }, { token: ahead });
    assert.equal(made.status, 201, made.text);
    // The clock is put right: the key's expiry lies ten years and 90 days away, far past the
    // 365 days no key may exceed (CONTRACT 10). An access token issued then is refused (its iat lies
    // in the future); the key must be too.
    h.clock.set(realNow);
    assert.equal((await h.get('/auth/me', { token: ahead })).status, 401, 'the access token of the skewed clock is refused');
    assert.equal((await call(made.body.data.key)).status, 401, 'the key issued under the clock far ahead is refused');
    assert.equal((await call(right.body.data.key)).status, 200, 'a key made at the right time still works');
    } finally {
      await host.close();
    }
  });
});

describe('config lifetimes at their extremes', () => {
  const database = { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true };
  const valid: IdentityConfig = { database, secret: 's'.repeat(32), issuer: 'https://id.example.test' };
  const quiet = { logger: { info() {}, warn() {}, error() {} } };
  function problemsOf(override: Record<string, unknown>): string[] {
    try {
      createIdentityRouter({ ...valid, ...override } as IdentityConfig, quiet);
    } catch (error) {
      assert.ok(error instanceof IdentityConfigError, String(error));
      return error.problems;
    }
    assert.fail(`createIdentityRouter accepted ${JSON.stringify(override)}`);
  }

  test('a lifetime of 0, negative, fractional, not a number or beyond what a date can hold is refused at construction', () => {
    const lifetimes: Array<[string, (value: unknown) => Record<string, unknown>]> = [
      ['tokens.accessTtl', (value) => ({ tokens: { accessTtl: value } })],
      ['tokens.refreshTtl', (value) => ({ tokens: { refreshTtl: value } })],
      ['tokens.sessionMaxAge', (value) => ({ tokens: { sessionMaxAge: value } })],
      ['tokens.mfaTicketTtl', (value) => ({ tokens: { mfaTicketTtl: value } })],
      ['tokens.emailVerifyTtl', (value) => ({ tokens: { emailVerifyTtl: value } })],
      ['tokens.passwordResetTtl', (value) => ({ tokens: { passwordResetTtl: value } })],
      ['tokens.inviteTtl', (value) => ({ tokens: { inviteTtl: value } })],
      ['auth.lockout.window', (value) => ({ auth: { lockout: { window: value } } })],
      ['auth.lockout.duration', (value) => ({ auth: { lockout: { duration: value } } })],
      ['otp.ttl', (value) => ({ otp: { ttl: value } })],
      ['security.stepUp.maxAge', (value) => ({ security: { stepUp: { maxAge: value } } })],
    ];
    for (const [name, config] of lifetimes) {
      for (const value of [0, -1, 1.5, '300', Number.NaN, Number.POSITIVE_INFINITY, 1e13, Number.MAX_SAFE_INTEGER]) {
        const problems = problemsOf(config(value));
        assert.ok(
          problems.some((problem) => problem.includes(`"${name}"`)),
          `${name} = ${String(value)} → ${problems.join('; ')}`,
        );
      }
    }
  });

  test('the longest lifetime a config takes still makes dates: an invitation under the largest tokens.inviteTtl is answered, not a 500', async () => {
    // The largest value the schema takes (a hundred years): an invite's `expires_at` must still be a date.
    const h = await startHarness({ config: { tokens: { inviteTtl: 100 * 365 * 24 * 3600 } } });
    const org = await createOrg(h);
    const invited = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('far'), role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invited.status, 201, invited.text);
    assert.ok(Number.isFinite(Date.parse(invited.body.data.expires_at)));
  });
});
