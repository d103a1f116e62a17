import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import express from 'express';
import { Harness, STRONG_PASSWORD, uniqueEmail, type LogLine, type SignedUpUser } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';
import { handoffPair, PROVIDER_ID, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';
import { listening, type ListeningApp } from '../helpers/host-app.js';
import { rawHttp, type RawResponse } from '../helpers/raw-request.js';

// The HTTP edge under attack (SPEC 5 and 7, docs/openapi.yaml, src/http/): path spellings,
// methods, media types, JSON bodies, response headers, and hosts that mount the router in
// ways of their own (a parser in front, a path with parameters).

let h: Harness;
let owner: SignedUpUser & { orgId: string };
/** The same router mounted by a host that applies `express.json()` in front of it, under a path whose parameter is named as the router's own (`orgId`). */
let host: ListeningApp;
const HOST_MOUNT = '/tenants/:orgId/identity';

before(async () => {
  h = await Harness.start();
  const user = await h.signUp();
  const org = await h.post('/orgs', { name: 'Edge Org' }, { token: user.accessToken });
  const switched = await h.post('/auth/switch-org', { organization_id: org.body.data.id }, { token: user.accessToken });
  owner = { ...user, accessToken: switched.body.data.access_token, orgId: org.body.data.id };
  const app = express();
  app.use(express.json());
  app.use(HOST_MOUNT, h.identity);
  host = await listening(app);
});
after(async () => {
  await host.close();
  await h.close();
});

const unexpectedErrors = (logs: LogLine[]) => logs.filter((line) => line.level === 'error');
const raw = (method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<RawResponse> => rawHttp(h.baseUrl, method, path, headers, body);
const viaHost = (method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<RawResponse> =>
  rawHttp(`${host.base}/tenants/acme/identity`, method, path, headers, body);

interface SocketAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
}

/** Bytes written as given; the answer, or undefined when none came within `timeoutMs` (the socket is then destroyed). */
function overSocket(base: string, bytes: string, timeoutMs: number): Promise<SocketAnswer | undefined> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(Buffer.from(bytes, 'latin1')));
    const chunks: Buffer[] = [];
    let answered = false;
    const finish = () => {
      const whole = Buffer.concat(chunks).toString('latin1');
      const split = whole.indexOf('\r\n\r\n');
      if (split === -1) return undefined;
      const head = whole.slice(0, split).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of head.slice(1)) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      return { status: Number(head[0]!.split(' ')[1]), headers, text: whole.slice(split + 4) };
    };
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(answered ? finish() : undefined);
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const answer = finish();
      if (answer && answer.text.length >= Number(answer.headers['content-length'] ?? 0)) {
        answered = true;
        clearTimeout(timer);
        socket.destroy();
        resolve(answer);
      }
    });
    socket.on('error', reject);
  });
}

test('HEAD of a social GET route spends the budget of that route, not one of its own', async () => {
  // The social group counts each route separately (docs/configuration.md); HEAD is answered by
  // the GET route (it starts a sign-in and writes a flow), so it must count against the GET's budget.
  const op = await TestOpenIdProvider.start();
  const limited = await startSocialHarness(op, { rateLimits: true, config: { auth: { rateLimits: { social: { limit: 2, windowSec: 300 } } } } });
  try {
    const start = () => `/auth/social/${PROVIDER_ID}/authorize?handoff_challenge=${handoffPair().challenge}&handoff_challenge_method=S256`;
    const send = (method: string) => rawHttp(limited.baseUrl, method, start(), {});
    assert.equal((await send('GET')).status, 302);
    assert.equal((await send('GET')).status, 302);
    assert.equal((await send('GET')).status, 429, 'the GET budget is spent');
    const head = await send('HEAD');
    assert.equal(head.status, 429, `HEAD ran the spent GET route: ${head.status} ${head.headers.location ?? ''}`);
    // The other way round on the callback: HEAD first, then GET finds the budget spent.
    const callback = (method: string) => rawHttp(limited.baseUrl, method, `/auth/social/${PROVIDER_ID}/callback?state=x&code=y`, {});
    assert.notEqual((await callback('HEAD')).status, 429);
    assert.notEqual((await callback('HEAD')).status, 429);
    assert.equal((await callback('GET')).status, 429, 'HEAD and GET of the callback share one budget');
    assert.deepEqual(unexpectedErrors(limited.logs), []);
  } finally {
    await limited.close();
    await op.close();
  }
});

