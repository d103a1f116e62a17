/*
 * Conformance to the letter of SPEC.md 2.6-2.8 (factor, OTP challenge, recovery codes), 3 (factor
 * and challenge states), 4.2 (the MFA routes), 5 (authentication schemes, step-up, enforcement,
 * codes, delivery), with the events (6) and limits (8) these routes emit or obey. Each test names
 * the sentence it proves. Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/mfa/spec-conformance.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { servicesOf } from '../../src/create-identity-router.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { assertError, assertUnauthorized, assertValidationErrors, countRows } from '../helpers/account.js';
import { decodeJwt, Harness, STRONG_PASSWORD, TEST_DB } from '../helpers/harness.js';
import { enrollEmail, enrollSms, enrollTotp, lastMailCode, lastSmsCode, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg } from '../helpers/orgs.js';

const wrongCodeFor = (code: string) => (code === '000000' ? '111111' : '000000');

function assertStepUpRequired(response: { status: number; body: any; headers: Headers; text: string }, context: string): void {
  assert.equal(response.status, 401, `${context}: ${response.text}`);
  assert.equal(response.body.error, 'step_up_required', context);
  assert.equal(typeof response.body.message, 'string', context);
  assert.equal(response.body.step_up, '/auth/mfa/step-up', context);
  assert.equal(response.headers.get('www-authenticate'), 'Bearer error="step_up_required"', context);
}

let h: Harness;
before(async () => {
  // The lockout and the verify window are not under test here: failures below would otherwise lock.
  h = await Harness.start({ config: { appName: 'Acme', auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } } });
});
after(async () => {
  await h.close();
});

describe(`spec 5 and 4: authentication schemes of every route on ${TEST_DB}`, () => {
  const PUBLIC = [
    ['get', '/auth/.well-known/jwks.json'],
    ['post', '/auth/register'],
    ['post', '/auth/email/verify'],
    ['post', '/auth/email/verify/resend'],
    ['post', '/auth/login'],
    ['post', '/auth/token/refresh'],
    ['post', '/auth/password/forgot'],
    ['post', '/auth/password/reset'],
  ] as const;
  const TICKET = [
    ['post', '/auth/mfa/challenge'],
    ['post', '/auth/mfa/verify'],
  ] as const;
  const BEARER = [
    ['post', '/auth/logout'],
    ['post', '/auth/logout-all'],
    ['post', '/auth/switch-org'],
    ['get', '/auth/sessions'],
    ['delete', '/auth/sessions/{}'],
    ['post', '/auth/password/change'],
    ['get', '/auth/me'],
    ['post', '/auth/mfa/totp/enroll'],
    ['post', '/auth/mfa/totp/confirm'],
    ['post', '/auth/mfa/sms/enroll'],
    ['post', '/auth/mfa/sms/confirm'],
    ['post', '/auth/mfa/email/enroll'],
    ['post', '/auth/mfa/email/confirm'],
    ['post', '/auth/mfa/step-up/challenge'],
    ['post', '/auth/mfa/step-up'],
    ['post', '/auth/mfa/recovery-codes/regenerate'],
    ['get', '/auth/mfa/factors'],
    ['patch', '/auth/mfa/factors/{}'],
    ['delete', '/auth/mfa/factors/{}'],
    ['post', '/orgs'],
    ['get', '/orgs'],
    ['get', '/orgs/{}'],
    ['patch', '/orgs/{}'],
    ['delete', '/orgs/{}'],
    ['get', '/orgs/{}/members'],
    ['patch', '/orgs/{}/members/{}/roles'],
    ['patch', '/orgs/{}/members/{}'],
    ['delete', '/orgs/{}/members/{}'],
    ['post', '/orgs/{}/invites'],
    ['get', '/orgs/{}/invites'],
    ['delete', '/orgs/{}/invites/{}'],
    ['post', '/auth/invites/accept'],
    ['get', '/orgs/{}/roles'],
    ['post', '/orgs/{}/roles'],
    ['patch', '/orgs/{}/roles/{}'],
    ['delete', '/orgs/{}/roles/{}'],
    ['get', '/permissions'],
    ['get', '/users/{}'],
    ['patch', '/users/{}'],
    ['post', '/users/{}/disable'],
    ['post', '/users/{}/enable'],
    ['delete', '/users/{}'],
  ] as const;

  const concrete = (path: string) => path.replaceAll('{}', randomUUID());
  const send = (method: string, path: string, token?: string) => h.request(method, concrete(path), { ...(token ? { token } : {}), ...(method === 'get' || method === 'delete' ? {} : { body: {} }) });

  test('every route of spec 4.1-4.4 is declared with the scheme of the spec 5 table (public, ticket, bearer)', () => {
    const declared = new Map(allRoutes(servicesOf(h.identity)).map((route) => [`${route.method} ${route.path.replace(/:[A-Za-z]+/g, '{}')}`, route.auth]));
    const wrong: string[] = [];
    for (const [scheme, routes] of [['public', PUBLIC], ['ticket', TICKET], ['bearer', BEARER]] as const) {
      for (const [method, path] of routes) {
        const auth = declared.get(`${method} ${path}`);
        if (auth !== scheme) wrong.push(`${method.toUpperCase()} ${path}: ${auth ?? 'missing'}, spec says ${scheme}`);
      }
    }
    assert.deepEqual(wrong, []);
  });

  test('bearer routes without credentials: 401 {error: unauthorized, message} with WWW-Authenticate: Bearer', async () => {
    for (const [method, path] of BEARER) assertUnauthorized(await send(method, path), `${method.toUpperCase()} ${path}`);
  });

  test('the MFA ticket is accepted only by challenge and verify: every bearer route refuses it (401 unauthorized)', async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    for (const [method, path] of BEARER) assertUnauthorized(await send(method, path, ticket), `ticket at ${method.toUpperCase()} ${path}`);
    // The ticket still works where it belongs: nothing above spent it.
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: randomUUID() }, { token: ticket });
    assertError(challenge, 404, 'not_found');
  });

  test('a ticket of an account disabled since the password: challenge and verify refuse it (401 unauthorized) and no code is sent', async () => {
    // Spec 3: a disabled user's login is blocked; the gate's challenge is part of that login.
    const user = await h.signUp();
    const phone = uniquePhone();
    const { factorId } = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    const admin = await h.signUp();
    await h.identity.service.grantSuperadmin(admin.userId);
    assert.equal((await h.post(`/users/${user.userId}/disable`, {}, { token: admin.accessToken })).status, 200);
    const sent = h.sms.length;
    assertUnauthorized(await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket }), 'challenge');
    assert.equal(h.sms.length, sent, 'no code goes to a disabled account');
    assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: factorId, code: '123456' }, { token: ticket }), 'verify');
  });

  test('the ticket routes refuse an access token and a missing ticket (401 unauthorized, WWW-Authenticate: Bearer)', async () => {
    const user = await h.signUp();
    for (const [method, path] of TICKET) {
      assertUnauthorized(await send(method, path), `no ticket at ${path}`);
      assertUnauthorized(await h.request(method, path, { token: user.accessToken, body: { factor_id: randomUUID(), code: '123456' } }), `access token at ${path}`);
    }
  });
});

describe(`spec 5: step-up on ${TEST_DB}`, () => {
  test('every operation the spec lists answers 401 step_up_required when auth_time is stale, and the step-up flow clears it', async () => {
    const user = await signUpWithTotp(h);
    const org = await createOrg(h, { owner: user });
    const member = await addMember(h, org, org.owner.token);
    await h.identity.service.grantSuperadmin(user.userId);
    const victim = await h.signUp();
    h.clock.advance(301);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    const stale = refreshed.body.data.access_token as string;
    assert.equal(decodeJwt(stale).org, org.id, 'the refreshed token stays scoped to the organization');
    const newPassword = 'a different horse battery staple';
    const operations: Array<[string, () => Promise<any>]> = [
      ['password change', () => h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: newPassword }, { token: stale })],
      ['factor removal', () => h.delete(`/auth/mfa/factors/${user.factorId}`, { token: stale })],
      ['recovery-code regeneration', () => h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: stale })],
      ['organization deletion', () => h.delete(`/orgs/${org.id}`, { token: stale })],
      ['user disable', () => h.post(`/users/${victim.userId}/disable`, {}, { token: stale })],
      ['user deletion', () => h.delete(`/users/${user.userId}`, { token: stale })],
      ['ownership transfer', () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: stale })],
    ];
    for (const [name, operation] of operations) assertStepUpRequired(await operation(), name);
    // Nothing happened.
    assert.equal((await h.get(`/orgs/${org.id}`, { token: stale })).status, 200);
    assert.equal((await h.get(`/users/${victim.userId}`, { token: stale })).body.data.status, 'active');

    // Clients clear it with step-up/challenge (SMS) and step-up, then retry with the new access token.
    const phone = uniquePhone();
    const sms = await enrollSmsWithStepUp(user.factorId, user.secret, stale, phone);
    h.clock.advance(301);
    const staleAgain = (await h.post('/auth/token/refresh', { refresh_token: refreshed.body.data.refresh_token })).body.data.access_token as string;
    assertStepUpRequired(await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: staleAgain }), 'regeneration before step-up');
    const challenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: sms }, { token: staleAgain });
    assert.equal(challenge.status, 200, challenge.text);
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: sms, code: lastSmsCode(h, phone) }, { token: staleAgain });
    assert.equal(stepped.status, 200, stepped.text);
    const fresh = stepped.body.data.access_token as string;
    assert.equal((await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: fresh })).status, 200);
    assert.equal((await h.post(`/users/${victim.userId}/disable`, {}, { token: fresh })).status, 200);

    // now - auth_time <= max_age (300 s): fresh at exactly 300 s, stale one second later.
    h.clock.advance(300);
    assert.equal((await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: fresh })).status, 200, 'at 300 s');
    h.clock.advance(1);
    assertStepUpRequired(await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: fresh }), 'at 301 s');
  });

  /** Enrolls and confirms an SMS factor through a step-up with TOTP (a second factor needs step-up). */
  async function enrollSmsWithStepUp(totpFactorId: string, secret: string, staleToken: string, phone: string): Promise<string> {
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: totpFactorId, code: nextTotpCode(h, secret) }, { token: staleToken });
    assert.equal(stepped.status, 200, stepped.text);
    const { factorId } = await enrollSms(h, stepped.body.data.access_token, phone);
    return factorId;
  }

  test('step-up applies only to users with a confirmed factor: a stale session without one passes', async () => {
    const user = await h.signUp();
    h.clock.advance(301);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    const changed = await h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'a different horse battery staple' }, { token: refreshed.body.data.access_token });
    assert.equal(changed.status, 200, changed.text);
  });
});

