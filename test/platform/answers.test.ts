import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { after, before, test } from 'node:test';
import express, { type Express } from 'express';
import { Harness } from '../helpers/harness.js';

// Issue 28: an uncacheable answer is written without Express's res.json (no ETag, no freshness
// check). What hosts can see of an answer must not change: a wrapped res.json still sees every
// answer, the app's JSON settings still apply, and the cacheable JWKS keeps its ETag.

let h: Harness;
const servers: Server[] = [];
before(async () => {
  h = await Harness.start();
});
after(async () => {
  for (const server of servers) server.close();
  await h.close();
});

async function serve(app: Express): Promise<string> {
  const server = await new Promise<Server>((resolve) => {
    const started = app.listen(0, '127.0.0.1', () => resolve(started));
  });
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

test('an answer carries its JSON type and exact length, no ETag, and HEAD has the length without the body', async () => {
  const user = await h.signUp();
  const me = await fetch(`${h.baseUrl}/auth/me`, { headers: { authorization: `Bearer ${user.accessToken}` } });
  const text = await me.text();
  assert.equal(me.status, 200);
  assert.equal(me.headers.get('content-type'), 'application/json; charset=utf-8');
  assert.equal(me.headers.get('content-length'), String(Buffer.byteLength(text)));
  assert.equal(me.headers.get('cache-control'), 'no-store');
  assert.equal(me.headers.get('etag'), null);
  assert.equal(JSON.parse(text).data.email, user.email);

  const head = await fetch(`${h.baseUrl}/auth/me`, { method: 'HEAD', headers: { authorization: `Bearer ${user.accessToken}` } });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(text)));
  assert.equal(await head.text(), '');

  const created = await fetch(`${h.baseUrl}/orgs`, { method: 'POST', headers: { authorization: `Bearer ${user.accessToken}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Answered' }) });
  assert.equal(created.status, 201);
  assert.equal((await created.json()).data.name, 'Answered');
});

test("a host's wrapper of res.json sees every answer, and the host app's JSON settings apply", async () => {
  const seen: unknown[] = [];
  const wrapping = express();
  wrapping.use('/identity', (_req, res, next) => {
    const original = res.json.bind(res);
    res.json = (body: { data?: Record<string, unknown> }) => {
      seen.push(body);
      return original({ ...body, wrapped: true });
    };
    next();
  }, h.identity);
  const wrapped = await serve(wrapping);
  const user = await h.signUp();
  const login = await fetch(`${wrapped}/identity/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: user.email, password: user.password }) });
  assert.equal(login.status, 200);
  assert.equal((await login.json()).wrapped, true);
  assert.equal((seen[0] as { data: { token_type: string } }).data.token_type, 'Bearer');

  const spacing = express();
  spacing.set('json spaces', 2);
  spacing.use('/identity', h.identity);
  const spaced = await serve(spacing);
  const me = await fetch(`${spaced}/identity/auth/me`, { headers: { authorization: `Bearer ${user.accessToken}` } });
  assert.match(await me.text(), /^\{\n {2}"data": \{\n/);
});

test('the JWKS, which may be cached, keeps its ETag and answers a matching If-None-Match with 304', async () => {
  const jwks = await fetch(`${h.baseUrl}/auth/.well-known/jwks.json`);
  assert.equal(jwks.status, 200);
  const etag = jwks.headers.get('etag');
  assert.ok(etag);
  // fetch() adds `Cache-Control: no-cache` to a conditional request unless one is given; no-cache would forbid the 304.
  assert.equal((await fetch(`${h.baseUrl}/auth/.well-known/jwks.json`, { headers: { 'if-none-match': etag, 'cache-control': 'max-age=0' } })).status, 304);
});
