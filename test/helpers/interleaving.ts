import type { Harness } from './harness.js';

/**
 * Interleavings on PostgreSQL: a test starts a second request inside the first one's window
 * (from a wrapped repository method) and must not simply await it there, since a second request
 * that needs a row lock the first holds would wait on the test itself. This resolves once
 * `request` has settled or PostgreSQL shows a transaction waiting on a lock, whichever comes
 * first; the first request then goes on, and the test awaits the second's answer after it.
 */
export async function untilWaitingOrSettled(h: Harness, request: Promise<unknown>): Promise<void> {
  let settled = false;
  request.then(
    () => (settled = true),
    () => (settled = true),
  );
  const waitingOnALock = async () => Number((await h.knex.raw('select count(*)::int as n from pg_locks where not granted')).rows[0].n) > 0;
  for (let turn = 0; turn < 5000 && !settled && !(await waitingOnALock()); turn += 1) await new Promise((resolve) => setImmediate(resolve));
}

/** `untilWaitingOrSettled` for a request started here: its answer, to await after the first request's. */
export async function startedInTheWindow<T>(h: Harness, request: () => Promise<T>): Promise<{ answer: Promise<T> }> {
  const answer = request();
  await untilWaitingOrSettled(h, answer);
  return { answer };
}
