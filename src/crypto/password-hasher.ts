import { createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/*
 * bcrypt runs in worker threads so a login never stalls the event loop for the ~250 ms a
 * cost-12 hash takes. The worker is an inline script that loads bcryptjs by absolute path,
 * so it works the same from the ESM build, the CJS build and tsx.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const bcrypt = require(workerData.bcryptPath);
parentPort.on('message', ({ id, op, password, hash, cost }) => {
  try {
    const result = op === 'hash' ? bcrypt.hashSync(password, cost) : bcrypt.compareSync(password, hash);
    parentPort.postMessage({ id, result });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.message || error) });
  }
});
`;

type Job =
  | { op: 'hash'; password: string; cost: number }
  | { op: 'compare'; password: string; hash: string };

interface PendingJob {
  job: Job;
  resolve: (value: unknown) => void;
  reject: (reason: Error) => void;
}

interface PoolWorker {
  worker: Worker;
  busy: PendingJob | undefined;
}

export interface PasswordHasherOptions {
  cost: number;
  /** HMAC key the password is pre-hashed with, so every byte past bcrypt's 72 counts. */
  pepper: Buffer;
  /** Default: one fewer than the cores, at least 1, at most 4. */
  threads?: number;
}

export class PasswordHasher {
  private readonly workers: PoolWorker[] = [];
  private readonly queue: PendingJob[] = [];
  private readonly bcryptPath = createRequire(import.meta.url).resolve('bcryptjs');
  private nextJobId = 0;
  private closed = false;
  private dummyHash: Promise<string> | undefined;

  constructor(private readonly options: PasswordHasherOptions) {}

  hash(password: string): Promise<string> {
    return this.run({ op: 'hash', password: this.prehash(password), cost: this.options.cost }) as Promise<string>;
  }

  verify(password: string, hash: string): Promise<boolean> {
    return this.run({ op: 'compare', password: this.prehash(password), hash }) as Promise<boolean>;
  }

  /**
   * Spends the time of a real comparison for an account that does not exist, is disabled or
   * is locked, so response time does not reveal which. The dummy is a real hash at the
   * configured cost: bcryptjs returns at once on a malformed hash.
   */
  async burnVerification(password: string): Promise<false> {
    this.dummyHash ??= this.hash('identity-router timing equaliser');
    await this.verify(password, await this.dummyHash);
    return false;
  }

  /** Warms the dummy hash so the first unknown-account login is not faster than the rest. */
  async warmUp(): Promise<void> {
    this.dummyHash ??= this.hash('identity-router timing equaliser');
    await this.dummyHash;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0)) pending.reject(new Error('Password hasher closed'));
    await Promise.all(this.workers.splice(0).map(({ worker }) => worker.terminate()));
  }

  private prehash(password: string): string {
    return createHmac('sha256', this.options.pepper).update(password, 'utf8').digest('base64');
  }

  private run(job: Job): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error('Password hasher closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const idle = this.workers.find((candidate) => !candidate.busy) ?? this.spawnIfRoom();
      if (!idle) return;
      const pending = this.queue.shift()!;
      idle.busy = pending;
      idle.worker.ref();
      idle.worker.postMessage({ id: ++this.nextJobId, ...pending.job });
    }
  }

  private spawnIfRoom(): PoolWorker | undefined {
    const limit = this.options.threads ?? Math.min(4, Math.max(1, availableParallelism() - 1));
    if (this.workers.length >= limit) return undefined;
    const poolWorker: PoolWorker = {
      worker: new Worker(WORKER_SOURCE, { eval: true, workerData: { bcryptPath: this.bcryptPath } }),
      busy: undefined,
    };
    poolWorker.worker.on('message', (message: { result?: unknown; error?: string }) => {
      const pending = poolWorker.busy;
      poolWorker.busy = undefined;
      poolWorker.worker.unref();
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
    poolWorker.busy?.reject(error);
    poolWorker.busy = undefined;
    if (!this.closed) this.dispatch();
  }
}
