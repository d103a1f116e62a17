/**
 * Where a refresh's CPU goes, thread by thread:
 *
 *   npx tsx bench/thread-cpu.ts [seconds]
 *
 * Starts the router as the bench does (bench/hot-path-server.ts, SQLite unless
 * BENCH_DATABASE_URL names a PostgreSQL), drives the refresh row with 20 connections for 2 s
 * of warm-up and then `seconds` (default 8), and divides each thread's CPU time over the load
 * (/proc/<pid>/task/<tid>/stat) by the refreshes answered: the event loop ("main"), libuv's
 * pool and V8's helper threads (named "node" by Linux, where the RS256 signatures run), and
 * this process, the load generator. On a 2-core machine all three share the cores, so the
 * event loop's figure bounds the rate and the sum bounds it too (docs/performance.md).
 */
import { fork } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import { MOUNT, refreshRequests, type IdentitySeed } from './hot-path-shared.js';

const here = dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? 8);
process.env.BENCH_REFRESH_SESSIONS ??= '200';

/** CPU microseconds per thread name; the event loop is the thread whose id is the process id. */
function threadCpu(pid: number): Record<string, number> {
  const totals: Record<string, number> = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const name = tid === String(pid) ? 'event loop' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.split(') ')[1]!.split(' ');
    totals[name] = (totals[name] ?? 0) + (Number(fields[11]) + Number(fields[12])) * 10_000;
  }
  return totals;
}

const child = fork(join(here, 'hot-path-server.ts'), ['identity'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
try {
  const seed = (await new Promise((resolve) => child.once('message', resolve))) as IdentitySeed;
  const load = { url: `${seed.origin}${MOUNT}/auth/token/refresh`, connections: 20, requests: refreshRequests(seed.refreshTokens) };
  await autocannon({ ...load, duration: 2 });
  const before = threadCpu(child.pid!);
  const ownBefore = process.cpuUsage();
  const result = await autocannon({ ...load, duration: seconds });
  const after = threadCpu(child.pid!);
  const own = process.cpuUsage(ownBefore);
  const answered = result['2xx'] as number;
  console.log(`refresh: ${Math.round(result.requests.average)} req/s, ${answered} answered, ${result.non2xx} not 2xx`);
  for (const name of Object.keys(after)) console.log(`  ${name}: ${Math.round(((after[name] ?? 0) - (before[name] ?? 0)) / answered)} µs per refresh`);
  console.log(`  load generator (this process): ${Math.round((own.user + own.system) / answered)} µs per refresh`);
} finally {
  child.kill('SIGINT');
}
