/**
 * The hot-path benchmark: every row against its floor measured in the
 * same run, on the same machine, with the same load generator.
 *
 *   npm run bench                              the hot path on SQLite
 *   npm run bench -- --database pg             the same rows on a throwaway PostgreSQL 15
 *   npm run bench -- --login-runs 5            the login row five times, with its spread
 *   npm run bench -- --scale                   1,000,000 users against 1,000 (both databases)
 *   npm run bench -- --soak                    10 minutes of every row at once: RSS and the access cache
 *
 * Floors: bare Express for the read rows; the database's single-row commit rate with the
 * router's own settings, 20 writers at once, for refresh; cores ÷ one bcrypt cost-10 hash for
 * login. Each row and its floor (and the row with a listener) are measured in alternating
 * slices: BENCH_ROUNDS rounds (default 7) of BENCH_SECONDS ÷ rounds each, so the machine's
 * changes of speed fall on a row and its floor alike; the row's ratio is the median of its
 * rounds' ratios, and its figures are that round's. A login slice's rate is the one while
 * logins were answered (`steadyRate`), against warm hashing threads (`HashFloor`). autocannon drives 20 connections; a
 * row's first slice follows a BENCH_WARMUP (default 2) s warm-up that is thrown away, and
 * each starts once the server has finished the requests left in flight. The servers run in
 * child processes (bench/hot-path-server.ts); autocannon runs here. It prints the table and
 * writes the figures to bench/results/. It is a benchmark, never a pass/fail test: the exit
 * code is 0 whether or not a goal is met (1 only when the bench itself failed).
 *
 *   BENCH_SECONDS=2 BENCH_WARMUP=0.5 npm run bench     a short smoke run
 *   BENCH_ROUNDS=n                                      rounds of alternating slices (default 7)
 *   BENCH_ONLY=refresh,login                            only the rows whose name contains a word
 *   BENCH_LOGIN_RUNS=n                                  as --login-runs n
 *   BENCH_SCALE_USERS=n                                 the scale bench's size (default 1,000,000)
 *   BENCH_SOAK_SECONDS=n                                the soak's length (default 600)
 *   BENCH_SKIP_SCALE=1                                  skip the member-page scale bench
 *   BENCH_SKIP_API_KEYS=1                               skip the API-key vs access-token rows
 *   BENCH_PASSWORD_WORKERS=n                            password.workers of the router
 *   BENCH_PROFILE_DIR=dir                               CPU profile of the router's process during the load
 *                                                       (after its seeding), one file per server
 */
