/*
 * docs/passwordless.md: passwordless sign-in by e-mail. Each block names the threat it closes:
 * the MFA bypass (better-auth #9552, #11287), mail scanners spending a link (better-auth
 * #9690), enumeration at start (better-auth #10603) and unlimited guesses. Frozen clock;
 * SQLite and PostgreSQL (the race block means most on PostgreSQL):
 *   node scripts/run-tests.mjs test/passwordless/passwordless.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { before, describe, test } from 'node:test';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig } from '../../src/index.js';
import { decodeJwt, type Harness, type HarnessOptions, STRONG_PASSWORD, TEST_DB, uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { assertError, assertValidationErrors, rateLimitHeaders, registerOnly } from '../helpers/account.js';
import { enrollEmail, enrollTotp, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { fixtures, fixtureWebauthnConfig, passGateWithRecorded, registerRecorded } from '../helpers/passkeys.js';
import { servicesOf } from '../../src/create-identity-router.js';

const LINK_PAGE = 'https://app.example.test/sign-in/link#token={token}';
const FULL = { passwordless: { link: true, allowSignup: true }, links: { passwordlessLogin: LINK_PAGE } };

const startWith = harnessesClosedAfterFile();
const startHarness = (config: Record<string, unknown>, options: HarnessOptions = {}): Promise<Harness> => startWith({ ...options, config });

async function start(h: Harness, email: string): Promise<string> {
  const started = await h.post('/auth/passwordless/start', { email });
  assert.equal(started.status, 202, started.text);
  return started.body.data.challenge_id;
}

function mailed(h: Harness, email: string): { code: string; token: string | undefined; url: string | undefined } {
  const message = h.lastMail(email, 'login_code');
  if (!message) throw new Error(`no login_code mail to ${email}`);
  const { code, token, url } = message.context as Record<string, string | undefined>;
  return { code: String(code), token, url };
}

async function verifyCode(h: Harness, challengeId: string, code: string) {
  return h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
}

/** A code sign-in from start to the answer. */
async function codeSignIn(h: Harness, email: string) {
  const challengeId = await start(h, email);
  return verifyCode(h, challengeId, mailed(h, email).code);
}

function wrongCode(code: string): string {
  return code === '000000' ? '111111' : '000000';
}

let h: Harness;
before(async () => {
  h = await startHarness(FULL);
});

describe('a code or a link signs in once', () => {
  test('a code signs in: tokens with amr [email], mfa false, user.logged_in {method: email_code}', async () => {
    const user = await h.signUp();
    const answer = await codeSignIn(h, user.email);
    assert.equal(answer.status, 200, answer.text);
    const claims = decodeJwt(answer.body.data.access_token);
    assert.deepEqual(claims.amr, ['email']);
    assert.equal(claims.mfa, false);
    assert.equal(answer.body.data.user.id, user.userId);
    assert.equal(answer.body.data.is_new_user, false);
    const event = h.eventsOfType('user.logged_in').at(-1)!;
    assert.equal(event.user_id, user.userId);
    assert.deepEqual(event.data, { mfa: false, amr: ['email'], method: 'email_code' });
  });

  test('the first POST of a code signs in and the second answers 422', async () => {
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    const { code } = mailed(h, user.email);
    assert.equal((await verifyCode(h, challengeId, code)).status, 200);
    assertError(await verifyCode(h, challengeId, code), 422, 'invalid_code', 'code replayed');
  });

  test('the first POST of a link signs in and the second answers 422; the code of a used link is spent too', async () => {
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    const { code, token, url } = mailed(h, user.email);
    assert.ok(token && url);
    assert.equal(url, LINK_PAGE.replace('{token}', encodeURIComponent(token)));
    const first = await h.post('/auth/passwordless/verify', { token });
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(decodeJwt(first.body.data.access_token).amr, ['email']);
    assert.equal(h.eventsOfType('user.logged_in').at(-1)!.data.method, 'email_link');
    assertError(await h.post('/auth/passwordless/verify', { token }), 422, 'invalid_code', 'link replayed');
    assertError(await verifyCode(h, challengeId, code), 422, 'invalid_code', 'code of a used link');
  });

  test('a start that mails supersedes the open challenges of the address', async () => {
    const user = await h.signUp();
    const firstChallenge = await start(h, user.email);
    const first = mailed(h, user.email);
    h.clock.advance(31);
    await start(h, user.email);
    assertError(await verifyCode(h, firstChallenge, first.code), 422, 'invalid_code', 'superseded code');
    assertError(await h.post('/auth/passwordless/verify', { token: first.token }), 422, 'invalid_code', 'superseded link');
  });

  test('an expired code answers 422 (injected clock)', async () => {
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    h.clock.advance(601);
    assertError(await verifyCode(h, challengeId, mailed(h, user.email).code), 422, 'invalid_code');
  });

  test("Alice's code on Bob's challenge answers 422 and counts against Bob's challenge", async () => {
    const alice = await h.signUp();
    const bob = await h.signUp();
    const aliceChallenge = await start(h, alice.email);
    const bobChallenge = await start(h, bob.email);
    const aliceCode = mailed(h, alice.email).code;
    const bobCode = mailed(h, bob.email).code;
    if (aliceCode === bobCode) return; // one in a million: nothing to show
    assertError(await verifyCode(h, bobChallenge, aliceCode), 422, 'invalid_code');
    assert.equal((await verifyCode(h, aliceChallenge, aliceCode)).status, 200);
  });

  test('the address is matched case-insensitively and the mail goes to the stored address', async () => {
    const user = await h.signUp();
    const challengeId = await start(h, `  ${user.email.toUpperCase()} `);
    assert.equal(h.mail.at(-1)!.to, user.email);
    assert.equal((await verifyCode(h, challengeId, mailed(h, user.email).code)).status, 200);
  });
});

