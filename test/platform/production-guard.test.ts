import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import knexFactory from 'knex';
import { createDevMailer, createDevSmsSender, createIdentityRouter, IdentityConfigError, noopSender, type IdentityAdapters, type IdentityConfig } from '../../src/index.js';

// Issue 10: under NODE_ENV=production the development adapters, which log tokens and codes,
// need an explicit opt-in; otherwise construction fails with a message saying what to pass.
// No database is touched: the check runs before anything connects.

const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
const config = { database: knex, secret: 'test-secret-that-is-at-least-32-characters-long', issuer: 'https://id.example.test', migrate: false } as IdentityConfig;
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const previous = process.env.NODE_ENV;
after(async () => {
  process.env.NODE_ENV = previous;
  await knex.destroy();
});

async function construct(adapters: IdentityAdapters): Promise<unknown> {
  let router: ReturnType<typeof createIdentityRouter> | undefined;
  try {
    router = createIdentityRouter(config, { logger: quiet, ...adapters });
  } catch (error) {
    return error;
  }
  // Start-up itself fails here (no tables, migrate off); only construction is under test.
  await router.ready.catch(() => undefined);
  await router.close();
  return undefined;
}

test('in production, a missing mailer or SMS sender fails construction with a clear message', async () => {
  process.env.NODE_ENV = 'production';
  const missingBoth = await construct({});
  assert.ok(missingBoth instanceof IdentityConfigError, String(missingBoth));
  assert.match(missingBoth.message, /NODE_ENV is production.*development mailer.*allowInProduction/);
  assert.match(missingBoth.message, /development sender.*one-time codes/);
  const missingSms = await construct({ mailer: noopSender });
  assert.ok(missingSms instanceof IdentityConfigError);
  assert.doesNotMatch(missingSms.message, /mailer/);
  const devAdapters = await construct({ mailer: createDevMailer({ logger: quiet }), sms: createDevSmsSender({ logger: quiet }) });
  assert.ok(devAdapters instanceof IdentityConfigError, 'a development adapter passed without the opt-in is refused too');
});

test('in production, real adapters or an explicit opt-in start; outside production nothing is required', async () => {
  process.env.NODE_ENV = 'production';
  assert.equal(await construct({ mailer: noopSender, sms: noopSender }), undefined);
  assert.equal(await construct({ mailer: createDevMailer({ logger: quiet, allowInProduction: true }), sms: createDevSmsSender({ logger: quiet, allowInProduction: true }) }), undefined);
  process.env.NODE_ENV = 'development';
  assert.equal(await construct({}), undefined);
  delete process.env.NODE_ENV;
  assert.equal(await construct({}), undefined);
});
