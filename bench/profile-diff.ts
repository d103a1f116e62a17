/**
 * Where a read row's CPU goes above bare Express, function by function:
 *
 *   npx tsx bench/profile-diff.ts [me|orgs|host|members]
 *
 * Starts bare Express and the router as the bench does (bench/hot-path-server.ts), each with a
 * CPU profile that begins once it is seeded, drives each with 20 connections (2 s of warm-up,
 * then BENCH_SECONDS, default 6), and stops them. Each function's self time is divided by the
 * requests its server answered while profiled; bare Express's figure is subtracted from the
 * router's. It prints the totals, the difference by area (the router's own code, Node's
 * internals, each package) and the functions that cost the router the most above bare
 * Express. The profiler adds its own cost, so the totals sit above `npm run bench`'s CPU per
 * request; the differences are what to read.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';
import { autocannonOptions, type IdentitySeed, isReadRow, READ_ROWS, readLoads } from './hot-path-shared.js';

const here = dirname(fileURLToPath(import.meta.url));
const row = process.argv[2] ?? 'me';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 6);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

async function profiled(mode: 'bare' | 'identity', target: (seed: IdentitySeed) => object): Promise<Map<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), `identity-profile-${mode}-`));
  const child: ChildProcess = fork(join(here, 'hot-path-server.ts'), [mode], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, BENCH_PROFILE_DIR: dir } });
  try {
    const seed = await new Promise<IdentitySeed>((resolve, reject) => {
      child.once('message', (message) => resolve(message as IdentitySeed));
      child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
    });
    const request = target(seed);
    const warmup = await autocannon({ ...request, connections: 20, duration: 2 });
    const measured = await autocannon({ ...request, connections: 20, duration: SECONDS });
    if (warmup.non2xx + measured.non2xx > 0) throw new Error('answers that were not 2xx');
    const requests = warmup['2xx'] + measured['2xx'];
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGINT');
    await exited;
    const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'))!;
    return perRequest(JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile, requests);
  } finally {
    child.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

const areaOf = (url: string) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ?? (url.startsWith('node:') || url === '' ? 'node' : 'identity-router (src)');

/** Self time in µs per answered request, by `area|function file:line`. */
function perRequest(profile: Profile, requests: number): Map<string, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const times = new Map<string, number>();
  profile.samples.forEach((id, index) => {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    if (functionName === '(idle)') return;
    const key = `${areaOf(url)}|${functionName || '(anonymous)'} ${url.replace(/^.*\/(src|node_modules)\//, '$1/')}:${lineNumber + 1}`;
    times.set(key, (times.get(key) ?? 0) + profile.timeDeltas[index]! / requests);
  });
  return times;
}

if (!isReadRow(row)) throw new Error(`usage: profile-diff.ts [${READ_ROWS.join('|')}]`);

const floor = await profiled('bare', (seed) => ({ url: `${seed.origin}/hello` }));
const router = await profiled('identity', (seed) => autocannonOptions(seed.origin, readLoads(seed)[row]));

const sum = (map: Map<string, number>) => [...map.values()].reduce((total, value) => total + value, 0);
const byArea = (map: Map<string, number>) => {
  const areas = new Map<string, number>();
  for (const [key, value] of map) areas.set(key.split('|')[0]!, (areas.get(key.split('|')[0]!) ?? 0) + value);
  return areas;
};
const µs = (value: number) => `${value.toFixed(1).padStart(6)} µs`;
console.log(`${row}: ${µs(sum(router))} of CPU per request under the profiler, bare Express ${µs(sum(floor))}, ${µs(sum(router) - sum(floor))} above it`);
const floorAreas = byArea(floor);
const routerAreas = byArea(router);
console.log('\nabove bare Express, by area');
for (const area of [...new Set([...floorAreas.keys(), ...routerAreas.keys()])].sort((a, b) => (routerAreas.get(b) ?? 0) - (floorAreas.get(b) ?? 0) - ((routerAreas.get(a) ?? 0) - (floorAreas.get(a) ?? 0))).slice(0, 10)) {
  console.log(`  ${µs((routerAreas.get(area) ?? 0) - (floorAreas.get(area) ?? 0))}  ${area}`);
}
console.log('\nabove bare Express, by function (self time)');
const keys = [...new Set([...floor.keys(), ...router.keys()])].sort((a, b) => (router.get(b) ?? 0) - (floor.get(b) ?? 0) - ((router.get(a) ?? 0) - (floor.get(a) ?? 0)));
for (const key of keys.slice(0, 30)) console.log(`  ${µs((router.get(key) ?? 0) - (floor.get(key) ?? 0))}  ${key.replace('|', ': ')}`);
