import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { assertError, assertValidationErrors } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg, switchOrg } from '../helpers/orgs.js';
import { type RawResponse, rawRequest } from '../helpers/raw-request.js';
import { listening } from '../helpers/host-app.js';

/*
 * Audit of API keys (CONTRACT 10, docs/api-keys.md) and the host middleware (CONTRACT 6).
 * Threats: a key that keeps a permission its owner lost through the superadmin grant; a key
 * revoked through another organization's path; malformed key headers that answer 500 or leak;
 * answers that drift from the contract's shapes.
 */

const HOST_PERMISSIONS = [
  { key: 'invoices.read', description: 'Read invoices' },
  { key: 'invoices.write', description: 'Write invoices' },
];
const DAY = 24 * 3600;

let h: Harness;
let host: { base: string; close(): Promise<void> };

function hostRequest(path: string, headers: Record<string, string | string[]>): Promise<RawResponse> {
  return rawRequest(`${host.base}${path}`, headers);
}

async function createKey(orgId: string, token: string, body: Record<string, unknown>): Promise<{ id: string; key: string; body: any }> {
  const response = await h.post(`/orgs/${orgId}/api-keys`, body, { token });
  assert.equal(response.status, 201, response.text);
  return { id: response.body.data.id, key: response.body.data.key, body: response.body.data };
}

before(async () => {
  h = await Harness.start({ config: { permissions: HOST_PERMISSIONS } });
  const identity = h.identity;
  const app = express();
  app.get('/invoices', identity.requirePermission('invoices.read', { apiKeys: true }), (req, res) => void res.json({ data: identity.caller(req) }));
  app.post('/invoices', identity.requirePermission('invoices.write', { apiKeys: true }), (req, res) => void res.json({ data: identity.caller(req) }));
  app.get('/whoami', identity.authenticate({ apiKeys: true }), (req, res) => void res.json({ data: identity.caller(req) }));
  host = await listening(app);
});
after(async () => {
  await host.close();
  await h.close();
});

describe('live authority', () => {
  test('a key cut from a superadmin member\'s authority loses what the grant gave the moment it is revoked', async () => {
    const local = await createOrg(h);
    const member = await addMember(h, local, local.owner.token, ['member']);
    await h.identity.service.grantSuperadmin(member.userId);
    const { key } = await createKey(local.id, member.token, { name: 'root key', permission_keys: ['invoices.write', 'org.read'] });
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key, 'content-type': 'application/json' })).status, 403, 'invoices.read is not in the key');
    const write = await new Promise<number>((resolve, reject) => {
      const request = http.request(`${host.base}/invoices`, { method: 'POST', headers: { 'x-api-key': key } }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      request.on('error', reject);
      request.end();
    });
    assert.equal(write, 200, 'the superadmin grant holds invoices.write');
    await h.identity.service.revokeSuperadmin(member.userId);
    const whoami = await hostRequest('/whoami', { 'x-api-key': key });
    assert.equal(whoami.status, 200, whoami.text);
    assert.deepEqual(whoami.body.data.permissions, ['org.read'], 'only what the member role still gives');
  });

  test('suspending or disabling the owner stops the key while it lasts; reactivating or enabling brings it back', async () => {
    const local = await createOrg(h);
    const member = await addMember(h, local, local.owner.token, ['admin']);
    const { key } = await createKey(local.id, member.token, { name: 'pause', permission_keys: ['invoices.read'] });
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 200);
    assert.equal((await h.patch(`/orgs/${local.id}/members/${member.userId}`, { status: 'suspended' }, { token: local.owner.token })).status, 200);
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 401);
    assert.equal((await h.patch(`/orgs/${local.id}/members/${member.userId}`, { status: 'active' }, { token: local.owner.token })).status, 200);
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 200, 'back once reactivated');
    const root = await h.signUp();
    await h.identity.service.grantSuperadmin(root.userId);
    assert.equal((await h.post(`/users/${member.userId}/disable`, undefined, { token: root.accessToken })).status, 200);
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 401, 'owner disabled');
    const enabled = await h.post(`/users/${member.userId}/enable`, undefined, { token: root.accessToken });
    assert.equal(enabled.status, 200, enabled.text);
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 200, 'back once enabled');
  });
});

describe('organization boundaries', () => {
  test('a key is revoked and listed only through its own organization\'s path', async () => {
    const a = await createOrg(h);
    const b = await createOrg(h);
    const { id, key } = await createKey(a.id, a.owner.token, { name: 'a key', permission_keys: ['invoices.read'] });
    // B's owner holds members.update in B, and names A's key through B's path.
    assertError(await h.delete(`/orgs/${b.id}/api-keys/${id}`, { token: b.owner.token }), 404, 'not_found');
    const listed = await h.get(`/orgs/${b.id}/api-keys`, { token: b.owner.token });
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(listed.body.data.keys, []);
    // And through A's path with B's token: the path is not B's active organization.
    assertError(await h.delete(`/orgs/${a.id}/api-keys/${id}`, { token: b.owner.token }), 403, 'forbidden');
    assert.equal((await hostRequest('/invoices', { 'x-api-key': key })).status, 200, 'untouched');
    const caller = (await hostRequest('/whoami', { 'x-api-key': key })).body.data;
    assert.equal(caller.organization_id, a.id);
  });

  test('the key\'s organization is its own, whatever organization its owner\'s session is in', async () => {
    const a = await createOrg(h);
    const b = await createOrg(h, { owner: a.owner });
    const { key } = await createKey(a.id, a.owner.token, { name: 'stays in a', permission_keys: ['invoices.read'] });
    await switchOrg(h, a.owner.token, b.id);
    const caller = (await hostRequest('/invoices', { authorization: `Bearer ${key}` })).body.data;
    assert.equal(caller.kind, 'api_key');
    assert.equal(caller.organization_id, a.id);
  });
});

