import { isDeadlock } from '../../src/database-errors.js';
import { Store } from '../../src/store/store.js';
import type { Harness } from './harness.js';

/**
 * Resolves once `request` has settled or PostgreSQL shows a transaction waiting on a lock,
 * whichever comes first. A second request started inside a first one's window must not simply
 * be awaited there: if it needs a row lock the first holds, it would wait on the test itself.
 */
async function untilWaitingOrSettled(h: Harness, request: Promise<unknown>): Promise<void> {
  let settled = false;
  request.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let turn = 0; turn < 5000 && !settled && !(await waitingOnALock(h)); turn += 1) await new Promise((resolve) => setImmediate(resolve));
}

/** Whether PostgreSQL shows a transaction waiting on a lock. */
export async function waitingOnALock(h: Harness): Promise<boolean> {
  return Number((await h.knex.raw('select count(*)::int as n from pg_locks where not granted')).rows[0].n) > 0;
}

type MethodOf<P> = { [K in keyof P]: P[K] extends (...args: any[]) => unknown ? K : never }[keyof P];
type ArgumentsOf<F> = F extends (...args: infer A) => unknown ? A : never;

/**
 * Runs `outer` with `prototype[method]` wrapped (several methods: one window shared by all): the
 * first call whose arguments `when` accepts starts `inner` inside the window (before the real call
 * with `at: 'before'`, after it by default), waiting only until `inner` settles or waits on a lock
 * (`untilWaitingOrSettled`). The methods are restored whatever happens; `inner`'s answer is awaited
 * after `outer`'s, and is undefined when the window was never reached.
 */
export async function withRequestInTheWindow<P extends object, K extends MethodOf<P>, O, I>(
  h: Harness,
  window: { prototype: P; method: K | readonly K[]; when?: (...args: ArgumentsOf<P[K]>) => boolean; at?: 'before' | 'after' },
  inner: () => Promise<I>,
  outer: () => Promise<O>,
): Promise<{ outer: O; inner: I | undefined }> {
  const { prototype, when = () => true, at = 'after' } = window;
  const methods: readonly K[] = Array.isArray(window.method) ? window.method : [window.method as K];
  const originals = methods.map((method) => prototype[method] as (...args: ArgumentsOf<P[K]>) => Promise<unknown>);
  let armed = true;
  let innerAnswer: Promise<I> | undefined;
  const inTheWindow = async (args: ArgumentsOf<P[K]>) => {
    if (armed && when(...args)) {
      armed = false;
      innerAnswer = inner();
      await untilWaitingOrSettled(h, innerAnswer);
    }
  };
  methods.forEach((method, index) => {
    const original = originals[index]!;
    prototype[method] = async function (this: P, ...args: ArgumentsOf<P[K]>) {
      if (at === 'before') await inTheWindow(args);
      const answer = await original.apply(this, args);
      if (at === 'after') await inTheWindow(args);
      return answer;
    } as P[K];
  });
  let answer: O;
  try {
    answer = await outer();
  } finally {
    methods.forEach((method, index) => {
      prototype[method] = originals[index] as P[K];
    });
  }
  return { outer: answer, inner: await innerAnswer };
}

/**
 * Runs `run` and answers how many transactions PostgreSQL rolled back meanwhile to break a
 * deadlock (40P01). Store.transaction runs such a one again, so the answers alone look serial;
 * the deadlock still cost PostgreSQL's deadlock_timeout. Every unit of work's 40P01 passes through
 * the `work` Store.transaction is given, in this process: unlike pg_stat_database's counter, the
 * count is neither delayed nor shared with the other test files using the database.
 */
export async function countingDeadlocks<T>(run: () => Promise<T>): Promise<{ answer: T; deadlocks: number }> {
  const original = Store.prototype.transaction;
  let deadlocks = 0;
  Store.prototype.transaction = function (this: Store, work: Parameters<Store['transaction']>[0]) {
    return original.call(this, async (repos, db) => {
      try {
        return await work(repos, db);
      } catch (error) {
        if (isDeadlock(error)) deadlocks += 1;
        throw error;
      }
    });
  } as Store['transaction'];
  try {
    return { answer: await run(), deadlocks };
  } finally {
    Store.prototype.transaction = original;
  }
}
