import { createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { type EventLoopUtilization, performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';

export type PasswordAlgorithm = 'bcrypt' | 'argon2id';

export interface Argon2Parameters {
  /** KiB of memory per hash */
  memoryCost: number;
  /** passes */
  timeCost: number;
  parallelism: number;
}

/*
 * Hashing runs in worker threads so a login never stalls the event loop for the tens of
 * milliseconds a hash takes. The pool has one thread per core: a login storm then uses the
 * whole machine. Each worker lowers its own scheduling priority (Linux threads have their
 * own nice value), so request handling on the main thread wins the CPU whenever both want
 * it and the hashes take what is left: under a storm, cheap routes keep their latency.
 *
 * The worker is an inline script that loads its libraries by absolute path, so it works the
 * same from the ESM build, the CJS build and tsx. `@node-rs/argon2` is loaded only by a job
 * that needs it.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
try {
  const tid = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
  if (Number.isInteger(tid) && tid > 0) require('node:os').setPriority(tid, workerData.nice);
} catch {}
const bcrypt = require(workerData.bcryptPath);
let argon2;
const loadArgon2 = () => (argon2 ??= require(workerData.argon2Path));
parentPort.on('message', ({ id, op, password, hash, cost, argon2: parameters }) => {
  try {
    let result;
    if (op === 'hash-bcrypt') result = bcrypt.hashSync(password, cost);
    else if (op === 'hash-argon2id') result = loadArgon2().hashSync(password, { ...parameters, algorithm: 2 });
    else if (hash.startsWith('$argon2')) result = loadArgon2().verifySync(hash, password);
    else result = bcrypt.compareSync(password, hash);
    parentPort.postMessage({ id, result });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.message || error) });
  }
});
`;

/** While the event loop was busier than this over the last interval, one core is left to it. */
const BUSY_EVENT_LOOP = 0.5;
const EVENT_LOOP_SAMPLE_MS = 100;
/** Jobs a worker holds at once: the one it hashes and the next. */
const PIPELINE_DEPTH = 2;

/**
 * Niceness of the hashing threads: the event loop wins about nine tenths of a contested core
 * (CFS weights 1024 against 110), and logins still progress under heavy reads. At 5 (three
 * quarters) the bench's /auth/me p99 under a login storm came out at 1.83x to 2.17x its idle
 * p99; at 10, 1.50x to 1.67x, with 15 to 16 logins/s during the storm instead of 18 to 19.
 */
const WORKER_NICE = 10;

type Job =
  | { op: 'hash-bcrypt'; password: string; cost: number }
  | { op: 'hash-argon2id'; password: string; argon2: Argon2Parameters }
  | { op: 'compare'; password: string; hash: string };

interface PendingJob {
  job: Job;
  resolve: (value: unknown) => void;
  reject: (reason: Error) => void;
  /** Stops listening for the caller's abandonment once the job has left the queue. */
  detach?: () => void;
}

interface PoolWorker {
  worker: Worker;
  /** Sent to the worker and not yet answered, oldest first (the worker answers in order). */
  jobs: PendingJob[];
}

export interface PasswordHasherOptions {
  /** What new hashes are made with. Default bcrypt. Hashes of either kind always verify. */
  algorithm?: PasswordAlgorithm;
  /** bcrypt cost of new bcrypt hashes. */
  cost: number;
  /** Parameters of new argon2id hashes. */
  argon2?: Argon2Parameters;
  /** HMAC key the password is pre-hashed with, so every byte past bcrypt's 72 counts. */
  pepper: Buffer;
  /** Worker threads. Default: the cores (`os.availableParallelism()`). */
  threads?: number;
}

/** OWASP's argon2id baseline (19 MiB, 2 passes, 1 lane), also @node-rs/argon2's default. */
export const DEFAULT_ARGON2: Argon2Parameters = { memoryCost: 19_456, timeCost: 2, parallelism: 1 };

const BCRYPT_HASH = /^\$2[abxy]\$(\d{2})\$/;
const ARGON2ID_HASH = /^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$/;

/**
 * The one form a password is judged and hashed in (docs/security.md "Passwords"): Unicode NFC,
 * so the same password typed on a keyboard that sends accented letters decomposed (NFD) is the
 * same password (NIST SP 800-63B 5.1.1.2).
 */
export function canonicalPassword(password: string): string {
  return password.normalize('NFC');
}

export class PasswordHasher {
  private readonly workers: PoolWorker[] = [];
  private readonly queue: PendingJob[] = [];
  private readonly require = createRequire(import.meta.url);
  private readonly bcryptPath = this.require.resolve('bcryptjs');
  private argon2Path: string | undefined;
  private readonly algorithm: PasswordAlgorithm;
  private readonly argon2: Argon2Parameters;
  private readonly threads: number;
  private nextJobId = 0;
  private closed = false;
  private eventLoopSample: EventLoopUtilization = performance.eventLoopUtilization();
  private eventLoopSampledAt = 0;
  private eventLoopBusy = false;
  private dummyHash: Promise<string> | undefined;

  constructor(private readonly options: PasswordHasherOptions) {
    this.algorithm = options.algorithm ?? 'bcrypt';
    this.argon2 = options.argon2 ?? DEFAULT_ARGON2;
    this.threads = options.threads ?? Math.max(1, availableParallelism());
  }

  /** Worker threads the pool grows to. */
  get poolSize(): number {
    return this.threads;
  }

  hash(password: string): Promise<string> {
    const prehashed = this.prehash(canonicalPassword(password));
    const job: Job = this.algorithm === 'argon2id'
      ? { op: 'hash-argon2id', password: prehashed, argon2: this.argon2 }
      : { op: 'hash-bcrypt', password: prehashed, cost: this.options.cost };
    return this.run(job) as Promise<string>;
  }

  /**
   * Verifies against a bcrypt or an argon2id hash, whatever the configured algorithm.
   *
   * `abandoned` is the caller giving up (its client went away). A comparison still waiting
   * for a thread is dropped then and rejects with the signal's reason: under a login storm
   * clients that time out would otherwise keep the pool busy with answers nobody reads. A
   * comparison a thread has taken always runs to its end and resolves as usual.
   */
  async verify(password: string, hash: string, abandoned?: AbortSignal): Promise<boolean> {
    const canonical = canonicalPassword(password);
    if (await this.run({ op: 'compare', password: this.prehash(canonical), hash }, abandoned)) return true;
    // A hash made before passwords were normalised holds the password as it was typed then.
    // Not abandonable: a guess whose first form was compared is answered in full.
    return canonical !== password && ((await this.run({ op: 'compare', password: this.prehash(password), hash })) as boolean);
  }

  /** Whether a stored hash differs from what `hash` would make now (algorithm, cost or parameters). */
  needsRehash(hash: string): boolean {
    if (this.algorithm === 'bcrypt') {
      const match = BCRYPT_HASH.exec(hash);
      return !match || Number(match[1]) !== this.options.cost;
    }
    const match = ARGON2ID_HASH.exec(hash);
    return !match || Number(match[1]) !== this.argon2.memoryCost || Number(match[2]) !== this.argon2.timeCost || Number(match[3]) !== this.argon2.parallelism;
  }

  /**
   * Spends the time of a real comparison for an account that does not exist, is disabled or
   * is locked, so response time does not reveal which. The dummy is a real hash at the
   * configured algorithm and cost: bcryptjs returns at once on a malformed hash.
   */
  async burnVerification(password: string, abandoned?: AbortSignal): Promise<false> {
    this.dummyHash ??= this.hash('identity-router timing equaliser');
    await this.verify(password, await this.dummyHash, abandoned);
    return false;
  }

  /** Warms the dummy hash so the first unknown-account login is not faster than the rest. */
  async warmUp(): Promise<void> {
    this.dummyHash ??= this.hash('identity-router timing equaliser');
    await this.dummyHash;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0)) {
      pending.detach?.();
      pending.reject(new Error('Password hasher closed'));
    }
    await Promise.all(this.workers.splice(0).map(({ worker }) => worker.terminate()));
  }

  private prehash(password: string): string {
    return createHmac('sha256', this.options.pepper).update(password, 'utf8').digest('base64');
  }

  private run(job: Job, abandoned?: AbortSignal): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error('Password hasher closed'));
    if (abandoned?.aborted) return Promise.reject(abandoned.reason);
    return new Promise((resolve, reject) => {
      const pending: PendingJob = { job, resolve, reject };
      if (abandoned) {
        const drop = () => {
          const index = this.queue.indexOf(pending);
          if (index < 0) return;
          this.queue.splice(index, 1);
          reject(abandoned.reason);
        };
        abandoned.addEventListener('abort', drop, { once: true });
        pending.detach = () => abandoned.removeEventListener('abort', drop);
      }
      this.queue.push(pending);
      this.dispatch();
    });
  }

  /**
   * Hashes run at once: the pool size, less one while the event loop is busy, so that under
   * a login storm request handling keeps a core and its latency.
   */
  private concurrency(): number {
    const now = performance.now();
    if (now - this.eventLoopSampledAt >= EVENT_LOOP_SAMPLE_MS) {
      const current = performance.eventLoopUtilization();
      this.eventLoopBusy = performance.eventLoopUtilization(current, this.eventLoopSample).utilization > BUSY_EVENT_LOOP;
      this.eventLoopSample = current;
      this.eventLoopSampledAt = now;
    }
    return this.eventLoopBusy && this.threads > 1 ? this.threads - 1 : this.threads;
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const active = this.workers.filter((candidate) => candidate.jobs.length > 0);
      let target = active.length < this.concurrency() ? (this.workers.find((candidate) => candidate.jobs.length === 0) ?? this.spawnIfRoom()) : undefined;
      // A worker that is hashing gets its next job now, so it never waits on the event loop between two hashes.
      target ??= active.filter((candidate) => candidate.jobs.length < PIPELINE_DEPTH).sort((a, b) => a.jobs.length - b.jobs.length)[0];
      if (!target) return;
      const pending = this.queue.shift()!;
      pending.detach?.();
      target.jobs.push(pending);
      target.worker.ref();
      target.worker.postMessage({ id: ++this.nextJobId, ...pending.job });
    }
  }

  private spawnIfRoom(): PoolWorker | undefined {
    if (this.workers.length >= this.threads) return undefined;
    this.argon2Path ??= this.require.resolve('@node-rs/argon2');
    const poolWorker: PoolWorker = {
      worker: new Worker(WORKER_SOURCE, { eval: true, workerData: { bcryptPath: this.bcryptPath, argon2Path: this.argon2Path, nice: WORKER_NICE } }),
      jobs: [],
    };
    poolWorker.worker.on('message', (message: { result?: unknown; error?: string }) => {
      const pending = poolWorker.jobs.shift();
      if (poolWorker.jobs.length === 0) poolWorker.worker.unref();
      if (pending) {
        if (message.error !== undefined) pending.reject(new Error(message.error));
        else pending.resolve(message.result);
      }
      this.dispatch();
    });
    poolWorker.worker.on('error', (error) => this.retire(poolWorker, error));
    poolWorker.worker.on('exit', () => this.retire(poolWorker, new Error('Password worker exited')));
    this.workers.push(poolWorker);
    return poolWorker;
  }

  // A worker is referenced only while it has a job, so an idle pool never keeps the host process alive.
  private retire(poolWorker: PoolWorker, error: Error): void {
    const index = this.workers.indexOf(poolWorker);
    if (index >= 0) this.workers.splice(index, 1);
    for (const pending of poolWorker.jobs.splice(0)) pending.reject(error);
    if (!this.closed) this.dispatch();
  }
}
