/**
 * The hot-path benchmark (issue 11): every row against bare Express 5 measured in the same
 * run, on the same machine, with the same load generator.
 *
 *   npm run bench
 *
 * autocannon drives 20 connections; each measurement is BENCH_SECONDS (default 10) after a
 * BENCH_WARMUP (default 2) s warm-up that is thrown away. The servers run in child
 * processes (bench/hot-path-server.ts); autocannon runs here. The router runs on SQLite at
 * bcrypt cost 10. Bare Express is measured again right before each row, so a row's ratio
 * compares two measurements taken seconds apart, and load from elsewhere on the machine
 * moves both alike. It prints the table and writes the figures to
 * bench/results/hot-path-<time>.json. A measurement starts once the server has finished the
 * requests its warm-up left in flight. It is a benchmark, never a pass/fail test: the exit
 * code is 0 whether or not a goal is met (1 only when the bench itself failed).
 *
 *   BENCH_SECONDS=2 BENCH_WARMUP=0.5 npm run bench     a short smoke run
 *   BENCH_SKIP_SCALE=1                                  skip the member-page scale bench
 *   BENCH_SKIP_API_KEYS=1                               skip the API-key vs access-token rows
 *   BENCH_PASSWORD_WORKERS=n                            password.workers of the router
 *   BENCH_PROFILE_DIR=dir                               CPU profile of the router's process
 *   BENCH_ONLY=refresh,login                            only the rows whose name contains a word
 */
import { type ChildProcess, fork, spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, cpus, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import bcrypt from 'bcryptjs';
import { cpuMicros } from './process-cpu.js';
import { BCRYPT_COST, HOST_ROUTE, MOUNT, type IdentitySeed } from './hot-path-shared.js';

const here = dirname(fileURLToPath(import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const CONNECTIONS = 20;
const ONLY = process.env.BENCH_ONLY?.split(',').filter(Boolean);
const wanted = (name: string) => !ONLY || ONLY.some((word) => name.toLowerCase().includes(word.toLowerCase()));

interface Measurement {
  requestsPerSecond: number;
  /** CPU time the server process spent per answered request (Linux), in microseconds: load elsewhere does not move it. */
  serverCpuMicrosPerRequest?: number;
  /** The part of it spent on the server's main thread (the event loop), in microseconds. */
  serverEventLoopCpuMicrosPerRequest?: number;
  p50Ms: number;
  p99Ms: number;
  ok: number;
  failed: number;
  /** Answers by status code, and connection errors and timeouts: what a failed request was. */
  statusCodes: Record<string, number>;
  errors: number;
  timeouts: number;
}

interface LoadRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
  requests?: unknown[];
}

interface Row {
  work: string;
  measured: string;
  baseline: string;
  ratio: number;
  ratioLabel: string;
  goal: string;
  met: boolean;
}

function startServer<T>(mode: 'bare' | 'identity'): Promise<{ child: ChildProcess; info: T }> {
  const profile = process.env.BENCH_PROFILE_DIR && mode === 'identity' ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const child = fork(join(here, 'hot-path-server.ts'), [mode], { execArgv: ['--import', 'tsx', ...profile], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: process.env });
  return new Promise((resolve, reject) => {
    child.once('message', (info) => resolve({ child, info: info as T }));
    child.once('exit', (code) => reject(new Error(`${mode} server exited with ${code} before it was ready`)));
  });
}

function stopServer(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.removeAllListeners('exit');
    child.once('exit', () => resolve());
    child.kill('SIGINT');
  });
}

function runAutocannon(origin: string, request: LoadRequest, duration: number): Promise<any> {
  return autocannon({
    url: origin + request.path,
    connections: CONNECTIONS,
    duration,
    method: request.method ?? 'GET',
    headers: request.headers,
    body: request.body,
    ...(request.requests ? { requests: request.requests } : {}),
  });
}

function summarise(result: any): Measurement {
  const ok = result['2xx'] as number;
  return {
    requestsPerSecond: ok / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    ok,
    failed: (result.non2xx as number) + (result.errors as number) + (result.timeouts as number),
    statusCodes: Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([code, stats]) => [code, (stats as { count: number }).count])),
    errors: result.errors as number,
    timeouts: result.timeouts as number,
  };
}

/**
 * Waits until the server has finished what the warm-up left it. autocannon closes its
 * connections when the warm-up ends, but requests the server already holds run on: a login
 * storm leaves up to a connection's worth of logins being hashed. Measuring at once would
 * count that tail as the measured window's time (about 20 logins, 5% of a 10 s login row)
 * and the measurement would start from a state no steady load has. Idle is a 200 ms stretch
 * with at most one clock tick of the server's CPU; it gives up after 5 s.
 */
