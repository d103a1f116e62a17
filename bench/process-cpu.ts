import { readFileSync } from 'node:fs';
// autocannon ships no types.
// @ts-expect-error no declaration file
import autocannon from 'autocannon';

/**
 * utime + stime of a process in microseconds, from /proc (undefined elsewhere); with
 * `mainThreadOnly`, of its main thread (the event loop) alone.
 */
export function cpuMicros(pid: number | undefined, mainThreadOnly = false): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(mainThreadOnly ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    // Fields 14 and 15 of stat (utime, stime), counted after the command name; clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return undefined;
  }
}

/**
 * A load on a server of ours: 20 connections for `warmupSeconds`, a short pause, then
 * `seconds` measured. Its CPU per answered request (from /proc) and its rate; any answer that is
 * not 2xx throws.
 */
export async function underLoad(pid: number | undefined, request: object, { warmupSeconds, seconds }: { warmupSeconds: number; seconds: number }): Promise<{ cpuMicrosPerRequest: number; requestsPerSecond: number }> {
  await autocannon({ ...request, connections: 20, duration: warmupSeconds });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const before = cpuMicros(pid)!;
  const result = await autocannon({ ...request, connections: 20, duration: seconds });
  if (result.non2xx > 0) throw new Error(`${result.non2xx} answers were not 2xx`);
  return { cpuMicrosPerRequest: (cpuMicros(pid)! - before) / result['2xx'], requestsPerSecond: result.requests.average };
}

/** The middle value (the upper middle of an even count). */
export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/**
 * `take` for every name, `rounds` times, the order reversed every other round, so a change in
 * the machine's speed while they run favours none of them. Answers each round's figures by name.
 */
export async function inAlternatingOrder<K extends string, T>(rounds: number, names: readonly K[], take: (name: K, round: number) => Promise<T>): Promise<Array<Record<K, T>>> {
  const taken: Array<Record<K, T>> = [];
  for (let round = 1; round <= rounds; round += 1) {
    const figures = {} as Record<K, T>;
    for (const name of round % 2 === 1 ? names : [...names].reverse()) figures[name] = await take(name, round);
    taken.push(figures);
  }
  return taken;
}
