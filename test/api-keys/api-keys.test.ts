import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { keyedHash } from '../../src/crypto/keyed-hash.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { assertError, assertUnauthorized, assertValidationErrors } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin, switchOrg, type CreatedOrg, type OrgMember } from '../helpers/orgs.js';
import { servicesOf } from '../../src/create-identity-router.js';
import { type RawResponse, rawRequest } from '../helpers/raw-request.js';
import { listening } from '../helpers/host-app.js';

/*
 * docs/api-keys.md, API keys. Threats: a key that outlives the authority that granted it (revoked,
 * expired, owner disabled/deleted/suspended/removed, organization deleted, permission lost);
 * a key that escalates past its creator; a key that reaches the router's own routes; a
 * request whose caller is ambiguous; a per-key budget that is skipped, shared or answered
 * with 401; a key that leaks after creation. The clock is the harness's frozen clock.
 */

const HOST_PERMISSIONS = [
  { key: 'invoices.read', description: 'Read invoices' },
  { key: 'invoices.write', description: 'Write invoices' },
];
const DAY = 24 * 3600;

/** Every key issued in this file, so the last test can grep logs, events and the audit table for them. */
const issuedKeys: string[] = [];

interface HostApp {
  base: string;
  close(): Promise<void>;
}

/** The host's own routes behind the router's middleware, as docs/api-keys.md shows them. */
async function startHostApp(h: Harness): Promise<HostApp> {
  const identity = h.identity;
  const app = express();
  app.get('/invoices', identity.requirePermission('invoices.read', { apiKeys: true }), (req, res) => {
    res.json({ data: { caller: identity.caller(req) } });
  });
  app.get('/whoami', identity.authenticate({ apiKeys: true }), (req, res) => {
    res.json({ data: { caller: identity.caller(req) } });
  });
  app.get('/tokens-only', identity.requirePermission('invoices.read'), (req, res) => {
    res.json({ data: { caller: identity.caller(req) } });
  });
  app.get('/tokens-only/whoami', identity.authenticate(), (req, res) => {
    res.json({ data: { caller: identity.caller(req) } });
  });
  return listening(app);
}

/** A raw request, so a test can send a header line twice (fetch would join them into one). */
function hostRequest(app: HostApp, path: string, headers: Record<string, string | string[]>): Promise<RawResponse> {
  return rawRequest(`${app.base}${path}`, headers);
}

const withKey = (key: string) => ({ authorization: `Bearer ${key}` });

async function createKey(h: Harness, orgId: string, token: string, body: Record<string, unknown>): Promise<{ id: string; key: string; body: any }> {
  const response = await h.post(`/orgs/${orgId}/api-keys`, body, { token });
  assert.equal(response.status, 201, response.text);
  issuedKeys.push(response.body.data.key);
  return { id: response.body.data.id, key: response.body.data.key, body: response.body.data };
}

/**
 * A fresh sign-in of the shared organization's owner, scoped to it: creating a key needs a fresh
 * authentication (docs/api-keys.md), and earlier tests moved the clock past the owner's first sign-in.
 */
async function freshOwnerToken(): Promise<string> {
  const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
  assert.equal(login.status, 200, login.text);
  return switchOrg(h, login.body.data.access_token, org.id);
}

function assertHostUnauthorized(response: RawResponse, context: string): void {
  assert.equal(response.status, 401, `${context}: ${response.text}`);
  assert.equal(response.body?.error, 'unauthorized', context);
  assert.match(String(response.headers['www-authenticate'] ?? ''), /^Bearer/, context);
}

let h: Harness;
let app: HostApp;
let org: CreatedOrg;

before(async () => {
  h = await Harness.start({ config: { permissions: HOST_PERMISSIONS } });
  app = await startHostApp(h);
  org = await createOrg(h);
});
after(async () => {
  await app.close();
  await h.close();
});

