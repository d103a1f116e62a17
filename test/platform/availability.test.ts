/*
 * Threat: a database outage turns into hung requests (exhausting the host's sockets) or
 * into 500s that leak driver messages. docs/getting-started.md: 503 {"error":"unavailable"} within 5 s,
 * never a hang, and recovery without a restart once the database is back.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import express from 'express';
import { createIdentityRouter, type IdentityRouter } from '../../src/index.js';
import { PG_URL, TEST_DB } from '../helpers/harness.js';

const quietLogger = { debug() {}, info() {}, warn() {}, error() {} };
const baseConfig = {
  secret: 'availability-secret-that-is-at-least-32-chars',
  issuer: 'https://id.example.test',
  password: { bcryptCost: 4 },
  auth: { rateLimits: false as const },
};

async function listen(identity: IdentityRouter): Promise<{ url: string; close: () => Promise<void> }> {
  const app = express();
  app.use('/identity', identity);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/identity`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

test('a database that cannot be opened answers 503 unavailable, not a hang or a 500', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'identity-unavailable-'));
  const identity = createIdentityRouter(
    { ...baseConfig, database: { client: 'better-sqlite3', connection: { filename: join(dir, 'missing-dir', 'db.sqlite') }, useNullAsDefault: true } },
    { logger: quietLogger },
  );
  await assert.rejects(identity.ready);
  const server = await listen(identity);
  try {
    const started = Date.now();
    const response = await fetch(`${server.url}/auth/.well-known/jwks.json`);
    assert.equal(response.status, 503);
    assert.deepEqual(await response.json(), { error: 'unavailable', message: 'The identity service is unavailable; try again shortly.' });
    assert.ok(Date.now() - started < 6000);
  } finally {
    await server.close();
    await identity.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A TCP relay in front of PostgreSQL that the test can cut and restore. */
class Relay {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;
  constructor(private readonly target: { host: string; port: number }) {}

  async start(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => socket.destroy());
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(this.port, '127.0.0.1', () => resolve()));
    this.port = (this.server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}

test(
  'PostgreSQL going away answers 503 within 5 s, and the router recovers when it returns',
  { skip: TEST_DB !== 'pg' && 'needs a PostgreSQL server to cut and restore' },
  async () => {
    const target = new URL(PG_URL!);
    const relay = new Relay({ host: target.hostname, port: Number(target.port || 5432) });
    await relay.start();
    const viaRelay = new URL(PG_URL!);
    viaRelay.port = String(relay.port);
    const tablePrefix = `avail${Date.now() % 100000}_`;
    const identity = createIdentityRouter({ ...baseConfig, tablePrefix, database: { client: 'pg', connection: viaRelay.toString(), pool: { min: 0, max: 4 } } }, { logger: quietLogger });
    await identity.ready;
    const server = await listen(identity);
    const register = () =>
      fetch(`${server.url}/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: `a${Math.random()}@example.com`, password: 'correct horse battery' }) });
    try {
      assert.equal((await register()).status, 202);

      await relay.stop();
      const started = Date.now();
      const during = await register();
      assert.equal(during.status, 503);
      assert.equal(((await during.json()) as { error: string }).error, 'unavailable');
      assert.ok(Date.now() - started < 6000, `took ${Date.now() - started} ms`);

      await relay.start();
      let recovered = 0;
      for (let attempt = 0; attempt < 20 && recovered !== 202; attempt += 1) {
        recovered = (await register()).status;
      }
      assert.equal(recovered, 202);
    } finally {
      await server.close();
      await identity.close();
      await relay.stop().catch(() => undefined);
    }
  },
);