describe('no GET anywhere (mail scanners)', () => {
  test('GET and HEAD of both paths answer 404 and spend nothing', async () => {
    // Threat: Safe Links and similar scanners fetch every URL of a mail before the person does.
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    const { code, token } = mailed(h, user.email);
    const mails = h.mail.length;
    for (const path of ['/auth/passwordless/start', '/auth/passwordless/verify']) {
      for (const query of ['', `?token=${token}`, `?challenge_id=${challengeId}&code=${code}`, `?email=${encodeURIComponent(user.email)}`]) {
        for (const method of ['GET', 'HEAD']) {
          // Not through h.request: no GET is documented, which is the point.
          const response = await fetch(h.baseUrl + path + query, { method });
          assert.equal(response.status, 404, `${method} ${path}${query}`);
        }
      }
    }
    assert.equal(h.mail.length, mails, 'a GET mailed');
    const answer = await h.post('/auth/passwordless/verify', { token });
    assert.equal(answer.status, 200, `the link still works: ${answer.text}`);
  });

  test('without a passwordless config both routes answer 404', async () => {
    const plain = await startHarness({});
    assertError(await plain.post('/auth/passwordless/start', { email: uniqueEmail() }), 404, 'not_found');
    assertError(await plain.post('/auth/passwordless/verify', { token: 'x' }), 404, 'not_found');
    assert.equal((await fetch(`${plain.baseUrl}/auth/passwordless/verify`)).status, 404);
  });

  test('link: true without links.passwordlessLogin is refused at construction, with every other problem', () => {
    const database = { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true };
    const config = { database, secret: 's'.repeat(32), issuer: 'https://id.example.test', passwordless: { link: true, ttl: 0, allowSignup: 'yes' } };
    assert.throws(
      () => createIdentityRouter(config as unknown as IdentityConfig, { logger: { info() {}, warn() {}, error() {} } }),
      (error: unknown) => error instanceof IdentityConfigError && error.problems.length === 3 && error.problems.some((problem) => /links\.passwordlessLogin/.test(problem)),
    );
  });
});

