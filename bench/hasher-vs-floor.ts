/**
 * Whether the router's password hasher hashes as fast as the login row's floor, with nothing
 * else running:
 *
 *   npx tsx bench/hasher-vs-floor.ts [rounds] [seconds]
 *
 * Alternates, `rounds` times (default 4) for `seconds` each (default 3), the order reversed
 * every other round: the router's
 * `PasswordHasher` (its worker threads, one per core, at their lowered priority, fed by 20
 * verifications at once as 20 connections feed it) and the bench's `HashFloor` (plain threads).
 * Prints each one's rate and its threads' CPU time per hash (/proc). Equal figures mean a login
 * row below its floor loses the difference outside the hasher: HTTP, the database, the
 * signature, the load generator (docs/performance.md, "The login row's floor, measured again").
 */
import { availableParallelism } from 'node:os';
import { PasswordHasher } from '../src/crypto/password-hasher.js';
import { HashFloor } from './hash-floor.js';
import { BCRYPT_COST, PASSWORD } from './hot-path-shared.js';
import { cpuMicros, inAlternatingOrder } from './process-cpu.js';

const [rounds = 4, seconds = 3] = process.argv.slice(2).map(Number);
const cores = availableParallelism();

/** CPU milliseconds of this process's threads but the main one: the hashing threads. */
const threadsCpuMs = () => (cpuMicros(process.pid)! - cpuMicros(process.pid, true)!) / 1000;

const hasher = new PasswordHasher({ cost: BCRYPT_COST, pepper: Buffer.from('pepper') });
const stored = await hasher.hash(PASSWORD);
const floor = await HashFloor.start(cores);

async function throughHasher(ms: number): Promise<number> {
  const until = performance.now() + ms;
  let verified = 0;
  await Promise.all(
    Array.from({ length: 20 }, async () => {
      while (performance.now() < until) {
        await hasher.verify(PASSWORD, stored);
        verified += 1;
      }
    }),
  );
  return verified;
}

/** One side for `seconds`: its hashes a second and its threads' CPU milliseconds a hash. */
async function take(side: 'hasher' | 'floor'): Promise<{ perSecond: number; cpuMs: number }> {
  const cpuBefore = threadsCpuMs();
  if (side === 'floor') {
    const { perSecond } = await floor.measure(seconds);
    return { perSecond, cpuMs: (threadsCpuMs() - cpuBefore) / (perSecond * seconds) };
  }
  const started = performance.now();
  const verified = await throughHasher(seconds * 1000);
  return { perSecond: verified / ((performance.now() - started) / 1000), cpuMs: (threadsCpuMs() - cpuBefore) / verified };
}

try {
  await throughHasher(1000);
  const taken = await inAlternatingOrder(rounds, ['hasher', 'floor'] as const, take);
  taken.forEach(({ hasher: mine, floor: bound }, index) => {
    console.log(
      `round ${index + 1}: hasher ${mine.perSecond.toFixed(2)}/s, ${mine.cpuMs.toFixed(1)} ms CPU a hash; floor ${bound.perSecond.toFixed(2)}/s, ${bound.cpuMs.toFixed(1)} ms CPU a hash; ${(mine.perSecond / bound.perSecond).toFixed(2)}×`,
    );
  });
} finally {
  await hasher.close();
  await floor.close();
}
