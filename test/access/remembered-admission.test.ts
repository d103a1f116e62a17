/*
 * The host middleware remembers an access token's admission (AccessPolicy.admitRemembered,
 * docs/performance.md): a later request with the same token through the same middleware is
 * answered as the first was, while nothing the decision was made from has changed. Every
 * revocation that reaches it through an event is tested in access-cache-revocation.test.ts
 * (each of its tests asks the host route twice before revoking). Here: what no event marks
 * (the token's expiry and the session's end, by the injected clock), that a middleware never
 * answers from another's admission, that a refusal is not remembered, and that the caller a
 * remembered admission hands out is the same and read-only.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import express from 'express';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg } from '../helpers/orgs.js';

const ACCESS_TTL_SECONDS = 300;
const SESSION_MAX_AGE_SECONDS = 600;

let h: Harness;
let origin: string;
let server: ReturnType<express.Express['listen']>;
before(async () => {
  h = await Harness.start({
    config: {
      permissions: [
        { key: 'reports.read', description: 'Read reports' },
        { key: 'reports.write', description: 'Write reports' },
      ],
      tokens: { accessTtl: ACCESS_TTL_SECONDS, sessionMaxAge: SESSION_MAX_AGE_SECONDS },
    },
  });
  const app = express();
  const answer: express.RequestHandler = (req, res) => {
    const caller = h.identity.caller(req)!;
    res.json({ caller, frozen: Object.isFrozen(caller) && Object.isFrozen(caller.permissions) && Object.isFrozen((caller as { amr?: string[] }).amr ?? []) });
  };
  app.get('/read', h.identity.requirePermission('reports.read'), answer);
  app.get('/write', h.identity.requirePermission('reports.write'), answer);
  app.get('/any', h.identity.authenticate(), answer);
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await h.close();
});

async function host(path: string, token: string): Promise<{ status: number; body: any }> {
  const response = await fetch(`${origin}${path}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: response.status, body: await response.json() };
}

/** An organization's owner (holds reports.read and reports.write) and a member whose role holds neither. */
async function organization() {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  return { org, owner: org.owner, member };
}

test('a remembered admission ends with its access token: 401 once the token has expired', async () => {
  const { owner } = await organization();
  const issuedAt = h.clock.now();
  for (let i = 0; i < 3; i += 1) assert.equal((await host('/read', owner.token)).status, 200);
  h.clock.set(issuedAt + ACCESS_TTL_SECONDS * 1000 - 1000);
  assert.equal((await host('/read', owner.token)).status, 200, 'a second before its expiry');
  h.clock.set(issuedAt + ACCESS_TTL_SECONDS * 1000);
  const expired = await host('/read', owner.token);
  assert.equal(expired.status, 401);
  assert.equal(expired.body.error, 'unauthorized');
});

test('a remembered admission ends with its session: 401 at the session end, though the token is still in time', async () => {
  const { owner, org } = await organization();
  const started = Number((await h.knex(`${h.tablePrefix}sessions`).where({ id: JSON.parse(Buffer.from(owner.token.split('.')[1]!, 'base64url').toString()).sid }).first()).created_at);
  // A token from just before the session's absolute end, which it outlives.
  h.clock.set(started + (SESSION_MAX_AGE_SECONDS - 10) * 1000);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: owner.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  const switched = await h.post('/auth/switch-org', { organization_id: org.id }, { token: refreshed.body.data.access_token });
  assert.equal(switched.status, 200, switched.text);
  const token = switched.body.data.access_token as string;
  for (let i = 0; i < 3; i += 1) assert.equal((await host('/read', token)).status, 200);
  h.clock.set(started + SESSION_MAX_AGE_SECONDS * 1000 - 1);
  assert.equal((await host('/read', token)).status, 200, 'a millisecond before the session ends');
  h.clock.set(started + SESSION_MAX_AGE_SECONDS * 1000);
  const ended = await host('/read', token);
  assert.equal(ended.status, 401);
  assert.match(ended.body.message, /session behind this token has ended/);
});

test("one middleware never answers from another's admission, and a refusal is not remembered", async () => {
  const { org, owner, member } = await organization();
  // The member is admitted by authenticate() and requirePermission('reports.read') would refuse it.
  for (let i = 0; i < 2; i += 1) assert.equal((await host('/any', member.token)).status, 200);
  for (let i = 0; i < 2; i += 1) assert.equal((await host('/read', member.token)).status, 403);
  // Given a role that holds reports.read (not reports.write), the next request is admitted.
  const created = await h.post(`/orgs/${org.id}/roles`, { slug: 'reader', name: 'Reader', permission_keys: ['reports.read'] }, { token: owner.token });
  assert.equal(created.status, 201, created.text);
  const granted = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'reader'] }, { token: owner.token });
  assert.equal(granted.status, 200, granted.text);
  for (let i = 0; i < 2; i += 1) assert.equal((await host('/read', member.token)).status, 200);
  for (let i = 0; i < 2; i += 1) assert.equal((await host('/write', member.token)).status, 403, 'reports.write after reports.read was remembered');
});

test('a remembered admission hands out the same caller, read-only', async () => {
  const { owner } = await organization();
  const first = await host('/read', owner.token);
  const second = await host('/read', owner.token);
  assert.equal(first.status, 200);
  assert.deepEqual(second.body.caller, first.body.caller);
  assert.ok(first.body.caller.permissions.includes('reports.read'));
  assert.equal(first.body.frozen, true);
  assert.equal(second.body.frozen, true);
});