test('another spelling of a path (case, one trailing slash, a percent-encoded id) spends the same per-IP budget', async () => {
  const limited = await Harness.start({ rateLimits: true, config: { auth: { rateLimits: { login: { limit: 3, windowSec: 300 } } } } });
  try {
    const login = (path: string) => rawHttp(limited.baseUrl, 'POST', path, { 'content-type': 'application/json' }, JSON.stringify({ email: 'nobody@example.com', password: 'x' }));
    assert.equal((await login('/auth/login')).status, 401);
    assert.equal((await login('/AUTH/Login')).status, 401);
    assert.equal((await login('/auth/login/')).status, 401);
    for (const spelling of ['/auth/login', '/Auth/LOGIN/', '/auth/LoGiN']) {
      const over = await login(spelling);
      assert.equal(over.status, 429, `${spelling}: ${over.status} ${over.text}`);
      assert.equal(over.body.error, 'rate_limited');
    }
    // Spellings that name no route answer 404 and never reach the login (nor its budget's refusal).
    for (const spelling of ['/auth/%6Cogin', '/auth/login;x=1', '/auth//login', '//auth/login', '/auth/login%2F', '/auth/login%00', '/auth/./login', '/auth/x/../login']) {
      const answer = await login(spelling);
      assert.equal(answer.status, 404, `${spelling}: ${answer.status} ${answer.text}`);
      assert.equal(answer.body.error, 'not_found');
    }
  } finally {
    await limited.close();
  }
});

test('path tricks in ids never reach another organization or user, nor skip the route requirement', async () => {
  const other = await h.signUp();
  const otherOrg = await h.post('/orgs', { name: 'Other Org' }, { token: other.accessToken });
  assert.equal(otherOrg.status, 201, otherOrg.text);
  const bearer = { authorization: `Bearer ${owner.accessToken}` };
  const otherId = otherOrg.body.data.id as string;
  const failures: string[] = [];
  const ids = [
    `${otherId}%2F..%2F${owner.orgId}`, `${owner.orgId}%2F..%2F${otherId}`, `${otherId}%00`, `${otherId};${owner.orgId}`, `${owner.orgId};x`, `%20${otherId}`, otherId.toUpperCase(),
    `${otherId}%2F`, 'x'.repeat(5000), `%${'41'.repeat(70)}`, '..', '%2e%2e', '%2E',
  ];
  for (const id of ids) {
    for (const [method, path] of [['GET', `/orgs/${id}`], ['GET', `/orgs/${id}/members`], ['PATCH', `/orgs/${id}`], ['GET', `/users/${id}`], ['PATCH', `/users/${id}`], ['DELETE', `/auth/sessions/${id}`]] as const) {
      const answer = await raw(method, path, { ...bearer, 'content-type': 'application/json' }, method === 'PATCH' ? JSON.stringify({ name: 'Taken', display_name: 'Taken' }) : undefined);
      if (answer.status < 400 || answer.status >= 500) failures.push(`${method} ${path.slice(0, 120)}: ${answer.status} ${answer.text.slice(0, 120)}`);
      if (answer.headers['cache-control'] !== 'no-store') failures.push(`${method} ${path.slice(0, 120)}: cache-control ${answer.headers['cache-control']}`);
    }
  }
  assert.deepEqual(failures, []);
  const otherToken = (await h.post('/auth/switch-org', { organization_id: otherId }, { token: other.accessToken })).body.data.access_token as string;
  assert.equal((await h.get(`/orgs/${otherId}`, { token: otherToken })).body.data.name, 'Other Org');
  assert.equal((await h.get(`/orgs/${owner.orgId}`, { token: owner.accessToken })).body.data.name, 'Edge Org');
  assert.notEqual((await h.get(`/users/${other.userId}`, { token: other.accessToken })).body.data.display_name, 'Taken');
  assert.deepEqual(unexpectedErrors(h.logs), []);
});

