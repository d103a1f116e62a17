/**
 * Where a row's CPU goes, from a profile written with BENCH_PROFILE_DIR:
 *
 *   BENCH_ONLY=host BENCH_PROFILE_DIR=/tmp/prof npm run bench
 *   npx tsx bench/profile-summary.ts /tmp/prof/identity-<pid>.cpuprofile [top]
 *
 * Prints the share of samples by area (the router's own code by folder, and each package
 * under node_modules, Node's internals, garbage collection, idle), then the functions with
 * the most self time, and the router's functions with the most total time (self plus what
 * they call).
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
}

const [file, topArg] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [top]');
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parent = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

function area(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  if (functionName === '(idle)') return '(idle)';
  if (functionName === '(garbage collector)') return '(garbage collector)';
  if (functionName === '(program)') return '(program)';
  const packageName = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (packageName) return packageName;
  const own = /\/(src\/[^/]+(?:\/[^/]+)?)/.exec(url)?.[1];
  if (own) return own.replace(/\/[^/]+\.ts$/, (name) => name);
  if (url.startsWith('node:') || url === '') return 'node internals';
  return url;
}

const label = (node: ProfileNode) => `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url.replace(/^.*\/(src|node_modules)\//, '$1/')}:${node.callFrame.lineNumber + 1}`;
const counts = new Map<number, number>();
for (const sample of profile.samples) counts.set(sample, (counts.get(sample) ?? 0) + 1);
const busy = profile.samples.filter((id) => byId.get(id)!.callFrame.functionName !== '(idle)').length;

const areas = new Map<string, number>();
const selfTime = new Map<string, number>();
const totalTime = new Map<string, number>();
for (const [id, count] of counts) {
  const node = byId.get(id)!;
  if (node.callFrame.functionName === '(idle)') continue;
  areas.set(area(node), (areas.get(area(node)) ?? 0) + count);
  selfTime.set(label(node), (selfTime.get(label(node)) ?? 0) + count);
  // Each frame on the stack once, so recursion does not count twice.
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const frame = byId.get(at)!;
    if (!frame.callFrame.url.includes('/src/')) continue;
    const name = label(frame);
    if (seen.has(name)) continue;
    seen.add(name);
    totalTime.set(name, (totalTime.get(name) ?? 0) + count);
  }
}

const percent = (count: number) => `${((count / busy) * 100).toFixed(1).padStart(5)}%`;
const print = (title: string, map: Map<string, number>, limit: number) => {
  console.log(`\n${title}`);
  for (const [name, count] of [...map].sort((a, b) => b[1] - a[1]).slice(0, limit)) console.log(`  ${percent(count)}  ${name}`);
};
console.log(`${busy} busy samples of ${profile.samples.length}`);
print('by area (self time)', areas, top);
print('functions by self time', selfTime, top);
print("the router's functions by total time", totalTime, top);
