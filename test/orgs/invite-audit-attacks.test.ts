import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import { Harness, STRONG_PASSWORD, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg, memberOf, superadmin, switchOrg } from '../helpers/orgs.js';
import { InviteRepository } from '../../src/store/organization-repository.js';

/*
 * Invitations and the organization audit log under attack (docs/organizations.md, docs/events.md).
 * Threats: an invite token spent by an account that is not its address's (another spelling, an
 * account deleted and registered again, a disabled one), or after the invite, its organization or
 * its sender is gone, or a moment past its expiry; and an audit log that tells a reader more than
 * the organization's own story: another organization's events, a member's activity elsewhere, the
 * address of an invited or deleted person, the IP of an account deleted since.
 */

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const INVITE_TTL_MS = 7 * 24 * 3600 * 1000;

async function invite(orgId: string, token: string, email: string, roleSlugs: string[] = ['member']): Promise<{ id: string; expiresAt: number; token: string }> {
  const response = await h.post(`/orgs/${orgId}/invites`, { email, role_slugs: roleSlugs }, { token });
  assert.equal(response.status, 201, response.text);
  return { id: response.body.data.id, expiresAt: Date.parse(response.body.data.expires_at), token: h.tokenFromMail(response.body.data.email, 'invite') };
}

async function inviteRow(id: string): Promise<{ status: string }> {
  return h.knex(`${h.tablePrefix}invites`).where({ id }).first('status');
}

async function membershipRows(orgId: string, userId: string): Promise<Array<{ status: string }>> {
  return h.knex(`${h.tablePrefix}memberships`).where({ organization_id: orgId, user_id: userId }).select('status');
}

async function freshToken(user: { email: string; password: string }): Promise<string> {
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  return login.body.data.access_token;
}

