import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import express from 'express';
import { createIdentityRouter, type IdentityConfig } from '../../src/index.js';
import { Harness, MOUNT, PG_URL, STRONG_PASSWORD, TEST_DB, uniqueEmail, type LogLine, type SignedUpUser } from '../helpers/harness.js';
import { assertError, assertValidationErrors } from '../helpers/account.js';
import { rawHttp } from '../helpers/raw-request.js';
import { servicesOf } from '../../src/create-identity-router.js';

// Issue 10: hostile input and protocol edges at the HTTP boundary.

let h: Harness;
let owner: SignedUpUser & { orgId: string };
before(async () => {
  h = await Harness.start();
  const user = await h.signUp();
  const org = await h.post('/orgs', { name: 'Edge Org' }, { token: user.accessToken });
  const switched = await h.post('/auth/switch-org', { organization_id: org.body.data.id }, { token: user.accessToken });
  owner = { ...user, accessToken: switched.body.data.access_token, orgId: org.body.data.id };
});
after(async () => {
  await h.close();
});

/** node:http, so a GET can carry a body and headers are sent exactly as given. */
const raw = (method: string, path: string, headers: Record<string, string>, body?: string | Buffer) => rawHttp(h.baseUrl, method, path, headers, body);

test('Content-Encoding gzip on a body that is not gzip is 400; an unknown Content-Encoding is 415; bodies on GET routes are ignored', async () => {
  const body = JSON.stringify({ email: 'a@example.com', password: STRONG_PASSWORD });
  const notGzip = await raw('POST', '/auth/login', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, body);
  assert.equal(notGzip.status, 400, notGzip.text);
  assert.equal(notGzip.body.error, 'invalid_json');
  const unknown = await raw('POST', '/auth/login', { 'content-type': 'application/json', 'content-encoding': 'x-unknown' }, body);
  assert.equal(unknown.status, 415, unknown.text);
  assert.equal(unknown.body.error, 'unsupported_media_type');
  const get = await raw('GET', '/auth/me', { 'content-type': 'application/json', 'content-encoding': 'gzip', authorization: `Bearer ${owner.accessToken}` }, body);
  assert.equal(get.status, 200, get.text);
  assert.equal(h.logs.filter((line) => line.msg === 'unexpected error').length, 0);
});

test('a body that is not JSON is 415 unsupported_media_type naming application/json; no body at all is still an empty object', async () => {
  for (const contentType of ['application/x-www-form-urlencoded', 'text/plain', 'multipart/form-data; boundary=x']) {
    const response = await raw('POST', '/auth/password/forgot', { 'content-type': contentType }, 'email=a%40example.com');
    assert.equal(response.status, 415, `${contentType}: ${response.text}`);
    assert.equal(response.body.error, 'unsupported_media_type');
    assert.match(response.body.message, /application\/json/);
  }
  const noType = await raw('POST', '/auth/password/forgot', {}, Buffer.from('{"email":"a@example.com"}'));
  assert.equal(noType.status, 415, noType.text);
  assert.equal((await raw('POST', '/auth/logout', { authorization: `Bearer ${(await h.signUp()).accessToken}` })).status, 200, 'a body-less POST needs no content-type');
  assert.equal((await raw('POST', '/auth/password/forgot', { 'content-type': 'application/merge-patch+json' }, '{"email":"a@example.com"}')).status, 202, '+json types are JSON');
});

