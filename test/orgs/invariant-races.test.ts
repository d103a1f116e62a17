/*
 * Organization invariants raced on PostgreSQL (READ COMMITTED): the last active owner stays, a
 * deleted role, organization or removed member leaves no live row behind, whatever request
 * commits inside another's window. Each test starts a second request inside one request's
 * window (a wrapped repository method, test/helpers/interleaving.ts) and asks for the answers
 * some serial order of the two gives. Every decision below takes the organization's row first
 * (docs/database.md), so a request started there waits, or committed before the first one's
 * locks and is seen by its reads under them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { newSubject, type TestOpenIdProvider, TestOpenIdProvider as OpenIdProvider } from '../helpers/oidc.js';
import { activeOwners, addMember, createOrg, type CreatedOrg, memberOf, switchOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, startSsoHarness, StubDns } from '../helpers/sso.js';
import { ApiKeyRepository } from '../../src/store/api-key-repository.js';
import { MembershipRepository, OrganizationRepository, RoleRepository } from '../../src/store/organization-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';

const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

/** The last error the router logged (a 500's cause). */
function lastError(): string {
  return JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1) ?? null);
}

/** Another session of a user, scoped to the organization: its requests do not queue behind the first session's row. */
async function secondSession(user: { email: string; password: string }, organizationId: string): Promise<string> {
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  return switchOrg(h, login.body.data.access_token, organizationId);
}

async function twoOwners(): Promise<{ org: CreatedOrg; second: Awaited<ReturnType<typeof addMember>> }> {
  const org = await createOrg(h);
  const second = await addMember(h, org, org.owner.token, ['owner']);
  assert.deepEqual((await activeOwners(h, org.id)).sort(), [org.owner.userId, second.userId].sort());
  return { org, second };
}

/** Whether some membership role row points at a role that no longer exists, or at one of another organization. */
async function strayRoleRows(orgId: string): Promise<number> {
  const t = h.tablePrefix;
  const rows = await h
    .knex(`${t}memberships as m`)
    .join(`${t}member_roles as mr`, 'mr.membership_id', 'm.id')
    .leftJoin(`${t}roles as r`, 'r.id', 'mr.role_id')
    .where('m.organization_id', orgId)
    .andWhere((query) => query.whereNull('r.id').orWhereNot('r.organization_id', orgId))
    .count({ count: '*' });
  return Number(rows[0]?.count ?? 0);
}

