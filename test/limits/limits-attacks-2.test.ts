/*
 * An attacker's audit of the rate limits, budgets and several instances (docs/security.md "Rate
 * limits and budgets", "Lockout"; docs/multiple-instances.md "The rate-limit store"). Each block
 * names the attack:
 *
 *   node scripts/run-tests.mjs --sqlite-only test/limits/limits-attacks-2.test.ts
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import express from 'express';
import { type Harness, MOUNT, STRONG_PASSWORD, uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { rawHttp, type RawResponse } from '../helpers/raw-request.js';
import { assertError } from '../helpers/account.js';
import { createOrg, switchOrg } from '../helpers/orgs.js';
import { enrollSms, lastSmsCode, loginForTicket } from '../helpers/mfa.js';

const start = harnessesClosedAfterFile();

/** The harness's router mounted again in a host app with the given `trust proxy`, as a host behind a load balancer would. */
async function behindProxy(h: Harness, trust: boolean | number | string): Promise<{ post(path: string, body: unknown, headers: Record<string, string | string[]>): Promise<RawResponse>; get(path: string, headers: Record<string, string | string[]>): Promise<RawResponse> }> {
  const app = express();
  app.set('trust proxy', trust);
  app.get('/whoami', h.identity.authenticate({ apiKeys: true }), (_req, res) => {
    res.json({ ok: true });
  });
  app.use(MOUNT, h.identity);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const root = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    post: (path, body, headers) => rawHttp(root + MOUNT, 'POST', path, { 'content-type': 'application/json', ...headers }, JSON.stringify(body)),
    get: (path, headers) => rawHttp(`${root}/`, 'GET', path.replace(/^\//, ''), headers),
  };
}

const forgot = () => ({ email: uniqueEmail() });

/*
 * Attack: per-IP budgets multiplied by IPv6. A client holds at least a /64 (usually a /56 or a
 * /48), so one machine can send each request from a fresh address that differs only in its low
 * 64 bits. The key must group them; a client of another /56 keeps its own budget.
 */
test('IPv6 addresses of one /64 (and one /56) share one per-IP budget; another /56 has its own', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { password_forgot: { limit: 3, windowSec: 3600 } } } } });
  const proxy = await behindProxy(h, true);
  const from = (ip: string) => proxy.post('/auth/password/forgot', forgot(), { 'x-forwarded-for': ip });
  const statuses = [];
  for (const ip of ['2001:db8:1:2::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:DB8:1:2:0:0:0:7', '2001:db8:1:2a::9', '2001:db8:1:2::abcd']) statuses.push((await from(ip)).status);
  assert.deepEqual(statuses, [202, 202, 202, 429, 429], 'low bits, spelling and the rest of the /56 spend one budget');
  assert.equal((await from('2001:db8:1:100::1')).status, 202, 'another /56 is another client');
});

/*
 * Attack: IPv4 clients of a dual-stack listener arrive as IPv4-mapped IPv6 (`::ffff:a.b.c.d`).
 * Grouped by the /56 of their IPv6 form they would all share one budget (one client exhausts
 * everyone's), and spelled mapped or plain one client would have two budgets.
 */
test('an IPv4-mapped IPv6 address spends the budget of its IPv4 address, and mapped clients are not lumped together', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { password_forgot: { limit: 2, windowSec: 3600 } } } } });
  const proxy = await behindProxy(h, true);
  const from = (ip: string) => proxy.post('/auth/password/forgot', forgot(), { 'x-forwarded-for': ip });
  assert.equal((await from('203.0.113.9')).status, 202);
  assert.equal((await from('::ffff:203.0.113.9')).status, 202);
  assert.equal((await from('::ffff:cb00:7109')).status, 429, 'the hex spelling of the same mapped address');
  for (const other of ['::ffff:203.0.113.10', '::ffff:198.51.100.9', '198.51.100.10']) assert.equal((await from(other)).status, 202, other);
});

/*
 * Attack: a client behind the host's one proxy (`trust proxy: 1`) writes its own
 * X-Forwarded-For entries, rotating them, repeating the header line, or filling it with junk,
 * to get a fresh budget per request. Only the hop the proxy appended (the last entry) may key.
 */