test('X-HTTP-Method-Override, X-Method-Override and _method change no method: no route is reached by another verb', async () => {
  const bearer = { authorization: `Bearer ${owner.accessToken}` };
  for (const header of ['x-http-method-override', 'x-method-override', 'x-http-method']) {
    const post = await raw('POST', `/orgs/${owner.orgId}`, { ...bearer, [header]: 'DELETE' });
    assert.equal(post.status, 405, post.text);
    assert.equal(post.headers.allow, 'GET, PATCH, DELETE, HEAD');
    const get = await raw('GET', `/orgs/${owner.orgId}`, { ...bearer, [header]: 'PATCH' });
    assert.equal(get.status, 200, get.text);
  }
  assert.equal((await raw('GET', `/orgs/${owner.orgId}?_method=DELETE`, bearer)).status, 200);
  const patch = await raw('PATCH', `/orgs/${owner.orgId}?_method=DELETE`, { ...bearer, 'content-type': 'application/json' }, JSON.stringify({ _method: 'DELETE' }));
  assert.equal(patch.status, 422, 'an unknown key is stripped, leaving no field to change');
  const org = await h.get(`/orgs/${owner.orgId}`, { token: owner.accessToken });
  assert.equal(org.body.data.status, 'active');
  assert.equal(org.body.data.name, 'Edge Org');
});

test('HEAD and OPTIONS write nothing: HEAD of a POST route is 405, HEAD of a GET route has no body', async () => {
  const user = await h.signUp();
  const before = await h.get('/auth/sessions', { token: user.accessToken });
  for (const path of ['/auth/login', '/auth/register', '/auth/logout', '/auth/logout-all', '/auth/token/refresh', '/orgs', '/auth/mfa/totp/enroll']) {
    for (const method of ['HEAD', 'OPTIONS']) {
      const answer = await raw(method, path, { authorization: `Bearer ${user.accessToken}` });
      if (path === '/orgs' && method === 'HEAD') {
        assert.equal(answer.status, 200, 'GET /orgs answers HEAD');
        assert.equal(answer.text, '');
        continue;
      }
      assert.equal(answer.status, 405, `${method} ${path}: ${answer.status}`);
      assert.match(String(answer.headers.allow), /POST/);
      if (method === 'HEAD') assert.equal(answer.text, '');
      else assert.equal(answer.body.error, 'method_not_allowed');
    }
  }
  const after = await h.get('/auth/sessions', { token: user.accessToken });
  assert.equal(after.status, 200, 'the session was not logged out');
  assert.equal(after.body.data.length, before.body.data.length);
  assert.equal((await h.get('/auth/mfa/factors', { token: user.accessToken })).body.data.factors.length, 0, 'no factor was enrolled');
  assert.deepEqual((await h.get('/orgs', { token: user.accessToken })).body.data, []);
});

