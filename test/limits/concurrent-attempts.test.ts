/*
 * Issue 22 (docs/security.md, the lockout bullet): concurrent attempts on one account never compare
 * more secrets than the failures left before the lock allow, and an attempt that finds no free
 * slot while others are being compared waits for one; past a short bound it answers 429
 * rate_limited with Retry-After, never invalid_credentials for a right password.
 * Threats: a user with several tabs (or a script with a few workers) told that a right
 * password is wrong; parallel guesses beating the cap.
 * The single-instance versions of test/platform/several-instances.test.ts; they run on SQLite and
 * PostgreSQL:
 *   node scripts/run-tests.mjs --sqlite-only test/limits/concurrent-attempts.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, STRONG_PASSWORD, TEST_DB } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { loginForTicket, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { servicesOf } from '../../src/create-identity-router.js';

const LOGIN_LIMIT = 10;
const THRESHOLD = 5;

let h: Harness;
let limited: Harness;
before(async () => {
  // A comparison that takes a moment (bcrypt cost 8), so concurrent logins overlap.
  h = await Harness.start({ config: { password: { bcryptCost: 8 } } });
  limited = await Harness.start({ shareDatabaseWith: h, rateLimits: true, config: { password: { bcryptCost: 8 }, auth: { rateLimits: { login: { limit: LOGIN_LIMIT, windowSec: 60 } } } } });
});
after(async () => {
  await limited.close();
  await h.close();
});

const users = () => h.knex(`${h.tablePrefix}users`);

/** Slots held as if attempts were being compared elsewhere (another instance), taken now by the injected clock. */
async function holdSlots(userId: string, count: number, takenAt = h.clock.now()): Promise<void> {
  await users().where({ id: userId }).update({ attempts_in_flight: count, attempts_in_flight_at: takenAt });
}

function countStatuses(answers: Array<{ status: number }>): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const answer of answers) counts[answer.status] = (counts[answer.status] ?? 0) + 1;
  return counts;
}

describe('right passwords in parallel', () => {
  test(`12 concurrent right-password logins under a login limit of ${LOGIN_LIMIT}: exactly ${LOGIN_LIMIT} tokens and two 429s`, async () => {
    const user = await h.signUp();
    const answers = await Promise.all(Array.from({ length: 12 }, () => limited.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })));
    assert.deepEqual(countStatuses(answers), { 200: LOGIN_LIMIT, 429: 2 }, answers.map((answer) => answer.text).join('\n'));
    assert.equal(answers.filter((answer) => typeof answer.body?.data?.access_token === 'string').length, LOGIN_LIMIT);
    for (const refused of answers.filter((answer) => answer.status === 429)) assertError(refused, 429, 'rate_limited');
    const row = await users().where({ id: user.userId }).first('failed_login_count', 'attempts_in_flight', 'locked_until');
    assert.deepEqual([Number(row.failed_login_count), Number(row.attempts_in_flight), row.locked_until], [0, 0, null], 'no failure, no slot left held');
  });

  test('a login that finds every slot held by attempts elsewhere gets one as soon as another instance gives one back', async () => {
    const user = await h.signUp();
    await holdSlots(user.userId, THRESHOLD);
    const pending = h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Another instance's comparison ends: its slot goes back in the database only.
    await users().where({ id: user.userId }).decrement('attempts_in_flight', 1);
    const answer = await pending;
    assert.equal(answer.status, 200, answer.text);
  });

  test('past the wait bound the answer is 429 rate_limited with Retry-After, never invalid_credentials', async () => {
    const user = await h.signUp();
    await holdSlots(user.userId, THRESHOLD);
    const refused = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
    assertError(refused, 429, 'rate_limited');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1, `Retry-After ${refused.headers.get('retry-after')}`);
    assert.equal(h.eventsOfType('user.login_failed').filter((event) => event.user_id === user.userId).length, 0, 'nothing was compared, nothing recorded');
    assert.equal(Number((await users().where({ id: user.userId }).first('failed_login_count')).failed_login_count), 0, 'a wait that ran out is no failure');
  });

  test('slots left held by an instance that died mid-comparison are forgotten after the lockout window', async () => {
    const user = await h.signUp();
    // Taken more than the window (15 minutes) ago and never given back.
    await holdSlots(user.userId, THRESHOLD, h.clock.now() - 15 * 60 * 1000 - 1);
    const answer = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
    assert.equal(answer.status, 200, answer.text);
  });

  test('a second-factor code that finds every slot held waits, and past the bound answers 429, not invalid_code', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    await holdSlots(user.userId, THRESHOLD);
    const code = nextTotpCode(h, user.secret);
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code }, { token: ticket }), 429, 'rate_limited');
    await holdSlots(user.userId, THRESHOLD);
    const pending = h.post('/auth/mfa/verify', { factor_id: user.factorId, code }, { token: ticket });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await users().where({ id: user.userId }).update({ attempts_in_flight: 0 });
    const verified = await pending;
    assert.equal(verified.status, 200, verified.text);
  });

  test('a password change whose current password finds every slot held answers 429 past the bound, never invalid_credentials', async () => {
    const user = await h.signUp();
    await holdSlots(user.userId, THRESHOLD);
    const body = { current_password: STRONG_PASSWORD, new_password: `${STRONG_PASSWORD} two` };
    assertError(await h.post('/auth/password/change', body, { token: user.accessToken }), 429, 'rate_limited');
    await holdSlots(user.userId, THRESHOLD - 1);
    const changed = await h.post('/auth/password/change', body, { token: user.accessToken });
    assert.equal(changed.status, 200, changed.text);
  });
});

