import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Store } from 'express-rate-limit';
import { createIdentityRouter, IdentityConfigError } from '../../src/index.js';
import { uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';

// auth.rateLimitStore: 'database' (counters shared by every instance on one database, for hosts
// without Redis) and passOnStoreError per group (docs/multiple-instances.md).
// Threat: a brute force spread over several instances getting N times the configured budget,
// and a rate-limit store outage turning into 500s or silently dropping the limit.

const start = harnessesClosedAfterFile();

test("the 'database' store holds one login budget across two instances on one database", async () => {
  const config = { auth: { rateLimitStore: 'database', rateLimits: { login: { limit: 3, windowSec: 60 } } } } as const;
  const a = await start({ rateLimits: true, config });
  const b = await start({ rateLimits: true, config, shareDatabaseWith: a });
  const body = { email: uniqueEmail(), password: 'whatever password' };
  const statuses = [];
  for (const instance of [a, b, a, b]) statuses.push((await instance.post('/auth/login', body)).status);
  assert.deepEqual(statuses, [401, 401, 401, 429]);
  const refused = await a.post('/auth/login', body);
  assertError(refused, 429, 'rate_limited');
  const retryAfter = Number(refused.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  // Groups keep their own counters in the shared table.
  assert.equal((await b.post('/auth/password/forgot', { email: uniqueEmail() })).status, 202);
});

test("the 'database' store counts concurrent hits exactly", async () => {
  const a = await start({ rateLimits: true, config: { auth: { rateLimitStore: 'database', rateLimits: { login: { limit: 10, windowSec: 60 } } } } });
  const body = { email: uniqueEmail(), password: 'whatever password' };
  const statuses = await Promise.all(Array.from({ length: 15 }, () => a.post('/auth/login', body).then((response) => response.status)));
  assert.equal(statuses.filter((status) => status === 429).length, 5, statuses.join(','));
});

const failingStore = (): Store => ({
  increment: () => Promise.reject(new Error('ECONNREFUSED 10.0.0.9:6379 (store down)')),
  decrement: () => undefined,
  resetKey: () => undefined,
});

test('a rate-limit store outage answers 503 unavailable by default, never 500', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimitStore: failingStore } } });
  const response = await h.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' });
  assertError(response, 503, 'unavailable');
  assert.doesNotMatch(response.text, /ECONNREFUSED|10\.0\.0\.9/);
});

test('passOnStoreError: true lets the group fail open, logged; other groups still answer 503', async () => {
  const h = await start({
    rateLimits: true,
    config: { auth: { rateLimitStore: failingStore, rateLimits: { login: { limit: 5, windowSec: 60, passOnStoreError: true } } } },
  });
  assert.equal((await h.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' })).status, 401);
  assert.ok(h.logs.some((line) => line.level === 'warn' && /rate-limit store of group login is unavailable/.test(line.msg)));
  assertError(await h.post('/auth/password/forgot', { email: uniqueEmail() }), 503, 'unavailable');
});

test('a rate-limit store that does not answer counts as down after 5 s', async () => {
  const hanging: Store = { increment: () => new Promise(() => undefined), decrement: () => undefined, resetKey: () => undefined };
  const h = await start({ rateLimits: true, config: { auth: { rateLimitStore: () => ({ ...hanging }) } } });
  const startedAt = performance.now();
  assertError(await h.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' }), 503, 'unavailable');
  assert.ok(performance.now() - startedAt < 7000);
});

test('rateLimitStore accepts memory, database or a function, and nothing else', () => {
  const base = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 'x'.repeat(32), issuer: 'https://id.example.test' };
  assert.throws(() => createIdentityRouter({ ...base, auth: { rateLimitStore: 'redis' } } as never), IdentityConfigError);
  assert.throws(() => createIdentityRouter({ ...base, auth: { rateLimits: { login: { limit: 1, windowSec: 1, passOnStoreError: 'yes' } } } } as never), /passOnStoreError/);
});

test('one store returned for two groups is a config error: they would count each other\'s requests in one window', () => {
  const base = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 'x'.repeat(32), issuer: 'https://id.example.test' };
  const shared = failingStore();
  assert.throws(() => createIdentityRouter({ ...base, auth: { rateLimitStore: () => shared } } as never), (error: unknown) => error instanceof IdentityConfigError && /one store for the groups "\w+" and "\w+"/.test(error.message));
});
