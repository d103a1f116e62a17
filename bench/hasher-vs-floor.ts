/**
 * Whether the router's password hasher hashes as fast as the login row's floor, with nothing
 * else running:
 *
 *   npx tsx bench/hasher-vs-floor.ts [rounds] [seconds]
 *
 * Alternates, `rounds` times (default 4) for `seconds` each (default 3): the router's
 * `PasswordHasher` (its worker threads, one per core, at their lowered priority, fed by 20
 * verifications at once as 20 connections feed it) and the bench's `HashFloor` (plain threads).
 * Prints each one's rate and its threads' CPU time per hash (/proc). Equal figures mean a login
 * row below its floor loses the difference outside the hasher: HTTP, the database, the
 * signature, the load generator (docs/performance.md, "The login row's floor, measured again").
 */
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { PasswordHasher } from '../src/crypto/password-hasher.js';
import { HashFloor } from './hash-floor.js';
import { BCRYPT_COST, PASSWORD } from './hot-path-shared.js';

const [rounds = 4, seconds = 3] = process.argv.slice(2).map(Number);
const cores = availableParallelism();

/** CPU milliseconds of this process's threads but the main one. */
function threadsCpuMs(): number {
  let ticks = 0;
  for (const tid of readdirSync('/proc/self/task')) {
    if (tid === String(process.pid)) continue;
    const fields = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * 10;
}

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

try {
  await throughHasher(1000);
  for (let round = 1; round <= rounds; round += 1) {
    const cpuBefore = threadsCpuMs();
    const started = performance.now();
    const verified = await throughHasher(seconds * 1000);
    const elapsed = (performance.now() - started) / 1000;
    const hasherCpu = (threadsCpuMs() - cpuBefore) / verified;
    const floorCpuBefore = threadsCpuMs();
    const { perSecond, hashMs } = await floor.measure(seconds);
    const floorCpu = (threadsCpuMs() - floorCpuBefore) / (perSecond * seconds);
    console.log(
      `round ${round}: hasher ${(verified / elapsed).toFixed(2)}/s, ${hasherCpu.toFixed(1)} ms CPU a hash; floor ${perSecond.toFixed(2)}/s (${hashMs.toFixed(1)} ms a hash), ${floorCpu.toFixed(1)} ms CPU a hash; ${(verified / elapsed / perSecond).toFixed(2)}×`,
    );
  }
} finally {
  await hasher.close();
  await floor.close();
}