async function auditLog(orgId: string, token: string): Promise<any[]> {
  const events: any[] = [];
  let cursor: string | null = null;
  do {
    const response: { status: number; text: string; body: any } = await h.get(`/orgs/${orgId}/audit-log?limit=100${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(response.status, 200, response.text);
    events.push(...response.body.data.events);
    cursor = response.body.data.next_cursor;
  } while (cursor);
  return events;
}

describe('an invite token spent by an account that is not its address\'s', () => {
  test('another spelling of the address that is another mailbox is refused (403) and burns nothing', async () => {
    const org = await createOrg(h);
    const tag = Math.random().toString(36).slice(2, 8);
    const invited = `ada-${tag}@example.com`;
    const { token, id } = await invite(org.id, org.owner.token, invited, ['admin']);
    // Look-alikes a squatter can own and prove: a Cyrillic "а", a plus tag, another domain
    // spelled close, a trailing dot on the local part.
    for (const lookalike of [`\u0430da-${tag}@example.com`, `ada-${tag}+x@example.com`, `ada-${tag}@example.co`, `ada-${tag}@examp1e.com`]) {
      const squatter = await h.signUp(lookalike);
      assertError(await h.post('/auth/invites/accept', { token }, { token: squatter.accessToken }), 403, 'forbidden', lookalike);
      assert.equal((await inviteRow(id)).status, 'pending', lookalike);
      assert.deepEqual(await membershipRows(org.id, squatter.userId), [], lookalike);
    }
    // The address in capitals or decomposed is the one account and mailbox: it joins.
    const owner = await h.signUp(invited.toUpperCase());
    assert.equal((await h.post('/auth/invites/accept', { token }, { token: owner.accessToken })).status, 200);
  });

  test('an account deleted after the invite: its token is dead, and the address registered again does not inherit it', async () => {
    const org = await createOrg(h);
    const first = await h.signUp(uniqueEmail('gone'));
    const sent = await invite(org.id, org.owner.token, first.email, ['admin']);
    assert.equal((await memberOf(h, org.id, org.owner.token, first.userId))?.status, 'invited');
    assert.equal((await h.delete(`/users/${first.userId}`, { token: first.accessToken })).status, 200);
    assert.equal((await h.post('/auth/invites/accept', { token: sent.token }, { token: first.accessToken })).status, 401);

    const again = await h.signUp(first.email);
    assert.notEqual(again.userId, first.userId);
    // The invite was revoked and its address replaced by the tombstone's: refused either way.
    const reused = await h.post('/auth/invites/accept', { token: sent.token }, { token: again.accessToken });
    assert.ok(reused.status === 403 || reused.status === 400, reused.text);
    assert.deepEqual(await membershipRows(org.id, again.userId), []);
    assert.deepEqual(await membershipRows(org.id, first.userId), []);
    const pending = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
    assert.deepEqual(pending.body.data, []);
  });

  test('a disabled invitee cannot accept; the invite is not spent', async () => {
    const org = await createOrg(h);
    const root = await superadmin(h);
    const invitee = await h.signUp(uniqueEmail('disabled'));
    const sent = await invite(org.id, org.owner.token, invitee.email);
    assert.equal((await h.post(`/users/${invitee.userId}/disable`, {}, { token: root.accessToken })).status, 200);
    assert.equal((await h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken })).status, 401);
    assert.equal((await h.post('/auth/login', { email: invitee.email, password: STRONG_PASSWORD })).status, 403);
    assert.equal((await inviteRow(sent.id)).status, 'pending');
    assert.deepEqual(await membershipRows(org.id, invitee.userId), [{ status: 'invited' }]);
  });
});

describe('an invite spent when it should be dead', () => {
  test('expiry at its boundary (injected clock): a millisecond before it joins, at expires_at it is refused and leaves the member list', async () => {
    const org = await createOrg(h);
    const early = await h.signUp(uniqueEmail('early'));
    const late = await h.signUp(uniqueEmail('late'));
    const earlyInvite = await invite(org.id, org.owner.token, early.email);
    const lateInvite = await invite(org.id, org.owner.token, late.email);
    assert.equal(lateInvite.expiresAt, earlyInvite.expiresAt);
    assert.equal(lateInvite.expiresAt, h.clock.now() + INVITE_TTL_MS);

    h.clock.advance((INVITE_TTL_MS - 1) / 1000);
    assert.equal(h.clock.now(), lateInvite.expiresAt - 1);
    const ownerToken = await switchOrg(h, await freshToken(org.owner), org.id);
    const earlyToken = await freshToken(early);
    const lateToken = await freshToken(late);
    const listed = await h.get(`/orgs/${org.id}/invites`, { token: ownerToken });
    assert.equal(listed.body.data.length, 2);
    assert.equal((await h.post('/auth/invites/accept', { token: earlyInvite.token }, { token: earlyToken })).status, 200);

    h.clock.advance(0.001);
    assert.equal(h.clock.now(), lateInvite.expiresAt);
    assert.equal((await memberOf(h, org.id, ownerToken, late.userId)), undefined, 'an expired invite leaves no invited entry');
    assert.deepEqual((await h.get(`/orgs/${org.id}/invites`, { token: ownerToken })).body.data, []);
    assertError(await h.post('/auth/invites/accept', { token: lateInvite.token }, { token: lateToken }), 400, 'invalid_token');
    assert.equal((await inviteRow(lateInvite.id)).status, 'expired');
    assert.deepEqual(await membershipRows(org.id, late.userId), []);
  });

  test('revoked, then sent again: the revoked invite\'s token stays dead beside the new one', async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('resent'));
    const first = await invite(org.id, org.owner.token, invitee.email, ['admin']);
    assert.equal((await h.delete(`/orgs/${org.id}/invites/${first.id}`, { token: org.owner.token })).status, 200);
    const second = await invite(org.id, org.owner.token, invitee.email, ['member']);
    assert.notEqual(second.id, first.id);
    assert.notEqual(second.token, first.token);
    assertError(await h.post('/auth/invites/accept', { token: first.token }, { token: invitee.accessToken }), 400, 'invalid_token');
    assert.equal((await inviteRow(second.id)).status, 'pending', 'the refused old token spent nothing of the new invite');
    assert.equal((await h.post('/auth/invites/accept', { token: second.token }, { token: invitee.accessToken })).status, 200);
    assert.deepEqual((await memberOf(h, org.id, org.owner.token, invitee.userId))?.roles, ['member']);
  });

  test('an invite to an organization deleted since is refused (400) and makes no membership', async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('late-org'));
    const sent = await invite(org.id, org.owner.token, invitee.email, ['admin']);
    assert.equal((await h.delete(`/orgs/${org.id}`, { token: org.owner.token })).status, 200);
    assertError(await h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }), 400, 'invalid_token');
    assert.equal((await inviteRow(sent.id)).status, 'revoked');
    assert.notEqual((await membershipRows(org.id, invitee.userId))[0]?.status, 'active');
    assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: invitee.accessToken })).status, 404);
  });

  test('the sender removed from the organization: the invite they sent dies with their membership', async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const invitee = await h.signUp(uniqueEmail('by-gone'));
    const sent = await invite(org.id, admin.token, invitee.email);
    assert.equal((await h.delete(`/orgs/${org.id}/members/${admin.userId}`, { token: org.owner.token })).status, 200);
    assertError(await h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }), 400, 'invalid_token');
    assert.deepEqual(await membershipRows(org.id, invitee.userId), []);
  });
});

describe('the audit log tells only the organization\'s own story', () => {
  test('a reader holding audit.read alone sees no address, no event of another organization, and no member\'s activity elsewhere', async () => {
    const a = await createOrg(h);
    const b = await createOrg(h);
    const created = await h.post(`/orgs/${a.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['audit.read'] }, { token: a.owner.token });
    assert.equal(created.status, 201, created.text);
    const auditor = await addMember(h, a, a.owner.token, ['auditor']);
    // A member of both organizations, active in B.
    const both = await addMember(h, a, a.owner.token, ['member']);
    const inB = await addMember(h, b, b.owner.token, ['admin'], { ...both, accessToken: await freshToken(both) });
    await invite(b.id, inB.token, uniqueEmail('b-invitee'));
    assert.equal((await h.patch(`/orgs/${b.id}`, { name: 'B renamed' }, { token: inB.token })).status, 200);
    // Invited and suspended people of A, with accounts and without.
    const invitedAccount = await h.signUp(uniqueEmail('invited'));
    await invite(a.id, a.owner.token, invitedAccount.email);
    const noAccount = uniqueEmail('no-account');
    await invite(a.id, a.owner.token, noAccount);
    const suspended = await addMember(h, a, a.owner.token, ['member']);
    assert.equal((await h.patch(`/orgs/${a.id}/members/${suspended.userId}`, { status: 'suspended' }, { token: a.owner.token })).status, 200);

    const events = await auditLog(a.id, auditor.token);
    assert.ok(events.length > 0);
    for (const event of events) assert.equal(event.organization_id, a.id, JSON.stringify(event));
    const text = JSON.stringify(events);
    for (const address of [invitedAccount.email, noAccount, suspended.email, both.email, a.owner.email]) assert.ok(!text.includes(address), address);
    assert.ok(!text.includes('@'), 'no address at all');
    // What the member of both did in B (joined, switched, invited, renamed) is B's story.
    const theirs = events.filter((event) => event.actor_id === both.userId).map((event) => event.type).sort();
    assert.deepEqual(theirs, ['auth.org_switched', 'member.joined']);
  });

  test('a deleted account: the events it left keep no address and no IP', async () => {
    const org = await createOrg(h);
    const leaver = await addMember(h, org, org.owner.token, ['admin']);
    await invite(org.id, leaver.token, uniqueEmail('by-leaver'));
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: leaver.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    const before = await auditLog(org.id, org.owner.token);
    assert.ok(before.some((event) => event.actor_id === leaver.userId && event.ip !== null), 'the member\'s IP was recorded');

    assert.equal((await h.delete(`/users/${leaver.userId}`, { token: leaver.accessToken })).status, 200);
    const events = await auditLog(org.id, org.owner.token);
    const theirs = events.filter((event) => event.actor_id === leaver.userId || (event.user_id === leaver.userId && event.actor_id === null));
    assert.ok(theirs.length >= 3, theirs.map((event) => event.type).join(','));
    for (const event of theirs) assert.equal(event.ip, null, event.type);
    assert.ok(!JSON.stringify(events).includes(leaver.email));
    assert.ok(events.some((event) => event.type === 'member.removed' && event.user_id === leaver.userId));
  });

  test('a superadmin reads any organization\'s log; a deleted organization\'s log is 404 to everyone', async () => {
    const org = await createOrg(h);
    const root = await superadmin(h);
    assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: root.accessToken })).status, 200);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    assert.equal((await h.delete(`/orgs/${org.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await h.get(`/orgs/${org.id}/audit-log`, { token: root.accessToken })).status, 404);
    const stale = await h.get(`/orgs/${org.id}/audit-log`, { token: admin.token });
    assert.ok(stale.status === 401 || stale.status === 404, stale.text);
  });
});

const PG_ONLY = { skip: TEST_DB !== 'pg' && 'SQLite runs one write transaction at a time', timeout: 60_000 };

describe('accept raced with what ends the invite (PostgreSQL)', () => {
  test('a revoke committed inside accept\'s window: the accept is refused and no one joins', PG_ONLY, async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('raced-revoke'));
    const sent = await invite(org.id, org.owner.token, invitee.email, ['admin']);
    const { outer: accepted, inner: revoked } = await withRequestInTheWindow(
      h,
      { prototype: InviteRepository.prototype, method: 'findByTokenHash' },
      () => h.delete(`/orgs/${org.id}/invites/${sent.id}`, { token: org.owner.token }),
      () => h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }),
    );
    assert.equal(revoked?.status, 200, revoked?.text);
    assertError(accepted, 400, 'invalid_token');
    assert.deepEqual(await membershipRows(org.id, invitee.userId), []);
    assert.equal((await inviteRow(sent.id)).status, 'revoked');
  });

  test('the sender removed inside accept\'s window: the accept is refused', PG_ONLY, async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const invitee = await h.signUp(uniqueEmail('raced-removal'));
    const sent = await invite(org.id, admin.token, invitee.email);
    const { outer: accepted, inner: removed } = await withRequestInTheWindow(
      h,
      { prototype: InviteRepository.prototype, method: 'findByTokenHash' },
      () => h.delete(`/orgs/${org.id}/members/${admin.userId}`, { token: org.owner.token }),
      () => h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }),
    );
    assert.equal(removed?.status, 200, removed?.text);
    assertError(accepted, 400, 'invalid_token');
    assert.deepEqual(await membershipRows(org.id, invitee.userId), []);
  });

  test('the organization deleted inside accept\'s window: the accept is refused', PG_ONLY, async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('raced-deletion'));
    const sent = await invite(org.id, org.owner.token, invitee.email);
    const { outer: accepted, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: InviteRepository.prototype, method: 'findByTokenHash' },
      () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }),
      () => h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }),
    );
    assert.equal(deleted?.status, 200, deleted?.text);
    assertError(accepted, 400, 'invalid_token');
    assert.notEqual((await membershipRows(org.id, invitee.userId))[0]?.status, 'active');
  });

  test('accept and revoke sent together, again and again: one of them wins, never both', PG_ONLY, async () => {
    const org = await createOrg(h);
    for (let round = 0; round < 8; round += 1) {
      const invitee = await h.signUp(uniqueEmail(`race-${round}`));
      const sent = await invite(org.id, org.owner.token, invitee.email);
      const [accepted, revoked] = await Promise.all([
        h.post('/auth/invites/accept', { token: sent.token }, { token: invitee.accessToken }),
        h.delete(`/orgs/${org.id}/invites/${sent.id}`, { token: org.owner.token }),
      ]);
      const rows = await membershipRows(org.id, invitee.userId);
      if (accepted.status === 200) {
        assert.equal(revoked.status, 404, `round ${round}: ${revoked.text}`);
        assert.deepEqual(rows, [{ status: 'active' }]);
        assert.equal((await inviteRow(sent.id)).status, 'accepted');
      } else {
        assertError(accepted, 400, 'invalid_token', `round ${round}`);
        assert.equal(revoked.status, 200, `round ${round}: ${revoked.text}`);
        assert.deepEqual(rows, []);
        assert.equal((await inviteRow(sent.id)).status, 'revoked');
      }
    }
  });
});