describe(`spec 4.2 enrollment and confirmation on ${TEST_DB}`, () => {
  test('enroll answers exactly the spec fields: totp {factor_id, secret, otpauth_uri, qr_svg}; sms and email {factor_id, destination}', async () => {
    const user = await h.signUp();
    const totp = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.deepEqual(Object.keys(totp.body.data).sort(), ['factor_id', 'otpauth_uri', 'qr_svg', 'secret']);
    const png = await h.post('/auth/mfa/totp/enroll?format=png', undefined, { token: user.accessToken });
    assert.deepEqual(Object.keys(png.body.data).sort(), ['factor_id', 'otpauth_uri', 'qr_png_base64', 'secret']);
    const sms = await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken });
    assert.deepEqual(Object.keys(sms.body.data).sort(), ['destination', 'factor_id']);
    const email = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
    assert.deepEqual(Object.keys(email.body.data).sort(), ['destination', 'factor_id']);
    assert.equal(email.body.data.destination, `${user.email[0]}***@example.com`);
  });

  test('TOTP confirm accepts the next step (window plus or minus 1); the first confirmation answers {status, recovery_codes}, a later one {status} only', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: enrolled.body.data.factor_id, code: totpCodeAt(h, enrolled.body.data.secret, 1) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.deepEqual(Object.keys(confirmed.body.data).sort(), ['recovery_codes', 'status']);
    assert.equal(confirmed.body.data.status, 'confirmed');
    assert.equal(confirmed.body.data.recovery_codes.length, 10);
    const phone = uniquePhone();
    const sms = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const second = await h.post('/auth/mfa/sms/confirm', { factor_id: sms.body.data.factor_id, code: lastSmsCode(h, phone) }, { token: user.accessToken });
    assert.equal(second.status, 200, second.text);
    assert.deepEqual(second.body.data, { status: 'confirmed' });
    assert.equal(h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId).length, 1, 'mfa.enrolled on the first confirmed factor only');
  });

  test('confirming an already confirmed factor again (a replayed code) is 422 invalid_code', async () => {
    // Spec 4.2: "422 invalid_code for a wrong, expired, exhausted or replayed code"; 404 only for unknown or foreign.
    const user = await h.signUp();
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const body = { factor_id: enrolled.body.data.factor_id, code: lastSmsCode(h, phone) };
    assert.equal((await h.post('/auth/mfa/sms/confirm', body, { token: user.accessToken })).status, 200);
    assertError(await h.post('/auth/mfa/sms/confirm', body, { token: user.accessToken }), 422, 'invalid_code', 'the same confirmation replayed');
    const totp = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const code = totpCodeAt(h, totp.body.data.secret);
    assert.equal((await h.post('/auth/mfa/totp/confirm', { factor_id: totp.body.data.factor_id, code }, { token: user.accessToken })).status, 200);
    assertError(await h.post('/auth/mfa/totp/confirm', { factor_id: totp.body.data.factor_id, code }, { token: user.accessToken }), 422, 'invalid_code', 'a TOTP confirmation replayed');
    assertError(await h.post('/auth/mfa/totp/confirm', { factor_id: totp.body.data.factor_id, code: nextTotpCode(h, totp.body.data.secret) }, { token: user.accessToken }), 422, 'invalid_code', 'a confirmed TOTP factor confirmed again');
  });

  test('an SMS or e-mail code lives 300 s: accepted at 299 s, refused at 300 s', async () => {
    const user = await h.signUp();
    const early = uniquePhone();
    const first = await h.post('/auth/mfa/sms/enroll', { phone_e164: early }, { token: user.accessToken });
    h.clock.advance(299);
    assert.equal((await h.post('/auth/mfa/sms/confirm', { factor_id: first.body.data.factor_id, code: lastSmsCode(h, early) }, { token: user.accessToken })).status, 200);
    const other = await h.signUp();
    const late = await h.post('/auth/mfa/email/enroll', {}, { token: other.accessToken });
    h.clock.advance(300);
    const fresh = await h.post('/auth/token/refresh', { refresh_token: other.refreshToken });
    assertError(await h.post('/auth/mfa/email/confirm', { factor_id: late.body.data.factor_id, code: lastMailCode(h, other.email) }, { token: fresh.body.data.access_token }), 422, 'invalid_code');
  });
});

