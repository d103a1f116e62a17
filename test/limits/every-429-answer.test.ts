/*
 * SPEC 7: "Rate-limit 429 responses carry Retry-After and X-RateLimit-* headers". Every place the
 * router answers 429 (the per-IP and authenticated groups, send budgets and cooldowns, the verify
 * budget, passwordless start, a failed-attempt slot's wait, a sign-in whose factors kept changing)
 * answers the same shape: {error, message, retry_after}, Retry-After a positive whole number of
 * seconds, X-RateLimit-Limit, X-RateLimit-Remaining 0 and X-RateLimit-Reset (epoch seconds) that
 * agrees with Retry-After, whatever store counts a group (a host store may keep no reset time). Threat: a client (or the host's proxy) that backs off on the
 * X-RateLimit-* headers finds none on some 429s and retries at once; headers that tell a known
 * address from an unknown one where the bodies are alike.
 *   node scripts/run-tests.mjs --sqlite-only test/limits/every-429-answer.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import express from 'express';
import { type Harness, type HarnessOptions, harnessesClosedAfterFile, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import type { TestResponse } from '../helpers/harness.js';
import { enrollEmail, loginForTicket, nextTotpCode, signUpWithTotp, uniquePhone } from '../helpers/mfa.js';
import { SessionService } from '../../src/services/sessions/session-service.js';
import { listening } from '../helpers/host-app.js';
import { createOrg } from '../helpers/orgs.js';

const startWith = harnessesClosedAfterFile();
const start = (options: HarnessOptions = {}): Promise<Harness> => startWith(options);

/**
 * The one shape of every 429: body {error, message, retry_after}, Retry-After a positive integer
 * equal to retry_after, and the three X-RateLimit-* headers of a rate-limit group, Reset within a
 * second of `nowMs` + Retry-After. `nowMs` is the clock the refusal was decided by.
 */
function assertFull429(response: TestResponse, code: 'rate_limited' | 'too_many_requests', nowMs: number, context: string): { retryAfter: number; limit: number; reset: number } {
  assert.equal(response.status, 429, `${context}: ${response.text}`);
  assert.equal(response.body?.error, code, context);
  assert.equal(typeof response.body?.message, 'string', context);
  const retryAfterText = response.headers.get('retry-after') ?? '';
  assert.match(retryAfterText, /^[1-9][0-9]*$/, `${context}: Retry-After "${retryAfterText}" is a positive whole number of seconds`);
  const retryAfter = Number(retryAfterText);
  assert.equal(response.body.retry_after, retryAfter, `${context}: retry_after agrees with Retry-After`);
  const limitText = response.headers.get('x-ratelimit-limit') ?? '';
  assert.match(limitText, /^[1-9][0-9]*$/, `${context}: X-RateLimit-Limit "${limitText}"`);
  assert.equal(response.headers.get('x-ratelimit-remaining'), '0', `${context}: X-RateLimit-Remaining`);
  const resetText = response.headers.get('x-ratelimit-reset') ?? '';
  assert.match(resetText, /^[1-9][0-9]*$/, `${context}: X-RateLimit-Reset "${resetText}" is epoch seconds`);
  const reset = Number(resetText);
  const expected = nowMs / 1000 + retryAfter;
  assert.ok(Math.abs(reset - expected) <= 1.5, `${context}: X-RateLimit-Reset ${reset} agrees with Retry-After ${retryAfter} (about ${expected})`);
  return { retryAfter, limit: Number(limitText), reset };
}

const headersOf = (response: TestResponse) => ({
  retryAfter: response.headers.get('retry-after'),
  limit: response.headers.get('x-ratelimit-limit'),
  remaining: response.headers.get('x-ratelimit-remaining'),
  reset: response.headers.get('x-ratelimit-reset'),
});

const THRESHOLD = 5;

/** Every failed-attempt slot of the account held, as by attempts being compared on another instance. */
async function holdEverySlot(h: Harness, userId: string): Promise<void> {
  await h.knex(`${h.tablePrefix}users`).where({ id: userId }).update({ attempts_in_flight: THRESHOLD, attempts_in_flight_at: h.clock.now() });
}

/** Runs `call` with the injected clock following real time, as production's does; answers the clock's reading at the answer. */
async function withRunningClock(h: Harness, call: () => Promise<TestResponse>): Promise<{ response: TestResponse; answeredAt: number; waitedMs: number }> {
  const frozen = h.clock.now.bind(h.clock);
  const base = frozen();
  const startedAt = performance.now();
  h.clock.now = () => base + Math.round(performance.now() - startedAt);
  try {
    const response = await call();
    const answeredAt = h.clock.now();
    return { response, answeredAt, waitedMs: answeredAt - base };
  } finally {
    h.clock.now = frozen;
  }
}

