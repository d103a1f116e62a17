import { readFileSync } from 'node:fs';

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