describe('creating, listing and revoking', () => {
  test('a key is irk_ + 32 random bytes, shown once; only its HMAC is stored; the list shows `start`, never the key', async () => {
    const created = await h.post(`/orgs/${org.id}/api-keys`, { name: '  Nightly export ', permission_keys: ['invoices.read', 'invoices.read', 'org.read'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const data = created.body.data;
    issuedKeys.push(data.key);
    assert.deepEqual(Object.keys(data).sort(), ['created_at', 'expires_at', 'id', 'key', 'name', 'permission_keys', 'start']);
    assert.match(data.key, /^irk_[A-Za-z0-9_-]{43}$/);
    assert.equal(Buffer.from(data.key.slice(4), 'base64url').length, 32);
    assert.equal(data.start, data.key.slice(4, 12));
    assert.equal(data.name, 'Nightly export');
    assert.deepEqual(data.permission_keys, ['invoices.read', 'org.read']);
    assert.equal(Date.parse(data.created_at), h.clock.now());
    assert.equal(Date.parse(data.expires_at), h.clock.now() + 90 * DAY * 1000, 'default expiry: 90 days');

    const row = await h.knex(`${h.tablePrefix}api_keys`).where({ id: data.id }).first();
    assert.equal(row.key_hash, keyedHash(deriveKeys('test-secret-that-is-at-least-32-characters-long').apiKeyHash, data.key));
    assert.ok(!Object.values(row).some((value) => String(value).includes(data.key.slice(4))), 'the key itself is stored nowhere');

    const list = await h.get(`/orgs/${org.id}/api-keys`, { token: org.owner.token });
    assert.equal(list.status, 200, list.text);
    const listed = list.body.data.keys.find((key: any) => key.id === data.id);
    assert.deepEqual(Object.keys(listed).sort(), ['created_at', 'expires_at', 'id', 'last_used_at', 'name', 'permission_keys', 'start', 'user_id']);
    assert.equal(listed.start, data.start);
    assert.equal(listed.user_id, org.owner.userId);
    assert.equal(listed.last_used_at, null);
    assert.ok(!list.text.includes(data.key.slice(4)), 'the list never shows the key');

    const [event] = h.eventsOfType('api_key.created').filter((candidate) => candidate.data.api_key_id === data.id);
    assert.deepEqual(event?.data, { api_key_id: data.id, name: 'Nightly export' });
    assert.equal(event?.organization_id, org.id);
    assert.equal(event?.user_id, org.owner.userId);
  });

  test('expiry is mandatory: expires_in sets it, at most 365 days (422 beyond); name is 1 to 120 characters', async () => {
    const custom = await createKey(h, org.id, org.owner.token, { name: 'short', permission_keys: ['org.read'], expires_in: 3600 });
    assert.equal(Date.parse(custom.body.expires_at), h.clock.now() + 3600 * 1000);
    const longest = await createKey(h, org.id, org.owner.token, { name: 'x'.repeat(120), permission_keys: [], expires_in: 365 * DAY });
    assert.equal(Date.parse(longest.body.expires_at), h.clock.now() + 365 * DAY * 1000);
    assertValidationErrors(await h.post(`/orgs/${org.id}/api-keys`, { name: 'too long', permission_keys: [], expires_in: 365 * DAY + 1 }, { token: org.owner.token }), /expires_in/);
    assertValidationErrors(await h.post(`/orgs/${org.id}/api-keys`, { name: 'never', permission_keys: [], expires_in: null }, { token: org.owner.token }), /expires_in/);
    assertValidationErrors(await h.post(`/orgs/${org.id}/api-keys`, { name: 'x'.repeat(121), permission_keys: [] }, { token: org.owner.token }), /name/);
    assertValidationErrors(await h.post(`/orgs/${org.id}/api-keys`, { name: '   ', permission_keys: [] }, { token: org.owner.token }), /name/);
    assertValidationErrors(await h.post(`/orgs/${org.id}/api-keys`, { permission_keys: [] }, { token: org.owner.token }), /name/);
  });

  test('the routes work in the active organization only, for active members', async () => {
    const other = await createOrg(h);
    assertError(await h.post(`/orgs/${other.id}/api-keys`, { name: 'k', permission_keys: [] }, { token: org.owner.token }), 403, 'forbidden');
    assertError(await h.get(`/orgs/${other.id}/api-keys`, { token: org.owner.token }), 403, 'forbidden');
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'k', permission_keys: [] }, { token: org.owner.accessToken }), 403, 'forbidden', 'no active organization');
    const root = await superadmin(h);
    const rootInOrg = await switchOrg(h, root.accessToken, org.id);
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'k', permission_keys: [] }, { token: rootInOrg }), 403, 'forbidden', 'a superadmin who is not a member');
    assertUnauthorized(await h.get(`/orgs/${org.id}/api-keys`));
  });

  test('creating needs step-up once the user has a confirmed factor', async () => {
    const user = await signUpWithTotp(h);
    const own = await createOrg(h, { owner: user });
    h.clock.advance(301);
    const stale = await h.post(`/orgs/${own.id}/api-keys`, { name: 'ci', permission_keys: ['org.read'] }, { token: own.owner.token });
    assertError(stale, 401, 'step_up_required');
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: own.owner.token });
    assert.equal(stepped.status, 200, stepped.text);
    await createKey(h, own.id, stepped.body.data.access_token, { name: 'ci', permission_keys: ['org.read'] });
  });

  test('a member lists only their own keys; members.update lists and revokes everyone\'s; others\' keys are 404', async () => {
    const local = await createOrg(h);
    const member = await addMember(h, local, local.owner.token, ['member']);
    const ownerKey = await createKey(h, local.id, local.owner.token, { name: 'owner key', permission_keys: ['org.read'] });
    const memberKey = await createKey(h, local.id, member.token, { name: 'member key', permission_keys: ['org.read'] });

    const mine = await h.get(`/orgs/${local.id}/api-keys`, { token: member.token });
    assert.deepEqual(mine.body.data.keys.map((key: any) => key.id), [memberKey.id]);
    const all = await h.get(`/orgs/${local.id}/api-keys`, { token: local.owner.token });
    assert.deepEqual(all.body.data.keys.map((key: any) => key.id).sort(), [ownerKey.id, memberKey.id].sort());

    assertError(await h.delete(`/orgs/${local.id}/api-keys/${ownerKey.id}`, { token: member.token }), 404, 'not_found');
    assertError(await h.delete(`/orgs/${local.id}/api-keys/00000000-0000-4000-8000-00000000abcd`, { token: member.token }), 404, 'not_found');
    const revoked = await h.delete(`/orgs/${local.id}/api-keys/${memberKey.id}`, { token: local.owner.token });
    assert.equal(revoked.status, 200, revoked.text);
    assert.deepEqual(revoked.body.data, { status: 'revoked' });
    const again = await h.delete(`/orgs/${local.id}/api-keys/${memberKey.id}`, { token: member.token });
    assert.equal(again.status, 200, 'revoking twice answers the same');
    const events = h.eventsOfType('api_key.revoked').filter((event) => event.data.api_key_id === memberKey.id);
    assert.equal(events.length, 1, 'and emits once');
    assert.deepEqual(events[0]!.data, { api_key_id: memberKey.id, name: 'member key', reason: 'revoked_by_admin' });
    assert.equal(events[0]!.actor_id, local.owner.userId);
    assert.deepEqual((await h.get(`/orgs/${local.id}/api-keys`, { token: member.token })).body.data.keys, [], 'revoked keys leave the list');
  });
});

