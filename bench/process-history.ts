/**
 * What bare Express costs once its process has served other routes, beside the router's
 * host route, in the same run:
 *
 *   npx tsx bench/process-history.ts [rounds]
 *
 * The host route's floor (`npm run bench`) is bare Express in a process that has answered
 * nothing but GET /hello. The router's process has answered every route it was seeded
 * through, and a real app's has answered its own. This starts three servers
 * (bench/hot-path-server.ts): bare Express as the bench starts it; bare Express that has
 * first served a few thousand requests of other routes (JSON bodies, route parameters,
 * several statuses, credentials in headers), then answers the same GET /hello; and the router
 * with its host route behind requirePermission. Each is driven in turn, `rounds` times
 * (default 4, the order alternating), with 20 connections; it prints the server's CPU per
 * request, its rate, and the medians side by side.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { autocannonOptions, type IdentitySeed, readLoads } from './hot-path-shared.js';
import { inAlternatingOrder, median, underLoad } from './process-cpu.js';

const here = dirname(fileURLToPath(import.meta.url));
const ROUNDS = Number(process.argv[2] ?? 4);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);

type Mode = 'bare' | 'bare-after-traffic' | 'identity';
const LABELS: Record<Mode, string> = { bare: 'bare Express', 'bare-after-traffic': 'bare Express after other traffic', identity: 'host route behind requirePermission' };

function start(mode: Mode): Promise<{ child: ChildProcess; request: object }> {
  const child = fork(join(here, 'hot-path-server.ts'), [mode], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (message) => {
      const seed = message as IdentitySeed;
      resolve({ child, request: mode === 'identity' ? autocannonOptions(seed.origin, readLoads(seed).host) : { url: `${seed.origin}/hello` } });
    });
    child.once('exit', (code) => reject(new Error(`${mode} exited with ${code}`)));
  });
}

async function main(): Promise<void> {
  const modes: Mode[] = ['bare', 'bare-after-traffic', 'identity'];
  const servers = new Map<Mode, { child: ChildProcess; request: object }>();
  try {
    for (const mode of modes) servers.set(mode, await start(mode));
    const rounds = await inAlternatingOrder(ROUNDS, modes, async (mode, round) => {
      const server = servers.get(mode)!;
      const { cpuMicrosPerRequest: cpu, requestsPerSecond: rate } = await underLoad(server.child.pid, server.request, { warmupSeconds: 1, seconds: SECONDS });
      console.log(`  round ${round}, ${LABELS[mode]}: ${Math.round(cpu)} µs of server CPU per request, ${Math.round(rate).toLocaleString('en-US')} req/s`);
      return { cpu, rate };
    });
    const figures = new Map(modes.map((mode) => [mode, rounds.map((round) => round[mode])]));
    const cpu = (mode: Mode) => median(figures.get(mode)!.map((figure) => figure.cpu));
    const rate = (mode: Mode) => median(figures.get(mode)!.map((figure) => figure.rate));
    console.log('\nmedians');
    for (const mode of modes) console.log(`  ${LABELS[mode]}: ${Math.round(cpu(mode))} µs, ${Math.round(rate(mode)).toLocaleString('en-US')} req/s`);
    console.log(`host route against bare Express: ${(rate('identity') / rate('bare')).toFixed(2)}× the rate, ${(cpu('bare') / cpu('identity')).toFixed(2)}× by CPU`);
    console.log(`host route against bare Express after other traffic: ${(rate('identity') / rate('bare-after-traffic')).toFixed(2)}× the rate, ${(cpu('bare-after-traffic') / cpu('identity')).toFixed(2)}× by CPU`);
    console.log(`bare Express after other traffic against bare Express: ${(rate('bare-after-traffic') / rate('bare')).toFixed(2)}× the rate`);
  } finally {
    for (const { child } of servers.values()) child.kill('SIGINT');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
