/*
 * Account enumeration: what an attacker without a credential sees on every public route, for an
 * unknown address and for each kind of account (unverified, verified, disabled, locked, deleted,
 * with MFA, without a password, a superadmin, at a domain that requires single sign-on). The
 * answers are compared whole (status, body, headers) and the work is compared structurally: the
 * password hasher is asked to compare exactly once on every login path (a spy on the hasher the
 * router holds; the database is real). SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/accounts/enumeration-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { Harness, type SignedUpUser, STRONG_PASSWORD, type TestResponse, uniqueEmail } from '../helpers/harness.js';
import { TestOpenIdProvider } from '../helpers/oidc.js';
import { addressAt, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import { insertConfirmedTotpFactor } from '../helpers/users.js';
import { servicesOf } from '../../src/create-identity-router.js';

const WRONG = 'not the password at all';
const wrongCode = (code: string) => (code === '000000' ? '111111' : '000000');

/** Rate-limit headers count this client's requests: their names are compared, their counts apart. */
const COUNTING = /^(x-)?ratelimit-(remaining|reset)$/;

/** The answer as an attacker compares it: status, body text (field order and wording) and every header but the date. */
function shapeOf(response: TestResponse): string {
  const headers: string[] = [];
  response.headers.forEach((value, name) => {
    if (name !== 'date') headers.push(COUNTING.test(name) ? name : `${name}: ${value}`);
  });
  return JSON.stringify({ status: response.status, text: response.text, headers });
}

/** The algorithm and cost of a hash (`$2b$04`, `$argon2id$v=19$m=1024,t=1,p=1`): what a comparison against it costs. */
function costOf(hash: string): string {
  return /^\$(?:2[abxy]\$\d\d|argon2id\$v=\d+\$m=\d+,t=\d+,p=\d+)/.exec(hash)?.[0] ?? hash;
}

/** The comparisons the router's hasher is asked for while `work` runs: the cost of each hash compared against. */
async function comparisonsDuring<T>(h: Harness, work: () => Promise<T>): Promise<{ result: T; compared: string[] }> {
  const hasher = servicesOf(h.identity).context.hasher;
  const verify = hasher.verify;
  const compared: string[] = [];
  hasher.verify = function (this: typeof hasher, ...args: Parameters<typeof verify>) {
    compared.push(costOf(args[1]));
    return verify.apply(hasher, args);
  };
  try {
    return { result: await work(), compared };
  } finally {
    hasher.verify = verify;
  }
}

describe('passwordless verify at a domain that requires single sign-on', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  const dns = new StubDns();
  let employee: SignedUpUser;
  let root: SignedUpUser;
  let domain: string;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await startSsoHarness(op, dns, {
      config: { passwordless: {}, otp: { verifyBudget: { limit: 3, windowSec: 900 } }, auth: { lockout: { threshold: 50 } } },
    });
    const setup = await ssoOrg(h, dns, op);
    domain = setup.domain;
    employee = await h.signUp(addressAt(domain, 'employee'));
    root = await h.signUp(addressAt(domain, 'root'));
    await h.identity.service.grantSuperadmin(root.userId);
    const enforced = await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: setup.org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
  });
  after(async () => {
    await h.close();
    await op.close();
  });

  test('a superadmin is not told apart by wrong codes reaching the verify budget: 403 sso_required for every address, however many', async () => {
    // CONTRACT 12.6: without a right credential a superadmin's address answers what every address
    // there gets. Its wrong codes are compared and counted (it is exempt with a right one), so past
    // otp.verifyBudget it answered 429 rate_limited where everyone else kept getting 403.
    const answers = new Map<string, string[]>();
    for (const [who, email] of [
      ['nobody', addressAt(domain, 'nobody')],
      ['employee', employee.email],
      ['superadmin', root.email],
    ] as const) {
      const started = await h.post('/auth/passwordless/start', { email });
      assert.equal(started.status, 202, started.text);
      const code = String(h.lastMail(email, 'login_code')?.context.code ?? '123456');
      const seen: string[] = [];
      for (let attempt = 0; attempt < 6; attempt += 1) {
        const answer = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: wrongCode(code) });
        assertError(answer, 403, 'sso_required', `${who}, wrong code ${attempt}`);
        seen.push(shapeOf(answer));
      }
      answers.set(who, seen);
    }
    assert.deepEqual(answers.get('superadmin'), answers.get('nobody'));
    assert.deepEqual(answers.get('employee'), answers.get('nobody'));
  });
});

/** Every kind of address an attacker may type, on one router (no single sign-on). */
interface Population {
  [kind: string]: string;
}