describe(`spec 2.6, 3: an unconfirmed factor cannot satisfy MFA on ${TEST_DB}`, () => {
  test('a pending TOTP factor opens neither the login gate nor step-up, and is not offered at login', async () => {
    const user = await signUpWithTotp(h);
    const pending = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(pending.status, 200, pending.text);
    const { factor_id: pendingId, secret } = pending.body.data;
    const { ticket, factors } = await loginForTicket(h, user);
    assert.deepEqual(factors.map((factor: any) => factor.id), [user.factorId]);
    const sessions = await countRows(h, 'sessions', { user_id: user.userId });
    const gate = await h.post('/auth/mfa/verify', { factor_id: pendingId, code: nextTotpCode(h, secret) }, { token: ticket });
    assert.notEqual(gate.status, 200, gate.text);
    assert.equal(gate.body.data, undefined);
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), sessions, 'no session opened');
    const stepUp = await h.post('/auth/mfa/step-up', { factor_id: pendingId, code: nextTotpCode(h, secret) }, { token: user.accessToken });
    assert.notEqual(stepUp.status, 200, stepUp.text);
  });
});

describe(`spec 3 and 8: challenges are consumed, burned after 5 failures, and sent under budgets on ${TEST_DB}`, () => {
  test('step-up challenge: consumed on success, burned after 5 failures; a new challenge is then required', async () => {
    const user = await signUpWithTotp(h);
    const phone = uniquePhone();
    const { factorId } = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken })).status, 200);
    const code = lastSmsCode(h, phone);
    for (let attempt = 1; attempt <= 5; attempt += 1) {
      assertError(await h.post('/auth/mfa/step-up', { factor_id: factorId, code: wrongCodeFor(code) }, { token: user.accessToken }), 422, 'invalid_code', `failure ${attempt}`);
    }
    assertError(await h.post('/auth/mfa/step-up', { factor_id: factorId, code }, { token: user.accessToken }), 422, 'invalid_code', 'the right code on a burned challenge');
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken })).status, 200);
    const next = lastSmsCode(h, phone);
    assert.equal((await h.post('/auth/mfa/step-up', { factor_id: factorId, code: next }, { token: user.accessToken })).status, 200);
    assertError(await h.post('/auth/mfa/step-up', { factor_id: factorId, code: next }, { token: user.accessToken }), 422, 'invalid_code', 'a consumed challenge');
  });

  test('login gate: an SMS challenge burned by 5 failures needs a new login', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const { factorId } = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    const code = lastSmsCode(h, phone);
    for (let attempt = 1; attempt <= 5; attempt += 1) assertError(await h.post('/auth/mfa/verify', { factor_id: factorId, code: wrongCodeFor(code) }, { token: ticket }), 422, 'invalid_code');
    assertError(await h.post('/auth/mfa/verify', { factor_id: factorId, code }, { token: ticket }), 422, 'invalid_code', 'burned');
    h.clock.advance(31);
    assertError(await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket }), 422, 'invalid_code', 'no new challenge on the exhausted ticket');
    const again = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: again.ticket })).status, 200);
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: again.ticket })).status, 200);
  });

  test('the per-account send budget applies to login and step-up challenges (429 rate_limited with Retry-After)', async () => {
    const local = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { sendBudget: { perAccount: { limit: 2, windowSec: 3600 }, perDestination: { limit: 50, windowSec: 3600 } } } } });
    try {
      const user = await local.signUp();
      const phone = uniquePhone();
      const { factorId } = await enrollSms(local, user.accessToken, phone); // send 1
      local.clock.advance(31);
      const { ticket } = await loginForTicket(local, user);
      assert.equal((await local.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200); // send 2
      local.clock.advance(31);
      const over = await local.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
      assertError(over, 429, 'rate_limited', 'login challenge over the account budget');
      assert.ok(Number(over.headers.get('retry-after')) > 0);
      assertError(await local.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken }), 429, 'rate_limited', 'step-up challenge over the account budget');
    } finally {
      await local.close();
    }
  });

  test('the per-account verify window spans tickets and step-up: over it every code, the right one too, is 429 rate_limited', async () => {
    // Threat: guesses spread over many tickets, each under its own attempt cap.
    const local = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 3, windowSec: 900 } } } });
    try {
      const user = await local.signUp();
      const totp = await enrollTotp(local, user.accessToken);
      local.clock.advance(30);
      const good = totpCodeAt(local, totp.secret);
      for (let failure = 1; failure <= 3; failure += 1) {
        const { ticket } = await loginForTicket(local, user);
        assertError(await local.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongCodeFor(good) }, { token: ticket }), 422, 'invalid_code', `failure ${failure} on its own ticket`);
      }
      const { ticket } = await loginForTicket(local, user);
      const blocked = await local.post('/auth/mfa/verify', { factor_id: totp.factorId, code: good }, { token: ticket });
      assertError(blocked, 429, 'rate_limited', 'the right code over the window');
      assert.ok(Number(blocked.headers.get('retry-after')) > 0);
      assertError(await local.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: good }, { token: user.accessToken }), 429, 'rate_limited', 'step-up over the window');
      local.clock.advance(901);
      const again = await loginForTicket(local, user);
      assert.equal((await local.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(local, totp.secret) }, { token: again.ticket })).status, 200, 'after the window');
    } finally {
      await local.close();
    }
  });

  test('the per-destination send budget applies to login challenges (429 rate_limited)', async () => {
    const local = await Harness.start({ config: { otp: { sendBudget: { perAccount: { limit: 50, windowSec: 3600 }, perDestination: { limit: 2, windowSec: 3600 } } } } });
    try {
      const user = await local.signUp();
      const phone = uniquePhone();
      const { factorId } = await enrollSms(local, user.accessToken, phone);
      for (let send = 1; send <= 2; send += 1) {
        local.clock.advance(31);
        const { ticket } = await loginForTicket(local, user);
        assert.equal((await local.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200, `challenge ${send}`);
      }
      local.clock.advance(31);
      const { ticket } = await loginForTicket(local, user);
      assertError(await local.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket }), 429, 'rate_limited');
    } finally {
      await local.close();
    }
  });
});