describe('using a key on the host routes', () => {
  test('a key works behind requirePermission(key, {apiKeys: true}), and the handler sees kind api_key', async () => {
    const { id, key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'reader', permission_keys: ['invoices.read'] });
    for (const headers of [withKey(key), { 'x-api-key': key }]) {
      const response = await hostRequest(app, '/invoices', headers);
      assert.equal(response.status, 200, response.text);
      assert.deepEqual(response.body.data.caller, { kind: 'api_key', user_id: org.owner.userId, organization_id: org.id, api_key_id: id, permissions: ['invoices.read'] });
    }
    const session = await hostRequest(app, '/invoices', withKey(org.owner.token));
    assert.equal(session.status, 200, session.text);
    assert.equal(session.body.data.caller.kind, 'session');
    assert.equal(session.body.data.caller.user_id, org.owner.userId);
    assert.equal(session.body.data.caller.organization_id, org.id);
    assert.equal(typeof session.body.data.caller.session_id, 'string');
    const whoami = await hostRequest(app, '/whoami', { 'x-api-key': key });
    assert.equal(whoami.status, 200, whoami.text);
    assert.equal(whoami.body.data.caller.kind, 'api_key');
  });

  test('a key carries only its own permission keys, intersected with the owner\'s', async () => {
    const { key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'no invoices', permission_keys: ['org.read'] });
    assertError(await hostFetch('/invoices', withKey(key)), 403, 'forbidden');
    const whoami = await hostRequest(app, '/whoami', withKey(key));
    assert.deepEqual(whoami.body.data.caller.permissions, ['org.read']);
  });

  test('middleware without {apiKeys: true} refuses a key with 401', async () => {
    const { key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'host only', permission_keys: ['invoices.read'] });
    assertHostUnauthorized(await hostRequest(app, '/tokens-only', withKey(key)), 'requirePermission without apiKeys');
    assertHostUnauthorized(await hostRequest(app, '/tokens-only/whoami', { 'x-api-key': key }), 'authenticate without apiKeys');
    assert.equal((await hostRequest(app, '/tokens-only', withKey(org.owner.token))).status, 200);
  });

  test('an unknown or malformed key answers 401 and never echoes the value', async () => {
    const forged = `irk_${'A'.repeat(43)}`;
    for (const value of [forged, 'irk_short', `irk_${'A'.repeat(43)}x`]) {
      const response = await hostRequest(app, '/invoices', { 'x-api-key': value });
      assertHostUnauthorized(response, value);
      assert.ok(!response.text.includes(value.slice(4, 20)));
    }
  });

  test('last_used_at is written at most once a minute per key', async () => {
    const { id, key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'usage', permission_keys: ['invoices.read'] });
    const lastUsed = async () => (await h.get(`/orgs/${org.id}/api-keys`, { token: org.owner.token })).body.data.keys.find((entry: any) => entry.id === id).last_used_at;
    const first = h.clock.now();
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    assert.equal(Date.parse(await lastUsed()), first);
    h.clock.advance(59);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    assert.equal(Date.parse(await lastUsed()), first, 'not rewritten within the minute');
    h.clock.advance(1);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    assert.equal(Date.parse(await lastUsed()), first + 60_000);
  });
});