describe('start answers the same for every address (enumeration)', () => {
  test('unknown, disabled, locked and active addresses get the same answer; only the active one is mailed', async () => {
    // Threat (better-auth #10603): USER_NOT_FOUND answered before the code was checked.
    const codeOnly = await startHarness({ passwordless: {} });
    const active = await codeOnly.signUp();
    const disabled = await codeOnly.signUp();
    await servicesOf(codeOnly.identity).context.store.repos.users.setStatus(disabled.userId, 'disabled', codeOnly.clock.now());
    const locked = await codeOnly.signUp();
    for (let attempt = 0; attempt < 5; attempt += 1) await codeOnly.post('/auth/login', { email: locked.email, password: 'wrong password here' });
    const unknown = uniqueEmail('nobody');
    const answers = [];
    for (const email of [unknown, disabled.email, locked.email, active.email]) {
      const mails = codeOnly.mail.length;
      const response = await codeOnly.post('/auth/passwordless/start', { email });
      answers.push({ status: response.status, keys: Object.keys(response.body.data).sort(), expires: response.body.data.expires_in, headers: headerNames(response.headers) });
      assert.equal(codeOnly.mail.length - mails, email === active.email ? 1 : 0, email);
      assert.match(response.body.data.challenge_id, /^[0-9a-f-]{36}$/);
    }
    for (const answer of answers) assert.deepEqual(answer, answers[3]);
    assert.equal(answers[0]!.status, 202);
    assert.equal(answers[0]!.expires, 600);
  });

  test('a challenge of an ineligible address opens with no code (disabled, locked, unknown)', async () => {
    const codeOnly = await startHarness({ passwordless: {} });
    const disabled = await codeOnly.signUp();
    const challengeId = await start(codeOnly, disabled.email);
    await servicesOf(codeOnly.identity).context.store.repos.users.setStatus(disabled.userId, 'active', codeOnly.clock.now());
    // Codes are digits: none opens a challenge that was never mailed one.
    assertError(await verifyCode(codeOnly, challengeId, '123456'), 422, 'invalid_code');
  });

  test('a user disabled after the start gets 403 account_disabled for the right code', async () => {
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    await servicesOf(h.identity).context.store.repos.users.setStatus(user.userId, 'disabled', h.clock.now());
    assertError(await verifyCode(h, challengeId, mailed(h, user.email).code), 403, 'account_disabled');
    assert.deepEqual(h.eventsOfType('user.login_failed').at(-1)!.data, { method: 'email_code', reason: 'account_disabled' });
  });
});

describe('validation', () => {
  test('a missing, malformed or over-long email, and anything but exactly one proof, is 422 {errors}', async () => {
    assertValidationErrors(await h.post('/auth/passwordless/start', {}));
    assertValidationErrors(await h.post('/auth/passwordless/start', { email: 'not an address' }));
    assertValidationErrors(await h.post('/auth/passwordless/start', { email: `${'a'.repeat(320)}@example.com` }));
    assertValidationErrors(await h.post('/auth/passwordless/start', { email: 42 }));
    assertValidationErrors(await h.post('/auth/passwordless/verify', {}));
    assertValidationErrors(await h.post('/auth/passwordless/verify', { challenge_id: randomUUID() }));
    assertValidationErrors(await h.post('/auth/passwordless/verify', { challenge_id: randomUUID(), code: '123456', token: 'abc' }));
    assertValidationErrors(await h.post('/auth/passwordless/verify', { code: '123456', token: 'abc' }));
    assertValidationErrors(await h.post('/auth/passwordless/verify', { challenge_id: 'not-a-uuid', code: '123456' }));
    assertError(await h.post('/auth/passwordless/verify', { challenge_id: randomUUID(), code: '123456' }), 422, 'invalid_code', 'unknown challenge');
    assertError(await h.post('/auth/passwordless/verify', { token: 'a'.repeat(43) }), 422, 'invalid_code', 'unknown token');
  });
});