// On PostgreSQL a NUL byte used to reach the database and answer 500.
test('a NUL or control character in any string field is 422, on every free-text field the fuzzer hit', async () => {
  const token = owner.accessToken;
  const orgPath = `/orgs/${owner.orgId}`;
  const cases: Array<[string, string, unknown]> = [
    ['POST', '/orgs', { name: 'Ac\u0000me' }],
    ['PATCH', orgPath, { name: 'a\u0000' }],
    ['POST', `${orgPath}/roles`, { name: 'R\u0000', slug: 'r-nul', permission_keys: [] }],
    ['POST', `${orgPath}/roles`, { name: 'R', slug: 'r-nul', description: 'd\u0000', permission_keys: [] }],
    ['POST', `${orgPath}/roles`, { name: 'R', slug: 'r-nul', permission_keys: ['org.read\u0000'] }],
    ['POST', `${orgPath}/invites`, { email: uniqueEmail(), role_slugs: ['member\u0000'] }],
    ['PATCH', `/users/${owner.userId}`, { display_name: 'Ada\u0000' }],
    ['PATCH', `/users/${owner.userId}`, { display_name: 'Ada\nLovelace' }],
    ['POST', '/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'x\u001by' }],
    ['POST', '/auth/register', { email: uniqueEmail(), password: `${STRONG_PASSWORD}\u0000` }],
    ['POST', '/auth/password/forgot', { email: 'a\u0000@example.com' }],
  ];
  for (const [method, path, body] of cases) {
    assertValidationErrors(await h.request(method, path, { body, token }), /control characters/, `${method} ${path} ${JSON.stringify(body)}`);
  }
  const withFactor = await h.signUp();
  const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: withFactor.accessToken });
  assertValidationErrors(await h.patch(`/auth/mfa/factors/${enrolled.body.data.factor_id}`, { label: 'phone\u0000' }, { token: withFactor.accessToken }), /control characters/, 'factor label');
});

test('a password being checked may hold a control character (login answers 401, not 422); a new one may not', async () => {
  const login = await h.post('/auth/login', { email: owner.email, password: `${STRONG_PASSWORD}\u0000` });
  assertError(login, 401, 'invalid_credentials');
  const change = await h.post('/auth/password/change', { current_password: `x\u0000`, new_password: 'another strong password' }, { token: (await h.signUp()).accessToken });
  assertError(change, 403, 'invalid_credentials');
  const user = await h.signUp();
  assertValidationErrors(await h.post('/auth/password/change', { current_password: user.password, new_password: 'tab\tin the new password' }, { token: user.accessToken }), /new_password/);
});

test('unknown paths and wrong methods under the router answer JSON 404 and 405 (with Allow)', async () => {
  const missing = await raw('GET', '/no/such/route', {});
  assert.equal(missing.status, 404, missing.text);
  assert.match(String(missing.headers['content-type']), /^application\/json/);
  assert.equal(missing.body.error, 'not_found');
  const wrongMethod = await raw('PUT', '/auth/login', { 'content-type': 'application/json' }, '{}');
  assert.equal(wrongMethod.status, 405, wrongMethod.text);
  assert.equal(wrongMethod.body.error, 'method_not_allowed');
  assert.equal(wrongMethod.headers.allow, 'POST');
  assert.equal((await raw('PUT', '/AUTH/Login/', {})).status, 405, 'matched like Express: case-insensitive, trailing slash');
  const orgs = await raw('DELETE', '/orgs', {});
  assert.equal(orgs.status, 405);
  assert.equal(orgs.headers.allow, 'POST, GET, HEAD');
  const options = await raw('OPTIONS', `/orgs/${owner.orgId}/members`, {});
  assert.equal(options.status, 405, options.text);
  assert.equal(options.body.error, 'method_not_allowed');
  for (const response of [missing, wrongMethod, orgs, options]) assert.equal(response.headers['cache-control'], 'no-store');
});

test('a request finds its route as Express would find it: case, one trailing slash, HEAD, decoded parameters', async () => {
  const bearer = { authorization: `Bearer ${owner.accessToken}` };
  assert.equal((await raw('GET', '/AUTH/Me/', bearer)).status, 200, 'literal segments are case-insensitive and one trailing slash is tolerated');
  assert.equal((await raw('GET', '/auth/me//', bearer)).status, 404, 'two trailing slashes name nothing');
  assert.equal((await raw('GET', '/auth//me', bearer)).status, 404, 'an empty segment names nothing');
  assert.equal((await raw('GET', '/auth/me/extra', bearer)).status, 404, 'a longer path names nothing');
  const head = await raw('HEAD', '/auth/me', bearer);
  assert.equal(head.status, 200, 'HEAD is answered by the GET route');
  assert.equal(head.text, '');
  const members = await raw('GET', `/ORGS/${owner.orgId}/Members`, bearer);
  assert.equal(members.status, 200, members.text);
  const encoded = await raw('GET', `/orgs/${owner.orgId.replace(/-/g, '%2D')}/members`, bearer);
  assert.equal(encoded.status, 200, 'a parameter is percent-decoded before it is used');
  assert.deepEqual(encoded.body, members.body);
  const undecodable = await raw('GET', '/orgs/%E2%82/members', bearer);
  assert.equal(undecodable.status, 404, undecodable.text);
  assert.equal(undecodable.body.error, 'not_found');
});

