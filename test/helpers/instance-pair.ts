import assert from 'node:assert/strict';
import express from 'express';
import { Harness } from './harness.js';
import { listening } from './host-app.js';

/*
 * Two routers on one database, for the revocation guarantees of CONTRACT 7
 * (docs/multiple-instances.md). B has, on PostgreSQL, a connection pool and a listening
 * connection of its own, as another process would have, so only a notification can tell it;
 * on SQLite (one process by nature) it shares A's database handle.
 *
 * The contract allows another instance 1 s, which the cache expiry alone would meet. Half of it
 * proves the notification: each revocation follows its warm-up by far less than the expiry.
 */
export const CROSS_INSTANCE_DEADLINE_MS = 500;
export const HOST_PERMISSION = 'reports.read';

export interface Instance {
  h: Harness;
  /** GET on a host route behind requirePermission(reports.read), API keys accepted. */
  host(credential: string): Promise<number>;
  /** GET on a host route behind authenticate(). */
  whoami(credential: string): Promise<number>;
  close(): Promise<void>;
}

export type Probe<T = number> = (on: Instance) => Promise<T>;

async function listen(h: Harness): Promise<Instance> {
  const app = express();
  app.get('/reports', h.identity.requirePermission(HOST_PERMISSION, { apiKeys: true }), (_req, res) => {
    res.json({ reports: [] });
  });
  app.get('/whoami', h.identity.authenticate(), (req, res) => {
    res.json({ caller: h.identity.caller(req) });
  });
  const { base, close } = await listening(app);
  const status = async (path: string, credential: string) => (await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${credential}` } })).status;
  return {
    h,
    host: (credential) => status('/reports', credential),
    whoami: (credential) => status('/whoami', credential),
    close,
  };
}

export class InstancePair {
  private constructor(
    readonly a: Instance,
    readonly b: Instance,
  ) {}

  static async start(): Promise<InstancePair> {
    const config = { permissions: [{ key: HOST_PERMISSION, description: 'Read reports' }] };
    const first = await Harness.start({ config });
    const a = await listen(first);
    const b = await listen(await Harness.start({ config, shareDatabaseWith: first, ownConnection: true }));
    return new InstancePair(a, b);
  }

  async close(): Promise<void> {
    await this.b.close();
    await this.b.h.close();
    await this.a.close();
    await this.a.h.close();
  }

  /** Asks B until it answers `expected` (compared as JSON) or the deadline passes; its last answer. */
  async onOtherInstance<T>(probe: Probe<T>, expected: T, deadline = CROSS_INSTANCE_DEADLINE_MS): Promise<T> {
    const started = performance.now();
    let answer = await probe(this.b);
    while (JSON.stringify(answer) !== JSON.stringify(expected) && performance.now() - started < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      answer = await probe(this.b);
    }
    return answer;
  }

  /** Warms both instances' caches (the probe answers `allowed` twice), revokes on A, then checks A at once and B within the deadline. */
  async assertRevokedEverywhere(probe: Probe, revoke: () => Promise<void>, refused: number, allowed = 200): Promise<void> {
    for (const on of [this.a, this.b]) {
      assert.equal(await probe(on), allowed, 'before the revocation');
      assert.equal(await probe(on), allowed, 'before the revocation, from the cache');
    }
    await revoke();
    assert.equal(await probe(this.a), refused, 'on the instance that revoked, at once');
    assert.equal(await this.onOtherInstance(probe, refused), refused, `on another instance within ${CROSS_INSTANCE_DEADLINE_MS} ms`);
  }
}