describe('the MFA gate exactly as after a password', () => {
  test('a user with a confirmed TOTP gets the MFA ticket, never tokens; the gate gives amr [email, otp]', async () => {
    // Threat (better-auth #9552, #11287): two-factor gated password paths only.
    const user = await signUpWithTotp(h);
    const sessions = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: user.userId }).count({ count: '*' }).first();
    const answer = await codeSignIn(h, user.email);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.data.mfa_required, true);
    assert.equal(answer.body.data.access_token, undefined);
    assert.equal(answer.body.data.refresh_token, undefined);
    const after = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: user.userId }).count({ count: '*' }).first();
    assert.equal(Number(after?.count), Number(sessions?.count), 'no session opened before the second factor');
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: answer.body.data.mfa_token });
    assert.equal(verified.status, 200, verified.text);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.deepEqual(claims.amr, ['email', 'otp']);
    assert.equal(claims.mfa, true);
    assert.deepEqual(h.eventsOfType('user.logged_in').at(-1)!.data, { mfa: true, amr: ['email', 'otp'], method: 'email_code' });
  });

  test('a link through the gate keeps method email_link', async () => {
    const user = await signUpWithTotp(h);
    await start(h, user.email);
    const answer = await h.post('/auth/passwordless/verify', { token: mailed(h, user.email).token });
    assert.equal(answer.body.data.mfa_required, true, answer.text);
    assert.equal(answer.body.data.is_new_user, undefined);
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: answer.body.data.mfa_token });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(h.eventsOfType('user.logged_in').at(-1)!.data.method, 'email_link');
  });

  test('an e-mail factor to the address just proven is no second factor; other factors and recovery codes work', async () => {
    const user = await h.signUp();
    const email = await enrollEmail(h, user);
    const step = await h.post('/auth/mfa/step-up/challenge', { factor_id: email.factorId }, { token: user.accessToken });
    assert.equal(step.status, 200, step.text);
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: email.factorId, code: String(h.lastMail(user.email, 'otp_code')!.context.code) }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    const totp = await enrollTotp(h, stepped.body.data.access_token);
    h.clock.advance(31);
    const answer = await codeSignIn(h, user.email);
    assert.equal(answer.body.data.mfa_required, true, answer.text);
    const factorIds = answer.body.data.factors.map((factor: { id: string }) => factor.id);
    assert.deepEqual(factorIds, [totp.factorId], 'the e-mail factor is left out');
    const ticket = answer.body.data.mfa_token;
    assertError(await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket }), 422, 'unsupported_factor');
    assertError(await h.post('/auth/mfa/verify', { factor_id: email.factorId, code: '123456' }, { token: ticket }), 422, 'unsupported_factor');
    const recovered = await h.post('/auth/mfa/verify', { type: 'recovery', code: email.recoveryCodes[0] }, { token: ticket });
    assert.equal(recovered.status, 200, recovered.text);
    assert.deepEqual(decodeJwt(recovered.body.data.access_token).amr, ['email', 'otp']);
    // After a password the same factor is a second factor as before.
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.ok(login.body.data.factors.some((factor: { id: string }) => factor.id === email.factorId));
  });

  test('a passkey at the gate gives amr [email, hwk]', async () => {
    const withPasskeys = await startHarness({ ...FULL, webauthn: fixtureWebauthnConfig });
    const user = await withPasskeys.signUp();
    const registered = await registerRecorded(withPasskeys, user.accessToken, fixtures.primary);
    assert.equal(registered.status, 200, registered.text);
    const answer = await codeSignIn(withPasskeys, user.email);
    assert.equal(answer.body.data.mfa_required, true, answer.text);
    const verified = await passGateWithRecorded(withPasskeys, answer.body.data.mfa_token, registered.body.data.factor_id, fixtures.primary.assertions[0]!);
    assert.equal(verified.status, 200, verified.text);
    assert.deepEqual(decodeJwt(verified.body.data.access_token).amr, ['email', 'hwk']);
  });

  test('mfa.enforce (grace) gives mfa=false and the grace restrictions, as after a password', async () => {
    const enforced = await startHarness({ ...FULL, mfa: { enforce: true } });
    const user = await enforced.signUp();
    const answer = await codeSignIn(enforced, user.email);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(decodeJwt(answer.body.data.access_token).mfa, false);
    assertError(await enforced.get('/auth/sessions', { token: answer.body.data.access_token }), 403, 'mfa_enrollment_required');
  });

  test("block mode refuses the sign-in with 403 mfa_enrollment_required, as after a password", async () => {
    const blocking = await startHarness({ ...FULL, mfa: { enforce: true, enforcementMode: 'block' } });
    const email = uniqueEmail();
    await registerOnly(blocking, email, STRONG_PASSWORD);
    assertError(await codeSignIn(blocking, email), 403, 'mfa_enrollment_required');
  });

  test("an organization's require_mfa puts the passwordless session under grace enrollment", async () => {
    const user = await h.signUp();
    const now = h.clock.now();
    const organizationId = randomUUID();
    await h.knex(`${h.tablePrefix}organizations`).insert({ id: organizationId, name: 'Strict', slug: `strict-${organizationId.slice(0, 8)}`, status: 'active', require_mfa: true, created_at: now, updated_at: now });
    await h.knex(`${h.tablePrefix}memberships`).insert({ id: randomUUID(), organization_id: organizationId, user_id: user.userId, status: 'active', created_at: now, updated_at: now });
    const answer = await codeSignIn(h, user.email);
    assert.equal(answer.status, 200, answer.text);
    assertError(await h.get('/auth/sessions', { token: answer.body.data.access_token }), 403, 'mfa_enrollment_required');
  });
});