describe(`the last active owner under races (${TEST_DB})`, () => {
  test('two owners demoting each other, the second inside the first\'s owner count: it waits, then is refused; one owner stays', PG_ONLY, async () => {
    const { org, second } = await twoOwners();
    const { outer: first, inner: reply } = await withRequestInTheWindow(
      h,
      { prototype: MembershipRepository.prototype, method: 'countActiveHolders', at: 'before' },
      () => h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: second.token }),
      () => h.patch(`/orgs/${org.id}/members/${second.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }),
    );
    assert.equal(first.status, 200, `${first.text} ${lastError()}`);
    // The second owner is no owner any more once the first demotion commits: owner protection.
    assert.equal(reply?.status, 403, reply?.text);
    assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
  });

  test('an owner suspended while demoting the last other owner: either order leaves exactly one active owner', PG_ONLY, async () => {
    {
      // The demotion counts first; the suspension by the owner it demotes waits and finds its actor demoted.
      const { org, second } = await twoOwners();
      const { outer: demoted, inner: suspended } = await withRequestInTheWindow(
        h,
        { prototype: MembershipRepository.prototype, method: 'countActiveHolders', at: 'before' },
        () => h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: org.owner.token }),
        () => h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: second.token }),
      );
      assert.equal(demoted.status, 200, `${demoted.text} ${lastError()}`);
      assert.equal(suspended?.status, 403, suspended?.text);
      assert.deepEqual(await activeOwners(h, org.id), [second.userId]);
    }
    {
      // The suspension counts first; the demotion by the owner it suspends waits and finds its session ended.
      const { org, second } = await twoOwners();
      const { outer: suspended, inner: demoted } = await withRequestInTheWindow(
        h,
        { prototype: MembershipRepository.prototype, method: 'countActiveHolders', at: 'before' },
        () => h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: second.token }),
        () => h.patch(`/orgs/${org.id}/members/${second.userId}`, { status: 'suspended' }, { token: org.owner.token }),
      );
      assert.equal(suspended.status, 200, `${suspended.text} ${lastError()}`);
      assert.ok([401, 403].includes(demoted!.status), `${demoted?.status} ${demoted?.text}`);
      assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
    }
  });

  test('an owner deletes their account while the other owner leaves, the leave committed before the deletion locks anything: 409, the deleting owner stays', PG_ONLY, async () => {
    const { org, second } = await twoOwners();
    const { outer: deleted, inner: left } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'memberOrganizationIds', when: (userId) => userId === org.owner.userId, at: 'before' },
      () => h.delete(`/orgs/${org.id}/members/${second.userId}`, { token: second.token }),
      () => h.delete(`/users/${org.owner.userId}`, { token: org.owner.accessToken }),
    );
    assert.equal(left?.status, 200, left?.text);
    assert.equal(deleted.status, 409, `deletion counted the owner who left: ${deleted.status} ${deleted.text} ${lastError()}`);
    assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
  });

  test('an owner deletes their account while removing the other owner from another session: the removal waits, then finds its actor gone; one owner stays', PG_ONLY, async () => {
    const { org, second } = await twoOwners();
    const otherSession = await secondSession(org.owner, org.id);
    const { outer: deleted, inner: removed } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'organizationsWhereLastActiveOwner', when: (userId) => userId === org.owner.userId, at: 'before' },
      () => h.delete(`/orgs/${org.id}/members/${second.userId}`, { token: otherSession }),
      () => h.delete(`/users/${org.owner.userId}`, { token: org.owner.accessToken }),
    );
    assert.equal(deleted.status, 200, `${deleted.text} ${lastError()}`);
    // Admitted while both lived; under the organization's lock the actor is gone (membership and session).
    assert.ok([401, 403].includes(removed!.status), `${removed?.status} ${removed?.text}`);
    assert.deepEqual(await activeOwners(h, org.id), [second.userId]);
  });

  test('ownership transfer racing the new owner\'s removal: either order, the organization keeps its owner and nothing of the removed member', PG_ONLY, async () => {
    {
      // The grant reads the owner role; the removal waits, then removes an owner (two owners then).
      const org = await createOrg(h);
      const admin = await addMember(h, org, org.owner.token, ['admin']);
      const otherSession = await secondSession(org.owner, org.id);
      const { outer: granted, inner: removed } = await withRequestInTheWindow(
        h,
        { prototype: RoleRepository.prototype, method: 'findBySlugs', when: (_organizationId, slugs) => slugs.includes('owner') },
        () => h.delete(`/orgs/${org.id}/members/${admin.userId}`, { token: otherSession }),
        () => h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['owner'] }, { token: org.owner.token }),
      );
      assert.equal(granted.status, 200, `${granted.text} ${lastError()}`);
      assert.equal(removed?.status, 200, removed?.text);
      assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
      assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: admin.userId }), 0);
    }
    {
      // The removal first; the transfer waits, then finds no member.
      const org = await createOrg(h);
      const admin = await addMember(h, org, org.owner.token, ['admin']);
      const otherSession = await secondSession(org.owner, org.id);
      const { outer: removed, inner: granted } = await withRequestInTheWindow(
        h,
        { prototype: MembershipRepository.prototype, method: 'rolesOf' },
        () => h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['owner'] }, { token: otherSession }),
        () => h.delete(`/orgs/${org.id}/members/${admin.userId}`, { token: org.owner.token }),
      );
      assert.equal(removed.status, 200, `${removed.text} ${lastError()}`);
      assert.equal(granted?.status, 404, granted?.text);
      assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
      assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: admin.userId }), 0);
    }
  });
});

describe(`roles, invitations and the organization's deletion under races (${TEST_DB})`, () => {
  test('a custom role deleted while a role change grants it: the change waits or is refused, and no member keeps the deleted role', PG_ONLY, async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const otherSession = await secondSession(org.owner, org.id);
    {
      const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read', 'audit.read'] }, { token: org.owner.token });
      assert.equal(role.status, 201, role.text);
      const { outer: changed, inner: deleted } = await withRequestInTheWindow(
        h,
        { prototype: RoleRepository.prototype, method: 'findBySlugs', when: (_organizationId, slugs) => slugs.includes('auditor') },
        () => h.delete(`/orgs/${org.id}/roles/${role.body.data.id}`, { token: otherSession }),
        () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'auditor'] }, { token: org.owner.token }),
      );
      assert.equal(changed.status, 200, `${changed.text} ${lastError()}`);
      assert.equal(deleted?.status, 200, deleted?.text);
      assert.deepEqual((await memberOf(h, org.id, org.owner.token, member.userId))?.roles, ['member']);
    }
    {
      const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read', 'audit.read'] }, { token: org.owner.token });
      assert.equal(role.status, 201, role.text);
      const { outer: deleted, inner: changed } = await withRequestInTheWindow(
        h,
        { prototype: RoleRepository.prototype, method: 'findInOrganization' },
        () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'auditor'] }, { token: otherSession }),
        () => h.delete(`/orgs/${org.id}/roles/${role.body.data.id}`, { token: org.owner.token }),
      );
      assert.equal(deleted.status, 200, `${deleted.text} ${lastError()}`);
      assert.equal(changed?.status, 422, changed?.text);
      assert.deepEqual((await memberOf(h, org.id, org.owner.token, member.userId))?.roles, ['member']);
    }
    assert.equal(await strayRoleRows(org.id), 0);
  });

  test('a member removed while their acceptance is past the organization\'s lock: the removal waits, then ends the membership and its invitation', PG_ONLY, async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('rejoin'));
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
    const token = h.tokenFromMail(invitee.email, 'invite');
    const { outer: accepted, inner: removed } = await withRequestInTheWindow(
      h,
      { prototype: MembershipRepository.prototype, method: 'find', when: (_organizationId, userId) => userId === invitee.userId },
      () => h.delete(`/orgs/${org.id}/members/${invitee.userId}`, { token: org.owner.token }),
      () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken }),
    );
    assert.equal(accepted.status, 200, `${accepted.text} ${lastError()}`);
    assert.equal(removed?.status, 200, removed?.text);
    assert.equal(await memberOf(h, org.id, org.owner.token, invitee.userId), undefined);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id, status: 'pending' }), 0);
    assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: invitee.accessToken })).status, 403);
    // The spent token does not bring the member back.
    assert.equal((await h.post('/auth/invites/accept', { token }, { token: invitee.accessToken })).status, 400);
  });

  test('an organization deleted while an acceptance is past its lock: the member joins, then the deletion ends it; nothing live is left in the organization', PG_ONLY, async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('joins-deleted'));
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 201);
    const token = h.tokenFromMail(invitee.email, 'invite');
    const { outer: accepted, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: MembershipRepository.prototype, method: 'find', when: (_organizationId, userId) => userId === invitee.userId },
      () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }),
      () => h.post('/auth/invites/accept', { token }, { token: invitee.accessToken }),
    );
    assert.equal(accepted.status, 200, `${accepted.text} ${lastError()}`);
    assert.equal(deleted?.status, 200, deleted?.text);
    const orgs = await h.get('/orgs', { token: invitee.accessToken });
    assert.equal(orgs.status, 200, orgs.text);
    assert.deepEqual(orgs.body.data, []);
    assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: invitee.accessToken })).status, 404);
    assert.equal(await countRows(h, 'sessions', { organization_id: org.id, revoked_at: null }), 0);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id, status: 'pending' }), 0);
  });

  test('an API key created while its organization is deleted: the deletion waits for the key, then revokes it', PG_ONLY, async () => {
    const org = await createOrg(h);
    const otherSession = await secondSession(org.owner, org.id);
    const { outer: created, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: ApiKeyRepository.prototype, method: 'insert' },
      () => h.delete(`/orgs/${org.id}`, { token: otherSession }),
      () => h.post(`/orgs/${org.id}/api-keys`, { name: 'raced', permission_keys: ['org.read'] }, { token: org.owner.token }),
    );
    assert.equal(created.status, 201, `${created.text} ${lastError()}`);
    assert.equal(deleted?.status, 200, deleted?.text);
    assert.equal(await countRows(h, 'api_keys', { organization_id: org.id, revoked_at: null }), 0);
    const used = await h.get(`/orgs/${org.id}`, { token: created.body.data.key });
    assert.equal(used.status, 401, used.text);
  });

  test('a role change sent while the organization is deleted: the change waits, and no live session or key of the organization is left', PG_ONLY, async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const otherSession = await secondSession(org.owner, org.id);
    const { outer: deleted, inner: changed } = await withRequestInTheWindow(
      h,
      { prototype: OrganizationRepository.prototype, method: 'suspend', at: 'before' },
      () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: otherSession }),
      () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }),
    );
    assert.equal(deleted.status, 200, `${deleted.text} ${lastError()}`);
    assert.ok([401, 404].includes(changed!.status), `${changed?.status} ${changed?.text}`);
    assert.deepEqual((await h.knex(`${h.tablePrefix}memberships as m`).join(`${h.tablePrefix}member_roles as mr`, 'mr.membership_id', 'm.id').join(`${h.tablePrefix}roles as r`, 'r.id', 'mr.role_id').where({ 'm.user_id': member.userId, 'm.organization_id': org.id }).pluck('r.slug')), ['member']);
    assert.equal(await countRows(h, 'sessions', { organization_id: org.id, revoked_at: null }), 0);
  });
});

