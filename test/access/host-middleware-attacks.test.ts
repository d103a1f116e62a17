import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { Harness, TEST_DB, type SignedUpUser } from '../helpers/harness.js';
import { type ListeningApp, listening } from '../helpers/host-app.js';
import { addMember, createOrg, type CreatedOrg, superadmin, switchOrg } from '../helpers/orgs.js';

/*
 * The host's side (CONTRACT 6 and 10, docs/getting-started.md, docs/api-keys.md): the
 * middleware a host app mounts on its own routes, attacked by a caller with a valid account
 * or with an organization's API key. Threats: an organization that is gone still handed to the
 * host's handler; the caller the handler reads taken from the request (query, body, a header)
 * instead of the credential; host permission keys that collide by prefix, case or wildcard;
 * two middlewares that answer the same token differently, telling an ex-member what became of
 * the organization. The clock is the harness's frozen clock.
 */

const HOST_PERMISSIONS = [
  { key: 'docs.read', description: 'Read documents' },
  { key: 'docs.read.all', description: 'Read every document' },
];

let h: Harness;
let app: ListeningApp;

before(async () => {
  h = await Harness.start({ config: { permissions: HOST_PERMISSIONS } });
  const identity = h.identity;
  const host = express();
  host.use(express.json());
  // Each route answers the caller the middleware set, and what the host itself parsed, to show both apart.
  const answer = (req: express.Request, res: express.Response) => void res.json({ data: identity.caller(req), body: req.body ?? null, query: req.query });
  host.all('/whoami', identity.authenticate(), answer);
  host.all('/org', identity.requirePermission('org.read'), answer);
  host.all('/docs', identity.requirePermission('docs.read', { apiKeys: true }), answer);
  host.all('/docs/all', identity.requirePermission('docs.read.all', { apiKeys: true }), answer);
  host.all('/keys/whoami', identity.authenticate({ apiKeys: true }), answer);
  app = await listening(host);
});
after(async () => {
  await app.close();
  await h.close();
});

interface HostAnswer {
  status: number;
  body: any;
  headers: Headers;
}