describe('wrong passwords in parallel', () => {
  test(`20 concurrent wrong passwords at threshold ${THRESHOLD}: exactly ${THRESHOLD} are compared, the rest refused as locked`, async () => {
    const user = await h.signUp();
    const hasher = servicesOf(h.identity).context.hasher;
    const verify = hasher.verify.bind(hasher);
    const row = await users().where({ id: user.userId }).first('password_hash');
    // Only comparisons against the account's real hash count (a locked login burns a dummy hash).
    let compared = 0;
    hasher.verify = async (password: string, hash: string, abandoned?: AbortSignal) => {
      if (hash === row.password_hash) compared += 1;
      return verify(password, hash, abandoned);
    };
    try {
      const answers = await Promise.all(Array.from({ length: 20 }, (_, index) => h.post('/auth/login', { email: user.email, password: `wrong guess number ${index}` })));
      for (const answer of answers) assertError(answer, 401, 'invalid_credentials');
      assert.equal(compared, THRESHOLD, `${compared} guesses were compared on ${TEST_DB}`);
      const failures = h.eventsOfType('user.login_failed').filter((event) => event.user_id === user.userId);
      assert.equal(failures.filter((event) => event.data.reason === 'wrong_password').length, THRESHOLD);
      assert.equal(failures.filter((event) => event.data.reason === 'locked').length, 20 - THRESHOLD);
      assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
    } finally {
      hasher.verify = verify;
    }
  });

  test('an attempt in flight is not a failure: a failure beside it does not lock the account early', async () => {
    // Three failures, then one wrong password while a right one is still being compared
    // elsewhere (its slot held): four failures do not lock at a threshold of five.
    const user = await signUpWithTotp(h);
    for (let attempt = 0; attempt < 3; attempt += 1) assertError(await h.post('/auth/login', { email: user.email, password: 'wrong password!' }), 401, 'invalid_credentials');
    await holdSlots(user.userId, 1);
    assertError(await h.post('/auth/login', { email: user.email, password: 'wrong password!' }), 401, 'invalid_credentials');
    await users().where({ id: user.userId }).update({ attempts_in_flight: 0 });
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
  });
});
