import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import express from 'express';
import type { AddressInfo } from 'node:net';
import { Harness, decodeJwt } from '../helpers/harness.js';
import { addMember, createOrg, superadmin } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { permissions: [{ key: 'invoices.read', description: 'Read invoices' }] } });
});
after(async () => {
  await h.close();
});

test('GET /permissions: the core catalog of spec 2.13 plus host keys; bearer required', async () => {
  const user = await h.signUp();
  const response = await h.get('/permissions', { token: user.accessToken });
  assert.equal(response.status, 200);
  const keys = (response.body.data as any[]).map((entry) => entry.key);
  assert.deepEqual(keys, [
    'org.read', 'org.update', 'org.delete', 'members.read', 'members.invite', 'members.update', 'members.remove',
    'roles.read', 'roles.manage', 'users.read', 'users.manage', 'audit.read', 'webhooks.manage', 'invoices.read',
  ]);
  for (const entry of response.body.data) {
    assert.deepEqual(Object.keys(entry).sort(), ['description', 'key']);
    assert.ok(entry.description.length > 0);
  }
  const anonymous = await h.get('/permissions');
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.headers.get('www-authenticate'), 'Bearer');
});

test('host routes check their own keys with identity.requirePermission, resolved from the database', async () => {
  const app = express();
  app.get('/invoices', h.identity.requirePermission('invoices.read'), (_req, res) => {
    res.json({ data: ['inv-1'] });
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const billing = await h.post(`/orgs/${org.id}/roles`, { name: 'Billing', slug: 'billing', permission_keys: ['invoices.read'] }, { token: org.owner.token });
    assert.equal(billing.status, 201);
    const call = (token?: string) => fetch(`${base}/invoices`, { headers: token ? { authorization: `Bearer ${token}` } : {} });

    assert.equal((await call(org.owner.token)).status, 200);
    assert.ok(decodeJwt(org.owner.token).scope.includes('invoices.read'));
    assert.equal((await call(member.token)).status, 403);
    assert.equal((await call()).status, 401);
    assert.equal((await call(org.owner.accessToken)).status, 403, 'no active organization');

    // Granting and revoking take effect without a new token.
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'billing'] }, { token: org.owner.token })).status, 200);
    assert.equal((await call(member.token)).status, 200);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token })).status, 200);
    const refused = await call(member.token);
    assert.equal(refused.status, 403);
    assert.equal(((await refused.json()) as any).error, 'forbidden');
    assert.throws(() => h.identity.requirePermission('unknown.key'), /not in the permission catalog/);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('the superadmin role: full catalog everywhere, granted and revoked through the service API, one row', async () => {
  const org = await createOrg(h);
  const root = await superadmin(h);
  await h.identity.service.grantSuperadmin(root.userId); // idempotent
  const rows = await h.knex(`${h.tablePrefix}roles`).whereNull('organization_id');
  assert.equal(rows.length, 1);
  assert.equal(rows[0].slug, 'superadmin');
  assert.ok([true, 1].includes(rows[0].is_system));
  assert.equal(JSON.parse(rows[0].permission_keys).length, 14); // docs/database.md, webhooks.manage (docs/webhooks.md) and the host key

  const switched = await h.post('/auth/switch-org', { organization_id: org.id }, { token: root.accessToken });
  assert.equal(switched.status, 200, switched.text);
  const claims = decodeJwt(switched.body.data.access_token);
  assert.ok(claims.roles.includes('superadmin'));
  assert.ok(claims.scope.includes('users.manage') && claims.scope.includes('org.delete') && claims.scope.includes('invoices.read'));
  const me = await h.get('/auth/me', { token: switched.body.data.access_token });
  assert.ok(me.body.data.roles.includes('superadmin'));

  await h.identity.service.revokeSuperadmin(root.userId);
  assert.equal((await h.get(`/orgs/${org.id}`, { token: switched.body.data.access_token })).status, 403);
  await assert.rejects(h.identity.service.grantSuperadmin('00000000-0000-0000-0000-000000000000'), /not found/);
});

test('a second instance starting on the same database does not duplicate the superadmin role', async () => {
  const second = await Harness.start({ shareDatabaseWith: h, config: { permissions: [{ key: 'invoices.read', description: 'Read invoices' }] } });
  try {
    const rows = await h.knex(`${h.tablePrefix}roles`).whereNull('organization_id');
    assert.equal(rows.length, 1);
  } finally {
    await second.close();
  }
});
