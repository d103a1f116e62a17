/**
 * Pages a refresh writes on SQLite, without a listener and with one:
 *
 *   npx tsx bench/wal-frames.ts [refreshes]
 *
 * A commit in WAL mode appends one frame (a 4 KiB page and its header) for every page it
 * changed, so the frames a refresh appends are the pages its commit writes: a count, not a
 * time, and the same on a busy machine as on a quiet one. The router runs in this process on
 * a SQLite file; a reader holds a snapshot open so no checkpoint rewinds the log while it is
 * counted; `refreshes` (default 400) refreshes run after 50 unmeasured: one after another, and
 * then as the bench's refresh row sends them, 20 in flight at once (20 sessions, each
 * refreshing its own token in turn), where SQLite's group commit (src/store/group-commit.ts)
 * writes the pages the refreshes of one commit share once.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import express from 'express';
import { createIdentityRouter } from '../src/index.js';
import { PASSWORD } from './hot-path-shared.js';

const REFRESHES = Number(process.argv[2] ?? 400);
const FRAME_BYTES = 4096 + 24;
const IN_FLIGHT = 20;

async function framesPerRefresh(withListener: boolean, inFlight: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-wal-frames-'));
  const file = join(dir, 'bench.sqlite');
  const mail: Array<{ context: Record<string, unknown> }> = [];
  const router = createIdentityRouter(
    { database: { client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true }, secret: 'bench-secret-that-is-at-least-32-characters', issuer: 'https://bench.example', password: { bcryptCost: 4 }, auth: { rateLimits: false } },
    {
      logger: { debug() {}, info() {}, warn() {}, error: (msg, meta) => console.error(msg, meta) },
      mailer: { send: async (message) => void mail.push(message) },
      sms: { send: async () => {} },
      ...(withListener ? { onEvent: () => {} } : {}),
    },
  );
  await router.ready;
  const server = express().use('/identity', router).listen(0, '127.0.0.1');
  try {
    await new Promise((resolve) => server.once('listening', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}/identity`;
    const post = async (path: string, body: unknown) => {
      const response = await fetch(origin + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
      return (await response.json()) as { data: { refresh_token: string } };
    };
    await post('/auth/register', { email: 'frames@bench.example', password: PASSWORD });
    await post('/auth/email/verify', { token: mail.at(-1)!.context.token });
    const tokens: string[] = [];
    for (let i = 0; i < inFlight; i += 1) tokens.push((await post('/auth/login', { email: 'frames@bench.example', password: PASSWORD })).data.refresh_token);
    const refresh = async (times: number) => {
      await Promise.all(
        tokens.map(async (_, chain) => {
          for (let i = chain; i < times; i += inFlight) tokens[chain] = (await post('/auth/token/refresh', { refresh_token: tokens[chain] })).data.refresh_token;
        }),
      );
      // The listener's deliveries are marked in batches every 20 ms: let the last one land.
      await new Promise((resolve) => setTimeout(resolve, 100));
    };
    await refresh(50);
    const reader = new Database(file, { readonly: true });
    try {
      reader.exec('BEGIN');
      reader.prepare('SELECT count(*) FROM identity_sessions').get();
      const before = statSync(`${file}-wal`).size;
      await refresh(REFRESHES);
      return (statSync(`${file}-wal`).size - before) / FRAME_BYTES / REFRESHES;
    } finally {
      reader.close();
    }
  } finally {
    server.close();
    await router.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: string[] = [];
for (const inFlight of [1, IN_FLIGHT]) {
  const without = await framesPerRefresh(false, inFlight);
  const withListener = await framesPerRefresh(true, inFlight);
  rows.push(`${inFlight === 1 ? 'one at a time' : `${inFlight} in flight`}: ${without.toFixed(2)} without a listener, ${withListener.toFixed(2)} with one (+${(withListener - without).toFixed(2)})`);
}
console.log(`WAL frames (pages written) per refresh, ${REFRESHES} refreshes:\n  ${rows.join('\n  ')}`);