/** A GET of the host app through fetch, shaped like the harness's answers for assertError. */
async function hostFetch(path: string, headers: Record<string, string>) {
  const response = await fetch(`${app.base}${path}`, { headers });
  const text = await response.text();
  return { status: response.status, body: JSON.parse(text), headers: response.headers, text };
}

describe('the router\'s own routes never accept a key', () => {
  test('every authenticated route answers 401 unauthorized to a key, in either header', async () => {
    const { key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'not for the router', permission_keys: ['invoices.read', 'org.read', 'members.read'] });
    // Routes of a feature this router has not configured (social) answer 404 before any credential is read.
    const routes = allRoutes(servicesOf(h.identity)).filter((route) => route.auth !== 'public' && !route.unavailable);
    assert.ok(routes.length > 30);
    for (const route of routes) {
      const path = route.path.replace(':orgId', org.id).replace(/:[A-Za-z]+/g, '00000000-0000-4000-8000-000000000000');
      for (const headers of [withKey(key), { 'x-api-key': key }]) {
        const response = await h.request(route.method, path, { headers, ...(route.method === 'get' || route.method === 'delete' ? {} : { body: {} }) });
        assert.equal(response.status, 401, `${route.method} ${route.path} with ${Object.keys(headers)[0]}: ${response.text}`);
        assert.equal(response.body.error, 'unauthorized', `${route.method} ${route.path}`);
      }
    }
  });

  test('an access token beside a key is refused on the router\'s routes too', async () => {
    const { key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'beside a token', permission_keys: ['org.read'] });
    assertUnauthorized(await h.get('/auth/me', { token: org.owner.token, headers: { 'x-api-key': key } }));
    assert.equal((await h.get('/auth/me', { token: org.owner.token })).status, 200);
  });
});

