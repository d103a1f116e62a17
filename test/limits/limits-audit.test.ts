/*
 * Audit of the send budgets and rate limits (docs/security.md "Rate limits and budgets",
 * docs/configuration.md `otp.sendBudget`, `invites.sendBudget`). Each block names the threat:
 *
 *   node scripts/run-tests.mjs test/limits/limits-audit.test.ts
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { type Harness, TEST_DB, uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { RateEventRepository } from '../../src/store/audit-repository.js';
import { assertError, countRows } from '../helpers/account.js';
import { createOrg } from '../helpers/orgs.js';
import { eventually } from '../helpers/eventually.js';

const start = harnessesClosedAfterFile();

/** A local part no other test uses, at an internationalised domain. */
const uniqueLocal = (prefix: string) => `${prefix}${Math.random().toString(36).slice(2, 10)}`;

/*
 * Threat: mail-bombing one mailbox through its spellings. `bücher.example`, its A-label
 * `xn--bcher-kva.example` and the same host in full-width letters are one domain (IDNA; the
 * router's own SSO domain rule treats them so), hence one mailbox; each spelling must not
 * open a budget of its own.
 */
test('one mailbox under its U-label, A-label and full-width domain spellings has one invite budget per address', async () => {
  const h = await start({ config: { invites: { sendBudget: { perOrganization: { limit: 50, windowSec: 3600 }, perAddress: { limit: 2, windowSec: 86400 } } } } });
  const local = uniqueLocal('idn');
  const spellings = [`${local}@bücher.example`, `${local}@xn--bcher-kva.example`, `${local}@ｂücher.example`, `${local}@XN--BCHER-KVA.example`];
  const statuses = [];
  for (const email of spellings) {
    const org = await createOrg(h);
    statuses.push((await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token })).status);
  }
  assert.deepEqual(statuses, [201, 201, 429, 429]);
  assert.equal(h.mail.filter((message) => message.template === 'invite' && message.to.startsWith(`${local}@`)).length, 2);
});

test('one mailbox under its domain spellings has one per-destination budget across enrolling accounts', async () => {
  const h = await start({ config: { otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } } });
  const local = uniqueLocal('idn');
  const spellings = [`${local}@bücher.example`, `${local}@xn--bcher-kva.example`, `${local}@ｂücher.example`];
  const statuses = [];
  for (const email of spellings) {
    const account = await h.signUp();
    statuses.push((await h.post('/auth/mfa/email/enroll', { email }, { token: account.accessToken })).status);
  }
  assert.deepEqual(statuses, [200, 200, 429]);
  assert.equal(h.mail.filter((message) => message.template === 'otp_code' && message.to.startsWith(`${local}@`)).length, 2);
});

/*
 * Threat: pumping codes to one address through two routes. Codes sent to an address that is
 * not yet anyone's confirmed factor count per address across accounts (otp.sendBudget
 * perDestination: "codes sent to one phone number or address"); passwordless start mails codes
 * to an address too, and must spend that same budget, not a second one of its own.
 */
test('enrollment codes and passwordless codes to one address spend one per-destination budget', async () => {
  const h = await start({
    config: {
      passwordless: { allowSignup: true },
      otp: { resendCooldown: 1, sendBudget: { perDestination: { limit: 3, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } },
    },
  });
  const target = uniqueEmail('target');
  const enrolls = [];
  for (let attacker = 0; attacker < 2; attacker += 1) {
    const account = await h.signUp();
    enrolls.push((await h.post('/auth/mfa/email/enroll', { email: target }, { token: account.accessToken })).status);
  }
  assert.deepEqual(enrolls, [200, 200]);
  const starts = [];
  for (let attempt = 0; attempt < 3; attempt += 1) {
    h.clock.advance(2);
    starts.push(await h.post('/auth/passwordless/start', { email: target }));
  }
  assert.deepEqual(starts.map((response) => response.status), [202, 429, 429], starts.map((response) => response.text).join('\n'));
  assertError(starts[1]!, 429, 'rate_limited');
  assert.ok(Number(starts[1]!.headers.get('retry-after')) > 3000, `Retry-After ${starts[1]!.headers.get('retry-after')}`);
  assert.equal(h.mail.filter((message) => message.to === target).length, 3);
  // And the other way round: the address's budget, spent, refuses the next enrollment too.
  const late = await h.signUp();
  assertError(await h.post('/auth/mfa/email/enroll', { email: target }, { token: late.accessToken }), 429, 'rate_limited');
});

/*
 * Threat: the budget table growing without bound. Each bucket drops its own old events only
 * when it is spent again, and most buckets (one per address a code or invite ever went to,
 * one per address a stranger typed into passwordless start) are spent once and never again.
 */
test('budget events of buckets never spent again are pruned once every window has passed', async () => {
  const h = await start({ config: { passwordless: {} } });
  for (let address = 0; address < 12; address += 1) {
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('stranger') })).status, 202);
  }
  const before = await countRows(h, 'rate_events');
  assert.ok(before >= 12, `${before} rows`);
  // Past the longest window of every budget (invites.sendBudget.perAddress: a day).
  h.clock.advance(2 * 86400);
  assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('stranger') })).status, 202);
  // The prune runs after the send's commit, outside its transaction.
  await eventually(async () => (await countRows(h, 'rate_events')) <= 2, `the rate events of ended windows pruned (of ${before})`);
});

