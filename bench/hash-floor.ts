import { createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import bcrypt from 'bcryptjs';
import { BCRYPT_COST, PASSWORD } from './hot-path-shared.js';

/**
 * The hash-bound login rate, measured here: one plain thread per core, each comparing a
 * pre-hashed password against a cost-10 bcrypt hash, all at once. This is cores ÷ (time of one
 * hash) as the machine delivers it at that moment, other load included.
 *
 * The threads start once and hash for a second before the first slice, so a slice measures
 * hashing, not threads starting and bcryptjs being compiled: when every slice started its own,
 * a thread took 54 to 83 ms to start and its first hash 26 to 50 ms more than the next ones,
 * about 3% of a 3.3 s slice. Each thread's rate is the hashes it finished over the time they
 * took, from the slice's start to its last hash's end: no hash is cut in two at either end.
 */
export class HashFloor {
  private constructor(private readonly workers: Worker[]) {}

  static async start(cores: number): Promise<HashFloor> {
    const prehashed = createHmac('sha256', 'pepper').update(PASSWORD).digest('base64');
    const hash = bcrypt.hashSync(prehashed, BCRYPT_COST);
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { performance } = require('node:perf_hooks');
      const bcrypt = require(workerData.bcryptPath);
      parentPort.on('message', (ms) => {
        const started = performance.now();
        let ended = started;
        let count = 0;
        while (ended - started < ms) {
          bcrypt.compareSync(workerData.prehashed, workerData.hash);
          count += 1;
          ended = performance.now();
        }
        parentPort.postMessage({ count, elapsedMs: ended - started });
      });
    `;
    const bcryptPath = createRequire(import.meta.url).resolve('bcryptjs');
    const floor = new HashFloor(Array.from({ length: cores }, () => new Worker(source, { eval: true, workerData: { bcryptPath, prehashed, hash } })));
    await floor.measure(1);
    return floor;
  }

  async measure(seconds: number): Promise<{ hashMs: number; perSecond: number }> {
    const rates = await Promise.all(
      this.workers.map(
        (worker) =>
          new Promise<number>((resolve, reject) => {
            worker.once('message', ({ count, elapsedMs }: { count: number; elapsedMs: number }) => {
              worker.off('error', reject);
              resolve(count / (elapsedMs / 1000));
            });
            worker.once('error', reject);
            worker.postMessage(seconds * 1000);
          }),
      ),
    );
    const perSecond = rates.reduce((sum, rate) => sum + rate, 0);
    return { hashMs: (this.workers.length * 1000) / perSecond, perSecond };
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.terminate()));
  }
}