describe('contract shapes', () => {
  test('201, list and DELETE answers carry exactly the contract\'s fields; events carry id and name only', async () => {
    const local = await createOrg(h);
    const created = await createKey(local.id, local.owner.token, { name: '  Nightly export  ', permission_keys: ['invoices.read', 'invoices.read'], expires_in: 3600 });
    assert.deepEqual(Object.keys(created.body).sort(), ['created_at', 'expires_at', 'id', 'key', 'name', 'permission_keys', 'start']);
    assert.equal(created.body.name, 'Nightly export', 'trimmed');
    assert.deepEqual(created.body.permission_keys, ['invoices.read'], 'deduplicated');
    assert.match(created.body.key, /^irk_[A-Za-z0-9_-]{43}$/);
    assert.equal(created.body.start, created.body.key.slice(4, 12));
    assert.equal(Date.parse(created.body.expires_at) - Date.parse(created.body.created_at), 3600 * 1000);
    const listed = await h.get(`/orgs/${local.id}/api-keys`, { token: local.owner.token });
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(Object.keys(listed.body.data), ['keys']);
    const [item] = listed.body.data.keys;
    assert.deepEqual(Object.keys(item).sort(), ['created_at', 'expires_at', 'id', 'last_used_at', 'name', 'permission_keys', 'start', 'user_id']);
    assert.ok(!JSON.stringify(listed.body).includes(created.key.slice(4)), 'never the key');
    const revoked = await h.delete(`/orgs/${local.id}/api-keys/${created.id}`, { token: local.owner.token });
    assert.equal(revoked.status, 200, revoked.text);
    assert.deepEqual(revoked.body, { data: { status: 'revoked' } });
    const [event] = h.eventsOfType('api_key.created').filter((candidate) => candidate.data.api_key_id === created.id);
    assert.deepEqual(event?.data, { api_key_id: created.id, name: 'Nightly export' });
  });

  test('bad bodies are 422: expires_in under 60 s, past 365 days, fractional or a string; names blank, too long or with control characters', async () => {
    const local = await createOrg(h);
    const bodies: Array<Record<string, unknown>> = [
      { name: 'x', permission_keys: ['invoices.read'], expires_in: 59 },
      { name: 'x', permission_keys: ['invoices.read'], expires_in: 365 * DAY + 1 },
      { name: 'x', permission_keys: ['invoices.read'], expires_in: 3600.5 },
      { name: 'x', permission_keys: ['invoices.read'], expires_in: '3600' },
      { name: 'x', permission_keys: ['invoices.read'], expires_in: null },
      { name: '   ', permission_keys: ['invoices.read'] },
      { name: 'x'.repeat(121), permission_keys: ['invoices.read'] },
      { name: 'a\nb', permission_keys: ['invoices.read'] },
      { name: 'x', permission_keys: 'invoices.read' },
      { name: 'x', permission_keys: [42] },
      { name: 'x' },
      { permission_keys: [] },
    ];
    for (const body of bodies) assertValidationErrors(await h.post(`/orgs/${local.id}/api-keys`, body, { token: local.owner.token }), undefined, JSON.stringify(body));
    assert.equal(await h.knex(`${h.tablePrefix}api_keys`).where({ organization_id: local.id }).count({ count: '*' }).first().then((row) => Number(row?.count)), 0);
    await createKey(local.id, local.owner.token, { name: 'x'.repeat(120), permission_keys: ['invoices.read'], expires_in: 365 * DAY });
  });
});

describe('odd key headers', () => {
  test('answer 401 unauthorized with WWW-Authenticate, never 500 and never the value', async () => {
    const local = await createOrg(h);
    const { key } = await createKey(local.id, local.owner.token, { name: 'odd', permission_keys: ['invoices.read'] });
    const cases: Array<Record<string, string | string[]>> = [
      { 'x-api-key': '' },
      { 'x-api-key': ' ' },
      { 'x-api-key': 'irk_' },
      { 'x-api-key': `irk_${'A'.repeat(43)}` },
      { 'x-api-key': `irk_${'A'.repeat(6000)}` },
      { 'x-api-key': `${key}x` },
      { 'x-api-key': key.slice(0, -1) },
      { 'x-api-key': `Bearer ${key}` },
      { 'x-api-key': [key, key] },
      { 'x-api-key': key, authorization: `Bearer ${key}` },
      { 'x-api-key': key, authorization: 'Basic YTpi' },
      { authorization: `Bearer irk_${'A'.repeat(43)}` },
      { authorization: `Bearer ${key.toUpperCase()}` },
      { authorization: `Bearer ${key}=` },
      { authorization: `Basic ${key}` },
      { authorization: [`Bearer ${key}`, `Bearer ${key}`] },
    ];
    for (const headers of cases) {
      const label = JSON.stringify(headers).slice(0, 80);
      const response = await hostRequest('/invoices', headers);
      assert.equal(response.status, 401, `${label}: ${response.text}`);
      assert.equal(response.body?.error, 'unauthorized', label);
      assert.match(String(response.headers['www-authenticate'] ?? ''), /^Bearer/, label);
      assert.ok(!response.text.includes(key.slice(4)), `${label}: echoes the key`);
    }
    // The key itself, with surrounding spaces in X-API-Key, or a lower-case scheme, still works.
    assert.equal((await hostRequest('/invoices', { 'x-api-key': ` ${key} ` })).status, 200);
    assert.equal((await hostRequest('/invoices', { authorization: `bearer ${key}` })).status, 200);
    assert.equal(h.logs.filter((line) => line.level === 'error').length, 0, JSON.stringify(h.logs.filter((line) => line.level === 'error')));
  });
});
