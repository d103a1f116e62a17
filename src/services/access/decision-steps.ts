/**
 * A decision written once and run as far as memory allows.
 *
 * The access policy's rules are generators that yield each read they need. A read the access
 * cache (or the JWT codec's remembered tokens) answers from memory is handed straight back, so a
 * request whose reads are all in memory is decided within its own event, with no promise and no
 * turn of the microtask queue; the first read that has to wait turns the rest of the decision
 * into a promise. Either way the same rules run in the same order: there is no second copy of
 * them to drift (docs/performance.md, the host route).
 */

/** A value now, or one to wait for. */
export type Answer<T> = T | Promise<T>;

/** The steps of a decision answering `T`: they yield reads and are resumed with their values. */
export type Steps<T> = Generator<unknown, T, unknown>;

/** One read of a decision, typed: `const value = yield* read(reads.something())`. */
export function* read<T>(answer: Answer<T>): Generator<unknown, T, unknown> {
  return (yield answer) as T;
}

/**
 * Runs the steps synchronously while each read is in memory. Answers the decision itself, or a
 * promise of it from the first read that must wait. A rule that refuses throws: synchronously
 * when it refuses before any wait, otherwise as the promise's rejection.
 */
export function decide<T>(steps: Steps<T>): Answer<T> {
  let step = steps.next();
  while (!step.done) {
    if (isWaiting(step.value)) return finishAfter(steps, step.value);
    step = steps.next(step.value);
  }
  return step.value;
}

async function finishAfter<T>(steps: Steps<T>, pending: PromiseLike<unknown>): Promise<T> {
  let step = await resume(steps, pending);
  while (!step.done) step = isWaiting(step.value) ? await resume(steps, step.value) : steps.next(step.value);
  return step.value;
}

/**
 * Whether a read has to be waited for: a promise, or any other thenable (a Knex query is one),
 * which must never be handed to the rules as if it were the value.
 */
function isWaiting(value: unknown): value is PromiseLike<unknown> {
  return value instanceof Promise || (typeof value === 'object' && value !== null && typeof (value as PromiseLike<unknown>).then === 'function');
}

/** A failed read is thrown into the steps at the point that asked for it, as `await` would. */
function resume<T>(steps: Steps<T>, pending: PromiseLike<unknown>): Promise<IteratorResult<unknown, T>> {
  return Promise.resolve(pending).then(
    (value) => steps.next(value),
    (error: unknown) => steps.throw(error),
  );
}

/** The steps as a promise, for callers that always wait. */
export async function decideLater<T>(steps: Steps<T>): Promise<T> {
  return decide(steps);
}
