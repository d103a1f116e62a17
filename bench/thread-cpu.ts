/**
 * Where a refresh's (or a login's, or `GET /auth/me`'s) CPU goes, thread by thread:
 *
 *   npx tsx bench/thread-cpu.ts [seconds] [--database pg] [--row login|me|idle] [--connections N]
 *
 * Starts the router as the bench does (bench/hot-path-server.ts, on SQLite, or with
 * `--database pg` on a throwaway PostgreSQL 15 started as bench/postgres.ts starts the
 * bench's), drives the refresh row with 20 connections (`--connections`) for 2 s of warm-up and then `seconds`
 * (default 8), and divides each thread's CPU time over the load (/proc/<pid>/task/<tid>/stat)
 * by the requests answered (`--row login`: the login row's load, the seeded accounts in turn;
 * `--row me`: `GET /auth/me` with the bench's token): the event loop ("main"), libuv's pool and V8's helper threads
 * (named "node" by Linux, where the RS256 signatures and the password hashes run), this process (the load generator),
 * and on PostgreSQL the database's own processes. On a 2-core machine all of them share the
 * cores, so the event loop's figure bounds the rate and the sum bounds it too
 * (docs/performance.md). `--row idle` sends nothing and gives each thread's CPU per second:
 * what the router spends with no request to answer (its timers and pollers), which every row's
 * figures include.
 */
import { fork } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import { autocannonOptions, type IdentitySeed, loginLoad, readLoads, refreshLoad } from './hot-path-shared.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from './postgres.js';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const onPostgres = args.includes('--database') && args[args.indexOf('--database') + 1] === 'pg';
const seconds = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 8);
const row = args.includes('--row') ? args[args.indexOf('--row') + 1] : 'refresh';
/** `--connections 1` measures one request at a time, with a core to spare beside its hash (a login) or its signature (a refresh). */
const connections = args.includes('--connections') ? Number(args[args.indexOf('--connections') + 1]) : 20;
if (!['refresh', 'login', 'me', 'idle'].includes(row!) || !(connections >= 1)) throw new Error('usage: thread-cpu.ts [seconds] [--database pg] [--row refresh|login|me|idle] [--connections N]');
process.env.BENCH_REFRESH_SESSIONS ??= '200';

/** CPU microseconds per thread name, and the kernel's part of it; the event loop is the thread whose id is the process id. */
function threadCpu(pid: number): Record<string, number> {
  const totals: Record<string, number> = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const name = tid === String(pid) ? 'event loop' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.split(') ')[1]!.split(' ');
    totals[name] = (totals[name] ?? 0) + (Number(fields[11]) + Number(fields[12])) * 10_000;
    totals[`${name} (kernel)`] = (totals[`${name} (kernel)`] ?? 0) + Number(fields[12]) * 10_000;
  }
  return totals;
}

/** CPU microseconds of every process of the PostgreSQL cluster whose postmaster is `postmaster`: it and its children. */
function postgresCpu(postmaster: number): number {
  let total = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // ended while we looked
    }
    const fields = stat.split(') ')[1]!.split(' ');
    if (Number(pid) !== postmaster && Number(fields[1]) !== postmaster) continue;
    total += (Number(fields[11]) + Number(fields[12])) * 10_000;
  }
  return total;
}

const postgres: ThrowawayPostgres | undefined = onPostgres ? await startThrowawayPostgres(['identity_thread_cpu']) : undefined;
/** The postmaster's pid, from the first line of its data directory's postmaster.pid. */
const postmaster = postgres ? Number(readFileSync(join(postgres.dataDirectory, 'postmaster.pid'), 'utf8').split('\n')[0]) : undefined;
const child = fork(join(here, 'hot-path-server.ts'), ['identity'], {
  execArgv: ['--import', 'tsx'],
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  env: { ...process.env, ...(postgres ? { BENCH_DATABASE_URL: postgres.urls[0]! } : {}) },
});
try {
  const seed = (await new Promise((resolve) => child.once('message', resolve))) as IdentitySeed;
  const rowLoad = row === 'login' ? loginLoad(seed) : row === 'me' ? readLoads(seed).me : refreshLoad(seed);
  const load = { ...autocannonOptions(seed.origin, rowLoad), connections };
  if (row !== 'idle') await autocannon({ ...load, duration: 2 });
  const before = threadCpu(child.pid!);
  const databaseBefore = postmaster === undefined ? 0 : postgresCpu(postmaster);
  const ownBefore = process.cpuUsage();
  const result = row === 'idle' ? await new Promise((resolve) => setTimeout(resolve, seconds * 1000)) : await autocannon({ ...load, duration: seconds });
  const after = threadCpu(child.pid!);
  const databaseAfter = postmaster === undefined ? 0 : postgresCpu(postmaster);
  const own = process.cpuUsage(ownBefore);
  const [answered, unit] = row === 'idle' ? [seconds, 'second'] : [(result as { '2xx': number })['2xx'], row];
  if (row === 'idle') console.log(`idle for ${seconds} s`);
  else {
    const { requests, non2xx } = result as { requests: { average: number }; non2xx: number };
    console.log(`${row}: ${requests.average.toFixed(1)} req/s, ${answered} answered, ${non2xx} not 2xx`);
  }
  for (const name of Object.keys(after)) console.log(`  ${name}: ${Math.round(((after[name] ?? 0) - (before[name] ?? 0)) / answered)} µs per ${unit}`);
  console.log(`  load generator (this process): ${Math.round((own.user + own.system) / answered)} µs per ${unit}`);
  if (postmaster !== undefined) console.log(`  PostgreSQL (its processes): ${Math.round((databaseAfter - databaseBefore) / answered)} µs per ${unit}`);
} finally {
  child.kill('SIGINT');
  if (postgres) {
    await new Promise((resolve) => child.once('exit', resolve));
    postgres.stop();
  }
}