async function populate(h: Harness): Promise<Population> {
  const users = `${h.tablePrefix}users`;
  const unverified = uniqueEmail('unverified');
  const registered = await h.post('/auth/register', { email: unverified, password: STRONG_PASSWORD });
  assert.equal(registered.status, 202, registered.text);
  const verified = await h.signUp(uniqueEmail('verified'));
  const disabled = await h.signUp(uniqueEmail('disabled'));
  await h.knex(users).where({ id: disabled.userId }).update({ status: 'disabled' });
  const locked = await h.signUp(uniqueEmail('locked'));
  await h.knex(users).where({ id: locked.userId }).update({ locked_until: h.clock.now() + 600_000 });
  const deleted = await h.signUp(uniqueEmail('deleted'));
  const gone = await h.delete(`/users/${deleted.userId}`, { token: deleted.accessToken });
  assert.equal(gone.status, 200, gone.text);
  const withMfa = await h.signUp(uniqueEmail('mfa'));
  await insertConfirmedTotpFactor(h, withMfa.userId);
  const withoutPassword = await h.signUp(uniqueEmail('nopassword'));
  await h.knex(users).where({ id: withoutPassword.userId }).update({ password_hash: null });
  const superadmin = await h.signUp(uniqueEmail('root'));
  await h.identity.service.grantSuperadmin(superadmin.userId);
  return {
    unknown: uniqueEmail('unknown'),
    unverified,
    verified: verified.email,
    disabled: disabled.email,
    locked: locked.email,
    deleted: deleted.email,
    'with MFA': withMfa.email,
    'without a password': withoutPassword.email,
    superadmin: superadmin.email,
  };
}

function assertAllAlike(answers: Map<string, TestResponse>, route: string): void {
  const reference = shapeOf(answers.get('unknown')!);
  for (const [kind, answer] of answers) assert.equal(shapeOf(answer), reference, `${route}: ${kind} answers unlike an unknown address`);
}

describe('the public account routes answer every address alike', () => {
  let h: Harness;
  let people: Population;
  before(async () => {
    // Rate limits on (high, so none refuses): their headers are part of what is compared.
    const generous = { limit: 10_000, windowSec: 60 };
    h = await Harness.start({
      rateLimits: true,
      config: { auth: { requireVerifiedEmail: true, rateLimits: { login: generous, register: generous, password_forgot: generous, token_consume: generous, authenticated: generous } } },
    });
    people = await populate(h);
  });
  after(async () => {
    await h?.close();
  });

  test('POST /auth/login with a wrong password: one 401 invalid_credentials, and exactly one comparison against a hash of the configured cost, for every kind', async () => {
    const answers = new Map<string, TestResponse>();
    for (const [kind, email] of Object.entries(people)) {
      const { result, compared } = await comparisonsDuring(h, () => h.post('/auth/login', { email, password: WRONG }));
      answers.set(kind, result);
      assertError(result, 401, 'invalid_credentials', kind);
      assert.deepEqual(compared, ['$2b$04'], `${kind}: one comparison, against a bcrypt hash of cost 4`);
    }
    assert.ok([...shapeOf(answers.get('unknown')!).matchAll(/ratelimit/gi)].length > 0, 'the rate-limit headers are among those compared');
    assertAllAlike(answers, 'login');
  });

  test('POST /auth/register, /auth/email/verify/resend and /auth/password/forgot: one 202 for every kind; mail only where due', async () => {
    const due: Record<string, Record<string, string | undefined>> = {
      register: { unknown: 'verify_email', deleted: 'verify_email' },
      resend: { unverified: 'verify_email' },
      forgot: { unverified: 'password_reset', verified: 'password_reset', locked: 'password_reset', 'with MFA': 'password_reset', 'without a password': 'password_reset', superadmin: 'password_reset' },
    };
    for (const [route, path, body] of [
      ['resend', '/auth/email/verify/resend', (email: string) => ({ email })],
      ['forgot', '/auth/password/forgot', (email: string) => ({ email })],
      // Last: a register of the deleted account's address makes a new account there.
      ['register', '/auth/register', (email: string) => ({ email, password: 'another long passphrase 9' })],
    ] as const) {
      // Fresh addresses where the route would create something (register of an unknown or freed address).
      const answers = new Map<string, TestResponse>();
      for (const [kind, email] of Object.entries(people)) {
        const target = route === 'register' && (kind === 'unknown' || kind === 'deleted') ? (kind === 'unknown' ? uniqueEmail('unknown') : email) : email;
        const mails = h.mail.length;
        const answer = await h.post(path, body(target));
        assert.equal(answer.status, 202, `${route} ${kind}: ${answer.text}`);
        answers.set(kind, answer);
        const sent = h.mail.slice(mails).map((message) => message.template);
        assert.deepEqual(sent, due[route]![kind] ? [due[route]![kind]] : [], `${route} ${kind}: mail`);
      }
      assertAllAlike(answers, route);
    }
  });
});