describe(`spec 5 delivery and 2.7 purposes on ${TEST_DB}`, () => {
  test('a step-up code by e-mail: otp_code mail with {app_name, code, ttl, purpose: step_up}; answer {channel, destination}', async () => {
    const user = await h.signUp();
    const { factorId } = await enrollEmail(h, user);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    const verified = await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastMailCode(h, user.email) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    h.clock.advance(31);
    const challenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: verified.body.data.access_token });
    assert.equal(challenge.status, 200, challenge.text);
    assert.deepEqual(challenge.body.data, { channel: 'email', destination: `${user.email[0]}***@example.com` });
    const mail = h.lastMail(user.email, 'otp_code')!;
    assert.deepEqual(Object.keys(mail.context).sort(), ['app_name', 'code', 'purpose', 'ttl']);
    assert.equal(mail.context.purpose, 'step_up');
    assert.equal(mail.context.app_name, 'Acme');
    assert.equal(mail.context.ttl, 300);
    assert.match(String(mail.context.code), /^[0-9]{6}$/);
    const row = await h.knex(`${h.tablePrefix}otp_challenges`).where({ factor_id: factorId, purpose: 'step_up' }).first();
    assert.equal(row.channel, 'email');
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: factorId, code: String(mail.context.code) }, { token: verified.body.data.access_token });
    assert.equal(stepped.status, 200, stepped.text);
  });
});

