/**
 * One row, on the code before a change and on the code after it, in the same run:
 *
 *   npx tsx bench/compare.ts <git revision> <row> [rounds]
 *   npx tsx bench/compare.ts main members 4
 *
 * The source of the revision is exported to a temporary directory (its node_modules linked to
 * this checkout's), and two routers are started side by side: that one and this checkout's.
 * The row (host, me, orgs, members, refresh) is then measured on each in turn, `rounds`
 * times, so load from elsewhere on the machine falls on both alike. It prints the server CPU
 * per request of each measurement and the medians: the figure to judge a change by on a
 * shared machine, where throughput moves with everyone else's work.
 */
import { type ChildProcess, execSync, fork } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inAlternatingOrder, median, underLoad } from './process-cpu.js';
import { autocannonOptions, type IdentitySeed, isReadRow, readLoads, refreshLoad } from './hot-path-shared.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const [revision, row = 'members', roundsArg = '4'] = process.argv.slice(2);
if (!revision) throw new Error('usage: compare.ts <git revision> <host|me|orgs|members|refresh> [rounds]');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1);
// Every autocannon run strands up to one refresh token per connection: two runs a round.
process.env.BENCH_REFRESH_SESSIONS ??= String(20 + 2 * 20 * Number(roundsArg));

function start(env: Record<string, string>): Promise<{ child: ChildProcess; seed: IdentitySeed }> {
  const child = fork(join(here, 'hot-path-server.ts'), ['identity'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...env } });
  return new Promise((resolve, reject) => {
    child.once('message', (seed) => resolve({ child, seed: seed as IdentitySeed }));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

function load(seed: IdentitySeed): object {
  if (row === 'refresh') return autocannonOptions(seed.origin, refreshLoad(seed));
  if (!isReadRow(row)) throw new Error(`unknown row ${row}`);
  return autocannonOptions(seed.origin, readLoads(seed)[row]);
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-compare-'));
  const servers: ChildProcess[] = [];
  try {
    execSync(`git -C ${JSON.stringify(root)} archive ${revision} src | tar -x -C ${JSON.stringify(dir)}`);
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
    const before = await start({ BENCH_ROUTER_MODULE: join(dir, 'src', 'index.ts') });
    servers.push(before.child);
    const after = await start({});
    servers.push(after.child);
    const beforeLoad = load(before.seed);
    const afterLoad = load(after.seed);
    const rounds = await inAlternatingOrder(Number(roundsArg), ['before', 'after'] as const, async (which, round) => {
      const { cpuMicrosPerRequest: value } = await underLoad((which === 'before' ? before : after).child.pid, which === 'before' ? beforeLoad : afterLoad, { warmupSeconds: WARMUP, seconds: SECONDS });
      console.log(`  round ${round}, ${which === 'before' ? revision : 'this checkout'}: ${Math.round(value)} µs of server CPU per request`);
      return value;
    });
    const figures = { before: rounds.map((round) => round.before), after: rounds.map((round) => round.after) };
    const b = median(figures.before);
    const a = median(figures.after);
    console.log(`${row}: median ${Math.round(b)} µs (${revision}) against ${Math.round(a)} µs (this checkout): ${(((a - b) / b) * 100).toFixed(1)}%`);
  } finally {
    for (const child of servers) child.kill('SIGINT');
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
