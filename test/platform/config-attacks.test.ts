import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import express from 'express';
import { createIdentityRouter, IdentityConfigError, noopSender, type IdentityConfig } from '../../src/index.js';
import { addressAt, ssoLogin, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import { harnessesClosedAfterFile, MOUNT, uniqueEmail } from '../helpers/harness.js';
import { rawHttp } from '../helpers/raw-request.js';
import { CLIENT_ID, newSubject, REDIRECT_BASE, RETURN_URL, TestOpenIdProvider } from '../helpers/oidc.js';

// An operator's mistakes: a configuration that is accepted but unsafe, or wrong but silent,
// is refused at construction with a problem naming the key (docs/configuration.md).

const database = { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true };
const SECRET = 'operator-secret-that-is-at-least-32-characters';
const valid: IdentityConfig = { database, secret: SECRET, issuer: 'https://id.example.test' };
const quiet = { logger: { info() {}, warn() {}, error() {} } };
const provider = { issuer: 'https://accounts.example.test', clientId: CLIENT_ID, clientSecret: 'provider-client-secret' };
const social = { redirectBase: 'https://id.example.test/identity', returnUrls: ['https://app.example.test/'], providers: { acme: provider } };
const sso = { redirectBase: 'https://id.example.test/identity', returnUrls: ['https://app.example.test/'] };

function problemsOf(config: Record<string, unknown>): string[] {
  let router: ReturnType<typeof createIdentityRouter> | undefined;
  try {
    router = createIdentityRouter({ ...valid, ...config } as IdentityConfig, quiet);
  } catch (error) {
    assert.ok(error instanceof IdentityConfigError, String(error));
    return error.problems;
  }
  void router.close();
  return [];
}

function assertRefused(config: Record<string, unknown>, expected: RegExp): void {
  const problems = problemsOf(config);
  assert.ok(problems.some((problem) => expected.test(problem)), `${JSON.stringify(config)} was not refused with ${expected}: [${problems.join('; ')}]`);
}

test('a misspelled or misplaced option is refused naming it, at every level, never ignored', () => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ requireVerifiedEmail: true }, /"requireVerifiedEmail" is not allowed/],
    [{ auth: { rateLimit: { login: { limit: 1, windowSec: 60 } } } }, /"auth.rateLimit" is not allowed/],
    [{ auth: { requireVerifiedEmails: true } }, /"auth.requireVerifiedEmails" is not allowed/],
    [{ auth: { lockout: { threshhold: 3 } } }, /"auth.lockout.threshhold" is not allowed/],
    [{ auth: { rateLimits: { login: { limit: 3, window: 60 } } } }, /auth.rateLimits.login/],
    [{ tokens: { accessTTL: 60 } }, /"tokens.accessTTL" is not allowed/],
    [{ password: { cost: 14 } }, /"password.cost" is not allowed/],
    [{ password: { argon2: { memory: 65_536 } } }, /"password.argon2.memory" is not allowed/],
    [{ otp: { sendBudget: { perPhone: { limit: 1, windowSec: 60 } } } }, /"otp.sendBudget.perPhone" is not allowed/],
    [{ mfa: { enforced: true } }, /"mfa.enforced" is not allowed/],
    [{ security: { stepUp: { maxAgeSec: 60 } } }, /"security.stepUp.maxAgeSec" is not allowed/],
    [{ links: { resetPasswordUrl: 'https://app.example.test/r?t={token}' } }, /"links.resetPasswordUrl" is not allowed/],
    [{ webhooks: { allowHTTP: true } }, /"webhooks.allowHTTP" is not allowed/],
    [{ events: { delivery: { retention: 5 } } }, /"events.delivery.retention" is not allowed/],
    [{ webauthn: { rpId: 'example.test', origins: ['https://example.test'], origin: 'https://example.test' } }, /"webauthn.origin" is not allowed/],
    [{ social: { ...social, autoLinkByEmails: false } }, /"social.autoLinkByEmails" is not allowed/],
    [{ social: { ...social, providers: { acme: { ...provider, allowSignUp: false } } } }, /"social.providers.acme.allowSignUp" is not allowed/],
    [{ sso: { ...sso, allowPrivateNetwork: true } }, /"sso.allowPrivateNetwork" is not allowed/],
    [{ passwordless: { allowSignUp: true } }, /"passwordless.allowSignUp" is not allowed/],
  ];
  for (const [config, expected] of cases) assertRefused(config, expected);
});

