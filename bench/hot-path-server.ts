/**
 * The server side of `npm run bench` (bench/run.ts forks it; it is not run by hand).
 *
 *   hot-path-server.ts bare      bare Express 5 answering GET /hello: the baseline
 *   hot-path-server.ts identity  the router on SQLite at bcrypt cost 10, plus a host route
 *                                behind requirePermission, seeded with an organization of
 *                                11 members, the sessions the load needs and the accounts
 *                                the login rows sign in as
 *
 * It tells the parent over IPC where it listens and what it seeded, and runs until killed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import { createIdentityRouter } from '../src/index.js';

import { BCRYPT_COST, HOST_ROUTE, LOGIN_ACCOUNTS, MOUNT, ORGANIZATION_MEMBERS, PASSWORD, REFRESH_SESSIONS, type IdentitySeed } from './hot-path-shared.js';

function listen(app: express.Express): Promise<string> {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}

async function bare(): Promise<void> {
  const app = express();
  app.get('/hello', (_req, res) => {
    res.json({ message: 'hello' });
  });
  process.send!({ origin: await listen(app) });
}

async function identity(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const mail: Array<{ to: string; template: string; context: Record<string, unknown> }> = [];
  const workers = process.env.BENCH_PASSWORD_WORKERS ? Number(process.env.BENCH_PASSWORD_WORKERS) : undefined;
  const router = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: join(dir, 'bench.sqlite') }, useNullAsDefault: true },
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
    },
  );
  await router.ready;
  const app = express();
  app.use(MOUNT, router);
  app.get(HOST_ROUTE, router.requirePermission('reports.read'), (_req, res) => {
    res.json({ reports: [] });
  });
  const origin = await listen(app);

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
  const seed: IdentitySeed = { origin, token, organizationId: organization.id, refreshTokens, logins, passwordWorkers: workers };
  process.send!(seed);
}

// SIGINT from the parent: exit normally, so a CPU profile (BENCH_PROFILE_DIR) is written.
process.on('SIGINT', () => process.exit(0));
const mode = process.argv[2];
(mode === 'bare' ? bare() : mode === 'identity' ? identity() : Promise.reject(new Error(`unknown mode ${mode}`))).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