describe('every failure counts: the challenge, the verify budget and the lockout', () => {
  test('the attempt cap burns the challenge: after otp.maxAttempts wrong codes the right one answers 422', async () => {
    const capped = await startHarness({ ...FULL, auth: { lockout: { threshold: 50 } } });
    const user = await capped.signUp();
    const challengeId = await start(capped, user.email);
    const { code, token } = mailed(capped, user.email);
    for (let attempt = 0; attempt < 5; attempt += 1) assertError(await verifyCode(capped, challengeId, wrongCode(code)), 422, 'invalid_code');
    assertError(await verifyCode(capped, challengeId, code), 422, 'invalid_code', 'burned challenge, right code');
    assert.deepEqual(capped.eventsOfType('user.login_failed').at(-1)!.data, { method: 'email_code', reason: 'invalid_code' });
    assertError(await capped.post('/auth/passwordless/verify', { token }), 422, 'invalid_code', 'burned challenge, its link');
    assert.deepEqual(capped.eventsOfType('user.login_failed').at(-1)!.data, { method: 'email_link', reason: 'invalid_code' });
  });

  test('the per-account verify budget holds across new starts: 429 whatever the code', async () => {
    const budgeted = await startHarness({ ...FULL, otp: { verifyBudget: { limit: 3, windowSec: 900 } }, auth: { lockout: { threshold: 50 } } });
    const user = await budgeted.signUp();
    for (let round = 0; round < 3; round += 1) {
      const challengeId = await start(budgeted, user.email);
      assertError(await verifyCode(budgeted, challengeId, wrongCode(mailed(budgeted, user.email).code)), 422, 'invalid_code');
      budgeted.clock.advance(31);
    }
    const challengeId = await start(budgeted, user.email);
    const refused = await verifyCode(budgeted, challengeId, mailed(budgeted, user.email).code);
    assertError(refused, 429, 'rate_limited', 'a new start resets no count');
    assert.ok(Number(refused.headers.get('retry-after')) > 0);
    // Once the failures leave the window, a fresh code signs in.
    budgeted.clock.advance(900);
    assert.equal((await codeSignIn(budgeted, user.email)).status, 200);
  });

  test('with no account the verify budget is keyed by the address', async () => {
    const budgeted = await startHarness({ ...FULL, otp: { verifyBudget: { limit: 2, windowSec: 900 } } });
    const email = uniqueEmail('newcomer');
    for (let round = 0; round < 2; round += 1) {
      const challengeId = await start(budgeted, email);
      assertError(await verifyCode(budgeted, challengeId, wrongCode(mailed(budgeted, email).code)), 422, 'invalid_code');
      budgeted.clock.advance(31);
    }
    const challengeId = await start(budgeted, email);
    assertError(await verifyCode(budgeted, challengeId, mailed(budgeted, email).code), 429, 'rate_limited');
    assert.equal(budgeted.eventsOfType('user.login_failed').length, 0, 'a refusal with no account emits nothing');
  });

  test('wrong codes and wrong passwords share the lockout; a live lockout refuses the right code', async () => {
    const user = await h.signUp();
    for (let attempt = 0; attempt < 3; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    const challengeId = await start(h, user.email);
    const { code } = mailed(h, user.email);
    assertError(await verifyCode(h, challengeId, wrongCode(code)), 422, 'invalid_code');
    assertError(await verifyCode(h, challengeId, wrongCode(code)), 422, 'invalid_code');
    const locked = h.eventsOfType('user.locked').at(-1)!;
    assert.equal(locked.user_id, user.userId);
    assert.equal(locked.data.reason, 'email_code');
    assertError(await verifyCode(h, challengeId, code), 422, 'invalid_code', 'live lockout');
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 401);
    // Locked: start mails nothing, and answers as ever.
    h.clock.advance(31);
    const mails = h.mail.length;
    await start(h, user.email);
    assert.equal(h.mail.length, mails);
  });
});