test('a value of the wrong type is refused, not converted (a TTL as a string, a flag as a string)', () => {
  assertRefused({ tokens: { accessTtl: '900' } }, /"tokens.accessTtl" must be a number/);
  assertRefused({ auth: { requireVerifiedEmail: 'true' } }, /"auth.requireVerifiedEmail" must be a boolean/);
  assertRefused({ tokens: { passwordResetTtl: 1.5 } }, /"tokens.passwordResetTtl" must be an integer/);
});

test('a mailed link on plain http: (off loopback), relative, or with userinfo is refused naming the key', () => {
  assertRefused({ links: { resetPassword: 'http://app.example.test/reset?token={token}' } }, /"links.resetPassword" must use https:/);
  assertRefused({ links: { verifyEmail: 'HTTP://app.example.test/verify?token={token}' } }, /"links.verifyEmail" must use https:/);
  assertRefused({ links: { acceptInvite: '/accept?token={token}' } }, /"links.acceptInvite" must be an absolute URL/);
  assertRefused({ links: { resetPassword: 'https://user:pass@app.example.test/reset?token={token}' } }, /"links.resetPassword" must not carry userinfo/);
  assertRefused({ passwordless: { link: true }, links: { passwordlessLogin: 'http://app.example.test/in#token={token}' } }, /"links.passwordlessLogin" must use https:/);
  // Accepted: https, http on loopback (development), an app's own scheme.
  assert.deepEqual(problemsOf({
    links: {
      verifyEmail: 'https://app.example.test/verify?token={token}',
      resetPassword: 'http://localhost:3000/reset?token={token}',
      acceptInvite: 'myapp://invites/accept?token={token}',
    },
  }), []);
});

test('a social client secret equal to "secret" is refused: the root of every key would go to the provider', () => {
  assertRefused({ social: { ...social, providers: { acme: { ...provider, clientSecret: SECRET } } } }, /"social.providers.acme.clientSecret" must not be "secret"/);
  assert.deepEqual(problemsOf({ social }), []);
});

test('a redirectBase with a query, fragment or userinfo is refused for social login and SSO', () => {
  for (const [feature, base] of [['social', social], ['sso', sso]] as const) {
    assertRefused({ [feature]: { ...base, redirectBase: 'https://id.example.test/identity?tenant=1' } }, new RegExp(`"${feature}.redirectBase" must not carry a query or fragment`));
    assertRefused({ [feature]: { ...base, redirectBase: 'https://id.example.test/identity#' } }, new RegExp(`"${feature}.redirectBase" must not carry a query or fragment`));
    assertRefused({ [feature]: { ...base, redirectBase: 'https://admin:pw@id.example.test/identity' } }, new RegExp(`"${feature}.redirectBase" must not carry userinfo`));
    assertRefused({ [feature]: { ...base, redirectBase: 'http://id.example.test/identity' } }, new RegExp(`"${feature}.redirectBase" must be an https: URL`));
  }
});

test('an SSO redirectBase written with a trailing slash still gives a callback the router answers', async () => {
  const dns = new StubDns();
  const op = await TestOpenIdProvider.start();
  const h = await startSsoHarness(op, dns, { sso: { redirectBase: `${REDIRECT_BASE}/`, returnUrls: [RETURN_URL] } });
  try {
    const { domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    assert.equal(connection.redirect_uri, `${REDIRECT_BASE}/auth/sso/${connection.id}/callback`);
    const email = addressAt(domain);
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email, email_verified: true }, { email });
    assert.equal(exchanged?.status, 200, exchanged?.text);
  } finally {
    await h.close();
    await op.close();
  }
});

