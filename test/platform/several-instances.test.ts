import assert from 'node:assert/strict';
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import knexFactory, { type Knex } from 'knex';

// docs/multiple-instances.md (several instances), proven with separate processes: three instances of the BUILT
// package (test/instances/instance.mjs imports dist/) on one throwaway PostgreSQL and one Redis,
// and a client that spreads its requests over them.
// Threats: a rolling deploy onto a new database bricking it (migration race); a revoked session
// or a removed member still served by another instance; tokens of a freshly rotated key refused
// by verifiers that cache the JWKS; a brute force getting N times its budget from N instances;
// a crash mid-request leaving a refresh family with two live successors.

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const INSTANCE_SCRIPT = join(ROOT, 'test', 'instances', 'instance.mjs');
const PG_URL = process.env.IDENTITY_TEST_PG_URL;
const REDIS_URL = process.env.IDENTITY_TEST_REDIS_URL;
const SKIP = process.env.IDENTITY_TEST_DB !== 'pg' || !PG_URL
  ? 'several instances share one PostgreSQL: this file runs in the PostgreSQL phase only'
  : false;
const REDIS_SKIP = REDIS_URL ? false : (process.env.IDENTITY_TEST_REDIS_SKIP ?? 'IDENTITY_TEST_REDIS_URL is not set (scripts/run-tests.mjs starts a throwaway redis-server)');
const STARTUP_ROUNDS = 10;
const LOGIN_LIMIT = 5;
const PASSWORD = 'correct horse battery staple';
const run = promisify(execFile);

interface Instance {
  name: string;
  url: string;
  child: ChildProcess;
  exited: Promise<void>;
}

const children = new Set<ChildProcess>();

async function startInstance(name: string, env: Record<string, string>): Promise<Instance> {
  const child = spawn(process.execPath, [INSTANCE_SCRIPT], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const exited = new Promise<void>((resolveExit) => child.once('exit', () => {
    children.delete(child);
    resolveExit();
  }));
  let output = '';
  child.stderr!.on('data', (chunk) => (output += chunk));
  const port = await new Promise<number>((resolvePort, reject) => {
    const timer = setTimeout(() => reject(new Error(`instance ${name} not ready within 30 s:\n${output}`)), 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk;
      const match = /LISTENING (\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolvePort(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`instance ${name} exited with ${code} before it was ready:\n${output}`));
    });
  });
  return { name, url: `http://127.0.0.1:${port}`, child, exited };
}

async function stopInstance(instance: Instance): Promise<void> {
  if (instance.child.exitCode === null && instance.child.signalCode === null) instance.child.kill('SIGTERM');
  const timeout = setTimeout(() => instance.child.kill('SIGKILL'), 5000);
  await instance.exited;
  clearTimeout(timeout);
}

interface Reply {
  status: number;
  body: any;
  ms: number;
}

