/**
 * The server side of `npm run bench` (bench/run.ts forks it; it is not run by hand).
 *
 *   hot-path-server.ts bare      bare Express 5 answering GET /hello: the baseline
 *   hot-path-server.ts bare-after-traffic
 *                                the same, after it has first served other routes the way
 *                                any app does (bench/process-history.ts)
 *   hot-path-server.ts identity  the router on SQLite at bcrypt cost 10, plus a host route
 *                                behind requirePermission, on a database a `seed` process
 *                                it starts first has filled
 *   hot-path-server.ts seed      signs up, through the router's routes, an organization of
 *                                11 members, the sessions the load needs and the accounts
 *                                the login rows sign in as; reports them, and exits
 *
 *   hot-path-server.ts startup   opens the router on the database the environment names
 *                                (migrations already applied), reports the milliseconds from
 *                                construction to `ready`, and exits
 *
 * The environment chooses the rest: BENCH_DATABASE_URL (PostgreSQL, 20 pool connections) or
 * BENCH_SQLITE_FILE (else a SQLite file in a temporary directory); BENCH_LISTENER=1 configures
 * an `onEvent` listener (which does nothing); BENCH_SCALE_USERS=n adds the scale bench's
 * bulk-inserted rows (bench/bulk-seed.ts) after the seeding through HTTP; BENCH_ROUTER_MODULE
 * loads the router from another copy of its source (bench/compare.ts).
 *
 * It tells the parent over IPC where it listens and what it seeded, answers `stats` messages
 * with its memory and access-cache sizes, and runs until killed.
 */
import { fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
import knexFactory from 'knex';
import type { IdentityConfig } from '../src/index.js';
import { servicesOf } from '../src/create-identity-router.js';
import { bulkSeed } from './bulk-seed.js';

// BENCH_ROUTER_MODULE: another copy of the router's source (a checkout of the code before a
// change) to hold against this one in the same run.
const { createIdentityRouter } = (await import(process.env.BENCH_ROUTER_MODULE ?? '../src/index.js')) as typeof import('../src/index.js');

/** The access cache behind a router: through the package's internals, or an older revision's `service.context`. */
const accessCacheOf = (router: any) => (router.service.context ?? servicesOf(router).context).accessCache;
import { BCRYPT_COST, HOST_ROUTE, LOGIN_ACCOUNTS, MOUNT, ORGANIZATION_MEMBERS, PASSWORD, PG_POOL, REFRESH_SESSIONS, type IdentitySeed } from './hot-path-shared.js';

function listen(app: express.Express): Promise<string> {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}

async function bare(history: 'none' | 'traffic'): Promise<void> {
  const app = express();
  app.get('/hello', (_req, res) => {
    res.json({ message: 'hello' });
  });
  if (history === 'traffic') otherRoutes(app);
  const origin = await listen(app);
  if (history === 'traffic') await serveOtherTraffic(origin);
  if (process.env.BENCH_PROFILE_DIR) await startProfile(process.env.BENCH_PROFILE_DIR);
  process.send!({ origin });
}

/**
 * What an app's process has served besides the measured route, in miniature: JSON bodies
 * through express.json(), route parameters, answers of several statuses with headers of their
 * own, and requests that carry credentials. None of it runs while the route is measured.
 */
function otherRoutes(app: express.Express): void {
  app.post('/items', express.json(), (req, res) => {
    if (typeof req.body?.name !== 'string') {
      res.status(422).json({ error: 'validation_failed', message: 'name is required' });
      return;
    }
    res.status(201).location(`/items/${req.body.name}`).json({ data: { name: req.body.name, tags: req.body.tags ?? [] } });
  });
  app.get('/items/:id', (req, res) => {
    if (req.params.id.startsWith('missing')) {
      res.status(404).json({ error: 'not_found', message: 'Item not found' });
      return;
    }
    res.set('Cache-Control', 'no-store').json({ data: { id: req.params.id } });
  });
  app.delete('/items/:id/tags/:tag', (req, res) => {
    res.json({ data: { id: req.params.id, removed: req.params.tag } });
  });
}

async function serveOtherTraffic(origin: string): Promise<void> {
  const credentials = { authorization: `Bearer ${'x'.repeat(900)}`, cookie: 'session=abc; theme=dark' };
  for (let i = 0; i < 1_000; i += 1) {
    const json = { 'content-type': 'application/json', ...(i % 2 === 0 ? credentials : {}) };
    await Promise.all([
      fetch(`${origin}/items`, { method: 'POST', headers: json, body: JSON.stringify(i % 5 === 0 ? { tags: [i] } : { name: `item${i}`, ...(i % 3 === 0 ? { tags: ['a', 'b'] } : {}) }) }),
      fetch(`${origin}/items/${i % 4 === 0 ? 'missing' : ''}${i}`, { headers: i % 2 === 1 ? credentials : {} }),
      fetch(`${origin}/items/${i}/tags/t${i % 7}`, { method: 'DELETE' }),
    ]).then((responses) => Promise.all(responses.map((response) => response.arrayBuffer())));
  }
}

/** The database of this run: PostgreSQL with the pool the bench gives it, or a SQLite file. */
function databaseConfig(): IdentityConfig['database'] {
  if (process.env.BENCH_DATABASE_URL) return { client: 'pg', connection: process.env.BENCH_DATABASE_URL, pool: { min: 2, max: PG_POOL } };
  const filename = process.env.BENCH_SQLITE_FILE;
  if (!filename) throw new Error('BENCH_DATABASE_URL or BENCH_SQLITE_FILE names the database');
  return { client: 'better-sqlite3', connection: { filename }, useNullAsDefault: true };
}

/** A SQLite file in a temporary directory, removed when this process exits. */
function temporarySqliteFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'bench.sqlite');
}