describe('ambiguity', () => {
  test('a token plus a key, or two keys, answers 401', async () => {
    const fresh = await freshOwnerToken();
    const first = await createKey(h, org.id, fresh, { name: 'first', permission_keys: ['invoices.read'] });
    const second = await createKey(h, org.id, fresh, { name: 'second', permission_keys: ['invoices.read'] });
    const cases: Array<[string, Record<string, string | string[]>]> = [
      ['token in Authorization, key in X-API-Key', { authorization: `Bearer ${org.owner.token}`, 'x-api-key': first.key }],
      ['key in Authorization, key in X-API-Key', { authorization: `Bearer ${first.key}`, 'x-api-key': second.key }],
      ['the same key in both headers', { authorization: `Bearer ${first.key}`, 'x-api-key': first.key }],
      ['two X-API-Key lines', { 'x-api-key': [first.key, second.key] }],
      ['two Authorization lines: key and token', { authorization: [`Bearer ${first.key}`, `Bearer ${org.owner.token}`] }],
      ['two Authorization lines: two keys', { authorization: [`Bearer ${first.key}`, `Bearer ${second.key}`] }],
    ];
    for (const [name, headers] of cases) {
      assertHostUnauthorized(await hostRequest(app, '/invoices', headers), name);
      assertHostUnauthorized(await hostRequest(app, '/whoami', headers), name);
    }
    // Each credential alone works.
    assert.equal((await hostRequest(app, '/invoices', { 'x-api-key': first.key })).status, 200);
    assert.equal((await hostRequest(app, '/invoices', withKey(org.owner.token))).status, 200);
  });
});

describe('a key stops at once', () => {
  /** An admin member of a fresh organization (admins hold the host keys) with a key for invoices.read. */
  async function memberWithKey(): Promise<{ local: CreatedOrg; member: OrgMember; key: string; id: string }> {
    const local = await createOrg(h);
    const member = await addMember(h, local, local.owner.token, ['admin']);
    const { key, id } = await createKey(h, local.id, member.token, { name: 'member key', permission_keys: ['invoices.read'] });
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200, 'works before');
    return { local, member, key, id };
  }

  async function assertStopped(key: string, context: string): Promise<void> {
    assertHostUnauthorized(await hostRequest(app, '/invoices', withKey(key)), `${context}: requirePermission`);
    assertHostUnauthorized(await hostRequest(app, '/whoami', { 'x-api-key': key }), `${context}: authenticate`);
  }

  test('when it is revoked', async () => {
    const { local, member, key, id } = await memberWithKey();
    assert.equal((await h.delete(`/orgs/${local.id}/api-keys/${id}`, { token: member.token })).status, 200);
    await assertStopped(key, 'revoked');
  });

  test('when it expires, by the injected clock', async () => {
    const { key } = await createKey(h, org.id, await freshOwnerToken(), { name: 'hour', permission_keys: ['invoices.read'], expires_in: 3600 });
    h.clock.advance(3599);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200, 'a second before expiry');
    h.clock.advance(1);
    await assertStopped(key, 'expired');
  });

  test('when its owner is disabled', async () => {
    const { member, key } = await memberWithKey();
    const root = await superadmin(h);
    assert.equal((await h.post(`/users/${member.userId}/disable`, undefined, { token: root.accessToken })).status, 200);
    await assertStopped(key, 'owner disabled');
  });

  test('when its owner is deleted, and the key goes with the user', async () => {
    const { member, key, id } = await memberWithKey();
    const deleted = await h.delete(`/users/${member.userId}`, { token: member.token });
    assert.equal(deleted.status, 200, deleted.text);
    await assertStopped(key, 'owner deleted');
    assert.equal(await h.knex(`${h.tablePrefix}api_keys`).where({ id }).first(), undefined, 'deleted with the user');
  });

  test('while its owner is locked out, like the owner\'s sessions on the host middleware', async () => {
    const { member, key } = await memberWithKey();
    for (let attempt = 0; attempt < 5; attempt += 1) assert.equal((await h.post('/auth/login', { email: member.email, password: 'wrong password here' })).status, 401);
    await assertStopped(key, 'owner locked');
    h.clock.advance(15 * 60 + 1);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200, 'the lock lapses');
  });

  test('when its owner is suspended in the organization', async () => {
    const { local, member, key } = await memberWithKey();
    assert.equal((await h.patch(`/orgs/${local.id}/members/${member.userId}`, { status: 'suspended' }, { token: local.owner.token })).status, 200);
    await assertStopped(key, 'owner suspended');
  });

  test('when its owner is removed from the organization, and the key is revoked with the membership', async () => {
    const { local, member, key, id } = await memberWithKey();
    assert.equal((await h.delete(`/orgs/${local.id}/members/${member.userId}`, { token: local.owner.token })).status, 200);
    await assertStopped(key, 'owner removed');
    const row = await h.knex(`${h.tablePrefix}api_keys`).where({ id }).first();
    assert.notEqual(row.revoked_at, null, 'revoked when the membership ended');
    const [event] = h.eventsOfType('api_key.revoked').filter((candidate) => candidate.data.api_key_id === id);
    assert.deepEqual(event?.data, { api_key_id: id, name: 'member key', reason: 'member_removed' });
    // Re-joining does not bring the key back (the removal ended the member's session too).
    const login = await h.post('/auth/login', { email: member.email, password: member.password });
    assert.equal(login.status, 200, login.text);
    await addMember(h, local, local.owner.token, ['admin'], { ...member, accessToken: login.body.data.access_token });
    await assertStopped(key, 'owner re-invited');
  });

  test('when the organization is deleted', async () => {
    const local = await createOrg(h);
    const { key } = await createKey(h, local.id, local.owner.token, { name: 'org key', permission_keys: ['invoices.read'] });
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    assert.equal((await h.delete(`/orgs/${local.id}`, { token: local.owner.token })).status, 200);
    await assertStopped(key, 'organization deleted');
  });

  test('grace enrollment binds the owner\'s keys: MFA enforced and no confirmed factor answers 403 mfa_enrollment_required', async () => {
    const local = await createOrg(h);
    const { key } = await createKey(h, local.id, local.owner.token, { name: 'enforced', permission_keys: ['invoices.read'] });
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    await h.identity.service.setMfaEnforced(local.owner.userId, true);
    for (const path of ['/invoices', '/whoami']) assertError(await hostFetch(path, withKey(key)), 403, 'mfa_enrollment_required', path);
    await h.identity.service.setMfaEnforced(local.owner.userId, false);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200, 'lifted with the enforcement');
  });

  test('a key loses a permission the moment its owner does, and still passes authenticate', async () => {
    const local = await createOrg(h);
    const billing = await h.post(`/orgs/${local.id}/roles`, { name: 'Billing', slug: 'billing', permission_keys: ['invoices.read'] }, { token: local.owner.token });
    assert.equal(billing.status, 201, billing.text);
    const member = await addMember(h, local, local.owner.token, ['member', 'billing']);
    const { key } = await createKey(h, local.id, member.token, { name: 'billing key', permission_keys: ['invoices.read', 'org.read'] });
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
    assert.equal((await h.patch(`/orgs/${local.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: local.owner.token })).status, 200);
    assertError(await hostFetch('/invoices', withKey(key)), 403, 'forbidden');
    const whoami = await hostRequest(app, '/whoami', withKey(key));
    assert.equal(whoami.status, 200, whoami.text);
    assert.deepEqual(whoami.body.data.caller.permissions, ['org.read']);
    // Given back, it works again: nothing about the key itself changed.
    assert.equal((await h.patch(`/orgs/${local.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'billing'] }, { token: local.owner.token })).status, 200);
    assert.equal((await hostRequest(app, '/invoices', withKey(key))).status, 200);
  });
});

