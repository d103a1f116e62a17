import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig } from '../../src/index.js';
import { resolveConfig } from '../../src/config/schema.js';

// docs/configuration.md: the config is checked at construction and every problem is listed at once (STYLE 8).

const database = { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true };
const valid: IdentityConfig = { database, secret: 's'.repeat(32), issuer: 'https://id.example.test' };
const quiet = { logger: { info() {}, warn() {}, error() {} } };

function problemsOf(config: unknown): string[] {
  try {
    createIdentityRouter(config as IdentityConfig, quiet);
  } catch (error) {
    assert.ok(error instanceof IdentityConfigError, String(error));
    assert.equal(error.name, 'IdentityConfigError');
    for (const problem of error.problems) assert.ok(error.message.includes(problem), 'the message lists every problem');
    return error.problems;
  }
  assert.fail('createIdentityRouter accepted an invalid config');
}

test('a bad config throws IdentityConfigError listing every problem', () => {
  const problems = problemsOf({ database, issuer: '' });
  assert.equal(problems.length, 2, problems.join('; '));
  assert.ok(problems.some((problem) => /"secret" is required/.test(problem)), problems.join('; '));
  assert.ok(problems.some((problem) => /"issuer"/.test(problem)), problems.join('; '));
});

test('each rule of the config schema is enforced', () => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ secret: 'too short' }, /"secret" length must be at least 32/],
    [{ database: undefined }, /"database" is required/],
    [{ database: 'sqlite://file' }, /"database"/],
    [{ tokens: { accessTtl: 0 } }, /"tokens.accessTtl"/],
    [{ tokens: { refreshRotation: 'yes' } }, /"tokens.refreshRotation"/],
    [{ password: { bcryptCost: 3 } }, /"password.bcryptCost"/],
    [{ password: { minLength: 20, maxLength: 10 } }, /minLength" must not exceed/],
    [{ auth: { lockout: { threshold: 0 } } }, /"auth.lockout.threshold"/],
    [{ auth: { rateLimits: { login: { limit: 0, windowSec: 60 } } } }, /auth.rateLimits.login/],
    [{ links: { verifyEmail: 'https://app.example/verify' } }, /"links.verifyEmail"/],
    [{ tablePrefix: 'Bad-Prefix' }, /"tablePrefix"/],
    [{ unknownOption: true }, /"unknownOption" is not allowed/],
  ];
  for (const [override, expected] of cases) {
    const problems = problemsOf({ ...valid, ...override });
    assert.ok(problems.some((problem) => expected.test(problem)), `${JSON.stringify(override)} → ${problems.join('; ')}`);
  }
});

test('a database config object is checked too: its client, its connection and its table prefix', () => {
  // Before, each passed: Knex asked to install sqlite3 (which the router cannot run on), a missing
  // connection (an unset DATABASE_URL) failed start-up with "Unable to acquire a connection" or a
  // TypeError, and a bad database.tablePrefix failed the migrations; each then answered 503.
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ client: 'sqlite3', connection: { filename: ':memory:' } }, /"database.client" must be "better-sqlite3" \(SQLite\) or "pg"/],
    [{ client: 'mysql2', connection: 'mysql://localhost/app' }, /"database.client"/],
    [{ client: 'pg', connection: undefined }, /"database.connection" is required/],
    [{ client: 'better-sqlite3', useNullAsDefault: true }, /"database.connection" is required/],
    [{ ...database, tablePrefix: 'Bad-Prefix; --' }, /"database.tablePrefix"/],
  ];
  for (const [databaseConfig, expected] of cases) {
    const problems = problemsOf({ ...valid, database: databaseConfig });
    assert.ok(problems.some((problem) => expected.test(problem)), `${JSON.stringify(databaseConfig)} → ${problems.join('; ')}`);
  }
  assert.equal(problemsOf({ ...valid, database: { client: 'oracledb', tablePrefix: 'X' } }).length, 3, 'every problem of the object at once');
});

test('a database driver that is not installed is a config error naming the package, and no stack reaches the log', () => {
  // A host on PostgreSQL that did `npm install identity-router express` only: Knex logged the
  // require error with its stack through the host's logger, then threw a plain Error.
  const moduleLoader = createRequire(import.meta.url)('node:module') as { _load: (request: string, ...rest: unknown[]) => unknown };
  const load = moduleLoader._load;
  moduleLoader._load = function (this: unknown, request: string, ...rest: unknown[]) {
    if (request === 'pg') throw Object.assign(new Error("Cannot find module 'pg'"), { code: 'MODULE_NOT_FOUND' });
    return load.call(this, request, ...rest);
  };
  const logged: string[] = [];
  const logger = { info() {}, warn() {}, error: (message: string, meta?: object) => void logged.push(`${message} ${JSON.stringify(meta ?? {})}`) };
  try {
    createIdentityRouter({ ...valid, database: { client: 'pg', connection: 'postgres://localhost/app' } }, { logger });
    assert.fail('createIdentityRouter accepted a client whose driver is missing');
  } catch (error) {
    assert.ok(error instanceof IdentityConfigError, String(error));
    assert.match(error.problems.join('\n'), /"database.client" is "pg", but its driver could not be loaded \(Cannot find module 'pg'\): install it in the host app, npm install pg/);
  } finally {
    moduleLoader._load = load;
  }
  assert.deepEqual(logged.filter((line) => /\n\s+at /.test(line)), [], 'no stack trace in the log');
});