describe('the two 429s that had Retry-After alone', () => {
  test('a login that finds every failed-attempt slot held past the wait bound answers the full 429', async () => {
    const h = await start({ config: { password: { bcryptCost: 8 } } });
    const user = await h.signUp();
    await holdEverySlot(h, user.userId);
    const { response: refused, answeredAt, waitedMs } = await withRunningClock(h, () => h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD }));
    assert.ok(waitedMs >= 2500, 'the wait ran its bound');
    const { limit } = assertFull429(refused, 'rate_limited', answeredAt, 'slot wait');
    assert.equal(limit, THRESHOLD, 'the limit is the attempts compared at once (the lockout threshold), the same for every account');
  });

  /*
   * The wait runs in real time (up to 3 s): a reset counted from the instant the attempt began
   * lies in the past by the time it is answered (with the clock of production, which runs), and a
   * client that honours X-RateLimit-Reset retries at once.
   */
  test('a second-factor code whose slot wait runs out answers the full 429 too, its reset after the answer', async () => {
    const h = await start();
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    await holdEverySlot(h, user.userId);
    const code = nextTotpCode(h, user.secret);
    const { response: refused, answeredAt } = await withRunningClock(h, () => h.post('/auth/mfa/verify', { factor_id: user.factorId, code }, { token: ticket }));
    assertFull429(refused, 'rate_limited', answeredAt, 'slot wait at the gate');
  });

  test('a sign-in whose factors changed under every pass of the gate answers the full 429', async () => {
    const h = await start();
    const user = await h.signUp();
    const open = SessionService.prototype.openSignedIn;
    SessionService.prototype.openSignedIn = async function (this: SessionService, ...args: Parameters<typeof open>) {
      if (args[0].id !== user.userId) return open.apply(this, args);
      return undefined;
    };
    try {
      const refused = await h.post('/auth/login', { email: user.email, password: user.password });
      assertFull429(refused, 'rate_limited', h.clock.now(), 'factors changing');
    } finally {
      SessionService.prototype.openSignedIn = open;
    }
  });
});