function createRouter(mail: Array<{ to: string; template: string; context: Record<string, unknown> }>) {
  const workers = process.env.BENCH_PASSWORD_WORKERS ? Number(process.env.BENCH_PASSWORD_WORKERS) : undefined;
  const router = createIdentityRouter(
    {
      database: databaseConfig(),
      secret: 'bench-secret-that-is-at-least-32-characters',
      issuer: 'https://bench.example',
      password: { bcryptCost: BCRYPT_COST, ...(workers ? { workers } : {}) },
      auth: { rateLimits: false },
      permissions: [{ key: 'reports.read', description: 'Read reports' }],
    },
    {
      logger: { debug() {}, info() {}, warn() {}, error: (msg, meta) => console.error(msg, meta) },
      mailer: { send: async (message) => void mail.push(message) },
      sms: { send: async () => {} },
      // A listener that does nothing: the row measures what delivering to one costs the router.
      ...(process.env.BENCH_LISTENER ? { onEvent: () => {} } : {}),
    },
  );
  return { router, workers };
}

async function startup(): Promise<void> {
  const started = performance.now();
  const { router } = createRouter([]);
  await router.ready;
  const milliseconds = performance.now() - started;
  await router.close();
  process.send!({ milliseconds }, () => process.exit(0));
}

/**
 * The measured router starts on a database another process seeded (`seed`), as a deployed one
 * starts on its data: its process then carries no trace of the seeding (an HTTP client, some
 * seven hundred requests of a dozen routes, their garbage), which bare Express's process does
 * not carry either.
 */
async function identity(): Promise<void> {
  if (!process.env.BENCH_DATABASE_URL && !process.env.BENCH_SQLITE_FILE) process.env.BENCH_SQLITE_FILE = temporarySqliteFile();
  const seed = await seededByAnotherProcess();
  const { router, workers } = createRouter([]);
  await router.ready;
  process.on('message', (message) => {
    if (message !== 'stats') return;
    process.send!({ stats: { rssBytes: process.memoryUsage().rss, heapUsedBytes: process.memoryUsage().heapUsed, accessCache: accessCacheOf(router).sizes() } });
  });
  const origin = await listen(hostApp(router));
  if (process.env.BENCH_PROFILE_DIR) await startProfile(process.env.BENCH_PROFILE_DIR);
  process.send!({ ...seed, origin, passwordWorkers: workers } satisfies IdentitySeed);
}

function hostApp(router: ReturnType<typeof createRouter>['router']): express.Express {
  const app = express();
  app.use(MOUNT, router);
  app.get(HOST_ROUTE, router.requirePermission('reports.read'), (_req, res) => {
    res.json({ reports: [] });
  });
  return app;
}

function seededByAnotherProcess(): Promise<Omit<IdentitySeed, 'origin' | 'passwordWorkers'>> {
  const child = fork(fileURLToPath(import.meta.url), ['seed'], { execArgv: process.execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (seed) => resolve(seed as Omit<IdentitySeed, 'origin' | 'passwordWorkers'>));
    child.once('exit', (code) => reject(new Error(`the seeding process exited with ${code} before it reported`)));
  });
}