describe('send throttling by the address', () => {
  test('the cooldown and the per-destination budget answer 429 with Retry-After, with or without an account; a refused start counts toward nothing', async () => {
    const throttled = await startHarness({ ...FULL, otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 } } } });
    const user = await throttled.signUp();
    for (const email of [user.email, uniqueEmail('stranger'), uniqueEmail('nosignup')]) {
      await start(throttled, email);
      const cooling = await throttled.post('/auth/passwordless/start', { email });
      assertError(cooling, 429, 'rate_limited', `cooldown ${email}`);
      assert.equal(cooling.headers.get('retry-after'), '30');
      assert.deepEqual(rateLimitHeaders(cooling), { limit: '1', remaining: '0', reset: String(Math.ceil(throttled.clock.now() / 1000) + 30) });
      throttled.clock.advance(30);
      await start(throttled, email);
      throttled.clock.advance(30);
      const over = await throttled.post('/auth/passwordless/start', { email });
      assertError(over, 429, 'rate_limited', `budget ${email}`);
      assert.ok(Number(over.headers.get('retry-after')) > 0);
      assert.equal(rateLimitHeaders(over).limit, '2');
    }
  });

  test('over the account per-account budget start answers 202 and sends nothing', async () => {
    const throttled = await startHarness({ ...FULL, otp: { sendBudget: { perAccount: { limit: 2, windowSec: 3600 } } } });
    const user = await throttled.signUp();
    let mails = 0;
    for (let round = 0; round < 3; round += 1) {
      const before = throttled.mail.length;
      await start(throttled, user.email);
      mails += throttled.mail.length - before;
      throttled.clock.advance(31);
    }
    assert.equal(mails, 2);
  });
});

describe('the per-IP rate group', () => {
  test('both routes count in the login group (spec 8)', async () => {
    const limited = await startHarness({ ...FULL, auth: { rateLimits: { login: { limit: 2, windowSec: 300 } } } }, { rateLimits: true });
    for (let round = 0; round < 2; round += 1) assert.equal((await limited.post('/auth/passwordless/start', { email: uniqueEmail() })).status, 202);
    assertError(await limited.post('/auth/passwordless/start', { email: uniqueEmail() }), 429, 'rate_limited');
    const verifies = [];
    for (let round = 0; round < 3; round += 1) verifies.push((await limited.post('/auth/passwordless/verify', { token: 'a'.repeat(43) })).status);
    assert.equal(verifies.at(-1), 429);
  });
});

describe('sign-up and the first proof', () => {
  test('sign-up happens at verify, never at start, and only with allowSignup', async () => {
    const email = uniqueEmail('newcomer');
    const challengeId = await start(h, email);
    assert.equal(await h.knex(`${h.tablePrefix}users`).where({ email }).first(), undefined, 'no account at start');
    const { token } = mailed(h, email);
    assert.ok(challengeId);
    const answer = await h.post('/auth/passwordless/verify', { token });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.data.is_new_user, true);
    assert.equal(answer.body.data.user.email_verified, true);
    const row = await h.knex(`${h.tablePrefix}users`).where({ email }).first();
    assert.equal(row.password_hash, null);
    const registered = h.eventsOfType('user.registered').at(-1)!;
    assert.equal(registered.user_id, row.id);
    assert.deepEqual(registered.data, { method: 'email_link' });

    const noSignup = await startHarness({ passwordless: { allowSignup: false } });
    const stranger = uniqueEmail('stranger');
    const refusedChallenge = await start(noSignup, stranger);
    assert.equal(noSignup.mail.length, 0);
    assertError(await verifyCode(noSignup, refusedChallenge, '123456'), 422, 'invalid_code');
    assert.equal(await noSignup.knex(`${noSignup.tablePrefix}users`).where({ email: stranger }).first(), undefined);
  });

  test('the first proof of an unverified account removes a password set before it and ends its other sessions', async () => {
    // Threat: a pre-hijacker registers the victim's address with a password of their own.
    const email = uniqueEmail('victim');
    await registerOnly(h, email, STRONG_PASSWORD);
    const squatter = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal(squatter.status, 200, squatter.text);
    const answer = await codeSignIn(h, email);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.data.user.email_verified, true);
    assertError(await h.post('/auth/login', { email, password: STRONG_PASSWORD }), 401, 'invalid_credentials');
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: squatter.body.data.refresh_token })).status, 401, "the squatter's session ended");
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: answer.body.data.refresh_token })).status, 200, 'the new session lives');
    const proof = h.eventsOfType('user.email_verified').at(-1)!;
    assert.deepEqual(proof.data, { method: 'email_code', credentials_removed: 1 });
    // A verified account keeps its password: only the first proof removes it.
    const verified = await h.signUp();
    assert.equal((await codeSignIn(h, verified.email)).status, 200);
    assert.equal((await h.post('/auth/login', { email: verified.email, password: verified.password })).status, 200);
  });
});

