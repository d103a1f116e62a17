/**
 * The package's public surface, held to lists written here (docs/getting-started.md). A name
 * that appears in `index.ts` or on `identity.service` without being added to these lists is
 * a widening of the surface hosts depend on, and fails here first.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { after, before, test } from 'node:test';
import * as entry from '../../src/index.js';
import { Harness } from '../helpers/harness.js';

/** The runtime names `identity-router` exports. Types are erased; `IdentityService` and the config types travel as types only. */
const EXPORTED_VALUES = [
  'CORE_PERMISSIONS',
  'EVENT_TYPES',
  'IdentityConfigError',
  'IdentityError',
  'consoleLogger',
  'createDevMailer',
  'createDevSmsSender',
  'createIdentityRouter',
  'createNodemailerMailer',
  'migrateIdentityDatabase',
  'noopSender',
  'renderMail',
  'renderSms',
];

/** `identity.service`: the spec's domain operations, the privilege changes, key rotation, event delivery and close. */
const SERVICE_MEMBERS = [
  'accounts',
  'apiKeys',
  'close',
  'deliverDueEvents',
  'grantSuperadmin',
  'invites',
  'me',
  'members',
  'mfa',
  'organizations',
  'passkeys',
  'passwordless',
  'revokeSuperadmin',
  'roles',
  'rotateSigningKey',
  'sessions',
  'setMfaEnforced',
  'social',
  'sso',
  'users',
  'webhooks',
];

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(() => h.close());

test('the package entry exports exactly the documented values', () => {
  assert.deepEqual(Object.keys(entry).sort(), EXPORTED_VALUES);
});

test('identity.service carries the documented operations and none of the internals', () => {
  const service = h.identity.service as unknown as Record<string, unknown>;
  assert.deepEqual(Object.keys(service).sort(), SERVICE_MEMBERS);
  for (const internal of ['context', 'store', 'keys', 'hasher', 'policy', 'keyRing', 'catalog', 'flows', 'signInRules', 'initialise', 'exchange']) {
    assert.equal(service[internal], undefined, `identity.service.${internal} is not public`);
  }
  assert.ok(Object.isFrozen(service), 'a host cannot swap an operation out');
});

test('identity.service works without HTTP: a superadmin grant made through it shows on GET /auth/me', async () => {
  const user = await h.signUp();
  await h.identity.service.grantSuperadmin(user.userId);
  const me = await h.get('/auth/me', { token: user.accessToken });
  assert.equal(me.status, 200);
  assert.ok(me.body.data.roles.includes('superadmin'));
});

test('createIdentityRouter returns an express.Router, which answers under any mount path (CONTRACT 1)', async () => {
  assert.ok(h.identity instanceof (express.Router as unknown as new () => object), 'identity is an express.Router');
  assert.equal(typeof h.identity.use, 'function');
  // The same router mounted again, deeper, in another app: its routes, 404 and 405 are found relative to the mount.
  const app = express();
  app.use('/tenants/:tenant/auth-service', h.identity);
  const server = await new Promise<ReturnType<typeof app.listen>>((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  try {
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/tenants/acme/auth-service`;
    const jwks = await fetch(`${base}/auth/.well-known/jwks.json`);
    assert.equal(jwks.status, 200);
    assert.ok(Array.isArray(((await jwks.json()) as { keys: unknown[] }).keys));
    const missing = await fetch(`${base}/no/such/route`);
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { error: string }).error, 'not_found');
    const wrongMethod = await fetch(`${base}/auth/me`, { method: 'DELETE' });
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.get('cache-control'), 'no-store');
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