describe('several instances and races', () => {
  test('a key revoked on one instance is refused by another at once (the revocation clears the cache on every instance)', async () => {
    const second = await Harness.start({ shareDatabaseWith: h, config: { permissions: HOST_PERMISSIONS } });
    const secondApp = await startHostApp(second);
    try {
      const local = await createOrg(h);
      const { id, key } = await createKey(h, local.id, local.owner.token, { name: 'two instances', permission_keys: ['invoices.read'] });
      assert.equal((await hostRequest(secondApp, '/invoices', withKey(key))).status, 200);
      assert.equal((await h.delete(`/orgs/${local.id}/api-keys/${id}`, { token: local.owner.token })).status, 200);
      assertHostUnauthorized(await hostRequest(secondApp, '/invoices', withKey(key)), 'revoked on the other instance');
    } finally {
      await secondApp.close();
      await second.close();
    }
  });

  test('concurrent revocations of one key revoke it once and emit one event', async () => {
    const local = await createOrg(h);
    const { id } = await createKey(h, local.id, local.owner.token, { name: 'raced', permission_keys: ['org.read'] });
    const answers = await Promise.all(Array.from({ length: 8 }, () => h.delete(`/orgs/${local.id}/api-keys/${id}`, { token: local.owner.token })));
    assert.deepEqual(answers.map((answer) => answer.status), Array(8).fill(200));
    assert.equal(h.eventsOfType('api_key.revoked').filter((event) => event.data.api_key_id === id).length, 1);
  });
});