describe(`in sequence (${TEST_DB})`, () => {
  test('the sole owner cannot leave by any path, and a suspended member re-invited is refused (422) until reactivated', async () => {
    const org = await createOrg(h);
    assert.equal((await h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token: org.owner.token })).status, 409);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${org.owner.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 409);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token })).status, 409);
    assert.equal((await h.delete(`/users/${org.owner.userId}`, { token: org.owner.accessToken })).status, 409);
    assert.deepEqual(await activeOwners(h, org.id), [org.owner.userId]);
    const member = await addMember(h, org, org.owner.token, ['member']);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 422);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id, status: 'pending' }), 0);
    assert.equal((await memberOf(h, org.id, org.owner.token, member.userId))?.status, 'suspended');
  });
});

describe(`a deleted role and a single sign-on join (${TEST_DB})`, () => {
  const dns = new StubDns();
  let op: TestOpenIdProvider;
  let hs: Harness;
  before(async () => {
    op = await OpenIdProvider.start();
    hs = await startSsoHarness(op, dns, { config: { tokens: { inviteTtl: 60 } } });
  });
  after(async () => {
    await hs?.close();
    await op?.close();
  });

  test('the connection\'s default role deleted: a JIT join over an expired invitation\'s entry grants none of the invited roles', async () => {
    // Threat: an invitation with an owner-equivalent role expires unaccepted (400 from then on);
    // its `invited` entry stays. A JIT join replaces an entry's roles with the default role, but
    // with that role deleted it replaced nothing, so the expired invitation's roles were granted
    // without its token.
    const org = await createOrg(hs);
    const created = await hs.post(`/orgs/${org.id}/roles`, { name: 'Contractor', slug: 'contractor', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const domain = (await addVerifiedDomain(hs, dns, org)).domain as string;
    await connect(hs, op, org, { jit: true, default_role: 'contractor' });
    assert.equal((await hs.delete(`/orgs/${org.id}/roles/${created.body.data.id}`, { token: org.owner.token })).status, 200);
    const user = await hs.signUp(addressAt(domain, 'expired-admin'));
    assert.equal((await hs.post(`/orgs/${org.id}/invites`, { email: user.email, role_slugs: ['admin'] }, { token: org.owner.token })).status, 201);
    const inviteToken = hs.tokenFromMail(user.email, 'invite');
    hs.clock.advance(61);
    const { exchanged } = await ssoLogin(hs, op, { sub: newSubject(), email: user.email }, { email: user.email });
    assert.equal(exchanged?.status, 200, exchanged?.text);
    const row = await memberOf(hs, org.id, org.owner.token, user.userId);
    assert.equal(row?.status, 'active');
    assert.deepEqual(row?.roles, [], `JIT join granted the expired invitation's roles: ${JSON.stringify(row)}`);
    assert.equal((await hs.post('/auth/invites/accept', { token: inviteToken }, { token: user.accessToken })).status, 400);
  });
});
