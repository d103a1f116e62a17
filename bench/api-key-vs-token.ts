/**
 * A host route behind `requirePermission(key, {apiKeys: true})`: an API key against an
 * access token, with bare Express (the same handler, no middleware) as the baseline of the
 * same run (a key must run at least as fast as a token).
 *
 *   npx tsx bench/api-key-vs-token.ts
 *
 * The server runs in a child process; autocannon drives it from this one.
 *
 * Both credentials go through the live checks of every request (the token: signature, live
 * session and user, organization, membership; the key: HMAC, one indexed lookup with owner
 * and organization state, membership). The key also pays its per-key rate limiter, set high
 * enough here never to answer 429, so the comparison does not flatter it.
 *
 * `runApiKeyVsToken` is exported so `bench/run.ts` can fold the rows into its own table.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fork } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import express from 'express';
import { createIdentityRouter, type MailMessage } from '../src/index.js';
import { cpuMicros } from './process-cpu.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = 10;

export interface BenchRow {
  name: string;
  p50: number;
  p99: number;
  requestsPerSecond: number;
  /** Non-2xx answers; any would make the row meaningless. */
  errors: number;
  /** CPU time of the server process per answered request (Linux /proc), in microseconds: steadier than throughput on a shared machine. */
  serverCpuMicros?: number;
}

async function measure(name: string, url: string, headers: Record<string, string> = {}, serverPid?: number): Promise<BenchRow> {
  await autocannon({ url, connections: CONNECTIONS, duration: 1, headers });
  const before = cpuMicros(serverPid);
  const result = await autocannon({ url, connections: CONNECTIONS, duration: SECONDS, headers });
  const after = cpuMicros(serverPid);
  const answered = result['2xx'] as number;
  return {
    name,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requestsPerSecond: result.requests.average,
    errors: result.non2xx + result.errors,
    ...(before !== undefined && after !== undefined && answered > 0 ? { serverCpuMicros: (after - before) / answered } : {}),
  };
}

async function postJson(url: string, body: unknown, token?: string): Promise<any> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  const json: any = await response.json();
  if (!response.ok) throw new Error(`${url}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

interface ServerInfo {
  origin: string;
  accessToken: string;
  apiKey: string;
}

/**
 * The server side, in a child process of its own (`api-key-vs-token.ts server`): the load
 * generator must not share the server's event loop, or the client's work on each answer
 * would count against the route that answers it.
 */
async function serve(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const mail: MailMessage[] = [];
  const quiet = { debug() {}, info() {}, warn() {}, error: console.error };
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: join(dir, 'bench.sqlite') }, useNullAsDefault: true },
      secret: 'bench-secret-that-is-at-least-32-characters',
      issuer: 'https://bench.example',
      permissions: [{ key: 'invoices.read', description: 'Read invoices' }],
      auth: { rateLimits: { authenticated: { limit: 1_000_000_000, windowSec: 60 } } },
    },
    { logger: quiet, mailer: { send: async (message) => void mail.push(message) }, sms: { send: async () => {} } },
  );
  await identity.ready;
  const app = express();
  app.use('/identity', identity);
  const handler: express.RequestHandler = (_req, res) => {
    res.json({ data: [{ id: 'inv-1', amount: 100 }] });
  };
  app.get('/bare/invoices', handler);
  app.get('/api/invoices', identity.requirePermission('invoices.read', { apiKeys: true }), handler);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const base = `${origin}/identity`;

  const email = 'bench-keys@example.com';
  const password = 'bench password 1234';
  await postJson(`${base}/auth/register`, { email, password });
  await postJson(`${base}/auth/email/verify`, { token: String(mail.find((message) => message.template === 'verify_email')!.context.token) });
  const login = await postJson(`${base}/auth/login`, { email, password });
  const org = await postJson(`${base}/orgs`, { name: 'Bench' }, login.data.access_token);
  const switched = await postJson(`${base}/auth/switch-org`, { organization_id: org.data.id }, login.data.access_token);
  const accessToken: string = switched.data.access_token;
  const created = await postJson(`${base}/orgs/${org.data.id}/api-keys`, { name: 'bench', permission_keys: ['invoices.read'] }, accessToken);
  const info: ServerInfo = { origin, accessToken, apiKey: created.data.key };
  process.send!(info);
}

/** Bare Express, then the same host route with an access token, then with an API key. */
export async function runApiKeyVsToken(): Promise<BenchRow[]> {
  const child = fork(fileURLToPath(import.meta.url), ['server'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const { origin, accessToken, apiKey } = await new Promise<ServerInfo>((resolve, reject) => {
      child.once('message', (message) => resolve(message as ServerInfo));
      child.once('exit', (code) => reject(new Error(`the bench server exited with ${code} before it was ready`)));
    });
    const rows: BenchRow[] = [];
    rows.push(await measure('bare Express (baseline)', `${origin}/bare/invoices`, {}, child.pid));
    rows.push(await measure('requirePermission, access token', `${origin}/api/invoices`, { authorization: `Bearer ${accessToken}` }, child.pid));
    rows.push(await measure('requirePermission, API key', `${origin}/api/invoices`, { authorization: `Bearer ${apiKey}` }, child.pid));
    return rows;
  } finally {
    child.removeAllListeners('exit');
    child.kill('SIGINT');
  }
}

export function printRows(rows: BenchRow[]): void {
  console.log(`\nA host route behind requirePermission('invoices.read', {apiKeys: true}) (SQLite, ${CONNECTIONS} connections, ${SECONDS} s each)`);
  const [baseline] = rows;
  for (const row of rows) {
    const ratio = baseline ? ` ${(row.requestsPerSecond / baseline.requestsPerSecond).toFixed(2)}x of bare` : '';
    const errors = row.errors > 0 ? `  (${row.errors} non-2xx!)` : '';
    const cpu = row.serverCpuMicros === undefined ? '' : `  server CPU ${Math.round(row.serverCpuMicros)} µs/request`;
    console.log(`${row.name.padEnd(34)} p50 ${String(row.p50).padStart(4)} ms  p99 ${String(row.p99).padStart(4)} ms  ${Math.round(row.requestsPerSecond).toString().padStart(6)} req/s${ratio}${cpu}${errors}`);
  }
  const token = rows.find((row) => row.name.includes('access token'));
  const key = rows.find((row) => row.name.includes('API key'));
  if (token && key) {
    console.log(`  API key / access token throughput: ${(key.requestsPerSecond / token.requestsPerSecond).toFixed(2)}x (>= 1 means the key is at least as fast)`);
    if (token.serverCpuMicros && key.serverCpuMicros) console.log(`  access token / API key server CPU per request: ${(token.serverCpuMicros / key.serverCpuMicros).toFixed(2)}x (>= 1 means the key costs the server no more)`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href && process.argv[2] === 'server') {
  process.on('SIGINT', () => process.exit(0));
  serve().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  runApiKeyVsToken()
    .then((rows) => {
      printRows(rows);
      if (rows.some((row) => row.errors > 0)) process.exitCode = 1;
    })
    .catch((error: unknown) => {
      console.error(error);
      process.exit(1);
    });
}