async function untilServerIdle(pid: number | undefined): Promise<void> {
  const INTERVAL_MS = 200;
  const IDLE_CPU_MICROS = 10_000;
  let previous = cpuMicros(pid);
  if (previous === undefined) return;
  for (let waited = 0; waited < 5_000; waited += INTERVAL_MS) {
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS));
    const current = cpuMicros(pid);
    if (current === undefined || current - previous <= IDLE_CPU_MICROS) return;
    previous = current;
  }
}

async function measure(origin: string, request: LoadRequest, pid?: number): Promise<Measurement> {
  if (WARMUP > 0) await runAutocannon(origin, request, WARMUP);
  await untilServerIdle(pid);
  const cpuBefore = cpuMicros(pid);
  const eventLoopCpuBefore = cpuMicros(pid, true);
  const measurement = summarise(await runAutocannon(origin, request, SECONDS));
  const cpuAfter = cpuMicros(pid);
  const eventLoopCpuAfter = cpuMicros(pid, true);
  if (cpuBefore !== undefined && cpuAfter !== undefined && measurement.ok > 0) measurement.serverCpuMicrosPerRequest = (cpuAfter - cpuBefore) / measurement.ok;
  if (eventLoopCpuBefore !== undefined && eventLoopCpuAfter !== undefined && measurement.ok > 0) {
    measurement.serverEventLoopCpuMicrosPerRequest = (eventLoopCpuAfter - eventLoopCpuBefore) / measurement.ok;
  }
  return measurement;
}

/** Several loads at once, warmed up together, measured together. */
async function measureTogether(origin: string, requests: LoadRequest[], pid?: number): Promise<Measurement[]> {
  if (WARMUP > 0) await Promise.all(requests.map((request) => runAutocannon(origin, request, WARMUP)));
  await untilServerIdle(pid);
  return (await Promise.all(requests.map((request) => runAutocannon(origin, request, SECONDS)))).map(summarise);
}

/**
 * The hash-bound login rate, measured here: one plain thread per core, each comparing a
 * pre-hashed password against a cost-10 bcrypt hash for `seconds`, all at once. This is
 * cores ÷ (time of one hash) as the machine delivers it at that moment, other load included.
 */
async function hashBoundRate(cores: number, seconds: number): Promise<{ hashMs: number; perSecond: number }> {
  const prehashed = createHmac('sha256', 'pepper').update('bench password 1234').digest('base64');
  const hash = bcrypt.hashSync(prehashed, BCRYPT_COST);
  const source = `
    const { parentPort, workerData } = require('node:worker_threads');
    const bcrypt = require(workerData.bcryptPath);
    const until = Date.now() + workerData.ms;
    let count = 0;
    while (Date.now() < until) { bcrypt.compareSync(workerData.prehashed, workerData.hash); count += 1; }
    parentPort.postMessage(count);
  `;
  const bcryptPath = createRequire(import.meta.url).resolve('bcryptjs');
  const started = performance.now();
  const counts = await Promise.all(
    Array.from({ length: cores }, () => new Promise<number>((resolve, reject) => {
      const worker = new Worker(source, { eval: true, workerData: { bcryptPath, prehashed, hash, ms: seconds * 1000 } });
      worker.once('message', (count: number) => {
        resolve(count);
        void worker.terminate();
      });
      worker.once('error', reject);
    })),
  );
  const elapsedMs = performance.now() - started;
  const total = counts.reduce((sum, count) => sum + count, 0);
  return { hashMs: (elapsedMs * cores) / total, perSecond: total / (elapsedMs / 1000) };
}

const perSecond = (m: Measurement) => `${Math.round(m.requestsPerSecond).toLocaleString('en-US')} req/s`;