async function call(path: string, credential: string | undefined, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<HostAnswer> {
  const headers: Record<string, string> = { ...(credential ? { authorization: `Bearer ${credential}` } : {}), ...init.headers };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${app.base}${path}`, { method: init.method ?? 'GET', headers, ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}) });
  return { status: response.status, body: await response.json(), headers: response.headers };
}

function assertRefused(answer: HostAnswer, status: number, error: string, context: string): void {
  assert.equal(answer.status, status, `${context}: ${JSON.stringify(answer.body)}`);
  assert.equal(answer.body.error, error, context);
  assert.equal(answer.body.data, undefined, `${context}: no caller reaches the handler`);
}

async function createRole(org: CreatedOrg, slug: string, permissionKeys: string[]): Promise<void> {
  const created = await h.post(`/orgs/${org.id}/roles`, { name: slug, slug, permission_keys: permissionKeys }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
}

async function createKey(organizationId: string, token: string, permissionKeys: string[]): Promise<string> {
  const created = await h.post(`/orgs/${organizationId}/api-keys`, { name: 'script', permission_keys: permissionKeys }, { token });
  assert.equal(created.status, 201, created.text);
  return created.body.data.key as string;
}

describe(`an organization that is gone is never served (${TEST_DB})`, () => {
  test("a superadmin's token of a deleted organization is 403 on authenticate() as on requirePermission(), though its session lives on in another", async () => {
    const orgA = await createOrg(h);
    const orgB = await createOrg(h);
    // One superadmin who was a member of A, one who only entered it (a superadmin may enter any organization).
    const memberRoot = await superadmin(h);
    const memberRootInA = await addMember(h, orgA, orgA.owner.token, ['member'], memberRoot);
    const visitingRoot = await superadmin(h);
    const visitingTokenA = await switchOrg(h, visitingRoot.accessToken, orgA.id);
    const rootKey = await createKey(orgA.id, memberRootInA.token, ['org.read']);
    const tokensA = [memberRootInA.token, visitingTokenA];
    for (const token of tokensA) {
      assert.equal((await call('/whoami', token)).status, 200);
      assert.equal((await call('/org', token)).status, 200);
    }
    // Both sessions move on to B; the tokens issued for A are still within their lifetime.
    const tokensB = [await switchOrg(h, memberRootInA.token, orgB.id), await switchOrg(h, visitingTokenA, orgB.id)];
    const deleted = await h.delete(`/orgs/${orgA.id}`, { token: orgA.owner.token });
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));

    for (const [index, token] of tokensA.entries()) {
      for (const path of ['/org', '/whoami']) assertRefused(await call(path, token), 403, 'forbidden', `superadmin ${index} ${path}`);
      assert.equal((await call('/whoami', tokensB[index])).status, 200, `superadmin ${index}: the session lives on in B`);
    }
    // The superadmin's key of the deleted organization has stopped, as anyone's.
    assertRefused(await call('/keys/whoami', rootKey), 401, 'unauthorized', "the superadmin's key");
  });
});

describe(`the caller comes from the credential alone (${TEST_DB})`, () => {
  let org: CreatedOrg;
  let other: CreatedOrg;
  let member: SignedUpUser & { token: string };
  before(async () => {
    org = await createOrg(h);
    other = await createOrg(h);
    member = await addMember(h, org, org.owner.token, ['member']);
  });

  test('an organization or user named in the query (twice), the body or a header changes nothing the handler reads as the caller', async () => {
    const forged = { organization_id: other.id, user_id: other.owner.userId, kind: 'api_key', superadmin: true, permissions: ['org.delete'] };
    const query = `?organization_id=${other.id}&organization_id=${org.id}&user_id=${other.owner.userId}`;
    const headers = { 'x-organization-id': other.id, 'x-user-id': other.owner.userId };
    const key = await createKey(org.id, org.owner.token, ['docs.read']);
    for (const [path, credential, kind] of [
      [`/whoami${query}`, member.token, 'session'],
      [`/org${query}`, member.token, 'session'],
      [`/keys/whoami${query}`, key, 'api_key'],
      [`/docs${query}`, key, 'api_key'],
    ] as const) {
      const answer = await call(path, credential, { method: 'POST', headers, body: forged });
      assert.equal(answer.status, 200, `${path}: ${JSON.stringify(answer.body)}`);
      const caller = answer.body.data;
      assert.equal(caller.kind, kind, path);
      assert.equal(caller.organization_id, org.id, path);
      assert.equal(caller.user_id, kind === 'session' ? member.userId : org.owner.userId, path);
      assert.ok(!caller.permissions.includes('org.delete'), path);
      assert.notEqual(caller.superadmin, true, path);
      // The host's own parsing is left as it was: the middleware neither reads nor rewrites it.
      assert.deepEqual(answer.body.body, forged, path);
      assert.deepEqual(answer.body.query.organization_id, [other.id, org.id], path);
    }
  });

  test('a credential in the query or the body is no credential: 401 with WWW-Authenticate, nothing admitted', async () => {
    const key = await createKey(org.id, org.owner.token, ['docs.read']);
    for (const [path, init] of [
      [`/whoami?access_token=${member.token}`, {}],
      [`/org?access_token=${member.token}`, {}],
      ['/whoami', { method: 'POST', body: { access_token: member.token } }],
      [`/docs?api_key=${key}`, {}],
      [`/keys/whoami?access_token=${key}`, {}],
      ['/keys/whoami', { method: 'POST', body: { api_key: key, access_token: key } }],
    ] as const) {
      const answer = await call(path, undefined, init);
      assertRefused(answer, 401, 'unauthorized', path);
      assert.match(answer.headers.get('www-authenticate') ?? '', /^Bearer/, path);
    }
  });
});

describe(`host permission keys are compared whole (${TEST_DB})`, () => {
  test("docs.read and docs.read.all are two keys: neither grants the other, to a session or to a key", async () => {
    const org = await createOrg(h);
    await createRole(org, 'docs-reader', ['docs.read']);
    await createRole(org, 'docs-auditor', ['docs.read.all']);
    const reader = await addMember(h, org, org.owner.token, ['docs-reader']);
    const auditor = await addMember(h, org, org.owner.token, ['docs-auditor']);
    const readerKey = await createKey(org.id, reader.token, ['docs.read']);
    const auditorKey = await createKey(org.id, auditor.token, ['docs.read.all']);
    for (const [name, credential, allowed, refused] of [
      ['reader', reader.token, '/docs', '/docs/all'],
      ['auditor', auditor.token, '/docs/all', '/docs'],
      ["reader's key", readerKey, '/docs', '/docs/all'],
      ["auditor's key", auditorKey, '/docs/all', '/docs'],
    ] as const) {
      assert.equal((await call(allowed, credential)).status, 200, `${name} ${allowed}`);
      assertRefused(await call(refused, credential), 403, 'forbidden', `${name} ${refused}`);
    }
  });

  test('no prefix, wildcard, other case or padded key is a permission: the middleware refuses to be built, roles and keys refuse to hold one', async () => {
    for (const key of ['docs', 'docs.*', '*', 'DOCS.READ', 'Docs.read', 'docs.read ', ' docs.read', 'docs.read.']) {
      assert.throws(() => h.identity.requirePermission(key), TypeError, `requirePermission(${JSON.stringify(key)})`);
      assert.throws(() => h.identity.requirePermission(key, { apiKeys: true }), TypeError, `requirePermission(${JSON.stringify(key)}, {apiKeys: true})`);
    }
    const org = await createOrg(h);
    for (const key of ['docs.*', '*', 'DOCS.READ', 'docs']) {
      const role = await h.post(`/orgs/${org.id}/roles`, { name: 'wild', slug: 'wild', permission_keys: [key] }, { token: org.owner.token });
      assert.equal(role.status, 422, `role with ${key}: ${role.text}`);
      const apiKey = await h.post(`/orgs/${org.id}/api-keys`, { name: 'wild', permission_keys: [key] }, { token: org.owner.token });
      assert.equal(apiKey.status, 403, `key with ${key}: ${apiKey.text}`);
      assert.equal(apiKey.body.error, 'forbidden', key);
    }
  });
});

describe(`one token, one answer: the refusals tell an ex-member nothing about the organization (${TEST_DB})`, () => {
  test('a token of an organization the member was removed from, and one of an organization deleted since, answer the same body on both middlewares', async () => {
    const answers: Record<string, HostAnswer[]> = { removed: [], deleted: [] };
    for (const fate of ['removed', 'deleted'] as const) {
      const org = await createOrg(h);
      const home = await createOrg(h);
      const member = await addMember(h, org, org.owner.token, ['admin']);
      await addMember(h, home, home.owner.token, ['member'], member);
      await switchOrg(h, member.token, home.id);
      const ended = fate === 'removed' ? await h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token }) : await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
      assert.equal(ended.status, 200, ended.text);
      for (const path of ['/whoami', '/org']) answers[fate]!.push(await call(path, member.token));
    }
    for (const [index, path] of ['/whoami', '/org'].entries()) {
      const removed = answers.removed![index]!;
      const deleted = answers.deleted![index]!;
      assertRefused(removed, 403, 'forbidden', `removed ${path}`);
      assert.deepEqual(removed.body, deleted.body, `${path}: removed and deleted answer alike`);
    }
    assert.deepEqual(answers.removed![1]!.body, answers.removed![0]!.body, 'requirePermission() answers as authenticate()');
  });

  test("an organization's require_mfa, turned on after the member was suspended, is not what the suspended member hears", async () => {
    const org = await createOrg(h);
    const home = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['admin']);
    await addMember(h, home, home.owner.token, ['member'], member);
    await switchOrg(h, member.token, home.id);
    const suspended = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
    assert.equal(suspended.status, 200, suspended.text);
    const strict = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
    assert.equal(strict.status, 200, strict.text);
    const whoami = await call('/whoami', member.token);
    const permitted = await call('/org', member.token);
    assertRefused(whoami, 403, 'forbidden', '/whoami');
    assert.deepEqual(permitted.body, whoami.body, '/org answers as /whoami');
  });
});
