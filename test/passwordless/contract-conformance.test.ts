/*
 * CONTRACT 11 (passwordless sign-in by e-mail) and 10 (API keys), sentence by sentence: the
 * requirements no other file proves. Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/passwordless/contract-conformance.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, registerOnly } from '../helpers/account.js';
import { decodeJwt, Harness, type SignedUpUser, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { TestOpenIdProvider } from '../helpers/oidc.js';
import { addressAt, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import { servicesOf } from '../../src/create-identity-router.js';

const LINK_PAGE = 'https://app.example.test/sign-in/link#token={token}';
const FULL = { passwordless: { link: true, allowSignup: true }, links: { passwordlessLogin: LINK_PAGE } };

const harnesses: Harness[] = [];
async function startHarness(config: Record<string, unknown>): Promise<Harness> {
  const h = await Harness.start({ config });
  harnesses.push(h);
  return h;
}
after(async () => {
  for (const h of harnesses.reverse()) await h.close();
});

async function start(h: Harness, email: string): Promise<string> {
  const started = await h.post('/auth/passwordless/start', { email });
  assert.equal(started.status, 202, started.text);
  return started.body.data.challenge_id;
}

function mailed(h: Harness, email: string): { code: string; token: string | undefined } {
  const message = h.lastMail(email, 'login_code');
  if (!message) throw new Error(`no login_code mail to ${email}`);
  return { code: String(message.context.code), token: message.context.token as string | undefined };
}

const verifyCode = (h: Harness, challengeId: string, code: string) => h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
const wrongCode = (code: string) => (code === '000000' ? '111111' : '000000');

let h: Harness;
before(async () => {
  h = await startHarness(FULL);
});

describe('CONTRACT 11, start', () => {
  test('a start that mails nothing (over the per-account budget) supersedes nothing: the open code still signs in', async () => {
    const budgeted = await startHarness({ ...FULL, otp: { sendBudget: { perAccount: { limit: 1, windowSec: 3600 } } } });
    const user = await budgeted.signUp();
    const first = await start(budgeted, user.email);
    const { code } = mailed(budgeted, user.email);
    budgeted.clock.advance(31);
    const mails = budgeted.mail.length;
    await start(budgeted, user.email);
    assert.equal(budgeted.mail.length, mails, 'over the per-account budget: no mail');
    const answer = await verifyCode(budgeted, first, code);
    assert.equal(answer.status, 200, `only a start that mails supersedes: ${answer.text}`);
  });

  test('a code-only config mails exactly {code, ttl, app_name}: otp.length digits, ttl in seconds', async () => {
    const codeOnly = await startHarness({ passwordless: { ttl: 120 }, otp: { length: 8 } });
    const user = await codeOnly.signUp();
    const started = await codeOnly.post('/auth/passwordless/start', { email: user.email });
    assert.equal(started.status, 202);
    assert.deepEqual(Object.keys(started.body.data).sort(), ['challenge_id', 'expires_in']);
    assert.equal(started.body.data.expires_in, 120);
    const message = codeOnly.lastMail(user.email, 'login_code')!;
    assert.deepEqual(Object.keys(message.context).sort(), ['app_name', 'code', 'ttl']);
    assert.match(String(message.context.code), /^\d{8}$/);
    assert.equal(message.context.ttl, 120);
  });
});

describe('CONTRACT 11, verify', () => {
  test('a new start resets no lockout count: failures on two challenges add up to the threshold, user.locked reason email_code', async () => {
    const user = await h.signUp();
    const first = await start(h, user.email);
    const firstCode = mailed(h, user.email).code;
    for (let attempt = 0; attempt < 3; attempt += 1) assertError(await verifyCode(h, first, wrongCode(firstCode)), 422, 'invalid_code');
    h.clock.advance(31);
    const second = await start(h, user.email);
    const secondCode = mailed(h, user.email).code;
    const lockedBefore = h.eventsOfType('user.locked').length;
    for (let attempt = 0; attempt < 2; attempt += 1) assertError(await verifyCode(h, second, wrongCode(secondCode)), 422, 'invalid_code');
    assert.equal(h.eventsOfType('user.locked').length, lockedBefore + 1, 'the fifth failure, across two challenges, locks');
    assert.equal(h.eventsOfType('user.locked').at(-1)!.data.reason, 'email_code');
    assertError(await verifyCode(h, second, secondCode), 422, 'invalid_code', 'a live lockout refuses the right code');
  });

  test('an expired link answers 422 invalid_code and emits user.login_failed {method: email_link, reason: invalid_code}', async () => {
    const user = await h.signUp();
    await start(h, user.email);
    const { token } = mailed(h, user.email);
    h.clock.advance(601);
    assertError(await h.post('/auth/passwordless/verify', { token }), 422, 'invalid_code');
    const failed = h.eventsOfType('user.login_failed').at(-1)!;
    assert.equal(failed.user_id, user.userId);
    assert.deepEqual(failed.data, { method: 'email_link', reason: 'invalid_code' });
  });

  test('a code proves the address once: email_verified true, user.email_verified only the first time', async () => {
    const email = uniqueEmail('unproven');
    await registerOnly(h, email, STRONG_PASSWORD);
    const proofs = () => h.eventsOfType('user.email_verified').filter((event) => event.data.method === 'email_code' || event.data.method === 'email_link');
    const before = proofs().length;
    const first = await verifyCode(h, await start(h, email), mailed(h, email).code);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.data.user.email_verified, true);
    assert.equal(first.body.data.is_new_user, false);
    assert.equal(proofs().length, before + 1);
    h.clock.advance(31);
    const second = await verifyCode(h, await start(h, email), mailed(h, email).code);
    assert.equal(second.status, 200, second.text);
    assert.equal(proofs().length, before + 1, 'no second user.email_verified');
  });

  test('a refusal on an account\'s challenge over the verify budget (429) emits user.login_failed with reason rate_limited', async () => {
    const budgeted = await startHarness({ ...FULL, otp: { verifyBudget: { limit: 2, windowSec: 900 } }, auth: { lockout: { threshold: 50 } } });
    const user = await budgeted.signUp();
    const challengeId = await start(budgeted, user.email);
    const { code } = mailed(budgeted, user.email);
    for (let attempt = 0; attempt < 2; attempt += 1) assertError(await verifyCode(budgeted, challengeId, wrongCode(code)), 422, 'invalid_code');
    const refused = await verifyCode(budgeted, challengeId, code);
    assertError(refused, 429, 'rate_limited');
    const failed = budgeted.eventsOfType('user.login_failed').at(-1)!;
    assert.equal(failed.user_id, user.userId);
    assert.deepEqual(failed.data, { method: 'email_code', reason: 'rate_limited' }, 'reason is the error code answered (CONTRACT 11, Events)');
  });

  test('a link sign-in of an existing account says is_new_user false; a sign-up by code says true with user.registered {method: email_code}', async () => {
    const user = await h.signUp();
    await start(h, user.email);
    const existing = await h.post('/auth/passwordless/verify', { token: mailed(h, user.email).token });
    assert.equal(existing.status, 200, existing.text);
    assert.equal(existing.body.data.is_new_user, false);
    assert.deepEqual(decodeJwt(existing.body.data.access_token).amr, ['email']);

    const email = uniqueEmail('newcomer');
    const created = await verifyCode(h, await start(h, email), mailed(h, email).code);
    assert.equal(created.status, 200, created.text);
    assert.equal(created.body.data.is_new_user, true);
    assert.equal(created.body.data.user.email_verified, true);
    const registered = h.eventsOfType('user.registered').at(-1)!;
    assert.equal(registered.user_id, created.body.data.user.id);
    assert.deepEqual(registered.data, { method: 'email_code' });
    assert.deepEqual(h.eventsOfType('user.logged_in').at(-1)!.data, { mfa: false, amr: ['email'], method: 'email_code' });
  });

  test('a refusal on the challenge of a disabled account emits user.login_failed; one with no account emits nothing', async () => {
    const codeOnly = await startHarness({ passwordless: {} });
    const disabled = await codeOnly.signUp();
    await servicesOf(codeOnly.identity).context.store.repos.users.setStatus(disabled.userId, 'disabled', codeOnly.clock.now());
    const challengeId = await start(codeOnly, disabled.email);
    assertError(await verifyCode(codeOnly, challengeId, '123456'), 422, 'invalid_code');
    const failed = codeOnly.eventsOfType('user.login_failed').at(-1)!;
    assert.equal(failed.user_id, disabled.userId);
    assert.deepEqual(failed.data, { method: 'email_code', reason: 'invalid_code' });
    const count = codeOnly.eventsOfType('user.login_failed').length;
    const strangerChallenge = await start(codeOnly, uniqueEmail('stranger'));
    assertError(await verifyCode(codeOnly, strangerChallenge, '123456'), 422, 'invalid_code');
    assert.equal(codeOnly.eventsOfType('user.login_failed').length, count);
  });
});

describe('CONTRACT 11 and 12: an address under SSO enforcement', () => {
  let op: TestOpenIdProvider;
  let sso: Harness;
  const dns = new StubDns();
  let employee: SignedUpUser;
  let colleague: SignedUpUser;
  let domain: string;
  before(async () => {
    op = await TestOpenIdProvider.start();
    sso = await startSsoHarness(op, dns, { config: { passwordless: { link: true }, links: { passwordlessLogin: LINK_PAGE } } });
    const setup = await ssoOrg(sso, dns, op, { jit: true });
    // Signed up before enforcement, as the people of a company that turns it on are.
    domain = setup.domain;
    employee = await sso.signUp(addressAt(setup.domain, 'employee'));
    colleague = await sso.signUp(addressAt(setup.domain, 'colleague'));
    const enforced = await sso.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: setup.org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
  });
  after(async () => {
    await sso.close();
    await op.close();
  });

  test('the right code or link answers 403 sso_required, never at start, and emits user.login_failed with reason sso_required; nothing is consumed', async () => {
    const started = await sso.post('/auth/passwordless/start', { email: employee.email });
    assert.equal(started.status, 202, started.text);
    const { code, token } = mailed(sso, employee.email);
    assertError(await verifyCode(sso, started.body.data.challenge_id, code), 403, 'sso_required');
    let failed = sso.eventsOfType('user.login_failed').at(-1);
    assert.equal(failed?.user_id, employee.userId);
    assert.deepEqual(failed?.data, { method: 'email_code', reason: 'sso_required' });
    assertError(await sso.post('/auth/passwordless/verify', { token }), 403, 'sso_required', 'the link of the same challenge: not consumed by the refusal');
    failed = sso.eventsOfType('user.login_failed').at(-1);
    assert.deepEqual(failed?.data, { method: 'email_link', reason: 'sso_required' });
  });

  test('a wrong code gets the same 403 as the right one, from the domain alone, and counts toward no lockout', async () => {
    // CONTRACT 12.6: "The answer comes from the domain alone, before any password check ... it counts toward no lockout."
    sso.clock.advance(31);
    const started = await sso.post('/auth/passwordless/start', { email: colleague.email });
    assert.equal(started.status, 202, started.text);
    const { code } = mailed(sso, colleague.email);
    for (let attempt = 0; attempt < 6; attempt += 1) assertError(await verifyCode(sso, started.body.data.challenge_id, wrongCode(code)), 403, 'sso_required', `wrong code ${attempt}`);
    const [row] = await sso.knex(`${sso.tablePrefix}users`).where({ id: colleague.userId });
    assert.equal(Number(row.failed_login_count ?? 0), 0, 'no failure counted');
    assert.equal(row.locked_until ?? null, null, 'not locked');
  });

  test('an address at the domain with no account gets the same 403, whatever the code', async () => {
    const stranger = addressAt(domain, 'stranger');
    const started = await sso.post('/auth/passwordless/start', { email: stranger });
    assert.equal(started.status, 202, started.text);
    assertError(await verifyCode(sso, started.body.data.challenge_id, '123456'), 403, 'sso_required', 'no account: the answer does not depend on it');
  });
});
