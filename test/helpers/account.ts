import assert from 'node:assert/strict';
import type { Harness, TestResponse } from './harness.js';

/** docs/security.md: every bearer failure is 401 {error: unauthorized, message} with WWW-Authenticate: Bearer. */
export function assertUnauthorized(response: TestResponse, context = ''): void {
  assert.equal(response.status, 401, `${context} ${response.text}`);
  assert.equal(response.body?.error, 'unauthorized', context);
  assert.equal(typeof response.body?.message, 'string', context);
  assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/, context);
}

/** README.md: 422 {errors: [strings]} and nothing else. */
export function assertValidationErrors(response: TestResponse, pattern?: RegExp, context = ''): string[] {
  assert.equal(response.status, 422, `${context} ${response.text}`);
  assert.ok(Array.isArray(response.body?.errors), `${context} ${response.text}`);
  assert.ok(response.body.errors.length > 0, context);
  for (const message of response.body.errors) assert.equal(typeof message, 'string', context);
  if (pattern) assert.ok(response.body.errors.some((message: string) => pattern.test(message)), `${context} ${response.text} should match ${pattern}`);
  return response.body.errors;
}

export function assertError(response: TestResponse, status: number, code: string, context = ''): void {
  assert.equal(response.status, status, `${context} ${response.text}`);
  assert.equal(response.body?.error, code, `${context} ${response.text}`);
  assert.equal(typeof response.body?.message, 'string', context);
}

/** A 429's `X-RateLimit-*` headers (spec 7: every rate-limit 429 carries them beside Retry-After). */
export function rateLimitHeaders(response: TestResponse): { limit: string | null; remaining: string | null; reset: string | null } {
  return {
    limit: response.headers.get('x-ratelimit-limit'),
    remaining: response.headers.get('x-ratelimit-remaining'),
    reset: response.headers.get('x-ratelimit-reset'),
  };
}

/** A body must never carry internals: stack frames, SQL or driver messages. */
export function assertNoInternals(response: TestResponse, context = ''): void {
  assert.notEqual(response.status, 500, `${context} answered 500: ${response.text}`);
  assert.ok(response.status < 500, `${context} answered ${response.status}: ${response.text}`);
  assert.doesNotMatch(response.text, /\bat .+\(.+:\d+:\d+\)|node_modules|select |insert into|update "|SQLITE|syntax error|violates/i, context);
}

export async function countRows(h: Harness, table: string, where: Record<string, unknown> = {}): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}${table}`).where(where).count({ count: '*' });
  return Number(row?.count ?? 0);
}

/** Registers without verifying or logging in; answers the verification token. */
export async function registerOnly(h: Harness, email: string, password: string): Promise<string> {
  const response = await h.post('/auth/register', { email, password });
  assert.equal(response.status, 202, response.text);
  return h.tokenFromMail(email, 'verify_email');
}
