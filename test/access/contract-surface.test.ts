/*
 * docs/getting-started.md and docs/configuration.md points that hosts rely on: requests during start-up wait for it, the
 * rate-limit store factory is used per group, appName and links reach the mail context,
 * and a configured audience is stamped and enforced.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import express from 'express';
import { MemoryStore, type Store } from 'express-rate-limit';
import { createIdentityRouter, type MailMessage, type RateLimitGroup } from '../../src/index.js';
import { Harness, STRONG_PASSWORD, decodeJwt, uniqueEmail } from '../helpers/harness.js';

const quietLogger = { debug() {}, info() {}, warn() {}, error() {} };

test('a request that arrives before start-up has finished waits for it instead of failing', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'identity-early-'));
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: join(dir, 'db.sqlite') }, useNullAsDefault: true },
      secret: 'early-request-secret-that-is-32-characters',
      issuer: 'https://id.example.test',
    },
    { logger: quietLogger },
  );
  let settled = false;
  void identity.ready.then(() => (settled = true));
  const app = express();
  app.use('/identity', identity);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const pending = fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/identity/auth/.well-known/jwks.json`);
    // Migrations and the first RSA key take far longer than reaching this line.
    assert.equal(settled, false, 'the request went out before start-up finished');
    const response = await pending;
    assert.equal(response.status, 200);
    assert.equal(((await response.json()) as { keys: unknown[] }).keys.length, 2, 'the active and the next signing key');
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await identity.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('auth.rateLimitStore gives each group its own store from the factory', async () => {
  const requestedGroups: RateLimitGroup[] = [];
  const incrementedGroups: RateLimitGroup[] = [];
  const storeFor = (group: RateLimitGroup): Store => {
    requestedGroups.push(group);
    const memory = new MemoryStore();
    return {
      init: (options) => memory.init(options),
      get: (key) => memory.get(key),
      increment: (key) => {
        incrementedGroups.push(group);
        return memory.increment(key);
      },
      decrement: (key) => memory.decrement(key),
      resetKey: (key) => memory.resetKey(key),
    };
  };
  const h = await Harness.start({ rateLimits: true, config: { auth: { rateLimitStore: storeFor } } });
  try {
    assert.ok(requestedGroups.includes('login') && requestedGroups.includes('authenticated'));
    await h.post('/auth/login', { email: uniqueEmail(), password: STRONG_PASSWORD });
    assert.deepEqual(incrementedGroups, ['login']);
  } finally {
    await h.close();
  }
});

test('appName and links reach the mail context as app_name and url', async () => {
  const h = await Harness.start({
    config: {
      appName: 'Acme ID',
      links: { verifyEmail: 'https://app.example.test/verify?t={token}', resetPassword: 'https://app.example.test/reset/{token}' },
    },
  });
  try {
    const email = uniqueEmail();
    await h.post('/auth/register', { email, password: STRONG_PASSWORD });
    const verify = h.lastMail(email, 'verify_email') as MailMessage;
    assert.equal(verify.context.app_name, 'Acme ID');
    assert.equal(verify.context.url, `https://app.example.test/verify?t=${encodeURIComponent(String(verify.context.token))}`);
    await h.post('/auth/password/forgot', { email });
    const reset = h.lastMail(email, 'password_reset') as MailMessage;
    assert.equal(reset.context.url, `https://app.example.test/reset/${encodeURIComponent(String(reset.context.token))}`);
  } finally {
    await h.close();
  }
});

test('a configured audience is stamped as aud, and a token for another audience is refused', async () => {
  const api = await Harness.start({ config: { audience: 'https://api.example.test' } });
  // Same database and so the same signing keys: only the audience differs.
  const other = await Harness.start({ shareDatabaseWith: api, config: { audience: 'https://other.example.test' } });
  try {
    const user = await api.signUp();
    assert.equal(decodeJwt(user.accessToken).aud, 'https://api.example.test');
    assert.equal((await api.get('/auth/me', { token: user.accessToken })).status, 200);
    const refused = await other.get('/auth/me', { token: user.accessToken });
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error, 'unauthorized');
  } finally {
    await other.close();
    await api.close();
  }
});

test('privilege changes leave a trace: superadmin grant and revoke, and MFA enforcement (service and PATCH /users), each once, with an audit row', async () => {
  // Threat: a privilege change nobody can see afterwards (docs/database.md promises the audit trail).
  const h = await Harness.start();
  try {
    const user = await h.signUp(uniqueEmail('privileged'));
    const admin = await h.signUp(uniqueEmail('admin'));
    await h.identity.service.grantSuperadmin(admin.userId);
    await h.identity.service.grantSuperadmin(user.userId);
    await h.identity.service.grantSuperadmin(user.userId);
    await h.identity.service.revokeSuperadmin(user.userId);
    await h.identity.service.revokeSuperadmin(user.userId);
    await h.identity.service.setMfaEnforced(user.userId, true);
    await h.identity.service.setMfaEnforced(user.userId, true);
    const patched = await h.patch(`/users/${user.userId}`, { mfa_enforced: false }, { token: admin.accessToken });
    assert.equal(patched.status, 200, patched.text);

    const mine = (type: string) => h.events.filter((event) => event.type === type && event.user_id === user.userId);
    assert.equal(mine('user.superadmin_granted').length, 1, 'a grant already held emits nothing');
    assert.equal(mine('user.superadmin_revoked').length, 1, 'a revoke of nothing emits nothing');
    const enforcement = mine('user.mfa_enforcement_changed');
    assert.deepEqual(enforcement.map((event) => [event.actor_id, event.data.mfa_enforced]), [[null, true], [admin.userId, false]]);
    for (const event of [...mine('user.superadmin_granted'), ...mine('user.superadmin_revoked')]) assert.equal(event.actor_id, null);
    const audited = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: user.userId }).whereIn('type', ['user.superadmin_granted', 'user.superadmin_revoked', 'user.mfa_enforcement_changed']).count({ count: '*' }).first();
    assert.equal(Number(audited?.count), 4);
    await assert.rejects(h.identity.service.grantSuperadmin('00000000-0000-4000-8000-000000000000'), (error: { code?: string }) => error.code === 'not_found');
  } finally {
    await h.close();
  }
});

// A plain-JavaScript host mounting the factory itself (`identity.authenticate`, no call): Express
// calls it as a handler, and every such request used to hang, never reaching `next`.
test('authenticate and requirePermission mounted without their call answer at once with an error naming the fix', async () => {
  const h = await Harness.start();
  const app = express();
  const asHandler = (factory: unknown) => factory as express.RequestHandler;
  app.get('/authenticate', asHandler(h.identity.authenticate), (_req, res) => void res.json({ reached: true }));
  app.get('/permission', asHandler(h.identity.requirePermission), (_req, res) => void res.json({ reached: true }));
  app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => void res.status(500).json({ message: error.message }));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const user = await h.signUp();
    for (const [path, fix] of [['/authenticate', 'identity.authenticate()'], ['/permission', "identity.requirePermission('…')"]] as const) {
      const answer = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${user.accessToken}` }, signal: AbortSignal.timeout(5000) });
      assert.equal(answer.status, 500, path);
      assert.match(((await answer.json()) as { message: string }).message, new RegExp(`is a factory: mount ${fix.replace(/[()'.…]/g, '\\$&')}`), path);
    }
  } finally {
    server.close();
    await h.close();
  }
});
