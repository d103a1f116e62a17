import assert from 'node:assert/strict';
import { test } from 'node:test';
import { STRONG_PASSWORD, uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';

// docs/configuration.md rate limits (fixed windows, per group, configurable through auth.rateLimits) and docs/openapi.yaml 429 headers.
// Threat: brute force and resource exhaustion from one client.

const start = harnessesClosedAfterFile();

test('the login group answers 429 rate_limited with Retry-After and X-RateLimit-* past its limit', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { login: { limit: 2, windowSec: 60 } } } } });
  const body = { email: uniqueEmail(), password: 'whatever password' };
  const first = await h.post('/auth/login', body);
  assert.equal(first.status, 401);
  assert.equal(first.headers.get('x-ratelimit-limit'), '2');
  assert.equal(first.headers.get('x-ratelimit-remaining'), '1');
  assert.ok(Number(first.headers.get('x-ratelimit-reset')) > 0);
  const second = await h.post('/auth/login', body);
  assert.equal(second.headers.get('x-ratelimit-remaining'), '0');
  const third = await h.post('/auth/login', body);
  assertError(third, 429, 'rate_limited');
  const retryAfter = Number(third.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  assert.equal(third.headers.get('x-ratelimit-limit'), '2');
  assert.equal(third.headers.get('x-ratelimit-remaining'), '0');
  assert.ok(third.headers.get('x-ratelimit-reset'));
  // Malformed requests are budgeted too: the limiter runs before parsing and validation.
  assertError(await h.request('POST', '/auth/login', { rawBody: '{oops' }), 429, 'rate_limited');
  assertError(await h.post('/auth/login', {}), 429, 'rate_limited');
  // Other groups keep their own budget.
  assert.equal((await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD })).status, 202);
  assert.equal((await h.post('/auth/token/refresh', { refresh_token: 'nope' })).status, 401);
});

test('the spec defaults apply when rate limits are on: register allows 5 per hour', async () => {
  const h = await start({ rateLimits: true });
  for (let attempt = 0; attempt < 5; attempt += 1) {
    assert.equal((await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD })).status, 202);
  }
  const sixth = await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD });
  assertError(sixth, 429, 'rate_limited');
  assert.equal(sixth.headers.get('x-ratelimit-limit'), '5');
  assert.ok(Number(sixth.headers.get('retry-after')) > 60);
});

test('token_consume and password_forgot groups cover their routes', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { token_consume: { limit: 3, windowSec: 60 }, password_forgot: { limit: 1, windowSec: 60 } } } } });
  assert.equal((await h.post('/auth/email/verify', { token: 'x' })).status, 400);
  assert.equal((await h.post('/auth/email/verify/resend', { email: uniqueEmail() })).status, 202);
  assert.equal((await h.post('/auth/password/reset', { token: 'x', new_password: STRONG_PASSWORD })).status, 401);
  assertError(await h.post('/auth/email/verify', { token: 'x' }), 429, 'rate_limited');
  assertError(await h.post('/auth/password/reset', { token: 'x', new_password: STRONG_PASSWORD }), 429, 'rate_limited');
  assert.equal((await h.post('/auth/password/forgot', { email: uniqueEmail() })).status, 202);
  assertError(await h.post('/auth/password/forgot', { email: uniqueEmail() }), 429, 'rate_limited');
});

test('a group set to false is not limited; auth.rateLimits false disables every group', async () => {
  const oneOff = await start({ rateLimits: true, config: { auth: { rateLimits: { login: false, register: { limit: 1, windowSec: 60 } } } } });
  for (let attempt = 0; attempt < 15; attempt += 1) {
    const response = await oneOff.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' });
    assert.equal(response.status, 401);
    assert.equal(response.headers.get('x-ratelimit-limit'), null);
  }
  assert.equal((await oneOff.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD })).status, 202);
  assertError(await oneOff.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD }), 429, 'rate_limited');

  const allOff = await start({ rateLimits: true, config: { auth: { rateLimits: false } } });
  for (let attempt = 0; attempt < 12; attempt += 1) {
    assert.equal((await allOff.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' })).status, 401);
  }
  for (let attempt = 0; attempt < 7; attempt += 1) {
    assert.equal((await allOff.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD })).status, 202);
  }
});

test('the authenticated budget is per user and runs after token authentication', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { authenticated: { limit: 3, windowSec: 60 } } } } });
  const alice = await h.signUp();
  const bob = await h.signUp();
  for (let call = 0; call < 3; call += 1) assert.equal((await h.get('/auth/me', { token: alice.accessToken })).status, 200);
  const limited = await h.get('/auth/me', { token: alice.accessToken });
  assertError(limited, 429, 'rate_limited');
  assert.ok(limited.headers.get('retry-after'));
  assertError(await h.get('/auth/sessions', { token: alice.accessToken }), 429, 'rate_limited');
  // Same IP, another user: their own budget.
  assert.equal((await h.get('/auth/me', { token: bob.accessToken })).status, 200);
  // Unauthenticated requests never reach (or spend) the per-user budget.
  assert.equal((await h.get('/auth/me')).status, 401);
  assert.equal((await h.get('/auth/me', { token: bob.accessToken })).status, 200);
  assert.equal((await h.get('/auth/me', { token: bob.accessToken })).status, 200);
  assertError(await h.get('/auth/me', { token: bob.accessToken }), 429, 'rate_limited');
});