test('JSON bodies: the last of duplicate keys is the one validated and used; __proto__ and constructor keys at any depth reach nothing', async () => {
  // The per-user MFA flag may not be sent by the user (users.manage only): the access policy
  // reads the body through the same schema as the service, so no spelling of the body tells
  // them apart.
  const user = await h.signUp();
  await enrollTotp(h, user.accessToken);
  await h.identity.service.setMfaEnforced(user.userId, true);
  const token = user.accessToken;
  const patch = (text: string) => raw('PATCH', `/users/${user.userId}`, { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, text);
  const tries: Array<[string, number]> = [
    ['{"mfa_enforced":false,"display_name":"A"}', 403],
    ['{"display_name":"A","mfa_enforced":true,"mfa_enforced":false}', 403],
    ['{"mfa_enforced":false,"display_name":"A","mfa_enforced":null}', 422],
    ['{"mfa_enforced":"false","display_name":"A"}', 422],
    ['{"mfa_enforced":"false","display_name":"A","mfa_enforced":false}', 403],
    ['{"display_name":"B","__proto__":{"mfa_enforced":false}}', 200],
    ['{"display_name":"C","constructor":{"prototype":{"mfa_enforced":false}}}', 200],
    ['{"display_name":"D","__proto__":{"__proto__":{"mfa_enforced":false}}}', 200],
    ['{"display_name":"E","display_name":{"__proto__":{"toString":"x"}}}', 422],
  ];
  for (const [text, status] of tries) {
    const answer = await patch(text);
    assert.equal(answer.status, status, `${text}: ${answer.text}`);
  }
  const me = await h.get('/auth/me', { token });
  assert.equal(me.body.data.mfa_enforced, true, 'the flag an administrator set is still on');
  assert.equal(me.body.data.display_name, 'D');
  assert.ok(!h.events.some((event) => event.type === 'user.mfa_enforcement_changed' && event.user_id === user.userId && event.data.mfa_enforced === false));
  // Registration: the last "email" is the one validated and the one the account gets.
  const email = uniqueEmail('dup');
  const first = await raw('POST', '/auth/register', { 'content-type': 'application/json' }, `{"email":"not an address","email":"${email}","password":"${STRONG_PASSWORD}"}`);
  assert.equal(first.status, 202, first.text);
  const last = await raw('POST', '/auth/register', { 'content-type': 'application/json' }, `{"email":"${uniqueEmail('dup')}","email":"not an address","password":"${STRONG_PASSWORD}"}`);
  assert.equal(last.status, 422, last.text);
  assert.ok(h.mail.some((message) => message.to === email), 'the account was made for the last address');
  assert.equal(({} as Record<string, unknown>).mfa_enforced, undefined);
  assert.equal(({} as Record<string, unknown>).toString, Object.prototype.toString);
});

test('numbers beyond 2^53 and strings for booleans are refused, not rounded or converted', async () => {
  const bearer = { authorization: `Bearer ${owner.accessToken}`, 'content-type': 'application/json' };
  for (const limit of ['9007199254740993', '1e400', '18446744073709551617', '0x10', '1.0000000000000002']) {
    const answer = await raw('GET', `/orgs/${owner.orgId}/members?limit=${limit}`, bearer);
    assert.equal(answer.status, 422, `limit=${limit}: ${answer.text}`);
  }
  for (const value of ['"true"', '"1"', '1', '"yes"', '[true]']) {
    const answer = await raw('PATCH', `/orgs/${owner.orgId}`, bearer, `{"settings":{"require_mfa":${value}}}`);
    assert.equal(answer.status, 422, `require_mfa ${value}: ${answer.text}`);
  }
  const org = await h.get(`/orgs/${owner.orgId}`, { token: owner.accessToken });
  assert.notEqual(org.body.data.settings?.require_mfa, true);
});

test('media types: any +json type and a UTF-16 body are JSON, other charsets 415; Accept changes nothing', async () => {
  const login = { email: 'nobody@example.com', password: 'x' };
  const send = (type: string, body: string | Buffer, extra: Record<string, string> = {}) => raw('POST', '/auth/login', { 'content-type': type, ...extra }, body);
  for (const type of ['application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/vnd.api+json', 'application/json-patch+json', 'application/merge-patch+json', 'application/json; foo=bar; charset="utf-8"']) {
    const answer = await send(type, JSON.stringify(login));
    assert.equal(answer.status, 401, `${type}: ${answer.text}`);
    assert.equal(answer.body.error, 'invalid_credentials');
  }
  const utf16 = await send('application/json; charset=utf-16le', Buffer.from(JSON.stringify(login), 'utf16le'));
  assert.equal(utf16.status, 401, utf16.text);
  for (const type of ['application/json; charset=latin1', 'application/json; charset=iso-8859-1', 'application/json; charset=x-unknown', 'text/json', 'application/jsonx', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'text/plain']) {
    const answer = await send(type, JSON.stringify(login));
    assert.equal(answer.status, 415, `${type}: ${answer.status} ${answer.text}`);
    assert.equal(answer.body.error, 'unsupported_media_type');
  }
  for (const accept of ['text/html', 'application/xml', 'image/png;q=1, */*;q=0', '*/*']) {
    const answer = await send('application/json', JSON.stringify(login), { accept });
    assert.equal(answer.status, 401, accept);
    assert.match(String(answer.headers['content-type']), /^application\/json; charset=utf-8/);
    const missing = await raw('GET', '/no/such/route', { accept });
    assert.equal(missing.status, 404);
    assert.match(String(missing.headers['content-type']), /^application\/json/);
  }
});

test('a host with express.json() in front, mounting under a path with a parameter: the router still validates, limits and answers in its shapes', async () => {
  const bearer = { authorization: `Bearer ${owner.accessToken}` };
  // The host's parser has read the body: the router's schemas still apply.
  const invalid = await viaHost('POST', '/auth/login', { 'content-type': 'application/json' }, JSON.stringify({ email: 5, password: ['x'] }));
  assert.equal(invalid.status, 422, invalid.text);
  assert.ok(Array.isArray(invalid.body.errors));
  const control = await viaHost('PATCH', `/orgs/${owner.orgId}`, { ...bearer, 'content-type': 'application/json' }, JSON.stringify({ name: 'a\u0000b' }));
  assert.equal(control.status, 422, control.text);
  const notAnObject = await viaHost('PATCH', `/orgs/${owner.orgId}`, { ...bearer, 'content-type': 'application/vnd.api+json' }, '"name"');
  assert.equal(notAnObject.status, 422, notAnObject.text);
  // A type the host's parser skipped is still refused, and an over-limit length at once.
  assert.equal((await viaHost('POST', '/auth/login', { 'content-type': 'text/plain' }, JSON.stringify({ email: 'a@b.io', password: 'x' }))).status, 415);
  const started = performance.now();
  const big = await overSocket(host.base, `POST /tenants/acme/identity/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.api+json\r\nContent-Length: 10000000\r\n\r\n{"email":"`, 2000);
  assert.equal(big?.status, 413, 'answered before the body is sent');
  assert.ok(performance.now() - started < 2000);
  // The host's own path parameter is not the router's: the organization is the one in the router's path.
  const otherOrg = randomUUID();
  const mounted = (tenant: string, orgId: string) => rawHttp(`${host.base}/tenants/${tenant}/identity`, 'GET', `/orgs/${orgId}/members`, bearer);
  const own = await mounted(otherOrg, owner.orgId);
  assert.equal(own.status, 200, own.text);
  assert.equal(own.headers['cache-control'], 'no-store');
  const foreign = await mounted(owner.orgId, otherOrg);
  assert.equal(foreign.status, 403, foreign.text);
  assert.equal(foreign.body.error, 'forbidden');
  const missing = await mounted(owner.orgId, `${owner.orgId}/nothing`);
  assert.equal(missing.status, 404, missing.text);
  assert.equal(missing.body.error, 'not_found');
  assert.deepEqual(unexpectedErrors(h.logs), []);
});

test('a body announced over 100 kB is refused at once whatever its Content-Encoding, before it is sent', async () => {
  const P = new URL(h.baseUrl).pathname;
  // A compressed body over the limit inflates over it; bytes that do not decode, or an unknown
  // coding, fail at once too: none may keep the connection reading the rest of what was announced.
  const inflating = gzipSync(Buffer.from(`{"email":"${'a'.repeat(400_000)}`)).subarray(0, 2000);
  const failures: string[] = [];
  for (const [encoding, head] of [['gzip', inflating], ['gzip', Buffer.from('not gzip at all')], ['deflate', Buffer.from('{"email":"')], ['x-unknown', Buffer.from('{"email":"')], ['identity, identity', Buffer.from('{"email":"')]] as const) {
    const started = performance.now();
    const answer = await overSocket(h.baseUrl, `POST ${P}/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: ${encoding}\r\nContent-Length: 10000000\r\n\r\n${head.toString('latin1')}`, 2000);
    if (!answer) failures.push(`${encoding} (${head.length} bytes sent): no answer within 2 s`);
    else if (answer.status < 400 || answer.status >= 500) failures.push(`${encoding}: ${answer.status} ${answer.text.slice(0, 100)}`);
    else assert.ok(performance.now() - started < 2000);
  }
  assert.deepEqual(failures, []);
  // A compressed body within the limit still signs in as before.
  const user = await h.signUp();
  const small = await raw('POST', '/auth/login', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, gzipSync(JSON.stringify({ email: user.email, password: user.password })));
  assert.equal(small.status, 200, small.text);
});