describe('no escalation', () => {
  test('a key never holds users.read or users.manage, nor a key its creator lacks, nor one outside the catalog', async () => {
    // Earlier tests moved the clock past the shared organization's tokens.
    const org = await createOrg(h);
    for (const permission of ['users.manage', 'users.read']) {
      assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'admin', permission_keys: [permission] }, { token: org.owner.token }), 403, 'forbidden', permission);
    }
    const root = await superadmin(h);
    const rootOrg = await createOrg(h, { owner: root });
    assertError(await h.post(`/orgs/${rootOrg.id}/api-keys`, { name: 'root', permission_keys: ['users.manage'] }, { token: rootOrg.owner.token }), 403, 'forbidden', 'not even a superadmin');
    const member = await addMember(h, org, org.owner.token, ['member']);
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'grab', permission_keys: ['org.read', 'invoices.read'] }, { token: member.token }), 403, 'forbidden', 'a key the member lacks');
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'grab', permission_keys: ['members.update'] }, { token: member.token }), 403, 'forbidden');
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'typo', permission_keys: ['invoices.raed'] }, { token: org.owner.token }), 403, 'forbidden', 'not in the catalog');
    await createKey(h, org.id, member.token, { name: 'fine', permission_keys: ['org.read', 'members.read'] });
    assert.equal(await h.knex(`${h.tablePrefix}api_keys`).where({ user_id: member.userId }).count({ count: '*' }).first().then((row) => Number(row?.count)), 1);
  });
});

describe('the per-key budget', () => {
  test('each key has its own budget in the authenticated group: 429 rate_limited with Retry-After, other keys and the owner untouched', async () => {
    const limited = await Harness.start({ rateLimits: true, config: { permissions: HOST_PERMISSIONS, auth: { rateLimits: { authenticated: { limit: 5, windowSec: 60 } } } } });
    const limitedApp = await startHostApp(limited);
    try {
      // The owner spends 4 of the user budget: create the organization, switch into it, create two keys.
      const local = await createOrg(limited);
      const first = await createKey(limited, local.id, local.owner.token, { name: 'first', permission_keys: ['invoices.read'] });
      const second = await createKey(limited, local.id, local.owner.token, { name: 'second', permission_keys: ['invoices.read'] });
      for (let n = 1; n <= 5; n += 1) {
        const response = await hostRequest(limitedApp, n % 2 ? '/invoices' : '/whoami', withKey(first.key));
        assert.equal(response.status, 200, `request ${n}: ${response.text}`);
      }
      const over = await hostRequest(limitedApp, '/invoices', withKey(first.key));
      assert.equal(over.status, 429, over.text);
      assert.equal(over.body.error, 'rate_limited');
      assert.ok(Number(over.headers['retry-after']) >= 1, 'Retry-After');
      assert.equal((await hostRequest(limitedApp, '/invoices', { 'x-api-key': first.key })).status, 429, 'the same budget through either header');
      assert.equal((await hostRequest(limitedApp, '/invoices', withKey(second.key))).status, 200, 'another key of the same owner has its own budget');
      assert.equal((await limited.get('/auth/me', { token: local.owner.token })).status, 200, 'the owner\'s own budget is untouched');
    } finally {
      await limitedApp.close();
      await limited.close();
    }
  });
});

describe('secrecy', () => {
  test('no key (nor its hash) appears in any event, audit row or log line', async () => {
    assert.ok(issuedKeys.length > 10);
    const hashKey = deriveKeys('test-secret-that-is-at-least-32-characters-long').apiKeyHash;
    const audit = await h.knex(`${h.tablePrefix}audit_events`).select('*');
    const haystacks = { events: JSON.stringify(h.events), audit: JSON.stringify(audit), logs: JSON.stringify(h.logs), mail: JSON.stringify(h.mail) };
    assert.ok(h.events.some((event) => event.type === 'api_key.created') && h.events.some((event) => event.type === 'api_key.revoked'));
    for (const key of issuedKeys) {
      const secret = key.slice(4);
      const hash = keyedHash(hashKey, key);
      for (const [name, haystack] of Object.entries(haystacks)) {
        assert.ok(!haystack.includes(secret), `the key appears in ${name}`);
        assert.ok(!haystack.includes(hash), `the key's hash appears in ${name}`);
      }
    }
  });
});