/** Seeds the database through the router's HTTP routes (and BENCH_SCALE_USERS's bulk rows), reports what the load needs, and exits. */
async function seed(): Promise<void> {
  const mail: Array<{ to: string; template: string; context: Record<string, unknown> }> = [];
  const { router } = createRouter(mail);
  await router.ready;
  const server = hostApp(router).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const call = async (method: string, path: string, body?: unknown, token?: string): Promise<any> => {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(`${origin}${MOUNT}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const text = await response.text();
    if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
  const tokenMailedTo = (email: string, template: string) => String([...mail].reverse().find((m) => m.to === email && m.template === template)!.context.token);
  const login = async (email: string) => (await call('POST', '/auth/login', { email, password: PASSWORD })).data;
  const signUp = async (email: string) => {
    await call('POST', '/auth/register', { email, password: PASSWORD });
    await call('POST', '/auth/email/verify', { token: tokenMailedTo(email, 'verify_email') });
    return login(email);
  };

  const owner = await signUp('owner@bench.example');
  const organization = (await call('POST', '/orgs', { name: 'Bench' }, owner.access_token)).data;
  const switchTo = async (accessToken: string) => (await call('POST', '/auth/switch-org', { organization_id: organization.id }, accessToken)).data.access_token as string;
  const token = await switchTo(owner.access_token);
  for (let i = 1; i < ORGANIZATION_MEMBERS; i += 1) {
    const email = `member${i}@bench.example`;
    const member = await signUp(email);
    await call('POST', `/orgs/${organization.id}/invites`, { email, role_slugs: ['member'] }, token);
    await call('POST', '/auth/invites/accept', { token: tokenMailedTo(email, 'invite') }, member.access_token);
  }
  const refreshTokens: string[] = [];
  for (let i = 0; i < REFRESH_SESSIONS; i += 1) {
    const session = await login('owner@bench.example');
    await switchTo(session.access_token);
    refreshTokens.push(session.refresh_token);
  }
  const logins = Array.from({ length: LOGIN_ACCOUNTS }, (_, i) => ({ email: `storm${i}@bench.example`, password: PASSWORD }));
  for (let i = 0; i < logins.length; i += 4) await Promise.all(logins.slice(i, i + 4).map(({ email }) => signUp(email)));
  let scale: IdentitySeed['scale'];
  const scaleUsers = Number(process.env.BENCH_SCALE_USERS ?? 0);
  if (scaleUsers > 0) {
    const knex = knexFactory({ ...(databaseConfig() as object), pool: { min: 1, max: 1 } });
    try {
      const memberRole = await knex('identity_roles').where({ organization_id: organization.id, slug: 'member' }).first('id');
      const passwordHash = (await knex('identity_users').where({ email: 'owner@bench.example' }).first('password_hash')).password_hash as string;
      scale = await bulkSeed(knex, { users: scaleUsers, passwordHash, organizationId: organization.id, memberRoleId: memberRole.id });
    } finally {
      await knex.destroy();
    }
  }
  server.close();
  await router.close();
  process.send!({ token, organizationId: organization.id, refreshTokens, logins, ...(scale ? { scale } : {}) }, () => process.exit(0));
}

/**
 * BENCH_PROFILE_DIR: a CPU profile of the measured load only. It starts once the seeding is
 * done (which signs up accounts through HTTP and would swamp a single row's profile) and is
 * written when the parent stops the server.
 */
async function startProfile(dir: string): Promise<void> {
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<any>((resolve, reject) => session.post(method, params ?? {}, (error, result) => (error ? reject(error) : resolve(result))));
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 100 });
  await post('Profiler.start');
  stopProfile = async () => {
    const { profile } = await post('Profiler.stop');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `${process.argv[2]}-${process.pid}.cpuprofile`), JSON.stringify(profile));
  };
}

let stopProfile: (() => Promise<void>) | undefined;

// SIGINT from the parent: exit normally, after writing the CPU profile (BENCH_PROFILE_DIR).
process.on('SIGINT', () => {
  void (stopProfile?.() ?? Promise.resolve()).finally(() => process.exit(0));
});
const mode = process.argv[2];
(mode === 'bare' ? bare('none') : mode === 'bare-after-traffic' ? bare('traffic') : mode === 'identity' ? identity() : mode === 'seed' ? seed() : mode === 'startup' ? startup() : Promise.reject(new Error(`unknown mode ${mode}`))).catch((error: unknown) => {
  // A failed bulk insert's message quotes its whole statement: the start of it says enough.
  console.error(String(error instanceof Error ? (error.stack ?? error.message) : error).slice(0, 2000));
  process.exit(1);
});