test('budget events still inside a window are kept by that pruning', async () => {
  const h = await start({ config: { invites: { sendBudget: { perOrganization: { limit: 50, windowSec: 3600 }, perAddress: { limit: 1, windowSec: 3 * 86400 } } } } });
  const org = await createOrg(h);
  const email = uniqueEmail('kept');
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  // Two days on, another budget is spent (and prunes): the invite's 3-day window still counts.
  h.clock.advance(2 * 86400);
  const later = await createOrg(h);
  assert.equal((await h.post(`/orgs/${later.id}/invites`, { email: uniqueEmail('other'), role_slugs: ['member'] }, { token: later.owner.token })).status, 201);
  const other = await createOrg(h);
  assertError(await h.post(`/orgs/${other.id}/invites`, { email, role_slugs: ['member'] }, { token: other.owner.token }), 429, 'rate_limited');
});

/* Checks that hold today (kept as regressions). */

test('X-Forwarded-For is not a key without trust proxy: a spoofed header gets no fresh per-IP budget', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { password_forgot: { limit: 2, windowSec: 3600 } } } } });
  const statuses = [];
  for (let i = 0; i < 4; i += 1) {
    statuses.push((await h.post('/auth/password/forgot', { email: uniqueEmail() }, { headers: { 'x-forwarded-for': `203.0.113.${i + 1}` } })).status);
  }
  assert.deepEqual(statuses, [202, 202, 429, 429]);
});

let shared: Harness;
before(async () => {
  shared = await start({ rateLimits: true, config: { auth: { rateLimits: { register: { limit: 1, windowSec: 600 } } } } });
});

test('a per-IP 429 carries Retry-After within the window and the X-RateLimit headers', async () => {
  await shared.post('/auth/register', { email: uniqueEmail(), password: 'correct horse battery staple' });
  const refused = await shared.post('/auth/register', { email: uniqueEmail(), password: 'correct horse battery staple' });
  assertError(refused, 429, 'rate_limited');
  const retryAfter = Number(refused.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 600, `Retry-After ${retryAfter}`);
  assert.equal(refused.headers.get('x-ratelimit-limit'), '1');
  assert.equal(refused.headers.get('x-ratelimit-remaining'), '0');
});

/*
 * Threat: two routes racing for an address's last slot. Enrollment codes and passwordless codes
 * to one address spend one bucket, so they must also take one lock: a passwordless start that
 * counts while an enrollment has counted but not yet committed waits for it, and then finds the
 * budget spent.
 */
const SKIP_PG_ONLY = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

test('an enrollment and a passwordless start racing for an address\'s last slot: exactly one code goes out', { skip: SKIP_PG_ONLY, timeout: 60_000 }, async () => {
  const h = await start({
    config: { passwordless: { allowSignup: true }, otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } },
  });
  const target = uniqueEmail('race');
  const first = await h.signUp();
  assert.equal((await h.post('/auth/mfa/email/enroll', { email: target }, { token: first.accessToken })).status, 200);
  const second = await h.signUp();
  const { outer, inner } = await withRequestInTheWindow(
    h,
    { prototype: RateEventRepository.prototype, method: 'countSince' },
    () => h.post('/auth/passwordless/start', { email: target }),
    () => h.post('/auth/mfa/email/enroll', { email: target }, { token: second.accessToken }),
  );
  assert.deepEqual([outer.status, inner?.status], [200, 429], `${outer.text}\n${inner?.text}`);
  assert.equal(h.mail.filter((message) => message.to === target).length, 2);
});

/*
 * Threat: flooding one inbox from many IP addresses (each within its own `password_forgot` or
 * `register` group) through the public account routes. The links mailed to one address spend
 * one silent budget (`otp.sendBudget.perDestination`): over it the routes answer 202 as ever,
 * so nothing tells the address's account apart, and nothing is retired, written or sent.
 */
test('reset and verification links mailed to one address stop at its budget, silently; the next window sends again', async () => {
  const h = await start({ config: { otp: { sendBudget: { perDestination: { limit: 3, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } } });
  const resets = (email: string) => h.mail.filter((message) => message.template === 'password_reset' && message.to === email).length;
  const account = await h.signUp();
  for (let request = 0; request < 6; request += 1) assert.equal((await h.post('/auth/password/forgot', { email: account.email })).status, 202);
  // Three links in the window: the one that verified the address at sign-up, then two resets.
  assert.equal(resets(account.email), 2);
  // The link the last mail carried still resets: an over-budget request retired nothing.
  const token = h.tokenFromMail(account.email, 'password_reset');
  assert.equal((await h.post('/auth/password/reset', { token, new_password: 'another strong passphrase 42' })).status, 200);
  h.clock.advance(3601);
  assert.equal((await h.post('/auth/password/forgot', { email: account.email })).status, 202);
  assert.equal(resets(account.email), 3);

  // Registration's link and resends share the address's budget.
  const email = uniqueEmail();
  assert.equal((await h.post('/auth/register', { email, password: 'a strong passphrase 42' })).status, 202);
  for (let request = 0; request < 5; request += 1) assert.equal((await h.post('/auth/email/verify/resend', { email })).status, 202);
  assert.equal(h.mail.filter((message) => message.template === 'verify_email' && message.to === email).length, 3);
});