test('behind one trusted proxy, entries a client writes into X-Forwarded-For never buy a fresh budget', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimits: { password_forgot: { limit: 2, windowSec: 3600 } } } } });
  const proxy = await behindProxy(h, 1);
  const proxied = (clientWrote: string | string[]) => {
    const lines = Array.isArray(clientWrote) ? clientWrote : [clientWrote];
    // The proxy appends the peer it saw to the last header line.
    const sent = [...lines.slice(0, -1), `${lines.at(-1)}, 192.0.2.77`];
    return proxy.post('/auth/password/forgot', forgot(), { 'x-forwarded-for': sent.length === 1 ? sent[0]! : sent });
  };
  const statuses = [];
  for (const wrote of ['10.0.0.1', '10.0.0.2', ['10.0.0.3', '10.0.0.4'], 'not-an-address', '2001:db8::1, ::1', ` ${'9'.repeat(4000)}`]) statuses.push((await proxied(wrote)).status);
  assert.deepEqual(statuses, [202, 202, 429, 429, 429, 429]);
  assert.equal((await proxy.post('/auth/password/forgot', forgot(), { 'x-forwarded-for': '192.0.2.78' })).status, 202, 'another client behind the proxy');
});

/*
 * Attack: junk in X-Forwarded-For on a host that trusts every hop (`trust proxy: true`): any
 * text becomes `req.ip` and the key. Such a host lets clients choose their key (documented), but
 * no spelling may break the limiter: never a 500, the key stays bounded in the database store,
 * and the text is never logged as written.
 */
test('under trust proxy true, malformed, huge or zoned X-Forwarded-For values answer as any client, never 500', async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimitStore: 'database', rateLimits: { password_forgot: { limit: 1, windowSec: 3600 } } } } });
  const proxy = await behindProxy(h, true);
  for (const value of ['not-an-address', 'fe80::1%eth0', 'fe80::1%', '::ffff:0:1.2.3.4', `x${'\u00e9'.repeat(3000)}`, '1.2.3.4:5678', '[2001:db8::1]', '<script>', '']) {
    const response = await proxy.post('/auth/password/forgot', forgot(), { 'x-forwarded-for': value });
    assert.ok(response.status === 202 || response.status === 429, `${JSON.stringify(value.slice(0, 20))}: ${response.status} ${response.text}`);
  }
  const keys = await h.knex(`${h.tablePrefix}rate_limit_counters`).select('key');
  for (const { key } of keys) assert.ok(String(key).length <= 200, `a counter key of ${String(key).length} characters`);
  assert.ok(!h.logs.some((line) => /<script>/.test(line.msg)), 'a written address is never logged as written');
});

/*
 * Attack: the store of the counters fails (the 'database' store's table is gone, or a
 * migration dropped it): the limit must fail closed (503 unavailable), not turn into 500s and
 * not silently drop the limit, on the per-IP groups, the router's authenticated budget and the
 * host middleware alike; only a group with passOnStoreError passes, logged.
 */
test("the 'database' store without its table answers 503 on every limited path, never 500 or unlimited", async () => {
  const h = await start({ rateLimits: true, config: { auth: { rateLimitStore: 'database', rateLimits: { token_refresh: { limit: 60, windowSec: 60, passOnStoreError: true } } } } });
  const org = await createOrg(h);
  const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'reports', permission_keys: [], expires_in: 3600 }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  const apiKey = { authorization: `Bearer ${created.body.data.key}` };
  const proxy = await behindProxy(h, false);
  assert.equal((await proxy.get('/whoami', apiKey)).status, 200);
  await h.knex.schema.dropTable(`${h.tablePrefix}rate_limit_counters`);

  const refused = [
    await h.post('/auth/login', { email: org.owner.email, password: org.owner.password }),
    await h.post('/auth/password/forgot', { email: org.owner.email }),
    await h.get('/auth/me', { token: org.owner.token }),
  ];
  for (const response of refused) assertError(response, 503, 'unavailable');
  // The host middleware counts an API key's budget (docs/api-keys.md): it fails closed too.
  const host = await proxy.get('/whoami', apiKey);
  assert.equal(host.status, 503, host.text);
  assert.equal(host.body?.error, 'unavailable');
  for (const text of [...refused.map((response) => response.text), host.text]) assert.doesNotMatch(text, /rate_limit_counters|no such table|does not exist|SQL/i);
  // The group the host chose to fail open passes (the refresh itself is refused: the token is wrong).
  const refresh = await h.post('/auth/token/refresh', { refresh_token: 'rt1.x.y.z' });
  assert.equal(refresh.body?.error, 'invalid_grant', refresh.text);
  assert.ok(h.logs.some((line) => line.level === 'warn' && /rate-limit store of group token_refresh is unavailable/.test(line.msg)));
});