describe(`spec 4.2 verify failures and 6 events on ${TEST_DB}`, () => {
  test('a code that cannot be a recovery code is 422 invalid_code (and mfa.verify_failed); a missing code is a validation 422', async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    assertError(await h.post('/auth/mfa/verify', { code: 'not-a-code!' }, { token: ticket }), 422, 'invalid_code');
    const failed = h.eventsOfType('mfa.verify_failed').filter((event) => event.user_id === user.userId);
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.data.method, 'recovery');
    assertValidationErrors(await h.post('/auth/mfa/verify', {}, { token: ticket }));
  });

  test('every 422 invalid_code of verify emits mfa.verify_failed, a code on an exhausted ticket included', async () => {
    // Spec 4.2: "422 invalid_code on failure ... failures emit mfa.verify_failed"; spec 7 counts "exhausted" among them.
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const good = nextTotpCode(h, totp.secret);
    const failures = () => h.eventsOfType('mfa.verify_failed').filter((event) => event.user_id === user.userId);
    for (let attempt = 1; attempt <= 5; attempt += 1) assertError(await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongCodeFor(good) }, { token: ticket }), 422, 'invalid_code');
    assert.equal(failures().length, 5);
    assertError(await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: good }, { token: ticket }), 422, 'invalid_code', 'exhausted ticket');
    assertError(await h.post('/auth/mfa/verify', { code: user.email }, { token: ticket }), 422, 'invalid_code', 'exhausted ticket, recovery path');
    const all = failures();
    assert.equal(all.length, 7, 'each refused code on the exhausted ticket emits mfa.verify_failed');
    assert.deepEqual(all[5]!.data, { context: 'login', method: 'totp', factor_id: totp.factorId });
    assert.deepEqual(all[6]!.data, { context: 'login', method: 'recovery', factor_id: null });
    const audited = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: user.userId, type: 'mfa.verify_failed' }).count({ count: '*' }).first();
    assert.equal(Number(audited!.count), 7);
  });

  test('all MFA activity is audited: every mfa.* event of a user has its audit row', async () => {
    const user = await signUpWithTotp(h);
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: '000000' }, { token: user.accessToken });
    await h.post('/auth/mfa/step-up', { code: user.recoveryCodes[0] }, { token: user.accessToken });
    await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken });
    await h.delete(`/auth/mfa/factors/${sms.factorId}`, { token: user.accessToken });
    const emitted = h.events.filter((event) => event.user_id === user.userId && event.type.startsWith('mfa.'));
    const types = new Set(emitted.map((event) => event.type));
    for (const type of ['mfa.enrolled', 'mfa.factor_added', 'mfa.verified', 'mfa.verify_failed', 'mfa.step_up_completed', 'mfa.recovery_used', 'mfa.recovery_regenerated', 'mfa.factor_removed']) {
      assert.ok(types.has(type as never), `${type} was emitted`);
    }
    const rows = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: user.userId }).select('id', 'type');
    const audited = new Map(rows.map((row: { id: string; type: string }) => [row.id, row.type]));
    for (const event of emitted) assert.equal(audited.get(event.id), event.type, `${event.type} ${event.id} is audited`);
  });
});