async function main(): Promise<void> {
  const startedAt = new Date();
  const loadBefore = loadavg();
  const cores = availableParallelism();
  console.log(`hot path bench: ${CONNECTIONS} connections, ${SECONDS} s measured after ${WARMUP} s warm-up, SQLite, bcrypt cost ${BCRYPT_COST}, ${cores} cores`);

  const bare = await startServer<{ origin: string }>('bare');
  const server = await startServer<IdentitySeed>('identity').catch(async (error: unknown) => {
    await stopServer(bare.child);
    throw error;
  });
  const seed = server.info;
  const bearer = { authorization: `Bearer ${seed.token}` };
  const json = { 'content-type': 'application/json' };
  // Each login signs in as the next of the seeded accounts, as a storm of users would.
  let nextLogin = 0;
  const loginPath = `${MOUNT}/auth/login`;
  const loginRequest: LoadRequest = {
    method: 'POST',
    path: loginPath,
    requests: [
      {
        method: 'POST',
        path: loginPath,
        headers: json,
        setupRequest: (request: Record<string, unknown>) => ({ ...request, body: JSON.stringify(seed.logins[nextLogin++ % seed.logins.length]) }),
      },
    ],
  };
  const meRequest: LoadRequest = { path: `${MOUNT}/auth/me`, headers: bearer };
  const express = (): Promise<Measurement> => measure(bare.info.origin, { path: '/hello' }, bare.child.pid);
  const rows: Row[] = [];
  const raw: Record<string, { measurement: Measurement; bareExpress?: Measurement }> = {};
  const versusExpress = async (name: string, request: LoadRequest, goal: number | 'refresh'): Promise<Measurement> => {
    const baseline = await express();
    const m = await measure(seed.origin, request, server.child.pid);
    raw[name] = { measurement: m, bareExpress: baseline };
    const ratio = m.requestsPerSecond / baseline.requestsPerSecond;
    rows.push({
      work: name,
      measured: perSecond(m),
      baseline: perSecond(baseline),
      ratio,
      ratioLabel: `${ratio.toFixed(2)}×`,
      goal: goal === 'refresh' ? '≥ 1,200 req/s' : `≥ ${goal.toFixed(2)}×`,
      met: goal === 'refresh' ? m.requestsPerSecond >= 1200 : ratio >= goal,
    });
    const cpu = (x: Measurement) => (x.serverCpuMicrosPerRequest === undefined ? '?' : `${Math.round(x.serverCpuMicrosPerRequest)} µs`);
    const cpuRatio = m.serverCpuMicrosPerRequest && baseline.serverCpuMicrosPerRequest ? ` (CPU per request ${cpu(m)} against ${cpu(baseline)}: ${(baseline.serverCpuMicrosPerRequest / m.serverCpuMicrosPerRequest).toFixed(2)}×)` : '';
    console.log(`  ${name}: ${perSecond(m)} (bare Express ${perSecond(baseline)}), ${ratio.toFixed(2)}×, p99 ${m.p99Ms} ms${cpuRatio}`);
    return m;
  };

  let hashMs = Number.NaN;
  try {
    if (wanted('host route behind requirePermission')) await versusExpress('host route behind requirePermission', { path: HOST_ROUTE, headers: bearer }, 0.5);
    let idleMe: Measurement | undefined;
    if (wanted('GET /auth/me') || wanted('storm')) idleMe = await versusExpress('GET /auth/me', meRequest, 0.3);
    if (wanted('GET /orgs')) await versusExpress('GET /orgs', { path: `${MOUNT}/orgs`, headers: bearer }, 0.3);
    if (wanted('GET /orgs/{id}/members (11 members)')) {
      await versusExpress('GET /orgs/{id}/members (11 members)', { path: `${MOUNT}/orgs/${seed.organizationId}/members`, headers: bearer }, 0.25);
    }
    if (wanted('POST /auth/token/refresh')) {
      // Each connection rotates its own refresh-token chain: a request takes a live token
      // from the pool and its answer puts the next one back.
      const livePool = [...seed.refreshTokens];
      const refreshPath = `${MOUNT}/auth/token/refresh`;
      await versusExpress('POST /auth/token/refresh', {
        method: 'POST',
        path: refreshPath,
        requests: [
          {
            method: 'POST',
            path: refreshPath,
            headers: json,
            setupRequest: (request: Record<string, unknown>) => ({ ...request, body: JSON.stringify({ refresh_token: livePool.shift() }) }),
            onResponse: (status: number, body: string) => {
              if (status === 200) livePool.push(JSON.parse(body).data.refresh_token);
            },
          },
        ],
      }, 'refresh');
    }
    if (wanted('POST /auth/login')) {
      const bound = await hashBoundRate(cores, Math.max(2, SECONDS / 2));
      hashMs = bound.hashMs;
      const hashBound = bound.perSecond;
      const login = await measure(seed.origin, loginRequest, server.child.pid);
      raw['POST /auth/login'] = { measurement: login };
      const ratio = login.requestsPerSecond / hashBound;
      rows.push({
        work: 'POST /auth/login',
        measured: `${login.requestsPerSecond.toFixed(1)} req/s`,
        baseline: `${cores} cores ÷ ${hashMs.toFixed(1)} ms = ${hashBound.toFixed(1)}/s`,
        ratio,
        ratioLabel: `${ratio.toFixed(2)}×`,
        goal: '≥ 0.95×',
        met: ratio >= 0.95,
      });
      const eventLoop = login.serverEventLoopCpuMicrosPerRequest === undefined ? '' : `; the event loop's CPU per login ${(login.serverEventLoopCpuMicrosPerRequest / 1000).toFixed(2)} ms`;
      console.log(`  POST /auth/login: ${login.requestsPerSecond.toFixed(1)} req/s; one hash ${hashMs.toFixed(1)} ms, ${cores} cores: ${hashBound.toFixed(1)}/s; ${ratio.toFixed(2)}×${eventLoop}`);
    }
    if (wanted('storm') && idleMe) {
      const [storm, logins] = await measureTogether(seed.origin, [meRequest, loginRequest], server.child.pid);
      raw['GET /auth/me under a login storm'] = { measurement: storm! };
      raw['POST /auth/login during the storm'] = { measurement: logins! };
      const ratio = storm!.p99Ms / Math.max(idleMe.p99Ms, 1);
      rows.push({
        work: 'GET /auth/me p99 under a login storm',
        measured: `${storm!.p99Ms} ms (${perSecond(storm!)}, ${logins!.requestsPerSecond.toFixed(1)} logins/s)`,
        baseline: `idle p99 ${idleMe.p99Ms} ms`,
        ratio,
        ratioLabel: `${ratio.toFixed(2)}×`,
        goal: '≤ 2×',
        met: ratio <= 2,
      });
      console.log(`  GET /auth/me under a login storm: p99 ${storm!.p99Ms} ms against ${idleMe.p99Ms} ms idle, ${ratio.toFixed(2)}×`);
    }
  } finally {
    await Promise.all([stopServer(server.child), stopServer(bare.child)]);
  }

  const loadAfter = loadavg();
  const format = (load: number[]) => load.map((value) => value.toFixed(2)).join(' ');
  console.log(`\n${startedAt.toISOString()}; load average ${format(loadBefore)} before, ${format(loadAfter)} after; ${cores} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}\n`);
  console.log('| work | identity-router | baseline (same run) | ratio | goal | met |');
  console.log('|---|---:|---:|---:|---:|:---:|');
  for (const row of rows) console.log(`| ${row.work} | ${row.measured} | ${row.baseline} | ${row.ratioLabel} | ${row.goal} | ${row.met ? 'yes' : 'NO'} |`);
  for (const [name, { measurement, bareExpress }] of Object.entries(raw)) {
    if (measurement.failed > 0) console.log(`warning: ${name} had ${measurement.failed} failed requests (status codes ${JSON.stringify(measurement.statusCodes)}, ${measurement.errors} errors, ${measurement.timeouts} timeouts)`);
    if (bareExpress && bareExpress.failed > 0) console.log(`warning: bare Express before ${name} had ${bareExpress.failed} failed requests`);
  }

  const resultsDir = join(here, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `hot-path-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  const report = {
    startedAt: startedAt.toISOString(),
    machine: { cores, cpu: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version, loadAverageBefore: loadBefore, loadAverageAfter: loadAfter },
    settings: { connections: CONNECTIONS, seconds: SECONDS, warmupSeconds: WARMUP, database: 'sqlite', bcryptCost: BCRYPT_COST, passwordWorkers: seed.passwordWorkers ?? cores },
    hashMs,
    rows,
    measurements: raw,
  };
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`\nwritten to ${file}`);

  if (!process.env.BENCH_SKIP_API_KEYS) {
    console.log('\n== bench/api-key-vs-token.ts (a host route with an API key beside an access token) ==');
    const apiKeys = spawnSync(process.execPath, ['--import', 'tsx', join(here, 'api-key-vs-token.ts')], { stdio: 'inherit' });
    if (apiKeys.status !== 0) process.exitCode = 1;
  }

  if (!process.env.BENCH_SKIP_SCALE) {
    console.log('\n== bench/org-members-page.ts (member page cost against organization size) ==');
    const scale = spawnSync(process.execPath, ['--import', 'tsx', join(here, 'org-members-page.ts')], { stdio: 'inherit' });
    if (scale.status !== 0) process.exitCode = 1;
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