/*
 * Several instances on one Redis: the documented store. Attacks: N instances multiplying the
 * limit; Redis going away mid-run (fail closed with 503 within the 5 s bound, never 500, never
 * unlimited) and coming back (the limit holds again, by itself).
 */
const REDIS_SERVER = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((path) => existsSync(path));

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function startRedis(port: number, dir: string): Promise<ChildProcess> {
  const child = spawn(REDIS_SERVER!, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`redis-server did not start\n${output}`)), 10_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (/Ready to accept connections/.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => reject(new Error(`redis-server exited with ${code}\n${output}`)));
  });
  return child;
}

async function stopRedis(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

test('one Redis store: two instances share one login budget; Redis gone answers 503 within the bound, and the limit holds again once it is back', { skip: REDIS_SERVER ? false : 'no redis-server', timeout: 60_000 }, async () => {
  const { createClient } = await import('redis');
  const { RedisStore } = await import('rate-limit-redis');
  const dir = mkdtempSync(join(tmpdir(), 'limits-attacks-redis-'));
  const port = await freePort();
  let redis = await startRedis(port, dir);
  const client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: () => 50 } });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const prefix = `rl:${Math.random().toString(36).slice(2)}:`;
    const config = {
      auth: {
        rateLimitStore: (group: string) => new RedisStore({ prefix: `${prefix}${group}:`, sendCommand: (...args: string[]) => client.sendCommand(args) }),
        rateLimits: { login: { limit: 3, windowSec: 60 } },
      },
    } as never;
    const a = await start({ rateLimits: true, config });
    const b = await start({ rateLimits: true, config, shareDatabaseWith: a });
    const body = { email: uniqueEmail(), password: 'whatever password' };
    const statuses = [];
    for (const instance of [a, b, a, b]) statuses.push((await instance.post('/auth/login', body)).status);
    assert.deepEqual(statuses, [401, 401, 401, 429], 'two instances do not double the budget');

    await stopRedis(redis);
    const startedAt = performance.now();
    const [onA, onB] = await Promise.all([a.post('/auth/login', body), b.post('/auth/password/forgot', { email: uniqueEmail() })]);
    assertError(onA, 503, 'unavailable');
    assertError(onB, 503, 'unavailable');
    assert.ok(performance.now() - startedAt < 7000, `answered after ${Math.round(performance.now() - startedAt)} ms`);
    assert.doesNotMatch(onA.text, /ECONNREFUSED|redis|6379|127\.0\.0\.1/i);

    // Back (empty, as a restarted Redis without persistence is): counting resumes by itself, on both instances.
    redis = await startRedis(port, dir);
    const deadline = performance.now() + 15_000;
    let status = 0;
    while (performance.now() < deadline) {
      status = (await a.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' })).status;
      if (status !== 503) break;
    }
    assert.equal(status, 401, 'the store answers again');
    const fresh = { email: uniqueEmail(), password: 'whatever password' };
    const after = [];
    for (const instance of [b, a, b, a]) after.push((await instance.post('/auth/login', fresh)).status);
    assert.ok(after.includes(429), `the limit holds again after the outage: ${after.join(',')}`);
    assert.ok(!after.includes(503) && !after.includes(500), after.join(','));
  } finally {
    await client.destroy?.();
    await stopRedis(redis);
    rmSync(dir, { recursive: true, force: true });
  }
});

/*
 * Attack: a lockout that lapses on one instance before another, or that lets a right password
 * in one millisecond early somewhere. Failures spread over two instances on one database lock
 * the account on both; until `locked_until` (injected clock) both refuse the right password
 * and read `locked`, and from that instant both let it in.
 */
