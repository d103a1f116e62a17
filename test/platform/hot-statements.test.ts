import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import express from 'express';
import { createIdentityRouter } from '../../src/index.js';
import { Harness, STRONG_PASSWORD, TEST_DB } from '../helpers/harness.js';

// Issue 11: the hot path's statements are prepared once per connection (named statements on
// PostgreSQL). During a rolling upgrade a newer instance may migrate the shared database
// while older ones keep serving: a column it adds must not break their prepared statements,
// which PostgreSQL refuses to run once their result columns change ("cached plan must not
// change result type"). Hot statements therefore name their columns.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('columns added under a running instance leave its login, refresh and member page working', async () => {
  const user = await h.signUp();
  const login = () => h.post('/auth/login', { email: user.email, password: user.password });
  // Sequential requests reuse the pool's connection, so these statements are prepared on it.
  for (let attempt = 0; attempt < 3; attempt += 1) assert.equal((await login()).status, 200);
  const organization = (await h.post('/orgs', { name: 'Rolling' }, { token: user.accessToken })).body.data;
  const scoped = (await h.post('/auth/switch-org', { organization_id: organization.id }, { token: user.accessToken })).body.data;
  assert.equal((await h.get(`/orgs/${organization.id}/members`, { token: scoped.access_token })).status, 200);

  for (const table of ['users', 'sessions', 'mfa_factors', 'memberships', 'refresh_tokens']) {
    await h.knex.schema.alterTable(`${h.tablePrefix}${table}`, (columns) => {
      columns.text('added_by_a_newer_version');
    });
  }

  const again = await login();
  assert.equal(again.status, 200, again.text);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: again.body.data.refresh_token });
  assert.equal(refreshed.status, 200, refreshed.text);
  const members = await h.get(`/orgs/${organization.id}/members`, { token: scoped.access_token });
  assert.equal(members.status, 200, members.text);
  assert.equal(members.body.data.length, 1);
});

// Knex writes a LIMIT as a placeholder, and the SQLite that better-sqlite3 builds compiles a
// statement with a bound LIMIT again on every run (docs/performance.md). On a SQLite file it
// opens itself, the router runs such a statement with the value written into its text.
test(
  'on its own SQLite file, a statement whose LIMIT is a placeholder runs with the value written in, and each page size is honoured',
  { skip: TEST_DB === 'pg' && 'the router opens SQLite connections of its own only on SQLite; the SQLite run covers it' },
  async () => {
    const texts: string[] = [];
    const nativePrepare = Database.prototype.prepare;
    Database.prototype.prepare = function (this: Database.Database, sql: string) {
      texts.push(sql);
      return nativePrepare.call(this, sql);
    } as typeof nativePrepare;
    const dir = mkdtempSync(join(tmpdir(), 'identity-limit-'));
    const identity = createIdentityRouter(
      {
        database: { client: 'better-sqlite3', connection: { filename: join(dir, 'db.sqlite') }, useNullAsDefault: true },
        secret: 'limit-test-secret-that-is-at-least-32-chars',
        issuer: 'https://id.example.test',
        password: { bcryptCost: 4 },
        auth: { rateLimits: false },
      },
      { logger: { debug() {}, info() {}, warn() {}, error() {} } },
    );
    const app = express();
    app.use('/identity', identity);
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/identity`;
    const call = async (method: string, path: string, body?: unknown, token?: string) => {
      const response = await fetch(`${base}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      return { status: response.status, body: (await response.json()) as any };
    };
    try {
      const credentials = { email: 'limits@example.test', password: STRONG_PASSWORD };
      assert.equal((await call('POST', '/auth/register', credentials)).status, 202);
      let signedIn: any;
      for (let session = 0; session < 4; session += 1) {
        signedIn = await call('POST', '/auth/login', credentials);
        assert.equal(signedIn.status, 200);
      }
      const refreshed = await call('POST', '/auth/token/refresh', { refresh_token: signedIn.body.data.refresh_token });
      assert.equal(refreshed.status, 200);
      for (const limit of [1, 2, 3, 4, 5]) {
        const page = await call('GET', `/auth/sessions?limit=${limit}`, undefined, refreshed.body.data.access_token);
        assert.equal(page.status, 200);
        assert.equal(page.body.data.sessions.length, Math.min(limit, 4), `a page of ${limit}`);
      }
      const boundLimits = new Set(texts.filter((sql) => / limit \?$/.test(sql)));
      const ran = texts.filter((sql) => / limit \d+$/.test(sql));
      assert.ok(ran.some((sql) => / limit 6$/.test(sql)), 'the page of 5 asks SQLite for 6 rows, with the value in the text');
      for (const sql of boundLimits) assert.ok(ran.some((written) => written.startsWith(sql.slice(0, -1))), `ran with its limit written in: ${sql}`);
    } finally {
      Database.prototype.prepare = nativePrepare;
      await new Promise((resolve) => server.close(resolve));
      await identity.close();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