test('an adapter of the wrong shape is a config error at construction, not a failure at every delivery', async () => {
  // Before: a nodemailer transporter passed as the mailer started, answered every registration 202
  // and logged "this.context.mailer.send is not a function" for each mail, which never left.
  async function problemsOfAdapters(adapters: unknown): Promise<string[]> {
    let router: ReturnType<typeof createIdentityRouter> | undefined;
    try {
      router = createIdentityRouter({ ...valid, password: { bcryptCost: 4, workers: 1 } }, adapters as never);
    } catch (error) {
      assert.ok(error instanceof IdentityConfigError, String(error));
      return error.problems;
    }
    await router.ready.catch(() => undefined);
    await router.close();
    return assert.fail(`createIdentityRouter accepted the adapters ${JSON.stringify(adapters)}`);
  }
  const transporter = { sendMail: async () => ({}) };
  assert.match((await problemsOfAdapters({ ...quiet, mailer: transporter })).join('\n'), /"mailer" is a nodemailer transporter.*createNodemailerMailer\(transporter, \{ from \}\)/);
  const all = await problemsOfAdapters({ mailer: {}, sms: { sendSms() {} }, onEvent: 'audit', clock: () => Date.now(), logger: { log() {} }, dns: { lookup: 'yes' } });
  assert.equal(all.length, 6, all.join('\n'));
  for (const name of ['mailer', 'sms', 'onEvent', 'clock', 'logger', 'dns']) assert.ok(all.some((problem) => problem.startsWith(`"${name}"`)), `${name}: ${all.join('; ')}`);
  assert.match((await problemsOfAdapters(null)).join(''), /the adapters, the second argument of createIdentityRouter, must be an object/);
});

test('a missing config object is a config error, not a TypeError', () => {
  assert.ok(problemsOf(undefined).some((problem) => /config object is required/.test(problem)));
});

test('an unknown rate-limit group is a config error', () => {
  const problems = problemsOf({ ...valid, auth: { rateLimits: { login: { limit: 1, windowSec: 1 }, logins: { limit: 1, windowSec: 1 } } } });
  assert.ok(problems.some((problem) => /logins/.test(problem)), problems.join('; '));
});

test('defaults follow CONTRACT 2 and a partial rate-limit object merges with them', () => {
  const resolved = resolveConfig({ ...valid, auth: { rateLimits: { login: { limit: 3, windowSec: 30 }, mfa_send: false } } });
  assert.equal(resolved.tablePrefix, 'identity_');
  assert.equal(resolved.migrate, true);
  assert.equal(resolved.appName, valid.issuer);
  assert.deepEqual(resolved.tokens, { accessTtl: 900, refreshTtl: 30 * 86400, refreshRotation: true, mfaTicketTtl: 300, emailVerifyTtl: 86400, passwordResetTtl: 3600, inviteTtl: 7 * 86400, sessionMaxAge: 90 * 86400 });
  assert.deepEqual(resolved.password, {
    minLength: 8,
    maxLength: 128,
    bcryptCost: 12,
    algorithm: 'bcrypt',
    argon2: { memoryCost: 19456, timeCost: 2, parallelism: 1 },
    workers: undefined,
  });
  assert.equal(resolved.auth.requireVerifiedEmail, false);
  assert.deepEqual(resolved.auth.lockout, { threshold: 5, window: 900, duration: 900 });
  assert.deepEqual(resolved.auth.rateLimits, {
    login: { limit: 3, windowSec: 30 },
    register: { limit: 5, windowSec: 3600 },
    password_forgot: { limit: 5, windowSec: 3600 },
    token_refresh: { limit: 60, windowSec: 60 },
    token_consume: { limit: 10, windowSec: 300 },
    mfa_send: false,
    mfa_confirm: { limit: 10, windowSec: 300 },
    mfa_enroll: { limit: 5, windowSec: 3600 },
    social: { limit: 20, windowSec: 300 },
    authenticated: { limit: 600, windowSec: 60 },
  });
  assert.equal(resolved.security.stepUp.maxAge, 300);
  assert.equal(resolved.otp.totp.issuer, 'id.example.test', 'CONTRACT 2: the host of issuer, so the label has no colon');
  const allOff = resolveConfig({ ...valid, auth: { rateLimits: false } });
  assert.ok(Object.values(allOff.auth.rateLimits).every((rule) => rule === false));
  assert.equal(resolveConfig({ ...valid, database: { ...database, tablePrefix: 'acme_' } }).tablePrefix, 'acme_');
});

test('a valid config builds a router synchronously', async () => {
  const router = createIdentityRouter({ ...valid, password: { bcryptCost: 4 } }, quiet);
  assert.equal(typeof router, 'function');
  await router.ready;
  await router.close();
});