describe('a login at a domain that requires single sign-on while the account is being guessed', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  const dns = new StubDns();
  let employee: SignedUpUser;
  let root: SignedUpUser;
  let locked: SignedUpUser;
  let passwordless: SignedUpUser;
  let domain: string;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await startSsoHarness(op, dns, { config: { passwordless: {} } });
    const setup = await ssoOrg(h, dns, op);
    domain = setup.domain;
    employee = await h.signUp(addressAt(domain, 'employee'));
    root = await h.signUp(addressAt(domain, 'root'));
    await h.identity.service.grantSuperadmin(root.userId);
    locked = await h.signUp(addressAt(domain, 'root-locked'));
    passwordless = await h.signUp(addressAt(domain, 'root-nopw'));
    for (const admin of [locked, passwordless]) await h.identity.service.grantSuperadmin(admin.userId);
    const enforced = await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: setup.org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
  });
  after(async () => {
    await h?.close();
    await op?.close();
  });

  test('a wrong password costs exactly one comparison for nobody, an employee, a superadmin, a locked superadmin and one without a password, all answered alike', async () => {
    const users = `${h.tablePrefix}users`;
    await h.knex(users).where({ id: locked.userId }).update({ locked_until: h.clock.now() + 600_000 });
    await h.knex(users).where({ id: passwordless.userId }).update({ password_hash: null });
    const shapes = new Map<string, string>();
    for (const [who, email] of [
      ['nobody', addressAt(domain, 'nobody')],
      ['employee', employee.email],
      ['superadmin', root.email],
      ['locked superadmin', locked.email],
      ['superadmin without a password', passwordless.email],
    ] as const) {
      const { result, compared } = await comparisonsDuring(h, () => h.post('/auth/login', { email, password: WRONG }));
      assertError(result, 403, 'sso_required', who);
      assert.deepEqual(compared, ['$2b$04'], `${who}: one comparison, at the configured cost`);
      shapes.set(who, shapeOf(result));
    }
    assert.equal(new Set(shapes.values()).size, 1, [...shapes].join('\n'));
  });

  test('every failed-attempt slot held (a hashing backlog, other instances): a superadmin still answers 403 sso_required, not 429', async () => {
    // Only a superadmin's attempt takes a slot at an enforcing domain; with every slot held by
    // attempts still being compared it waited and answered 429 rate_limited past the bound, where
    // every other address there answers 403 at once (CONTRACT 12.6: the answer is 403 unless the
    // superadmin's credential is right; here nothing was compared).
    const users = `${h.tablePrefix}users`;
    await h.knex(users).where({ id: root.userId }).update({ attempts_in_flight: 5, attempts_in_flight_at: h.clock.now() });
    try {
      const { result: answers, compared } = await comparisonsDuring(h, async () => {
        const byRoot = await h.post('/auth/login', { email: root.email, password: WRONG });
        const byEmployee = await h.post('/auth/login', { email: employee.email, password: WRONG });
        return { byRoot, byEmployee };
      });
      assertError(answers.byEmployee, 403, 'sso_required', 'employee');
      assertError(answers.byRoot, 403, 'sso_required', 'superadmin with every slot held');
      assert.equal(shapeOf(answers.byRoot), shapeOf(answers.byEmployee));
      assert.deepEqual(compared, ['$2b$04', '$2b$04'], 'one comparison each (the dummy hash where nothing may be compared)');

      const started = await h.post('/auth/passwordless/start', { email: root.email });
      assert.equal(started.status, 202, started.text);
      const verified = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: '123456' });
      assertError(verified, 403, 'sso_required', 'passwordless verify of a superadmin with every slot held');
    } finally {
      await h.knex(users).where({ id: root.userId }).update({ attempts_in_flight: 0 });
    }
  });
});

describe('with argon2id configured', () => {
  let h: Harness;
  let people: Population;
  before(async () => {
    h = await Harness.start({ config: { password: { algorithm: 'argon2id', bcryptCost: 4, argon2: { memoryCost: 1024, timeCost: 1, parallelism: 1 } } } });
    people = await populate(h);
  });
  after(async () => {
    await h?.close();
  });

  test('a wrong password is compared once against an argon2id hash of the configured parameters, whoever the address is', async () => {
    for (const [kind, email] of Object.entries(people)) {
      const { result, compared } = await comparisonsDuring(h, () => h.post('/auth/login', { email, password: WRONG }));
      assertError(result, 401, 'invalid_credentials', kind);
      assert.deepEqual(compared, ['$argon2id$v=19$m=1024,t=1,p=1'], `${kind}: one comparison against the configured argon2id`);
    }
  });
});