describe('secrets stay secret', () => {
  test('no code or token appears in a response, event, log line or table; no row holds a new address in plain text', async () => {
    const watched = await startHarness(FULL);
    const user = await watched.signUp();
    const newcomer = uniqueEmail('secret-newcomer');
    const answers: string[] = [];
    for (const email of [user.email, newcomer]) {
      const started = await watched.post('/auth/passwordless/start', { email });
      answers.push(started.text);
    }
    const secrets = [user.email, newcomer].flatMap((email) => {
      const { code, token } = mailed(watched, email);
      return [code, token!];
    });
    const addressOnly = newcomer;
    const tables = await watched.knex(`${watched.tablePrefix}passwordless_challenges`).select('*');
    const audit = await watched.knex(`${watched.tablePrefix}audit_events`).select('*');
    const rateEvents = await watched.knex(`${watched.tablePrefix}rate_events`).select('*');
    const dump = JSON.stringify({ tables, audit, rateEvents, events: watched.events, logs: watched.logs, answers });
    for (const secret of secrets) assert.ok(!dump.includes(secret), `a secret leaked on ${TEST_DB}`);
    assert.ok(!dump.includes(addressOnly), 'the address with no account is stored in plain text');
    // And after verifying, nothing either.
    const verify = await watched.post('/auth/passwordless/verify', { token: secrets[1] });
    assert.equal(verify.status, 200);
    const wrong = await watched.post('/auth/passwordless/verify', { token: `${secrets[1]}x` });
    const after = JSON.stringify({ events: watched.events, logs: watched.logs, verify: verify.text, wrong: wrong.text, audit: await watched.knex(`${watched.tablePrefix}audit_events`).select('*') });
    for (const secret of secrets) assert.ok(!after.includes(secret));
  });
});

describe('concurrency', () => {
  test('of 20 concurrent verifies of one code exactly one signs in', async () => {
    const racing = await startHarness(FULL);
    const user = await racing.signUp();
    const challengeId = await start(racing, user.email);
    const { code } = mailed(racing, user.email);
    const answers = await Promise.all(Array.from({ length: 20 }, () => verifyCode(racing, challengeId, code)));
    const signedIn = answers.filter((answer) => answer.status === 200);
    assert.equal(signedIn.length, 1, `${signedIn.length} of 20 signed in on ${TEST_DB}: ${answers.map((answer) => answer.status).join(',')}`);
    for (const answer of answers) assert.ok(answer.status === 200 || answer.status === 422 || answer.status === 429, answer.text);
    const sessions = await racing.knex(`${racing.tablePrefix}sessions`).where({ user_id: user.userId }).count({ count: '*' }).first();
    assert.equal(Number(sessions?.count), 2, 'the sign-up session and one passwordless session');
  });
});

/** Header names of an answer, sorted (forEach: the DOM typings the client brings in lack keys()). */
function headerNames(headers: Headers): string[] {
  const names: string[] = [];
  headers.forEach((_value, name) => names.push(name));
  return names.sort();
}
