/**
 * `work`, or a rejection with `message` once `ms` have passed without it settling: for a
 * dependency that may never answer (a host's adapter, a resolver, a store). The work itself is
 * not cancelled, only no longer waited for; the timer keeps no process alive.
 */
export function settleWithin<T>(work: Promise<T> | T, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
    timer.unref();
  });
  return Promise.race([Promise.resolve(work), expired]).finally(() => clearTimeout(timer));
}