describe(`spec 2.6 factor fields on ${TEST_DB}`, () => {
  test('label appears only when set; destinations are masked in the list and the PATCH answer; no secret is listed', async () => {
    const user = await h.signUp();
    const { factorId } = await enrollEmail(h, user, 'backup.box@example.org');
    const labelled = await h.patch(`/auth/mfa/factors/${factorId}`, { label: 'Backup' }, { token: user.accessToken });
    assert.deepEqual(labelled.body.data, { id: factorId, type: 'email', default: true, label: 'Backup', destination: 'b***@example.org', confirmed: true });
    const cleared = await h.patch(`/auth/mfa/factors/${factorId}`, { label: null }, { token: user.accessToken });
    assert.equal(cleared.status, 200, cleared.text);
    assert.equal('label' in cleared.body.data, false);
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors, [{ id: factorId, type: 'email', default: true, destination: 'b***@example.org', confirmed: true }]);
    assert.ok(!list.text.includes('backup.box'));
  });
});

describe(`spec 8: default rate limits of the MFA groups, counted per IP before authentication, on ${TEST_DB}`, () => {
  let limited: Harness;
  before(async () => {
    limited = await Harness.start({ rateLimits: true });
  });
  after(async () => {
    await limited.close();
  });

  const groups: Array<{ group: string; limit: number; windowSec: number; first: [string, string]; also: [string, string] }> = [
    { group: 'mfa_send', limit: 5, windowSec: 600, first: ['POST', '/auth/mfa/challenge'], also: ['POST', '/auth/mfa/sms/enroll'] },
    { group: 'mfa_confirm', limit: 10, windowSec: 300, first: ['POST', '/auth/mfa/verify'], also: ['POST', '/auth/mfa/step-up'] },
    { group: 'mfa_enroll', limit: 5, windowSec: 3600, first: ['GET', '/auth/mfa/factors'], also: ['POST', '/auth/mfa/totp/enroll'] },
  ];
  for (const { group, limit, windowSec, first, also } of groups) {
    test(`${group}: ${limit} per ${windowSec} s, then 429 rate_limited with Retry-After and X-RateLimit-*`, async () => {
      const call = ([method, path]: [string, string]) => limited.request(method, path, method === 'GET' ? {} : { body: {} });
      for (let index = 1; index <= limit; index += 1) assertUnauthorized(await call(first), `${group} request ${index}`);
      for (const route of [first, also]) {
        const over = await call(route);
        assertError(over, 429, 'rate_limited', `${route.join(' ')} over ${group}`);
        const retryAfter = Number(over.headers.get('retry-after'));
        assert.ok(retryAfter > windowSec - 30 && retryAfter <= windowSec, `Retry-After ${retryAfter} within a ${windowSec} s window`);
        assert.equal(over.headers.get('x-ratelimit-limit'), String(limit));
        assert.equal(over.headers.get('x-ratelimit-remaining'), '0');
        assert.ok(over.headers.get('x-ratelimit-reset'));
      }
    });
  }
});