test('Cache-Control: no-store on every router answer except the JWKS', async () => {
  const user = await h.signUp();
  const answers = [
    await h.post('/auth/login', { email: user.email, password: user.password }),
    await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }),
    await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }),
    await h.get('/auth/me', { token: user.accessToken }),
    await h.get('/auth/me'),
    await h.post('/auth/login', { email: 'nobody' }),
    await h.post('/auth/password/forgot', { email: user.email }),
  ];
  for (const response of answers) assert.equal(response.headers.get('cache-control'), 'no-store', `${response.status} ${response.text.slice(0, 80)}`);
  assert.equal((await h.get('/auth/.well-known/jwks.json')).headers.get('cache-control'), 'public, max-age=300');
});

// A database error must not put bound values (e-mails, password hashes, token hashes) in the log.
test('database errors are logged by code with a fixed message, never with bound values; the router-created Knex has compileSqlOnError off', async () => {
  const logs: LogLine[] = [];
  const tempDir = TEST_DB === 'sqlite' ? mkdtempSync(join(tmpdir(), 'identity-logs-')) : undefined;
  const tablePrefix = `l${randomBytes(4).toString('hex')}_`;
  const database = TEST_DB === 'pg' ? { client: 'pg', connection: PG_URL } : { client: 'better-sqlite3', connection: { filename: join(tempDir!, 'db.sqlite') } };
  const identity = createIdentityRouter({ database, tablePrefix, secret: 'test-secret-that-is-at-least-32-characters-long', issuer: 'https://id.example.test', password: { bcryptCost: 4 } } as IdentityConfig, {
    logger: { info: (msg, meta) => logs.push({ level: 'info', msg, meta }), warn: (msg, meta) => logs.push({ level: 'warn', msg, meta }), error: (msg, meta) => logs.push({ level: 'error', msg, meta }) },
    mailer: { send: async () => undefined },
    sms: { send: async () => undefined },
  });
  await identity.ready;
  const knex = servicesOf(identity).context.store.knex;
  const app = express().use(MOUNT, identity);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    assert.equal(knex.client.config.compileSqlOnError, false);
    // A broken table makes the next query fail with the e-mail among its bindings.
    await knex.schema.renameTable(`${tablePrefix}users`, `${tablePrefix}users_moved`);
    const email = uniqueEmail('leak');
    const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}${MOUNT}/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: STRONG_PASSWORD }) });
    assert.equal(response.status, 500);
    const logged = JSON.stringify(logs);
    assert.ok(logs.some((line) => line.msg === 'unexpected error'), logged);
    assert.doesNotMatch(logged, new RegExp(email.split('@')[0]!), 'the e-mail is not logged');
    assert.match(logged, /database error/);
    await knex.schema.renameTable(`${tablePrefix}users_moved`, `${tablePrefix}users`);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    if (TEST_DB === 'pg') {
      const { rows } = await knex.raw<{ rows: Array<{ tablename: string }> }>('select tablename from pg_tables where schemaname = current_schema() and tablename like ?', [`${tablePrefix}%`]);
      if (rows.length > 0) await knex.raw(`drop table if exists ${rows.map((row) => `"${row.tablename}"`).join(', ')} cascade`);
    }
    await identity.close();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
});

test('the same database failure through a host-supplied Knex (compileSqlOnError on) is logged without values either', async () => {
  const email = uniqueEmail('hostleak');
  await h.knex.schema.renameTable(`${h.tablePrefix}users`, `${h.tablePrefix}users_moved`);
  try {
    const response = await h.post('/auth/password/forgot', { email });
    assert.equal(response.status, 500, response.text);
  } finally {
    await h.knex.schema.renameTable(`${h.tablePrefix}users_moved`, `${h.tablePrefix}users`);
  }
  const logged = JSON.stringify(h.logs);
  assert.doesNotMatch(logged, new RegExp(email.split('@')[0]!), 'the e-mail is not logged');
  assert.match(logged, /database error/);
  h.logs.length = 0;
});