test('a lockout reached over two instances holds on both until locked_until, and ends on both at that instant', async () => {
  const a = await start({ config: { auth: { lockout: { threshold: 3, window: 600, duration: 300 } } } });
  const b = await start({ config: { auth: { lockout: { threshold: 3, window: 600, duration: 300 } } }, shareDatabaseWith: a });
  const user = await a.signUp(uniqueEmail('lock'), STRONG_PASSWORD);
  for (const instance of [a, b, a]) assertError(await instance.post('/auth/login', { email: user.email, password: 'wrong password here' }), 401, 'invalid_credentials');
  const locked = a.eventsOfType('user.locked').find((event) => event.user_id === user.userId) ?? b.eventsOfType('user.locked').find((event) => event.user_id === user.userId);
  assert.ok(locked, 'user.locked');
  const until = Date.parse(String((locked.data as { until: string }).until));
  const [row] = await a.knex(`${a.tablePrefix}users`).where({ id: user.userId });
  assert.equal(Number(row.locked_until), until, 'the event names the stored instant');

  a.clock.set(until - 1);
  for (const instance of [a, b]) {
    assertError(await instance.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
    assert.equal((await instance.get('/auth/me', { token: user.accessToken })).body.data.status, 'locked');
  }
  a.clock.set(until);
  assert.equal((await b.get('/auth/me', { token: user.accessToken })).body.data.status, 'active');
  const signedIn = await b.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(signedIn.status, 200, signedIn.text);
  // The lock that lapsed left no failures behind: one more wrong password does not lock again at once.
  assertError(await a.post('/auth/login', { email: user.email, password: 'wrong password here' }), 401, 'invalid_credentials');
  assert.equal((await a.post('/auth/login', { email: user.email, password: user.password })).status, 200);
});

/*
 * Attack (availability): Redis is unreachable for a moment while an instance starts (a deploy
 * that restarts Redis and the app together, a failover). rate-limit-redis loads its scripts in
 * the store's `init`, once, and keeps the failed load: every later count rethrew it, so each
 * limited group of that instance answered 503 for as long as the process lived, long after
 * Redis was back. A client that fails fast while disconnected (node-redis
 * `disableOfflineQueue`, ioredis after `maxRetriesPerRequest`) shows it.
 */
test('a store whose init failed while Redis was down recovers once Redis is back, instead of 503 for the life of the process', { skip: REDIS_SERVER ? false : 'no redis-server', timeout: 60_000 }, async () => {
  const { createClient } = await import('redis');
  const { RedisStore } = await import('rate-limit-redis');
  const dir = mkdtempSync(join(tmpdir(), 'limits-attacks-redis-'));
  const port = await freePort();
  let redis = await startRedis(port, dir);
  const client = createClient({ url: `redis://127.0.0.1:${port}`, disableOfflineQueue: true, socket: { reconnectStrategy: () => 50 } });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await stopRedis(redis);
    const prefix = `rl:${Math.random().toString(36).slice(2)}:`;
    const h = await start({
      rateLimits: true,
      config: {
        auth: {
          rateLimitStore: (group: string) => new RedisStore({ prefix: `${prefix}${group}:`, sendCommand: (...args: string[]) => client.sendCommand(args) }),
          rateLimits: { login: { limit: 2, windowSec: 60 } },
        },
      } as never,
    });
    const body = { email: uniqueEmail(), password: 'whatever password' };
    assertError(await h.post('/auth/login', body), 503, 'unavailable');

    redis = await startRedis(port, dir);
    const deadline = performance.now() + 10_000;
    while (!client.isReady && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(client.isReady, 'the client reconnected');
    const statuses = [];
    for (let attempt = 0; attempt < 3; attempt += 1) statuses.push((await h.post('/auth/login', body)).status);
    assert.deepEqual(statuses, [401, 401, 429], 'the limit counts again once Redis is back');
    assert.ok(!h.logs.some((line) => /passes without a limit/.test(line.msg)), 'a failed start-up is not logged as a limit let go');
  } finally {
    await client.destroy?.();
    await stopRedis(redis);
    rmSync(dir, { recursive: true, force: true });
  }
});

/*
 * Attack on the client's trust in Retry-After: a send over two budgets at once (an invitation
 * over its organization's budget and its address's; a code over a shared destination's and the
 * account's) was told to come back when the first bucket checked reopens, though the other stays
 * spent for far longer: a client that honours Retry-After (or a script that sleeps on it) is
 * refused again and again. Retry-After must name the instant the send can go through.
 */
test('a send over two budgets is told to retry when both have room, not when the first reopens', async () => {
  const h = await start({ config: { invites: { sendBudget: { perOrganization: { limit: 1, windowSec: 600 }, perAddress: { limit: 1, windowSec: 86_400 } } } } });
  const orgA = await createOrg(h);
  const orgB = await createOrg(h);
  const address = uniqueEmail('invited');
  assert.equal((await h.post(`/orgs/${orgA.id}/invites`, { email: uniqueEmail('other'), role_slugs: ['member'] }, { token: orgA.owner.token })).status, 201);
  h.clock.advance(10);
  assert.equal((await h.post(`/orgs/${orgB.id}/invites`, { email: address, role_slugs: ['member'] }, { token: orgB.owner.token })).status, 201);
  h.clock.advance(50);

  const refused = await h.post(`/orgs/${orgA.id}/invites`, { email: address, role_slugs: ['member'] }, { token: orgA.owner.token });
  assertError(refused, 429, 'rate_limited');
  const retryAfter = Number(refused.headers.get('retry-after'));
  assert.ok(retryAfter >= 86_400 - 60 && retryAfter <= 86_400, `Retry-After ${retryAfter}: the address's budget reopens a day after its send`);
  assert.equal(Number(refused.headers.get('x-ratelimit-reset')) * 1000 >= h.clock.now() + (retryAfter - 1) * 1000, true, 'X-RateLimit-Reset agrees with Retry-After');
  assert.equal(refused.headers.get('x-ratelimit-limit'), '1');

  // Honoured, it gets through at once.
  h.clock.advance(retryAfter);
  const login = await h.post('/auth/login', { email: orgA.owner.email, password: orgA.owner.password });
  const token = await switchOrg(h, login.body.data.access_token, orgA.id);
  const honoured = await h.post(`/orgs/${orgA.id}/invites`, { email: address, role_slugs: ['member'] }, { token });
  assert.equal(honoured.status, 201, honoured.text);
});

/*
 * Attack: lockout by budget. An unauthenticated client cannot reach a victim's login codes
 * directly (a challenge needs the password), but passwordless start mails the victim's address
 * and spends the account's `perAccount` send budget (CONTRACT 11), which the victim's second-
 * factor codes spend too. Under any spelling of the address it is held to the address's
 * `perDestination` budget, which the defaults keep below `perAccount`: the victim still gets
 * login codes in the same hour.
 */
test("passwordless starts for a victim's address, in every spelling, leave the victim's login codes flowing under the default budgets", async () => {
  const h = await start({ config: { passwordless: {} } });
  const victim = await h.signUp(uniqueEmail('victim'));
  const phone = `+1555${String(Date.now() % 100000).padStart(5, '0')}77`;
  const { factorId } = await enrollSms(h, victim.accessToken, phone);
  const [local, domain] = victim.email.split('@') as [string, string];
  const spellings = [victim.email, victim.email.toUpperCase(), ` ${victim.email} `, `${local}@${domain.toUpperCase()}`, `${local.toUpperCase()}@${domain}`];
  const statuses = [];
  for (let round = 0; round < 3; round += 1) {
    for (const spelling of spellings) {
      h.clock.advance(31);
      statuses.push((await h.post('/auth/passwordless/start', { email: spelling })).status);
    }
  }
  assert.equal(statuses.filter((status) => status === 202).length, 5, `the address's budget bounds every spelling: ${statuses.join(',')}`);
  assert.equal(h.mail.filter((message) => message.to === victim.email && message.template === 'login_code').length, 5);

  // The victim's own login codes: the account budget (10) less the enrollment code and those five.
  const codes = [];
  for (let login = 0; login < 5; login += 1) {
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, victim);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    codes.push(challenge.status);
    if (challenge.status !== 200) continue;
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket })).status, 200);
  }
  assert.deepEqual(codes, [200, 200, 200, 200, 429], 'the victim keeps the rest of the account budget');
});