describe('every other 429: its headers agree, and tell no address apart', () => {
  test('a per-IP group (login) and the authenticated group, on the process clock', async () => {
    const h = await start({ rateLimits: true, config: { auth: { rateLimits: { login: { limit: 2, windowSec: 300 }, authenticated: { limit: 3, windowSec: 60 } } } } });
    for (let n = 0; n < 2; n += 1) await h.post('/auth/login', { email: uniqueEmail(), password: 'wrong password here' });
    const login = assertFull429(await h.post('/auth/login', { email: uniqueEmail(), password: 'wrong password here' }), 'rate_limited', Date.now(), 'login group');
    assert.equal(login.limit, 2);
    assert.ok(login.retryAfter <= 300);

    const other = await start({ rateLimits: true, config: { auth: { rateLimits: { authenticated: { limit: 3, windowSec: 60 } } } } });
    const user = await other.signUp();
    let over: TestResponse | undefined;
    for (let n = 0; n < 6 && !over; n += 1) {
      const response = await other.get('/auth/me', { token: user.accessToken });
      if (response.status === 429) over = response;
    }
    assert.ok(over, 'the authenticated budget refused');
    assert.equal(assertFull429(over, 'rate_limited', Date.now(), 'authenticated group').limit, 3);
  });

  test("a host store that keeps no reset time (express-rate-limit's resetTime is optional): the 429 still names its reset", async () => {
    const counts = new Map<string, number>();
    const store = (group: string) => ({
      prefix: `${group}:`,
      localKeys: false,
      increment: async (key: string) => {
        const totalHits = (counts.get(`${group}:${key}`) ?? 0) + 1;
        counts.set(`${group}:${key}`, totalHits);
        return { totalHits, resetTime: undefined };
      },
      decrement: async (key: string) => {
        counts.set(`${group}:${key}`, Math.max(0, (counts.get(`${group}:${key}`) ?? 1) - 1));
      },
      resetKey: async (key: string) => {
        counts.delete(`${group}:${key}`);
      },
    });
    const h = await start({ rateLimits: true, config: { auth: { rateLimitStore: store, rateLimits: { register: { limit: 1, windowSec: 600 } } } } });
    assert.equal((await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD })).status, 202);
    const over = assertFull429(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD }), 'rate_limited', Date.now(), 'host store without a reset time');
    assert.equal(over.limit, 1);
    assert.equal(over.retryAfter, 600, 'the whole window, as Retry-After already said');
  });

  test("an API key's own budget on the host middleware (CONTRACT 10), the group's headers through the host's app", async () => {
    const h = await start({ rateLimits: true, config: { auth: { rateLimits: { authenticated: { limit: 3, windowSec: 60 } } } } });
    const app = express();
    app.get('/whoami', h.identity.authenticate({ apiKeys: true }), (req, res) => {
      res.json({ data: { caller: h.identity.caller(req) } });
    });
    const host = await listening(app);
    try {
      const org = await createOrg(h);
      const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'budget', permission_keys: ['org.read'] }, { token: org.owner.token });
      assert.equal(created.status, 201, created.text);
      const call = async (): Promise<TestResponse> => {
        const response = await fetch(`${host.base}/whoami`, { headers: { authorization: `Bearer ${created.body.data.key}` } });
        const text = await response.text();
        return { status: response.status, headers: response.headers, text, body: text ? JSON.parse(text) : undefined } as TestResponse;
      };
      for (let n = 0; n < 3; n += 1) assert.equal((await call()).status, 200);
      assert.equal(assertFull429(await call(), 'rate_limited', Date.now(), 'API key budget').limit, 3);
    } finally {
      await host.close();
    }
  });

  test('the challenge resend cooldown (too_many_requests) and an enrollment send budget, on the injected clock', async () => {
    const h = await start();
    const user = await h.signUp();
    const email = await enrollEmail(h, user);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket })).status, 200);
    h.clock.advance(10);
    const cooldown = assertFull429(await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket }), 'too_many_requests', h.clock.now(), 'challenge cooldown');
    assert.equal(cooldown.retryAfter, 20);
    assert.equal(cooldown.limit, 1);

    const phone = uniquePhone();
    for (let index = 0; index < 5; index += 1) {
      const enrolling = await h.signUp(uniqueEmail('pump'));
      assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: enrolling.accessToken })).status, 200);
    }
    const sixth = await h.signUp(uniqueEmail('pump'));
    const budget = assertFull429(await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: sixth.accessToken }), 'rate_limited', h.clock.now(), 'per-destination budget');
    assert.equal(budget.limit, 5);
  });

  test('passwordless start: an unknown address and an account answer the same 429 headers, cooldown and budget alike', async () => {
    const h = await start({ config: { passwordless: {}, otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 } } } } });
    const known = await h.signUp();
    const unknown = uniqueEmail('nobody');
    const startFor = (email: string) => h.post('/auth/passwordless/start', { email });
    for (const email of [known.email, unknown]) assert.equal((await startFor(email)).status, 202);
    h.clock.advance(5);
    const cooldowns = [await startFor(known.email), await startFor(unknown)];
    for (const refused of cooldowns) assertFull429(refused, 'rate_limited', h.clock.now(), 'passwordless cooldown');
    assert.deepEqual(headersOf(cooldowns[0]!), headersOf(cooldowns[1]!), 'the cooldown tells no account apart');

    h.clock.advance(31);
    for (const email of [known.email, unknown]) assert.equal((await startFor(email)).status, 202);
    h.clock.advance(31);
    const budgets = [await startFor(known.email), await startFor(unknown)];
    for (const refused of budgets) assertFull429(refused, 'rate_limited', h.clock.now(), 'passwordless budget');
    assert.deepEqual(headersOf(budgets[0]!), headersOf(budgets[1]!), 'the budget tells no account apart');
    assert.equal(budgets[0]!.headers.get('x-ratelimit-limit'), '2');
  });

  test('the verify budget (passwordless): an unknown address and an account answer the same 429 headers', async () => {
    const h = await start({ config: { passwordless: {}, auth: { lockout: { threshold: 100 } }, otp: { verifyBudget: { limit: 2, windowSec: 900 }, maxAttempts: 10 } } });
    const known = await h.signUp();
    const unknown = uniqueEmail('nobody');
    const refusals: TestResponse[] = [];
    for (const email of [known.email, unknown]) {
      const started = await h.post('/auth/passwordless/start', { email });
      assert.equal(started.status, 202, started.text);
      const challengeId = started.body.data.challenge_id;
      for (let n = 0; n < 2; n += 1) assert.equal((await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code: '000000' })).status, 422);
      refusals.push(await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code: '000000' }));
    }
    for (const refused of refusals) assertFull429(refused, 'rate_limited', h.clock.now(), 'verify budget');
    assert.deepEqual(headersOf(refusals[0]!), headersOf(refusals[1]!), 'the verify budget tells no account apart');
  });
});
