/**
 * Does password hashing block the event loop?
 *
 * Measures, in one run and on one machine, the latency of a cheap route (the JWKS
 * document) while logins at the default bcrypt cost (12) are in flight, against the same
 * route with nothing else running (the baseline). It then repeats the logins with bcrypt
 * run inline on the main thread, the way a naive integration would, to show what the
 * worker threads buy. Results are ratios against the baseline of the same run.
 *
 *   npx tsx bench/login-under-load.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import bcrypt from 'bcryptjs';
import express from 'express';
import { createIdentityRouter } from '../src/index.js';

const CONCURRENT_LOGINS = 4;
const SECONDS = 6;

interface LatencySummary {
  p50: number;
  p99: number;
  max: number;
  requestsPerSecond: number;
}

async function measureJwks(url: string): Promise<LatencySummary> {
  const result = await autocannon({ url, connections: 10, duration: SECONDS });
  return { p50: result.latency.p50, p99: result.latency.p99, max: result.latency.max, requestsPerSecond: result.requests.average };
}

async function loginLoop(baseUrl: string, email: string, password: string, until: () => boolean): Promise<number> {
  let count = 0;
  while (!until()) {
    const response = await fetch(`${baseUrl}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
    await response.arrayBuffer();
    count += 1;
  }
  return count;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-'));
  const quiet = { debug() {}, info() {}, warn() {}, error: console.error };
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: join(dir, 'bench.sqlite') }, useNullAsDefault: true },
      secret: 'bench-secret-that-is-at-least-32-characters',
      issuer: 'https://bench.example',
      auth: { rateLimits: false },
    },
    { logger: quiet, mailer: { send: async () => {} }, sms: { send: async () => {} } },
  );
  await identity.ready;
  const app = express();
  app.use('/identity', identity);
  // The "naive" contrast: the same cost-12 bcrypt, but run on the event loop.
  const inlineHash = await bcrypt.hash('bench password 1234', 12);
  app.post('/inline-login', (_req, res) => {
    res.json({ ok: bcrypt.compareSync('bench password 1234', inlineHash) });
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const baseUrl = `${origin}/identity`;
  const jwksUrl = `${baseUrl}/auth/.well-known/jwks.json`;

  const email = 'bench@example.com';
  const password = 'bench password 1234';
  await fetch(`${baseUrl}/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });

  const baseline = await measureJwks(jwksUrl);

  const delay = monitorEventLoopDelay({ resolution: 10 });
  let stop = false;
  delay.enable();
  const loginsDone = Promise.all(Array.from({ length: CONCURRENT_LOGINS }, () => loginLoop(baseUrl, email, password, () => stop)));
  const underWorkerLogins = await measureJwks(jwksUrl);
  stop = true;
  const workerLoginCount = (await loginsDone).reduce((sum, n) => sum + n, 0);
  delay.disable();
  const workerLoopDelayP99 = delay.percentile(99) / 1e6;

  const inlineDelay = monitorEventLoopDelay({ resolution: 10 });
  stop = false;
  inlineDelay.enable();
  const inlineDone = Promise.all(
    Array.from({ length: CONCURRENT_LOGINS }, async () => {
      let count = 0;
      while (!stop) {
        await (await fetch(`${origin}/inline-login`, { method: 'POST' })).arrayBuffer();
        count += 1;
      }
      return count;
    }),
  );
  const underInlineLogins = await measureJwks(jwksUrl);
  stop = true;
  const inlineLoginCount = (await inlineDone).reduce((sum, n) => sum + n, 0);
  inlineDelay.disable();
  const inlineLoopDelayP99 = inlineDelay.percentile(99) / 1e6;

  server.close();
  await identity.close();
  rmSync(dir, { recursive: true, force: true });

  const row = (name: string, s: LatencySummary, extra: string) =>
    `${name.padEnd(34)} p50 ${String(s.p50).padStart(5)} ms  p99 ${String(s.p99).padStart(5)} ms  ${Math.round(s.requestsPerSecond).toString().padStart(6)} req/s  ${extra}`;
  console.log(`\nJWKS latency while logins hash (bcrypt cost 12, ${CONCURRENT_LOGINS} login loops, ${SECONDS} s each, 10 connections)`);
  console.log(row('baseline (idle)', baseline, ''));
  console.log(row('logins, bcrypt in worker threads', underWorkerLogins, `${workerLoginCount} logins, event-loop delay p99 ${workerLoopDelayP99.toFixed(1)} ms`));
  console.log(row('logins, bcrypt inline (contrast)', underInlineLogins, `${inlineLoginCount} logins, event-loop delay p99 ${inlineLoopDelayP99.toFixed(1)} ms`));
  console.log('\nratios against the baseline of this run (1.0 = unaffected):');
  console.log(`  throughput, worker threads: ${(underWorkerLogins.requestsPerSecond / baseline.requestsPerSecond).toFixed(2)}x`);
  console.log(`  throughput, inline bcrypt:  ${(underInlineLogins.requestsPerSecond / baseline.requestsPerSecond).toFixed(2)}x`);
  console.log(`  p99 latency, worker threads: ${(underWorkerLogins.p99 / Math.max(1, baseline.p99)).toFixed(2)}x`);
  console.log(`  p99 latency, inline bcrypt:  ${(underInlineLogins.p99 / Math.max(1, baseline.p99)).toFixed(2)}x`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
