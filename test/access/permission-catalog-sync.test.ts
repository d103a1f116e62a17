import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import express from 'express';
import { Harness, TEST_DB, type HarnessOptions } from '../helpers/harness.js';
import { addMember, createOrg, roleIdOf, switchOrg } from '../helpers/orgs.js';

// docs/security.md: the owner and admin templates hold the host's permission keys, and hosts add
// keys as their product grows. Defect guarded against: a key added to `config.permissions`
// after organizations exist reached only organizations created afterwards, so the owner of an
// older organization got 403 on the host route a new organization's owner could use. Instances
// are started one after the other on one database, as a deploy does; on PostgreSQL each has a
// connection pool of its own, like another process.

const INVOICES = { key: 'invoices.read', description: 'Read invoices' };
const REPORTS = { key: 'reports.read', description: 'Read reports' };

const running: Harness[] = [];
after(async () => {
  // The first harness owns the database: close the others before it.
  for (const harness of running.reverse()) await harness.close();
});

async function instance(permissions: Array<{ key: string; description: string }>, shareDatabaseWith?: Harness): Promise<Harness> {
  const options: HarnessOptions = { config: { permissions }, ...(shareDatabaseWith ? { shareDatabaseWith, ownConnection: true } : {}) };
  const harness = await Harness.start(options);
  running.push(harness);
  return harness;
}

/** A host route guarded by `requirePermission(key)` of one instance; answers the status. */
async function guardedStatus(h: Harness, key: string, token: string): Promise<number> {
  const app = express();
  app.get('/guarded', h.identity.requirePermission(key), (_req, res) => void res.json({ ok: true }));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/guarded`, { headers: { authorization: `Bearer ${token}` } });
    return response.status;
  } finally {
    server.close();
  }
}

async function roleKeys(h: Harness, orgId: string, token: string): Promise<Record<string, string[]>> {
  const roles = await h.get(`/orgs/${orgId}/roles`, { token });
  assert.equal(roles.status, 200, roles.text);
  return Object.fromEntries((roles.body.data as Array<{ slug: string; permission_keys: string[] }>).map((role) => [role.slug, role.permission_keys]));
}

test(`a host key added to the config reaches every organization's owner and admin, once (${TEST_DB})`, async () => {
  const first = await instance([INVOICES]);
  const older = await createOrg(first);
  const admin = await addMember(first, older, older.owner.token, ['admin']);
  const member = await addMember(first, older, older.owner.token, ['member']);
  // A custom role and a trimmed admin role are the organization's own choices.
  const custom = await first.post(`/orgs/${older.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['invoices.read'] }, { token: older.owner.token });
  assert.equal(custom.status, 201, custom.text);

  // The next deploy adds reports.read.
  const second = await instance([INVOICES, REPORTS], first);
  assert.equal(await guardedStatus(second, 'reports.read', older.owner.token), 200, 'the older organization\'s owner holds the new key');
  assert.equal(await guardedStatus(second, 'reports.read', admin.token), 200, 'its admin too');
  assert.equal(await guardedStatus(second, 'reports.read', member.token), 403, 'a member does not');
  const newer = await createOrg(second);
  assert.equal(await guardedStatus(second, 'reports.read', newer.owner.token), 200, 'a new organization\'s owner holds it');
  // The first instance still runs the old configuration: an organization it creates now clones the database's catalog.
  const fromOldInstance = await createOrg(first);
  assert.equal(await guardedStatus(second, 'reports.read', fromOldInstance.owner.token), 200, 'an organization created by an instance on the old config holds it');

  let keys = await roleKeys(second, older.id, older.owner.token);
  assert.equal(keys.owner!.filter((key) => key === 'reports.read').length, 1);
  assert.ok(keys.admin!.includes('reports.read'));
  assert.ok(!keys.member!.includes('reports.read'));
  assert.deepEqual(keys.auditor, ['invoices.read'], 'custom roles are not given host keys');

  // The organization takes reports.read away from its admins; a restart on the same config does not give it back.
  const adminRoleId = await roleIdOf(second, older.id, older.owner.token, 'admin');
  const trimmed = await second.patch(`/orgs/${older.id}/roles/${adminRoleId}`, { permission_keys: keys.admin!.filter((key) => key !== 'reports.read') }, { token: older.owner.token });
  assert.equal(trimmed.status, 200, trimmed.text);
  const third = await instance([INVOICES, REPORTS], first);
  keys = await roleKeys(third, older.id, older.owner.token);
  assert.ok(!keys.admin!.includes('reports.read'), 'a synchronised key is granted once, not at every start-up');
  assert.equal(await guardedStatus(third, 'reports.read', admin.token), 403);
  assert.equal(await guardedStatus(third, 'reports.read', older.owner.token), 200);
});

test(`a host key removed from the config leaves the catalog and the system roles, and stays in custom roles (${TEST_DB})`, async () => {
  const first = await instance([INVOICES, REPORTS]);
  const org = await createOrg(first);
  const custom = await first.post(`/orgs/${org.id}/roles`, { name: 'Reporter', slug: 'reporter', permission_keys: ['reports.read', 'org.read'] }, { token: org.owner.token });
  assert.equal(custom.status, 201, custom.text);

  const second = await instance([INVOICES], first);
  assert.throws(() => second.identity.requirePermission('reports.read'), /not in the permission catalog/);
  const catalog = await second.get('/permissions', { token: org.owner.token });
  assert.equal(catalog.status, 200, catalog.text);
  assert.ok(!(catalog.body.data as Array<{ key: string }>).some((entry) => entry.key === 'reports.read'), 'the catalog no longer lists it');
  const keys = await roleKeys(second, org.id, org.owner.token);
  assert.ok(!keys.owner!.includes('reports.read') && !keys.admin!.includes('reports.read'), 'the system roles lose it');
  assert.ok(keys.owner!.includes('invoices.read'), 'the other host key stays');
  assert.deepEqual(keys.reporter, ['org.read', 'reports.read'], 'custom roles keep it (docs/organizations.md)');
  assert.equal(await guardedStatus(second, 'invoices.read', org.owner.token), 200);

  // Added back later, it is granted again to the owner and admin roles.
  const third = await instance([INVOICES, REPORTS], first);
  assert.equal(await guardedStatus(third, 'reports.read', org.owner.token), 200);
});

test(`instances started together with a new key grant it once and all become ready (${TEST_DB})`, async () => {
  const first = await instance([]);
  const org = await createOrg(first);
  await Promise.all([instance([INVOICES], first), instance([INVOICES], first), instance([INVOICES], first)]);
  const keys = await roleKeys(first, org.id, org.owner.token);
  assert.equal(keys.owner!.filter((key) => key === 'invoices.read').length, 1);
  assert.equal(keys.admin!.filter((key) => key === 'invoices.read').length, 1);
  const token = await switchOrg(first, org.owner.accessToken, org.id);
  assert.equal(await guardedStatus(running.at(-1)!, 'invoices.read', token), 200);
});