/** A client of the cluster: each request names its instance; a fresh client IP per request unless one is given. */
async function call(instance: Instance, method: string, path: string, options: { body?: unknown; token?: string; ip?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'x-forwarded-for': options.ip ?? randomIp() };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const startedAt = performance.now();
  const response = await fetch(`${instance.url}${path.startsWith('/test/') ? '' : '/identity'}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined, ms: performance.now() - startedAt };
}

function randomIp(): string {
  const bytes = randomBytes(3);
  return `10.${bytes[0]}.${bytes[1]}.${bytes[2]}`;
}

const uniqueEmail = (label: string) => `${label}-${randomBytes(4).toString('hex')}@cluster.test`;

/** Mail and SMS every instance appended to the shared file. */
function messages(mailFile: string): Array<Record<string, any>> {
  if (!existsSync(mailFile)) return [];
  return readFileSync(mailFile, 'utf8').trim().split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

function mailToken(mailFile: string, to: string, template: string): string {
  const message = messages(mailFile).reverse().find((entry) => entry.kind === 'mail' && entry.to === to && entry.template === template);
  assert.ok(message, `no ${template} mail to ${to}`);
  return String(message.context.token);
}

function lastSmsCode(mailFile: string, to: string): string {
  const message = messages(mailFile).reverse().find((entry) => entry.kind === 'sms' && entry.to === to);
  assert.ok(message, `no SMS to ${to}`);
  return /\b(\d{6})\b/.exec(message.message)![1]!;
}

async function dropPrefixedTables(knex: Knex, prefix: string): Promise<void> {
  const { rows } = await knex.raw<{ rows: Array<{ tablename: string }> }>('select tablename from pg_tables where schemaname = current_schema() and tablename like ?', [`${prefix}%`]);
  if (rows.length > 0) await knex.raw(`drop table if exists ${rows.map((row) => `"${row.tablename}"`).join(', ')} cascade`);
}

/** Polls `refused` until it holds; answers the delay in ms, or fails after `withinMs`. */
async function delayUntil(refused: () => Promise<boolean>, withinMs = 1000): Promise<number> {
  const startedAt = performance.now();
  for (;;) {
    if (await refused()) return performance.now() - startedAt;
    if (performance.now() - startedAt > withinMs) assert.fail(`not in force within ${withinMs} ms`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 5));
  }
}

describe('several instances on one PostgreSQL (and Redis)', { skip: SKIP }, () => {
  let knex: Knex;
  let workDir: string;
  const prefixes: string[] = [];

  before(async () => {
    // The instances run the package as a host gets it.
    await run('npm', ['run', 'build'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
    knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 4 } });
    workDir = mkdtempSync(join(tmpdir(), 'identity-cluster-'));
  });

  after(async () => {
    for (const child of children) child.kill('SIGKILL');
    for (const prefix of prefixes) await dropPrefixedTables(knex, prefix).catch(() => undefined);
    await knex?.destroy();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  function clusterEnv(store: 'memory' | 'database' | 'redis', loginLimit = 100_000): Record<string, string> {
    const prefix = `c${randomBytes(4).toString('hex')}_`;
    prefixes.push(prefix);
    return {
      IDENTITY_DATABASE_URL: PG_URL!,
      IDENTITY_TABLE_PREFIX: prefix,
      IDENTITY_MAIL_FILE: join(workDir, `${prefix}mail.jsonl`),
      IDENTITY_RATE_STORE: store,
      IDENTITY_REDIS_URL: REDIS_URL ?? '',
      IDENTITY_LOGIN_LIMIT: String(loginLimit),
    };
  }

  async function startCluster(env: Record<string, string>): Promise<Instance[]> {
    return Promise.all(['A', 'B', 'C'].map((name) => startInstance(name, env)));
  }

  test(`three instances started together on an empty database all become ready with one active key (${STARTUP_ROUNDS} rounds)`, async () => {
    const timings: number[] = [];
    for (let round = 0; round < STARTUP_ROUNDS; round += 1) {
      const env = clusterEnv('memory');
      const prefix = env.IDENTITY_TABLE_PREFIX!;
      const startedAt = performance.now();
      const cluster = await startCluster(env);
      timings.push(performance.now() - startedAt);
      try {
        const keys = await knex(`${prefix}signing_keys`).select('active_slot', 'next_slot');
        assert.equal(keys.filter((key) => key.active_slot !== null).length, 1, `round ${round}: one active key`);
        assert.equal(keys.filter((key) => key.next_slot !== null).length, 1, `round ${round}: one next key`);
        assert.equal(keys.length, 2, `round ${round}: no stray keys`);
        const lock = await knex(`${prefix}migrations_lock`).select('is_locked');
        assert.deepEqual(lock.map((row) => Number(row.is_locked)), [0], `round ${round}: one unlocked migration lock row`);
        const applied = await knex(`${prefix}migrations`).select('name');
        assert.equal(applied.length, new Set(applied.map((row) => row.name)).size, `round ${round}: each migration applied once`);
        // Every instance serves, and they share the keys.
        const kids = await Promise.all(cluster.map(async (instance) => (await call(instance, 'GET', '/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid).join()));
        assert.equal(new Set(kids).size, 1, `round ${round}: one JWKS`);
      } finally {
        await Promise.all(cluster.map(stopInstance));
      }
    }
    console.log(`# start-up race: ${STARTUP_ROUNDS} rounds of 3 processes, all ready in ${timings.map((ms) => Math.round(ms)).join(', ')} ms`);
  });

  describe('one cluster', () => {
    let cluster: Instance[];
    let A: Instance;
    let B: Instance;
    let C: Instance;
    let mailFile: string;
    let prefix: string;

    before(async () => {
      const env = clusterEnv(REDIS_URL ? 'redis' : 'database', LOGIN_LIMIT);
      mailFile = env.IDENTITY_MAIL_FILE!;
      prefix = env.IDENTITY_TABLE_PREFIX!;
      cluster = await startCluster(env);
      [A, B, C] = cluster as [Instance, Instance, Instance];
    });
    after(async () => {
      await Promise.all((cluster ?? []).map(stopInstance));
    });

    /** Registers on one instance, verifies on another, logs in on a third. */
    async function signUp(label = 'user', via: [Instance, Instance, Instance] = [A, B, C]) {
      const email = uniqueEmail(label);
      assert.equal((await call(via[0], 'POST', '/auth/register', { body: { email, password: PASSWORD } })).status, 202);
      const verified = await call(via[1], 'POST', '/auth/email/verify', { body: { token: mailToken(mailFile, email, 'verify_email') } });
      assert.equal(verified.status, 200, JSON.stringify(verified.body));
      return { email, ...(await login(via[2], email)) };
    }

    async function login(instance: Instance, email: string) {
      const reply = await call(instance, 'POST', '/auth/login', { body: { email, password: PASSWORD } });
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      const data = reply.body.data;
      return { userId: data.user.id as string, accessToken: data.access_token as string, refreshToken: data.refresh_token as string };
    }

    test('register on A, verify on B, log in on C, refresh on A, /auth/me on B', async () => {
      const user = await signUp('flow', [A, B, C]);
      const refreshed = await call(A, 'POST', '/auth/token/refresh', { body: { refresh_token: user.refreshToken } });
      assert.equal(refreshed.status, 200);
      const me = await call(B, 'GET', '/auth/me', { token: refreshed.body.data.access_token });
      assert.equal(me.status, 200);
      assert.equal(me.body.data.email, user.email);
    });

    test('one refresh token sent to all three at once succeeds exactly once (20 repetitions)', async () => {
      const user = await signUp('race');
      for (let repetition = 0; repetition < 20; repetition += 1) {
        const session = await login([A, B, C][repetition % 3]!, user.email);
        const replies = await Promise.all(cluster.map((instance) => call(instance, 'POST', '/auth/token/refresh', { body: { refresh_token: session.refreshToken } })));
        const statuses = replies.map((reply) => reply.status);
        assert.equal(statuses.filter((status) => status === 200).length, 1, `repetition ${repetition}: ${statuses.join(',')}`);
        assert.ok(statuses.every((status) => status === 200 || status === 401), statuses.join(','));
      }
    });

    test('each revocation of CONTRACT 7 made on A is in force on B and C within 1 s', async () => {
      const delays: Array<[string, number]> = [];
      /** After `revoke` answered on A, polls B and C with `probe` until each refuses. */
      async function measure(label: string, revoke: () => Promise<void>, probe: (instance: Instance) => Promise<boolean>) {
        for (const instance of [B, C]) assert.equal(await probe(instance), false, `${label}: still allowed before the revocation`);
        await revoke();
        for (const instance of [B, C]) delays.push([`${label} on ${instance.name}`, await delayUntil(() => probe(instance))]);
      }
      const meRefused = (token: string) => async (instance: Instance) => (await call(instance, 'GET', '/auth/me', { token })).status === 401;

      const loggingOut = await signUp('logout');
      await measure('logout', async () => void assert.equal((await call(A, 'POST', '/auth/logout', { body: {}, token: loggingOut.accessToken })).status, 200), meRefused(loggingOut.accessToken));

      const everywhere = await signUp('logout-all');
      const second = await login(B, everywhere.email);
      await measure('logout-all', async () => void assert.equal((await call(A, 'POST', '/auth/logout-all', { body: {}, token: everywhere.accessToken })).status, 200), meRefused(second.accessToken));

      const deleting = await signUp('session-delete');
      const other = await login(C, deleting.email);
      const sid = JSON.parse(Buffer.from(other.accessToken.split('.')[1]!, 'base64url').toString()).sid;
      await measure('session delete', async () => void assert.equal((await call(A, 'DELETE', `/auth/sessions/${sid}`, { token: deleting.accessToken })).status, 200), meRefused(other.accessToken));

      const changing = await signUp('password-change');
      const elsewhere = await login(B, changing.email);
      await measure('password change', async () => {
        const reply = await call(A, 'POST', '/auth/password/change', { body: { current_password: PASSWORD, new_password: `${PASSWORD} two` }, token: changing.accessToken });
        assert.equal(reply.status, 200, JSON.stringify(reply.body));
      }, meRefused(elsewhere.accessToken));

      const resetting = await signUp('password-reset');
      await measure('password reset', async () => {
        assert.equal((await call(A, 'POST', '/auth/password/forgot', { body: { email: resetting.email } })).status, 202);
        const reply = await call(A, 'POST', '/auth/password/reset', { body: { token: mailToken(mailFile, resetting.email, 'password_reset'), new_password: `${PASSWORD} three` } });
        assert.equal(reply.status, 200, JSON.stringify(reply.body));
      }, meRefused(resetting.accessToken));

      const root = await signUp('root');
      assert.equal((await call(A, 'POST', `/test/superadmin/${root.userId}`)).status, 200);
      const disabled = await signUp('disabled');
      await measure('user disable', async () => void assert.equal((await call(A, 'POST', `/users/${disabled.userId}/disable`, { body: {}, token: root.accessToken })).status, 200), meRefused(disabled.accessToken));
      const deleted = await signUp('deleted');
      await measure('user delete', async () => void assert.equal((await call(A, 'DELETE', `/users/${deleted.userId}`, { token: root.accessToken })).status, 200), meRefused(deleted.accessToken));

      // Organization revocations: an owner on A acts on members whose requests go to B and C.
      const owner = await signUp('owner');
      const created = await call(A, 'POST', '/orgs', { body: { name: `Cluster ${randomBytes(3).toString('hex')}` }, token: owner.accessToken });
      assert.equal(created.status, 201);
      const orgId = created.body.data.id as string;
      const switchOrg = async (instance: Instance, token: string) => (await call(instance, 'POST', '/auth/switch-org', { body: { organization_id: orgId }, token })).body.data.access_token as string;
      const ownerToken = await switchOrg(A, owner.accessToken);
      async function member(label: string, roles: string[]) {
        const user = await signUp(label);
        assert.equal((await call(A, 'POST', `/orgs/${orgId}/invites`, { body: { email: user.email, role_slugs: roles }, token: ownerToken })).status, 201);
        assert.equal((await call(B, 'POST', '/auth/invites/accept', { body: { token: mailToken(mailFile, user.email, 'invite') }, token: user.accessToken })).status, 200);
        return { ...user, token: await switchOrg(C, user.accessToken) };
      }
      const orgRefused = (token: string) => async (instance: Instance) => (await call(instance, 'GET', `/orgs/${orgId}`, { token })).status >= 400;

      const suspended = await member('suspended', ['member']);
      await measure('member suspend', async () => void assert.equal((await call(A, 'PATCH', `/orgs/${orgId}/members/${suspended.userId}`, { body: { status: 'suspended' }, token: ownerToken })).status, 200), orgRefused(suspended.token));
      const removed = await member('removed', ['member']);
      await measure('member remove', async () => void assert.equal((await call(A, 'DELETE', `/orgs/${orgId}/members/${removed.userId}`, { token: ownerToken })).status, 200), orgRefused(removed.token));
      const demoted = await member('demoted', ['admin']);
      await measure('role change', async () => void assert.equal((await call(A, 'PATCH', `/orgs/${orgId}/members/${demoted.userId}/roles`, { body: { role_slugs: ['member'] }, token: ownerToken })).status, 200),
        async (instance) => (await call(instance, 'GET', `/orgs/${orgId}/invites`, { token: demoted.token })).status === 403);
      const remaining = await member('remaining', ['member']);
      await measure('organization delete', async () => {
        const reply = await call(A, 'DELETE', `/orgs/${orgId}`, { token: ownerToken });
        assert.equal(reply.status, 200, JSON.stringify(reply.body));
      }, orgRefused(remaining.token));

      const worst = Math.max(...delays.map(([, ms]) => ms));
      console.log(`# revocation delays (after A answered, until B/C refuse): ${delays.map(([label, ms]) => `${label} ${ms.toFixed(1)} ms`).join('; ')}; worst ${worst.toFixed(1)} ms`);
      assert.ok(worst < 1000);
    });

    test('rotation on A: B and C sign with the new key within 1 s; a jose verifier that fetched the JWKS before accepts the new tokens at once; old tokens still verify', async () => {
      const user = await signUp('rotation');
      const issuer = 'https://id.cluster.test';
      // jose's defaults: a 30 s cooldown between refetches, so a kid it lacks would be refused.
      const jwks = createRemoteJWKSet(new URL(`${B.url}/identity/auth/.well-known/jwks.json`));
      const before = await login(B, user.email);
      const oldKid = decodeProtectedHeader(before.accessToken).kid;
      await jwtVerify(before.accessToken, jwks, { issuer, typ: 'at+jwt' });
      const published = (await call(C, 'GET', '/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);

      const rotated = await call(A, 'POST', '/test/rotate');
      assert.equal(rotated.status, 200);
      const newKid = rotated.body.kid as string;
      assert.notEqual(newKid, oldKid);
      assert.ok(published.includes(newKid), 'the key a rotation activates was in every JWKS before it');

      const delays: string[] = [];
      const firstNew: Record<string, string> = {};
      for (const instance of [B, C]) {
        const ms = await delayUntil(async () => {
          const session = await login(instance, user.email);
          if (decodeProtectedHeader(session.accessToken).kid !== newKid) return false;
          firstNew[instance.name] = session.accessToken;
          return true;
        });
        delays.push(`${instance.name} ${ms.toFixed(1)} ms`);
      }
      console.log(`# rotation: instances signing with the new key after A's rotateSigningKey() answered: ${delays.join(', ')}`);

      // The verifier fetched the JWKS before the rotation and may not refetch for 30 s (its cooldown):
      // it already holds the new key.
      for (const token of Object.values(firstNew)) await jwtVerify(token, jwks, { issuer, typ: 'at+jwt' });
      await jwtVerify(before.accessToken, jwks, { issuer, typ: 'at+jwt' });
      for (const instance of cluster) {
        assert.equal((await call(instance, 'GET', '/auth/me', { token: before.accessToken })).status, 200, `old token on ${instance.name}`);
        const keys = (await call(instance, 'GET', '/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);
        assert.equal(keys[0], newKid, `${instance.name} lists the new active key first`);
        assert.ok(keys.includes(oldKid), `${instance.name} still lists the retiring key`);
        assert.equal(keys.length, 3, `${instance.name}: active, next and retiring`);
      }
    });

    test('the login rate limit holds across the three instances (Redis store)', { skip: REDIS_SKIP }, async () => {
      const ip = randomIp();
      const email = uniqueEmail('limited');
      const statuses = [];
      for (let attempt = 0; attempt < LOGIN_LIMIT + 1; attempt += 1) {
        statuses.push((await call(cluster[attempt % 3]!, 'POST', '/auth/login', { body: { email, password: 'wrong password here' }, ip })).status);
      }
      assert.deepEqual(statuses, [...Array(LOGIN_LIMIT).fill(401), 429]);
      for (const instance of cluster) assert.equal((await call(instance, 'POST', '/auth/login', { body: { email, password: 'x'.repeat(8) }, ip })).status, 429);
      const keys = [];
      const { createClient } = await import('redis');
      const redis = createClient({ url: REDIS_URL });
      await redis.connect();
      try {
        for await (const key of redis.scanIterator({ MATCH: `rl:${prefix}login:*` })) keys.push(key);
      } finally {
        await redis.quit();
      }
      assert.ok(keys.length >= 1, 'the counters live in Redis');
    });

    test('lockout, the OTP resend cooldown and the send budget hold across instances', async () => {
      // Lockout: 5 failures spread over A, B and C (each from its own IP) lock the account everywhere.
      const locked = await signUp('locked');
      for (let attempt = 0; attempt < 5; attempt += 1) {
        assert.equal((await call(cluster[attempt % 3]!, 'POST', '/auth/login', { body: { email: locked.email, password: 'wrong password here' } })).status, 401);
      }
      for (const instance of cluster) {
        const reply = await call(instance, 'POST', '/auth/login', { body: { email: locked.email, password: PASSWORD } });
        assert.notEqual(reply.status, 200, `${instance.name} refuses the locked account`);
      }

      // OTP: enroll an SMS factor on A, confirm on B, then the login gate's challenges hop instances.
      const user = await signUp('otp');
      const phone = `+1555${String(Date.now() % 1_000_000).padStart(6, '0')}`;
      const enrolled = await call(A, 'POST', '/auth/mfa/sms/enroll', { body: { phone_e164: phone }, token: user.accessToken });
      assert.equal(enrolled.status, 200, JSON.stringify(enrolled.body));
      const factorId = enrolled.body.data.factor_id;
      assert.equal((await call(B, 'POST', '/auth/mfa/sms/confirm', { body: { factor_id: factorId, code: lastSmsCode(mailFile, phone) }, token: user.accessToken })).status, 200);
      const gate = await call(C, 'POST', '/auth/login', { body: { email: user.email, password: PASSWORD } });
      assert.equal(gate.body.data.mfa_required, true);
      const ticket = gate.body.data.mfa_token;
      const challenge = (instance: Instance) => call(instance, 'POST', '/auth/mfa/challenge', { body: { factor_id: factorId }, token: ticket });
      // The enrollment code started the factor's cooldown (1 s in these instances).
      await new Promise((resolveWait) => setTimeout(resolveWait, 1100));
      assert.equal((await challenge(A)).status, 200);
      const cooled = await challenge(B);
      assert.equal(cooled.status, 429, 'the resend cooldown set on A holds on B');
      await new Promise((resolveWait) => setTimeout(resolveWait, 1100));
      assert.equal((await challenge(C)).status, 200);
      await new Promise((resolveWait) => setTimeout(resolveWait, 1100));
      // The enrollment send counted in the number's budget shared by all accounts; the login
      // codes to the now confirmed factor count in this user's own bucket for the number
      // whose budget of 3 holds the sends from A, C and A.
      assert.equal((await challenge(A)).status, 200);
      await new Promise((resolveWait) => setTimeout(resolveWait, 1100));
      const overBudget = await challenge(B);
      assert.equal(overBudget.status, 429, 'three sends to one number (A, C, A) exhaust its budget on every instance');
      assert.equal(overBudget.body.error, 'rate_limited');
      const verified = await call(B, 'POST', '/auth/mfa/verify', { body: { factor_id: factorId, code: lastSmsCode(mailFile, phone) }, token: ticket });
      assert.equal(verified.status, 200, JSON.stringify(verified.body));
    });

    test('SIGKILL of one instance under load: the others keep answering, no family with two live successors, no half-written row', async () => {
      const users = await Promise.all(Array.from({ length: 6 }, () => signUp('load')));
      const survivors = [A, B];
      const answers: number[] = [];
      let stop = false;
      let killedAt = 0;
      async function worker(index: number) {
        let refreshToken = users[index]!.refreshToken;
        let turn = index;
        while (!stop) {
          const instance = [A, B, C][turn++ % 3]!;
          if (instance === C && killedAt) continue;
          let reply: Reply;
          try {
            reply = await call(instance, 'POST', '/auth/token/refresh', { body: { refresh_token: refreshToken } });
          } catch {
            // The request died with C: its outcome is unknown, so the next one may find the token consumed.
            assert.equal(instance, C, 'only the killed instance drops requests');
            continue;
          }
          if (survivors.includes(instance)) answers.push(reply.status);
          assert.ok(reply.status < 500, `${instance.name} answered ${reply.status}`);
          if (reply.status === 200) refreshToken = reply.body.data.refresh_token;
          else refreshToken = (await login(A, users[index]!.email)).refreshToken;
        }
      }
      const load = Promise.all(users.map((_user, index) => worker(index)));
      await new Promise((resolveWait) => setTimeout(resolveWait, 700));
      C.child.kill('SIGKILL');
      killedAt = performance.now();
      await C.exited;
      await new Promise((resolveWait) => setTimeout(resolveWait, 700));
      stop = true;
      await load;
      assert.ok(answers.length > 20, `load ran (${answers.length} answers from A and B)`);

      // Every live session's refresh generation is the number of its committed refreshes: each
      // rotation moved the generation and wrote its audit event in one transaction (no rotation
      // half done), and one generation leaves no room for two live successors.
      const userIds = users.map((user) => user.userId);
      const rows = await knex(`${prefix}sessions as s`)
        .whereIn('s.user_id', userIds)
        .whereNull('s.revoked_at')
        .select(
          's.id',
          's.refresh_generation',
          knex.raw(`(select count(*) from ${prefix}audit_events as a where a.type = 'auth.token_refreshed' and a.data = '{"session_id":"' || s.id || '"}') as refreshes`),
        );
      assert.ok(rows.length > 0);
      assert.ok(rows.some((row) => Number(row.refresh_generation) > 0), 'the load rotated some sessions');
      for (const row of rows) assert.equal(Number(row.refresh_generation), Number(row.refreshes), `session ${row.id}: generation ${row.refresh_generation} after ${row.refreshes} refreshes`);
      // A survivor still serves, and a restarted instance joins.
      const restarted = await startInstance('C2', { ...clusterEnvOf(prefix) });
      try {
        const session = await login(restarted, users[0]!.email);
        assert.equal((await call(B, 'GET', '/auth/me', { token: session.accessToken })).status, 200);
      } finally {
        await stopInstance(restarted);
      }
    });

    function clusterEnvOf(tablePrefix: string): Record<string, string> {
      return {
        IDENTITY_DATABASE_URL: PG_URL!,
        IDENTITY_TABLE_PREFIX: tablePrefix,
        IDENTITY_MAIL_FILE: mailFile,
        IDENTITY_RATE_STORE: REDIS_URL ? 'redis' : 'database',
        IDENTITY_REDIS_URL: REDIS_URL ?? '',
        IDENTITY_LOGIN_LIMIT: String(LOGIN_LIMIT),
      };
    }
  });

  // Issue 22 (docs/security.md lockout, docs/configuration.md otp.sendBudget): limits that refuse only what
  // they should. Threats: a user with several tabs told a right password is wrong; parallel
  // guesses beating the lockout; SMS pumping to one number through many accounts; another
  // account's enrollments exhausting a victim's login codes.
  describe('limits across instances (login limit 10, lockout threshold 5, 3 texts per number)', () => {
    const LIMITS_LOGIN_LIMIT = 10;
    const THRESHOLD = 5;
    let cluster: Instance[];
    let A: Instance;
    let B: Instance;
    let C: Instance;
    let mailFile: string;
    let prefix: string;

    before(async () => {
      const env = clusterEnv(REDIS_URL ? 'redis' : 'database', LIMITS_LOGIN_LIMIT);
      mailFile = env.IDENTITY_MAIL_FILE!;
      prefix = env.IDENTITY_TABLE_PREFIX!;
      cluster = await startCluster(env);
      [A, B, C] = cluster as [Instance, Instance, Instance];
    });
    after(async () => {
      await Promise.all((cluster ?? []).map(stopInstance));
    });

    async function signUp(label: string) {
      const email = uniqueEmail(label);
      assert.equal((await call(A, 'POST', '/auth/register', { body: { email, password: PASSWORD } })).status, 202);
      assert.equal((await call(B, 'POST', '/auth/email/verify', { body: { token: mailToken(mailFile, email, 'verify_email') } })).status, 200);
      const reply = await call(C, 'POST', '/auth/login', { body: { email, password: PASSWORD } });
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      return { email, userId: reply.body.data.user.id as string, accessToken: reply.body.data.access_token as string };
    }

    const smsTo = (phone: string) => messages(mailFile).filter((entry) => entry.kind === 'sms' && entry.to === phone);
    const clusterPhone = (tag: number) => `+1555${String((Date.now() + tag * 7919) % 1_000_000).padStart(6, '0')}`;

    test(`12 concurrent right-password logins of one account under a login limit of ${LIMITS_LOGIN_LIMIT}: exactly ${LIMITS_LOGIN_LIMIT} tokens and two 429s`, async () => {
      const user = await signUp('tabs');
      const ip = randomIp();
      const replies = await Promise.all(Array.from({ length: 12 }, (_unused, index) => call(cluster[index % 3]!, 'POST', '/auth/login', { body: { email: user.email, password: PASSWORD }, ip })));
      const statuses = replies.map((reply) => reply.status);
      assert.equal(replies.filter((reply) => reply.status === 200 && typeof reply.body.data.access_token === 'string').length, LIMITS_LOGIN_LIMIT, statuses.join(','));
      assert.equal(statuses.filter((status) => status === 429).length, 2, statuses.join(','));
      for (const refused of replies.filter((reply) => reply.status === 429)) assert.equal(refused.body.error, 'rate_limited');
      const row = await knex(`${prefix}users`).where({ id: user.userId }).first('failed_login_count', 'attempts_in_flight', 'locked_until');
      assert.deepEqual([Number(row.failed_login_count), Number(row.attempts_in_flight), row.locked_until], [0, 0, null], 'no failure recorded, no slot left held');
    });

    test(`20 concurrent wrong passwords at threshold ${THRESHOLD} over the three instances still compare at most ${THRESHOLD}`, async () => {
      const user = await signUp('guessed');
      // Each guess from its own address, so the login limit lets all 20 reach the lockout.
      const replies = await Promise.all(Array.from({ length: 20 }, (_unused, index) => call(cluster[index % 3]!, 'POST', '/auth/login', { body: { email: user.email, password: `wrong guess number ${index}` } })));
      for (const reply of replies) assert.equal(reply.status, 401, JSON.stringify(reply.body));
      const failures = await knex(`${prefix}audit_events`).where({ user_id: user.userId, type: 'user.login_failed' }).select('data');
      const compared = failures.filter((row) => JSON.parse(String(row.data)).reason === 'wrong_password').length;
      assert.ok(compared <= THRESHOLD, `${compared} guesses were compared`);
      assert.equal(compared, THRESHOLD, 'every slot was used by a guess before the lock');
      const row = await knex(`${prefix}users`).where({ id: user.userId }).first('failed_login_count', 'attempts_in_flight', 'locked_until');
      assert.equal(Number(row.failed_login_count), THRESHOLD);
      assert.equal(Number(row.attempts_in_flight), 0);
      assert.ok(row.locked_until !== null, 'locked');
    });

    test('four accounts enrolling one number, one after another on A, B, C and A: three sends and one 429', async () => {
      const phone = clusterPhone(1);
      const accounts = [];
      for (let index = 0; index < 4; index += 1) accounts.push(await signUp(`pump-${index}`));
      const statuses = [];
      for (const [index, account] of accounts.entries()) {
        statuses.push((await call([A, B, C, A][index]!, 'POST', '/auth/mfa/sms/enroll', { body: { phone_e164: phone }, token: account.accessToken })).status);
      }
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      assert.equal(smsTo(phone).length, 3, 'three texts reached the number');
    });

    test("another account's enrollments never block the victim's login challenge to their confirmed number", async () => {
      const victim = await signUp('victim');
      const phone = clusterPhone(2);
      const enrolled = await call(A, 'POST', '/auth/mfa/sms/enroll', { body: { phone_e164: phone }, token: victim.accessToken });
      assert.equal(enrolled.status, 200, JSON.stringify(enrolled.body));
      const factorId = enrolled.body.data.factor_id;
      assert.equal((await call(B, 'POST', '/auth/mfa/sms/confirm', { body: { factor_id: factorId, code: lastSmsCode(mailFile, phone) }, token: victim.accessToken })).status, 200);
      // Attackers enroll the victim's number on every instance until its budget is spent.
      const statuses = [];
      for (const [index, instance] of [B, C, A].entries()) {
        const attacker = await signUp(`attacker-${index}`);
        statuses.push((await call(instance, 'POST', '/auth/mfa/sms/enroll', { body: { phone_e164: phone }, token: attacker.accessToken })).status);
      }
      assert.deepEqual(statuses, [200, 200, 429], 'the victim\'s enrollment and two others spent the number\'s budget');
      const gate = await call(C, 'POST', '/auth/login', { body: { email: victim.email, password: PASSWORD } });
      assert.equal(gate.body.data.mfa_required, true);
      // The enrollment code started the factor's cooldown (1 s in these instances).
      await new Promise((resolveWait) => setTimeout(resolveWait, 1100));
      const challenge = await call(A, 'POST', '/auth/mfa/challenge', { body: { factor_id: factorId }, token: gate.body.data.mfa_token });
      assert.equal(challenge.status, 200, JSON.stringify(challenge.body));
      const verified = await call(B, 'POST', '/auth/mfa/verify', { body: { factor_id: factorId, code: lastSmsCode(mailFile, phone) }, token: gate.body.data.mfa_token });
      assert.equal(verified.status, 200, JSON.stringify(verified.body));
    });
  });

  test("the login rate limit holds across three instances with the built-in 'database' store", async () => {
    const cluster = await startCluster(clusterEnv('database', LOGIN_LIMIT));
    try {
      const ip = randomIp();
      const email = uniqueEmail('db-limited');
      const statuses = [];
      for (let attempt = 0; attempt < LOGIN_LIMIT + 1; attempt += 1) {
        statuses.push((await call(cluster[attempt % 3]!, 'POST', '/auth/login', { body: { email, password: 'wrong password here' }, ip })).status);
      }
      assert.deepEqual(statuses, [...Array(LOGIN_LIMIT).fill(401), 429]);
      // Concurrent attempts from a fresh IP over all three: exactly the limit passes.
      const burstIp = randomIp();
      const burst = await Promise.all(Array.from({ length: 12 }, (_unused, index) => call(cluster[index % 3]!, 'POST', '/auth/login', { body: { email, password: 'wrong password here' }, ip: burstIp })));
      assert.equal(burst.filter((reply) => reply.status !== 429).length, LOGIN_LIMIT);
    } finally {
      await Promise.all(cluster.map(stopInstance));
    }
  });
});