test('a credential lifetime written in milliseconds is refused, naming the key and the unit, not read as weeks', () => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ tokens: { accessTtl: 900_000 } }, 'tokens.accessTtl'],
    [{ tokens: { mfaTicketTtl: 300_000 } }, 'tokens.mfaTicketTtl'],
    [{ tokens: { passwordResetTtl: 3_600_000 } }, 'tokens.passwordResetTtl'],
    [{ otp: { ttl: 300_000 } }, 'otp.ttl'],
    [{ security: { stepUp: { maxAge: 300_000 } } }, 'security.stepUp.maxAge'],
    // An attacker's five wrong guesses would lock an account for ten days, not fifteen minutes.
    [{ auth: { lockout: { duration: 900_000 } } }, 'auth.lockout.duration'],
    [{ auth: { lockout: { window: 900_000 } } }, 'auth.lockout.window'],
    [{ otp: { resendCooldown: 30_000 } }, 'otp.resendCooldown'],
    [{ social: { ...social, exchangeTtl: 60_000 } }, 'social.exchangeTtl'],
    [{ social: { ...social, stateTtl: 600_000 } }, 'social.stateTtl'],
    [{ sso: { ...sso, exchangeTtl: 60_000 } }, 'sso.exchangeTtl'],
    [{ sso: { ...sso, stateTtl: 600_000 } }, 'sso.stateTtl'],
  ];
  for (const [config, key] of cases) assertRefused(config, new RegExp(`"${key.replaceAll('.', '\\.')}" must be at most \\d+ seconds \\(durations are in seconds, not milliseconds\\)`));
  // The ceilings leave room for any lifetime meant in seconds.
  assert.deepEqual(problemsOf({
    tokens: { accessTtl: 86_400, mfaTicketTtl: 3600, passwordResetTtl: 7 * 86_400 },
    otp: { ttl: 86_400, resendCooldown: 0 },
    security: { stepUp: { maxAge: 86_400 } },
    auth: { lockout: { window: 86_400, duration: 86_400 } },
    social: { ...social, stateTtl: 86_400, exchangeTtl: 3600 },
    sso: { ...sso, stateTtl: 86_400, exchangeTtl: 3600 },
  }), []);
});

/** The warnings logged while constructing a router under `nodeEnv` with real (no-op) adapters. */
async function warningsOf(config: Record<string, unknown>, nodeEnv: string | undefined): Promise<string[]> {
  const warnings: string[] = [];
  const previous = process.env.NODE_ENV;
  process.env.NODE_ENV = nodeEnv;
  if (nodeEnv === undefined) delete process.env.NODE_ENV;
  let router: ReturnType<typeof createIdentityRouter>;
  try {
    router = createIdentityRouter({ ...valid, ...config } as IdentityConfig, { mailer: noopSender, sms: noopSender, logger: { info() {}, error() {}, warn: (message: string) => warnings.push(message) } });
  } finally {
    process.env.NODE_ENV = previous;
    if (previous === undefined) delete process.env.NODE_ENV;
  }
  await router.ready.catch(() => undefined);
  await router.close();
  return warnings;
}

test('in production, a test bcrypt cost, weak argon2 parameters or every rate limit off is not silent', async () => {
  const warned = (warnings: string[], pattern: RegExp) => assert.ok(warnings.some((warning) => pattern.test(warning)), `no warning ${pattern}: [${warnings.join('; ')}]`);
  warned(await warningsOf({ password: { bcryptCost: 4 } }, 'production'), /production but password\.bcryptCost is 4, a test value/);
  warned(await warningsOf({ password: { algorithm: 'argon2id', argon2: { memoryCost: 1024, timeCost: 1 } } }, 'production'), /production but password\.argon2 .* below OWASP/);
  warned(await warningsOf({ auth: { rateLimits: false } }, 'production'), /production but auth\.rateLimits is false/);
  // A cost so high every login takes seconds: a handful of requests would hold every hashing worker.
  warned(await warningsOf({ password: { bcryptCost: 20 } }, 'test'), /password\.bcryptCost 20: each hash takes about 256 times/);
  // Test settings outside production, and the defaults in production, say nothing.
  assert.deepEqual(await warningsOf({ password: { bcryptCost: 4 }, auth: { rateLimits: false } }, 'test'), []);
  assert.deepEqual(await warningsOf({}, 'production'), []);
});

const startHarness = harnessesClosedAfterFile();

test('a host that trusts every proxy hop (trust proxy: true) is told so: the per-IP limits then key on a client-written address', async () => {
  const h = await startHarness({ rateLimits: true });
  const app = express();
  app.set('trust proxy', true);
  app.use(MOUNT, h.identity);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const root = `http://127.0.0.1:${(server.address() as AddressInfo).port}${MOUNT}`;
    const answered = await rawHttp(root, 'POST', '/auth/password/forgot', { 'content-type': 'application/json', 'x-forwarded-for': '203.0.113.9' }, JSON.stringify({ email: uniqueEmail() }));
    assert.equal(answered.status, 202, answered.text);
    assert.ok(h.logs.some((line) => line.level === 'warn' && /ERR_ERL_PERMISSIVE_TRUST_PROXY/.test(line.msg)), h.logs.map((line) => line.msg).join('\n'));
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