import { type ChildProcess, fork, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import { openDatabase } from '../src/store/database.js';
import { HashFloor } from './hash-floor.js';
import { cpuMicros, inAlternatingOrder } from './process-cpu.js';
import { autocannonOptions, BCRYPT_COST, type IdentitySeed, type LoadRequest, loginLoad, PG_POOL, readLoads, refreshLoad } from './hot-path-shared.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from './postgres.js';

const here = dirname(fileURLToPath(import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const CONNECTIONS = 20;
// Seven short rounds, not three long ones: this machine's speed moves within seconds (a read
// row's rounds ran from 0.69× to 1.41× of bare Express in one run), and the median of seven
// pairs taken close together is steadier than that of three.
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 7));
// Every autocannon run strands up to one refresh token per connection: a warm-up and a slice a round.
process.env.BENCH_REFRESH_SESSIONS ??= String(CONNECTIONS * (ROUNDS + 3));
const ONLY = process.env.BENCH_ONLY?.split(',').filter(Boolean);
const wanted = (name: string) => !ONLY || ONLY.some((word) => name.toLowerCase().includes(word.toLowerCase()));

const { values: options } = parseArgs({
  options: {
    database: { type: 'string', default: process.env.BENCH_DATABASE ?? 'sqlite' },
    'login-runs': { type: 'string', default: process.env.BENCH_LOGIN_RUNS ?? '1' },
    scale: { type: 'boolean', default: false },
    soak: { type: 'boolean', default: false },
  },
});
const DATABASE = options.database === 'pg' || options.database === 'postgres' ? 'pg' : 'sqlite';
if (options.database !== DATABASE && options.database !== 'postgres') throw new Error(`--database is sqlite or pg, not ${options.database}`);
const LOGIN_RUNS = Math.max(1, Number(options['login-runs']));
const SCALE_USERS = Number(process.env.BENCH_SCALE_USERS ?? 1_000_000);
const SCALE_BASELINE_USERS = 1_000;
const SOAK_SECONDS = Number(process.env.BENCH_SOAK_SECONDS ?? 600);
const DATABASE_LABEL = DATABASE === 'pg' ? 'PostgreSQL' : 'SQLite';

interface Measurement {
  /** Successful answers a second: over the slice's duration, or while they flowed (`steadyRate`, the login rows). */
  requestsPerSecond: number;
  /** With a steady rate: the successful answers over the slice's duration, for comparison. */
  countedPerSecond?: number;
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

interface Goal {
  /** `issue 11` (the first goals, kept) or `issue 28` / `issue 26` (this machine class's). */
  source: string;
  label: string;
  met: boolean;
}

interface Row {
  work: string;
  measured: string;
  /** What the row is a ratio to, measured in the same run. */
  floor: { kind: 'bare Express' | 'commit' | 'hash-bound' | 'idle p99' | 'without a listener' | '1,000 users' | 'first minute' | 'bound'; label: string; value: number };
  ratio: number;
  /** How the ratio column shows it, where `n×` would mislead (a spread). */
  ratioLabel?: string;
  cpuMicrosPerRequest?: number;
  goals: Goal[];
}

type Server = { child: ChildProcess; info: IdentitySeed };

function startServer<T>(mode: 'bare' | 'identity' | 'startup', env: Record<string, string> = {}): Promise<{ child: ChildProcess; info: T }> {
  const child = fork(join(here, 'hot-path-server.ts'), [mode], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...env } });
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

/** `onAnswer` hears each response's status code as it arrives. */
function runAutocannon(origin: string, request: LoadRequest, duration: number, connections = CONNECTIONS, onAnswer?: (statusCode: number) => void): Promise<any> {
  const run = autocannon({ ...autocannonOptions(origin, request), connections, duration });
  if (onAnswer) run.on('response', (_client: unknown, statusCode: number) => onAnswer(statusCode));
  return run;
}

/**
 * Successful answers a second while they flowed: the least-squares slope of their count
 * against the time each arrived. A login slice starts with nothing answered for about one
 * hash's time (the hashing threads' pipeline fills) and ends with the hashes in flight cut
 * off. Counted over the slice's duration, those two edges took 1 to 9% off the rate of a 1.4 s
 * slice (which autocannon runs to its next whole second, 2 s), 0.5 to 5% off a 3.3 s one, by
 * an amount that moved with where the cut fell. The slope is the rate between them.
 */
function steadyRate(arrivals: number[]): number | undefined {
  const n = arrivals.length;
  if (n < 3) return undefined;
  const meanTime = arrivals.reduce((sum, time) => sum + time, 0) / n;
  const meanCount = (n - 1) / 2;
  let covariance = 0;
  let variance = 0;
  arrivals.forEach((time, count) => {
    covariance += (time - meanTime) * (count - meanCount);
    variance += (time - meanTime) ** 2;
  });
  return variance > 0 ? (covariance / variance) * 1000 : undefined;
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

/** How long one measurement runs, and the warm-up thrown away before it. */
interface Slice {
  warmup: number;
  seconds: number;
}
const WHOLE: Slice = { warmup: WARMUP, seconds: SECONDS };

/** `steady`: the rate is `steadyRate`'s (the login rows), not the answers over the slice's duration. */
async function measure(origin: string, request: LoadRequest, pid?: number, slice: Slice = WHOLE, steady = false): Promise<Measurement> {
  if (slice.warmup > 0) await runAutocannon(origin, request, slice.warmup);
  await untilServerIdle(pid);
  const cpuBefore = cpuMicros(pid);
  const eventLoopCpuBefore = cpuMicros(pid, true);
  const arrivals: number[] = [];
  const onAnswer = (statusCode: number) => {
    if (statusCode >= 200 && statusCode < 300) arrivals.push(performance.now());
  };
  const measurement = summarise(await runAutocannon(origin, request, slice.seconds, CONNECTIONS, steady ? onAnswer : undefined));
  const rate = steady ? steadyRate(arrivals) : undefined;
  if (rate !== undefined) {
    measurement.countedPerSecond = measurement.requestsPerSecond;
    measurement.requestsPerSecond = rate;
  }
  const cpuAfter = cpuMicros(pid);
  const eventLoopCpuAfter = cpuMicros(pid, true);
  if (cpuBefore !== undefined && cpuAfter !== undefined && measurement.ok > 0) measurement.serverCpuMicrosPerRequest = (cpuAfter - cpuBefore) / measurement.ok;
  if (eventLoopCpuBefore !== undefined && eventLoopCpuAfter !== undefined && measurement.ok > 0) {
    measurement.serverEventLoopCpuMicrosPerRequest = (eventLoopCpuAfter - eventLoopCpuBefore) / measurement.ok;
  }
  return measurement;
}

/** Several loads at once, warmed up together, measured together. */
async function measureTogether(origin: string, requests: LoadRequest[], pid?: number, slice: Slice = WHOLE): Promise<Measurement[]> {
  if (slice.warmup > 0) await Promise.all(requests.map((request) => runAutocannon(origin, request, slice.warmup)));
  await untilServerIdle(pid);
  return (await Promise.all(requests.map((request) => runAutocannon(origin, request, slice.seconds)))).map(summarise);
}

/**
 * Several measurements in alternating slices: `rounds` rounds (BENCH_ROUNDS by default), each
 * taking every one in turn for BENCH_SECONDS ÷ rounds, in reverse order every other round. A shared
 * machine's speed moves while a bench runs (seen here: a fixed loop ran three to six times slower
 * for minutes, then fast again); measured in turn this way, a row and its floor meet the same
 * moments, and each round's ratio compares like with like. Only the first round warms up.
 */
async function alternating<F extends Record<string, (slice: Slice) => Promise<unknown>>>(takes: F, count = ROUNDS): Promise<Array<{ [K in keyof F]: Awaited<ReturnType<F[K]>> }>> {
  const rounds = await inAlternatingOrder(count, Object.keys(takes), (name, round) => takes[name]!({ warmup: round === 1 ? WARMUP : 0, seconds: SECONDS / count }));
  return rounds as Array<{ [K in keyof F]: Awaited<ReturnType<F[K]>> }>;
}

/** The round whose ratio is the median of the rounds' (the upper middle of an even count): its figures are the row's. */
function medianRound<T>(rounds: T[], ratio: (round: T) => number): { round: T; ratio: number; ratios: number[] } {
  const sorted = [...rounds].sort((a, b) => ratio(a) - ratio(b));
  const round = sorted[Math.floor(sorted.length / 2)]!;
  return { round, ratio: ratio(round), ratios: rounds.map(ratio) };
}

const silentLogger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The refresh row's floor: single-row commits per second through a pool opened by the
 * router's own `openDatabase` (so SQLite runs with the router's pragmas: WAL, foreign keys,
 * busy timeout, and `synchronous` at its default; PostgreSQL with the `synchronous_commit` the
 * router leaves as the server has it), 20 writers at once as the refresh row has 20
 * connections. On SQLite the file sits in the same directory as the router's.
 */
async function commitFloor(url: string | undefined, seconds: number): Promise<{ perSecond: number; settings: string }> {
  const dir = url ? undefined : mkdtempSync(join(tmpdir(), 'identity-bench-floor-'));
  const { knex } = openDatabase(
    (url
      ? { client: 'pg', connection: url, pool: { min: 2, max: PG_POOL } }
      : { client: 'better-sqlite3', connection: { filename: join(dir!, 'floor.sqlite') }, useNullAsDefault: true }) as never,
    silentLogger,
  );
  const table = 'bench_commit_floor';
  try {
    await knex.schema.dropTableIfExists(table);
    await knex.schema.createTable(table, (t) => {
      t.string('id', 36).primary();
      t.bigInteger('at').notNullable();
    });
    const write = () => knex.transaction(async (trx) => void (await trx(table).insert({ id: randomUUID(), at: Date.now() })));
    const writers = async (ms: number) => {
      let count = 0;
      const until = performance.now() + ms;
      await Promise.all(
        Array.from({ length: CONNECTIONS }, async () => {
          while (performance.now() < until) {
            await write();
            count += 1;
          }
        }),
      );
      return count;
    };
    await writers(Math.min(1000, WARMUP * 1000));
    const started = performance.now();
    const count = await writers(seconds * 1000);
    const perSecond = count / ((performance.now() - started) / 1000);
    const settings = url
      ? `synchronous_commit=${(await knex.raw('SHOW synchronous_commit')).rows[0].synchronous_commit}, fsync=${(await knex.raw('SHOW fsync')).rows[0].fsync}`
      : `journal_mode=${(await knex.raw('PRAGMA journal_mode'))[0].journal_mode}, synchronous=${['OFF', 'NORMAL', 'FULL', 'EXTRA'][(await knex.raw('PRAGMA synchronous'))[0].synchronous]}`;
    await knex.schema.dropTableIfExists(table);
    return { perSecond, settings };
  } finally {
    await knex.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

const perSecond = (m: Measurement) => `${Math.round(m.requestsPerSecond).toLocaleString('en-US')} req/s`;
const micros = (value: number | undefined) => (value === undefined ? '' : `${Math.round(value)} µs`);


/**
 * The machine's speed at this moment: iterations a millisecond of a fixed loop, for one
 * second on this thread. Taken before and after a run, it shows whether the machine was the
 * same throughout (on a shared one it is not always: sixfold here within half an hour).
 */
function machineSpeed(): number {
  let sink = 0;
  let iterations = 0;
  const started = performance.now();
  while (performance.now() - started < 1000) {
    for (let i = 0; i < 100_000; i += 1) sink += i % 7;
    iterations += 100_000;
  }
  if (sink < 0) console.log(sink);
  return Math.round(iterations / (performance.now() - started) / 1000);
}

function machine() {
  return { cores: availableParallelism(), cpu: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version };
}

const describeMachine = ({ cores, cpu, memoryGiB, node }: ReturnType<typeof machine>) => `${cores} × ${cpu ?? 'cpu'}, ${memoryGiB} GiB, Node ${node}`;

function printTable(rows: Row[]): void {
  const goals = (row: Row, source: string) => row.goals.filter((goal) => goal.source === source);
  const cell = (list: Goal[]) => (list.length === 0 ? ' | ' : `${list.map((goal) => goal.label).join('; ')} | ${list.map((goal) => (goal.met ? 'met' : 'MISSED')).join('; ')}`);
  console.log('| work | identity-router | floor (same run) | ratio | CPU per request | goal (issue 11) | met | goal (issues 26, 28) | met |');
  console.log('|---|---:|---:|---:|---:|---:|:---:|---:|:---:|');
  for (const row of rows) {
    const later = row.goals.filter((goal) => goal.source !== 'issue 11');
    console.log(`| ${row.work} | ${row.measured} | ${row.floor.label} | ${row.ratioLabel ?? `${row.ratio.toFixed(2)}×`} | ${micros(row.cpuMicrosPerRequest)} | ${cell(goals(row, 'issue 11'))} | ${cell(later)} |`);
  }
}

function writeResults(kind: string, startedAt: Date, report: Record<string, unknown>): void {
  const resultsDir = join(here, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `${kind}-${DATABASE}-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify({ startedAt: startedAt.toISOString(), machine: machine(), database: DATABASE, ...report }, null, 2)}\n`);
  console.log(`\nwritten to ${file}`);
}

/** The read rows' ratios of the newest SQLite hot-path run, for the PostgreSQL goal "within 80% of the SQLite ratio". */
function newestSqliteRatios(): Map<string, number> | undefined {
  const resultsDir = join(here, 'results');
  const files = readdirSync(resultsDir).filter((file) => file.startsWith('hot-path-sqlite-')).sort().reverse();
  // A run of some rows only (BENCH_ONLY) says nothing of the others: the newest run that measured the read rows.
  for (const file of files) {
    const report = JSON.parse(readFileSync(join(resultsDir, file), 'utf8')) as { rows: Row[] };
    if (report.rows.some((row) => row.floor.kind === 'bare Express')) return new Map(report.rows.map((row) => [row.work, row.ratio]));
  }
  return undefined;
}

/** A throwaway PostgreSQL with these databases for --database pg, nothing for SQLite. */
async function withDatabases<T>(names: string[], work: (urls: Array<string | undefined>) => Promise<T>): Promise<T> {
  if (DATABASE === 'sqlite') return work(names.map(() => undefined));
  let postgres: ThrowawayPostgres | undefined;
  const stop = () => postgres?.stop();
  // Ctrl-C ends the process without its exit hooks: stop the cluster and remove it first.
  const interrupted = () => {
    stop();
    process.exit(130);
  };
  process.once('exit', stop);
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  try {
    postgres = await startThrowawayPostgres(names);
    console.log(`throwaway PostgreSQL ${postgres.version} (fsync and synchronous_commit at their defaults; pool of ${PG_POOL})`);
    return await work(postgres.urls);
  } finally {
    stop();
    process.removeListener('exit', stop);
    process.removeListener('SIGINT', interrupted);
    process.removeListener('SIGTERM', interrupted);
  }
}

const envFor = (url: string | undefined, extra: Record<string, string> = {}): Record<string, string> => ({ ...(url ? { BENCH_DATABASE_URL: url } : {}), ...extra });

async function hotPath(): Promise<void> {
  const startedAt = new Date();
  const loadBefore = loadavg();
  const speedBefore = machineSpeed();
  const cores = availableParallelism();
  console.log(`hot path bench: ${CONNECTIONS} connections, ${SECONDS} s measured after ${WARMUP} s warm-up (rows against their floors in ${ROUNDS} alternating rounds), ${DATABASE_LABEL}, bcrypt cost ${BCRYPT_COST}, ${cores} cores`);
  const rows: Row[] = [];
  const raw: Record<string, { measurement: Measurement; bareExpress?: Measurement; rounds?: unknown[] }> = {};
  const floors: Record<string, unknown> = {};
  const listenerRows = wanted('listener');

  await withDatabases(['bench', 'bench_listener'], async ([url, listenerUrl]) => {
    const bare = await startServer<{ origin: string }>('bare');
    const servers: ChildProcess[] = [bare.child];
    try {
      const server = await startServer<IdentitySeed>('identity', envFor(url));
      servers.push(server.child);
      const seed = server.info;
      const loads = readLoads(seed);
      const versusExpress = async (name: string, request: LoadRequest, goals: { issue11: number; issue28: number }): Promise<Measurement> => {
        const rounds = await alternating({
          bareExpress: (slice) => measure(bare.info.origin, { path: '/hello' }, bare.child.pid, slice),
          measurement: (slice) => measure(seed.origin, request, server.child.pid, slice),
        });
        const { round, ratio, ratios } = medianRound(rounds, (pair) => pair.measurement.requestsPerSecond / pair.bareExpress.requestsPerSecond);
        const { measurement: m, bareExpress: baseline } = round;
        raw[name] = { measurement: m, bareExpress: baseline, rounds };
        rows.push({
          work: name,
          measured: perSecond(m),
          floor: { kind: 'bare Express', label: `${perSecond(baseline)} (${micros(baseline.serverCpuMicrosPerRequest)})`, value: baseline.requestsPerSecond },
          ratio,
          ...(m.serverCpuMicrosPerRequest === undefined ? {} : { cpuMicrosPerRequest: m.serverCpuMicrosPerRequest }),
          goals: [
            { source: 'issue 11', label: `≥ ${goals.issue11.toFixed(2)}×`, met: ratio >= goals.issue11 },
            { source: 'issue 28', label: `≥ ${goals.issue28.toFixed(2)}×`, met: ratio >= goals.issue28 },
          ],
        });
        const cpuRatio = m.serverCpuMicrosPerRequest && baseline.serverCpuMicrosPerRequest ? ` (CPU per request ${micros(m.serverCpuMicrosPerRequest)} against ${micros(baseline.serverCpuMicrosPerRequest)}: ${(baseline.serverCpuMicrosPerRequest / m.serverCpuMicrosPerRequest).toFixed(2)}×)` : '';
        console.log(`  ${name}: ${perSecond(m)} (bare Express ${perSecond(baseline)}), ${ratio.toFixed(2)}× (rounds ${ratios.map((value) => value.toFixed(2)).join(', ')}), p99 ${m.p99Ms} ms${cpuRatio}`);
        return m;
      };

      if (wanted('host route behind requirePermission')) await versusExpress('host route behind requirePermission', loads.host, { issue11: 0.5, issue28: 0.85 });
      if (wanted('GET /auth/me')) await versusExpress('GET /auth/me', loads.me, { issue11: 0.3, issue28: 0.75 });
      if (wanted('GET /orgs')) await versusExpress('GET /orgs', loads.orgs, { issue11: 0.3, issue28: 0.75 });
      if (wanted('GET /orgs/{id}/members (11 members)')) await versusExpress('GET /orgs/{id}/members (11 members)', loads.members, { issue11: 0.25, issue28: 0.5 });

      // Issue 26: refresh and login again on a router with an `onEvent` listener, right after
      // the rows without one: every event is written to the outbox in its transaction and
      // delivered after commit.
      let withListener: Server | undefined;
      if (listenerRows) {
        withListener = await startServer<IdentitySeed>('identity', envFor(listenerUrl, { BENCH_LISTENER: '1' }));
        servers.push(withListener.child);
      }
      const compare = (name: string, m: Measurement, without: Measurement, perSecondLabel: string, roundRatios?: number[]) => {
        raw[name] = { measurement: m, ...(roundRatios ? { rounds: roundRatios } : {}) };
        const ratio = m.requestsPerSecond / without.requestsPerSecond;
        const cost = 1 - ratio;
        const cpuCost = m.serverCpuMicrosPerRequest && without.serverCpuMicrosPerRequest ? m.serverCpuMicrosPerRequest / without.serverCpuMicrosPerRequest - 1 : undefined;
        rows.push({
          work: name,
          measured: perSecondLabel,
          floor: { kind: 'without a listener', label: `${without.requestsPerSecond.toFixed(1)} req/s (${micros(without.serverCpuMicrosPerRequest)})`, value: without.requestsPerSecond },
          ratio,
          ...(m.serverCpuMicrosPerRequest === undefined ? {} : { cpuMicrosPerRequest: m.serverCpuMicrosPerRequest }),
          goals: [{ source: 'issue 26', label: `cost ≤ 15% (here ${(cost * 100).toFixed(1)}%${cpuCost === undefined ? '' : `, CPU ${(cpuCost * 100).toFixed(1)}%`})`, met: cost <= 0.15 }],
        });
        const costs = roundRatios ? ` (rounds ${roundRatios.map((value) => `${((1 - value) * 100).toFixed(1)}%`).join(', ')})` : '';
        console.log(`  ${name}: ${perSecondLabel} against ${without.requestsPerSecond.toFixed(1)} without; cost ${(cost * 100).toFixed(1)}%${costs} in throughput${cpuCost === undefined ? '' : `, ${(cpuCost * 100).toFixed(1)}% in CPU per request`}`);
      };

      if (wanted('POST /auth/token/refresh') || listenerRows) {
        const refreshWithout = refreshLoad(seed);
        const refreshWith = withListener && refreshLoad(withListener.info);
        const rounds = await alternating({
          commit: (slice: Slice) => commitFloor(url, slice.seconds),
          refresh: (slice: Slice) => measure(seed.origin, refreshWithout, server.child.pid, slice),
          ...(withListener && refreshWith ? { withListener: (slice: Slice) => measure(withListener.info.origin, refreshWith, withListener.child.pid, slice) } : {}),
        });
        const { round, ratio, ratios } = medianRound(rounds, (figures) => figures.refresh.requestsPerSecond / figures.commit.perSecond);
        const { commit: floor, refresh: m } = round;
        floors.commit = floor;
        raw['POST /auth/token/refresh'] = { measurement: m, rounds: rounds.map(({ commit, refresh }) => ({ commit, refresh })) };
        rows.push({
          work: 'POST /auth/token/refresh',
          measured: perSecond(m),
          floor: { kind: 'commit', label: `${Math.round(floor.perSecond).toLocaleString('en-US')} commits/s (${floor.settings})`, value: floor.perSecond },
          ratio,
          ...(m.serverCpuMicrosPerRequest === undefined ? {} : { cpuMicrosPerRequest: m.serverCpuMicrosPerRequest }),
          goals: [
            { source: 'issue 11', label: '≥ 1,200 req/s', met: m.requestsPerSecond >= 1200 },
            { source: 'issue 28', label: '≥ 0.70× commit floor', met: ratio >= 0.7 },
            { source: 'issue 28', label: '≥ 2,000 req/s', met: m.requestsPerSecond >= 2000 },
          ],
        });
        console.log(`  POST /auth/token/refresh: ${perSecond(m)}; commit floor ${Math.round(floor.perSecond)}/s (${floor.settings}); ${ratio.toFixed(2)}× (rounds ${ratios.map((value) => value.toFixed(2)).join(', ')}); CPU per request ${micros(m.serverCpuMicrosPerRequest)}`);
        if (withListener) {
          const pairs = rounds.map((figures) => ({ without: figures.refresh, with: figures.withListener! }));
          const median = medianRound(pairs, (pair) => pair.with.requestsPerSecond / pair.without.requestsPerSecond);
          compare('POST /auth/token/refresh with a listener', median.round.with, median.round.without, perSecond(median.round.with), median.ratios);
        }
      }

      if (wanted('POST /auth/login') || listenerRows) {
        const ratios: number[] = [];
        const hashFloor = await HashFloor.start(cores);
        try {
          for (let run = 1; run <= LOGIN_RUNS; run += 1) {
            const loginWithout = loginLoad(seed);
            const loginWith = withListener && run === 1 ? loginLoad(withListener.info) : undefined;
            const rounds = await alternating(
              {
                // The floor waits, as a login slice does, for the hashes a login slice left in flight.
                hash: async (slice: Slice) => {
                  await untilServerIdle(server.child.pid);
                  if (withListener) await untilServerIdle(withListener.child.pid);
                  return hashFloor.measure(slice.seconds);
                },
                login: (slice: Slice) => measure(seed.origin, loginWithout, server.child.pid, slice, true),
                ...(withListener && loginWith ? { withListener: (slice: Slice) => measure(withListener.info.origin, loginWith, withListener.child.pid, slice, true) } : {}),
              },
            );
            const median = medianRound(rounds, (figures) => figures.login.requestsPerSecond / figures.hash.perSecond);
            const { hash: bound, login } = median.round;
            const { ratio } = median;
            const name = LOGIN_RUNS > 1 ? `POST /auth/login (run ${run} of ${LOGIN_RUNS})` : 'POST /auth/login';
            raw[name] = { measurement: login, rounds: rounds.map(({ hash, login }) => ({ hash, login })) };
            ratios.push(ratio);
            floors[`hash ${run}`] = bound;
            rows.push({
              work: name,
              measured: `${login.requestsPerSecond.toFixed(1)} req/s`,
              floor: { kind: 'hash-bound', label: `${cores} cores ÷ ${bound.hashMs.toFixed(1)} ms = ${bound.perSecond.toFixed(1)}/s`, value: bound.perSecond },
              ratio,
              ...(login.serverCpuMicrosPerRequest === undefined ? {} : { cpuMicrosPerRequest: login.serverCpuMicrosPerRequest }),
              goals: [
                { source: 'issue 11', label: '≥ 0.95×', met: ratio >= 0.95 },
                { source: 'issue 28', label: '≥ 0.95×', met: ratio >= 0.95 },
              ],
            });
            const eventLoop = login.serverEventLoopCpuMicrosPerRequest === undefined ? '' : `; the event loop's CPU per login ${(login.serverEventLoopCpuMicrosPerRequest / 1000).toFixed(2)} ms`;
            console.log(`  ${name}: ${login.requestsPerSecond.toFixed(1)} req/s; one hash ${bound.hashMs.toFixed(1)} ms, ${cores} cores: ${bound.perSecond.toFixed(1)}/s; ${ratio.toFixed(2)}× (rounds ${median.ratios.map((value) => value.toFixed(2)).join(', ')})${eventLoop}`);
            if (loginWith) {
              const pairs = rounds.map((figures) => ({ without: figures.login, with: figures.withListener! }));
              const listenerMedian = medianRound(pairs, (pair) => pair.with.requestsPerSecond / pair.without.requestsPerSecond);
              const withOne = listenerMedian.round.with;
              compare('POST /auth/login with a listener', withOne, listenerMedian.round.without, `${withOne.requestsPerSecond.toFixed(1)} req/s`, listenerMedian.ratios);
            }
          }
          if (LOGIN_RUNS > 1) {
            const mean = ratios.reduce((sum, ratio) => sum + ratio, 0) / ratios.length;
            const spread = (Math.max(...ratios) - Math.min(...ratios)) / mean;
            rows.push({
              work: `POST /auth/login spread over ${LOGIN_RUNS} runs`,
              measured: `${Math.min(...ratios).toFixed(2)}× to ${Math.max(...ratios).toFixed(2)}×`,
              floor: { kind: 'hash-bound', label: `mean ${mean.toFixed(2)}×`, value: mean },
              ratio: spread,
              ratioLabel: `spread ${(spread * 100).toFixed(1)}%`,
              goals: [{ source: 'issue 28', label: 'spread ≤ 5%', met: spread <= 0.05 }],
            });
            console.log(`  login over ${LOGIN_RUNS} runs: ${ratios.map((ratio) => ratio.toFixed(2)).join(', ')}; spread ${(spread * 100).toFixed(1)}% of the mean`);
          }
        } finally {
          await hashFloor.close();
        }
      }

      if (wanted('storm')) {
        // The idle p99 in the same alternating rounds as the storm, as every other row meets its
        // floor: a p99 of a few milliseconds taken minutes apart moved the ratio by a third a millisecond.
        const rounds = await alternating({
          idle: (slice: Slice) => measure(seed.origin, loads.me, server.child.pid, slice),
          storm: async (slice: Slice) => {
            const [me, logins] = await measureTogether(seed.origin, [loads.me, loginLoad(seed)], server.child.pid, slice);
            return { me: me!, logins: logins! };
          },
        });
        const median = medianRound(rounds, (figures) => figures.storm.me.p99Ms / Math.max(figures.idle.p99Ms, 1));
        const { idle, storm } = median.round;
        const { ratio } = median;
        raw['GET /auth/me under a login storm'] = { measurement: storm.me, rounds: rounds.map(({ idle, storm }) => ({ idle, storm: storm.me, logins: storm.logins })) };
        raw['POST /auth/login during the storm'] = { measurement: storm.logins };
        rows.push({
          work: 'GET /auth/me p99 under a login storm',
          measured: `${storm.me.p99Ms} ms (${perSecond(storm.me)}, ${storm.logins.requestsPerSecond.toFixed(1)} logins/s)`,
          floor: { kind: 'idle p99', label: `idle p99 ${idle.p99Ms} ms (same rounds)`, value: idle.p99Ms },
          ratio,
          goals: [
            { source: 'issue 11', label: '≤ 2×', met: ratio <= 2 },
            { source: 'issue 28', label: '≤ 2×', met: ratio <= 2 },
          ],
        });
        console.log(`  GET /auth/me under a login storm: p99 ${storm.me.p99Ms} ms against ${idle.p99Ms} ms idle, ${ratio.toFixed(2)}× (rounds ${median.ratios.map((value) => value.toFixed(2)).join(', ')})`);
      }

    } finally {
      await Promise.all(servers.map(stopServer));
    }
  });

  if (DATABASE === 'pg') {
    const sqlite = newestSqliteRatios();
    for (const row of rows) {
      if (row.floor.kind !== 'bare Express') continue;
      const sqliteRatio = sqlite?.get(row.work);
      if (sqliteRatio) row.goals.push({ source: 'issue 28', label: `≥ 0.80 × SQLite's ${sqliteRatio.toFixed(2)}×`, met: row.ratio >= 0.8 * sqliteRatio });
    }
    if (!sqlite) console.log('(no SQLite run in bench/results to hold the PostgreSQL read ratios against: run `npm run bench` first)');
  }

  const loadAfter = loadavg();
  const speedAfter = machineSpeed();
  const format = (load: number[]) => load.map((value) => value.toFixed(2)).join(' ');
  console.log(`\n${startedAt.toISOString()}; ${DATABASE_LABEL}; load average ${format(loadBefore)} before, ${format(loadAfter)} after; machine speed ${speedBefore} before, ${speedAfter} after (thousands of loop iterations a millisecond); ${describeMachine(machine())}\n`);
  printTable(rows);
  for (const [name, { measurement, bareExpress }] of Object.entries(raw)) {
    if (measurement.failed > 0) console.log(`warning: ${name} had ${measurement.failed} failed requests (status codes ${JSON.stringify(measurement.statusCodes)}, ${measurement.errors} errors, ${measurement.timeouts} timeouts)`);
    if (bareExpress && bareExpress.failed > 0) console.log(`warning: bare Express before ${name} had ${bareExpress.failed} failed requests`);
  }
  writeResults('hot-path', startedAt, {
    loadAverageBefore: loadBefore,
    machineSpeed: { before: speedBefore, after: speedAfter },
    loadAverageAfter: loadAfter,
    settings: { connections: CONNECTIONS, seconds: SECONDS, warmupSeconds: WARMUP, rounds: ROUNDS, database: DATABASE, bcryptCost: BCRYPT_COST, loginRuns: LOGIN_RUNS, pgPool: DATABASE === 'pg' ? PG_POOL : undefined },
    floors,
    rows,
    measurements: raw,
  });

  if (!process.env.BENCH_SKIP_API_KEYS && DATABASE === 'sqlite' && !ONLY) {
    console.log('\n== bench/api-key-vs-token.ts (a host route with an API key beside an access token) ==');
    const apiKeys = spawnSync(process.execPath, ['--import', 'tsx', join(here, 'api-key-vs-token.ts')], { stdio: 'inherit' });
    if (apiKeys.status !== 0) process.exitCode = 1;
  }
  if (!process.env.BENCH_SKIP_SCALE && DATABASE === 'sqlite' && !ONLY) {
    console.log('\n== bench/org-members-page.ts (member page cost against organization size) ==');
    const scale = spawnSync(process.execPath, ['--import', 'tsx', join(here, 'org-members-page.ts')], { stdio: 'inherit' });
    if (scale.status !== 0) process.exitCode = 1;
  }
}

/**
 * --scale: the same database at two sizes, each seeded once (the bench's accounts through
 * HTTP, then the bulk rows of bench/bulk-seed.ts), a router on each, both running at once;
 * each row measured on the two in alternating slices (the ratio the median of the rounds'),
 * and the router's start-up time on each (construction to `ready`, migrations already
 * applied; the median of three starts).
 */
async function scale(): Promise<void> {
  const startedAt = new Date();
  const sizes = [SCALE_BASELINE_USERS, SCALE_USERS];
  console.log(`scale bench: ${sizes.map((size) => size.toLocaleString('en-US')).join(' and ')} users, ${DATABASE_LABEL}, ${CONNECTIONS} connections, ${SECONDS} s after ${WARMUP} s warm-up`);
  const figures: Array<{ users: number; seed: IdentitySeed['scale']; startupMs: number; rows: Record<string, Measurement> }> = [];
  const rounds: Record<string, Array<{ small: Measurement; large: Measurement }>> = {};
  await withDatabases(
    sizes.map((size) => `bench_${size}`),
    async (urls) => {
      const dirs = sizes.map(() => mkdtempSync(join(tmpdir(), 'identity-bench-scale-')));
      const envs = sizes.map((size, index) => envFor(urls[index], { BENCH_SCALE_USERS: String(size), ...(urls[index] ? {} : { BENCH_SQLITE_FILE: join(dirs[index]!, 'bench.sqlite') }) }));
      const servers: Server[] = [];
      try {
        // Both sizes run at once, so each row is measured on them in alternating slices.
        for (const [index, size] of sizes.entries()) {
          const seeding = performance.now();
          const server = await startServer<IdentitySeed>('identity', envs[index]!);
          servers.push(server);
          const seed = server.info;
          console.log(`  ${size.toLocaleString('en-US')} users: seeded in ${((performance.now() - seeding) / 1000).toFixed(1)} s (bulk rows ${seed.scale?.seconds.toFixed(1)} s: ${seed.scale?.users} users, ${seed.scale?.organizations} organizations, ${seed.scale?.membersAdded} members added to the bench's)`);
          figures.push({ users: size, seed: seed.scale, startupMs: 0, rows: {} });
        }
        const [smallServer, largeServer] = servers as [Server, Server];
        const loadsOf = (server: Server) => ({ ...readLoads(server.info), login: loginLoad(server.info), refresh: refreshLoad(server.info) });
        const smallLoads = loadsOf(smallServer);
        const largeLoads = loadsOf(largeServer);
        const measureRow = async (name: string, load: keyof typeof smallLoads) => {
          const taken = await alternating(
            {
              small: (slice: Slice) => measure(smallServer.info.origin, smallLoads[load], smallServer.child.pid, slice, load === 'login'),
              large: (slice: Slice) => measure(largeServer.info.origin, largeLoads[load], largeServer.child.pid, slice, load === 'login'),
            },
          );
          const { round, ratios } = medianRound(taken, (pair) => pair.large.requestsPerSecond / pair.small.requestsPerSecond);
          rounds[name] = taken;
          figures[0]!.rows[name] = round.small;
          figures[1]!.rows[name] = round.large;
          const line = (m: Measurement) => `${m.requestsPerSecond.toFixed(1)} req/s, CPU per request ${micros(m.serverCpuMicrosPerRequest)}, p99 ${m.p99Ms} ms`;
          console.log(`    ${name}: ${line(round.large)} against ${line(round.small)} (rounds ${ratios.map((value) => value.toFixed(2)).join(', ')})`);
        };
        await measureRow('POST /auth/login', 'login');
        await measureRow('GET /auth/me', 'me');
        await measureRow('POST /auth/token/refresh', 'refresh');
        await measureRow(`GET /orgs/{id}/members (a page of the largest organization)`, 'members');
        await Promise.all(servers.map((server) => stopServer(server.child)));
        for (const [index, env] of envs.entries()) {
          const starts: number[] = [];
          for (let i = 0; i < 3; i += 1) starts.push((await startServer<{ milliseconds: number }>('startup', env)).info.milliseconds);
          figures[index]!.startupMs = starts.sort((a, b) => a - b)[1]!;
          console.log(`    start-up at ${sizes[index]!.toLocaleString('en-US')} users (construction to ready): ${starts.map((ms) => `${Math.round(ms)} ms`).join(', ')}`);
        }
      } finally {
        await Promise.all(servers.map((server) => stopServer(server.child)));
        for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
      }
    },
  );
  const [small, large] = figures as [(typeof figures)[number], (typeof figures)[number]];
  const rows: Row[] = [];
  for (const [name, m] of Object.entries(large.rows)) {
    const base = small.rows[name]!;
    const ratio = m.requestsPerSecond / base.requestsPerSecond;
    rows.push({
      work: `${name} at ${large.users.toLocaleString('en-US')} users`,
      measured: `${m.requestsPerSecond.toFixed(1)} req/s`,
      floor: { kind: '1,000 users', label: `${base.requestsPerSecond.toFixed(1)} req/s (${micros(base.serverCpuMicrosPerRequest)})`, value: base.requestsPerSecond },
      ratio,
      ...(m.serverCpuMicrosPerRequest === undefined ? {} : { cpuMicrosPerRequest: m.serverCpuMicrosPerRequest }),
      goals: [{ source: 'issue 28', label: 'within 20% (≥ 0.80×)', met: ratio >= 0.8 }],
    });
  }
  rows.push({
    work: `start-up at ${large.users.toLocaleString('en-US')} users`,
    measured: `${Math.round(large.startupMs)} ms`,
    floor: { kind: '1,000 users', label: `${Math.round(small.startupMs)} ms`, value: small.startupMs },
    ratio: large.startupMs / small.startupMs,
    goals: [{ source: 'issue 28', label: '< 2 s', met: large.startupMs < 2000 }],
  });
  console.log('');
  printTable(rows);
  writeResults('scale', startedAt, { settings: { connections: CONNECTIONS, seconds: SECONDS, warmupSeconds: WARMUP, rounds: ROUNDS, sizes }, figures, rows, rounds });
}

/**
 * --soak: every row at once for BENCH_SOAK_SECONDS on one router, 20 connections between
 * them; the server's RSS and access-cache sizes are sampled every 10 s. Goal: RSS at the end
 * within 10% of RSS after the first minute, and the cache within its bound throughout.
 */
async function soak(): Promise<void> {
  const startedAt = new Date();
  const firstMinute = Math.min(60, SOAK_SECONDS / 4);
  console.log(`soak: ${SOAK_SECONDS} s, ${CONNECTIONS} connections across every row, ${DATABASE_LABEL}`);
  type Stats = { rssBytes: number; heapUsedBytes: number; accessCache: { entries: number; weight?: number; invalidations: number; maxEntries: number } };
  const samples: Array<{ atSeconds: number } & Stats> = [];
  let results: Record<string, Measurement> = {};
  await withDatabases(['bench'], async ([url]) => {
    const server = await startServer<IdentitySeed>('identity', envFor(url));
    try {
      const seed = server.info;
      const loads = readLoads(seed);
      // Connections per row: 20 in all; two logins keep the password pool busy without starving the rest.
      const mix: Array<[string, LoadRequest, number]> = [
        ['host route', loads.host, 4],
        ['GET /auth/me', loads.me, 4],
        ['GET /orgs', loads.orgs, 3],
        ['GET /orgs/{id}/members', loads.members, 3],
        ['POST /auth/token/refresh', refreshLoad(seed), 4],
        ['POST /auth/login', loginLoad(seed), 2],
      ];
      const stats = () =>
        new Promise<Stats>((resolve) => {
          server.child.once('message', (message) => resolve((message as { stats: Stats }).stats));
          server.child.send('stats');
        });
      const started = performance.now();
      const sampler = setInterval(() => {
        void stats().then((sample) => samples.push({ atSeconds: Math.round((performance.now() - started) / 1000), ...sample }));
      }, Math.min(10_000, (SOAK_SECONDS * 1000) / 20));
      try {
        const outcomes = await Promise.all(mix.map(([, request, connections]) => runAutocannon(seed.origin, request, SOAK_SECONDS, connections)));
        results = Object.fromEntries(mix.map(([name], i) => [name, summarise(outcomes[i])]));
      } finally {
        clearInterval(sampler);
      }
      samples.push({ atSeconds: Math.round((performance.now() - started) / 1000), ...(await stats()) });
    } finally {
      await stopServer(server.child);
    }
  });
  const afterFirstMinute = samples.find((sample) => sample.atSeconds >= firstMinute) ?? samples[0]!;
  const last = samples[samples.length - 1]!;
  const growth = last.rssBytes / afterFirstMinute.rssBytes - 1;
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  // The bound holds the weight (a cached page counts its rows); an older router reports entries alone.
  const largestCache = Math.max(...samples.map((sample) => sample.accessCache.weight ?? sample.accessCache.entries));
  const largestInvalidations = Math.max(...samples.map((sample) => sample.accessCache.invalidations));
  for (const [name, m] of Object.entries(results)) console.log(`  ${name}: ${m.requestsPerSecond.toFixed(1)} req/s, p99 ${m.p99Ms} ms, ${m.failed} failed`);
  for (const sample of samples) console.log(`  ${String(sample.atSeconds).padStart(4)} s: RSS ${mib(sample.rssBytes)}, heap ${mib(sample.heapUsedBytes)}, access cache ${sample.accessCache.entries} entries (weight ${sample.accessCache.weight ?? sample.accessCache.entries}), ${sample.accessCache.invalidations} invalidations`);
  const rows: Row[] = [
    {
      work: `RSS after ${SOAK_SECONDS} s`,
      measured: mib(last.rssBytes),
      floor: { kind: 'first minute', label: `after ${afterFirstMinute.atSeconds} s: ${mib(afterFirstMinute.rssBytes)}`, value: afterFirstMinute.rssBytes },
      ratio: last.rssBytes / afterFirstMinute.rssBytes,
      goals: [{ source: 'issue 28', label: `within 10% (here ${(growth * 100).toFixed(1)}%)`, met: Math.abs(growth) <= 0.1 }],
    },
    {
      work: 'access cache, largest size seen',
      measured: `weight ${largestCache} (a cached page counts its rows), ${largestInvalidations} invalidations`,
      floor: { kind: 'bound', label: `bound ${last.accessCache.maxEntries}`, value: last.accessCache.maxEntries },
      ratio: largestCache / last.accessCache.maxEntries,
      goals: [{ source: 'issue 28', label: 'within its bound', met: largestCache <= last.accessCache.maxEntries }],
    },
  ];
  console.log('');
  printTable(rows);
  writeResults('soak', startedAt, { settings: { connections: CONNECTIONS, seconds: SOAK_SECONDS }, samples, results, rows });
}

(options.scale ? scale() : options.soak ? soak() : hotPath()).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
