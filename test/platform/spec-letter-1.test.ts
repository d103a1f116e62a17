import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { decodeJwt, type Harness, harnessesClosedAfterFile, uniqueEmail } from '../helpers/harness.js';
import { enrollTotp, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { addMember, createOrg, roleIdOf, switchOrg } from '../helpers/orgs.js';

// Spec sections 1 to 3 and the endpoints of section 4, taken to the letter: the requirements no
// other conformance file pins (test/README.md lists those).

const start = harnessesClosedAfterFile();

describe('spec 2 and 3 to the letter', () => {
  let h: Harness;
  before(async () => {
    h = await start();
  });

  test('2.1: a login access token carries every claim with its type: org null (present), roles and scope arrays, sid the listed session', async () => {
    const user = await h.signUp(uniqueEmail('claims'));
    const claims = decodeJwt(user.accessToken);
    assert.equal(claims.sub, user.userId);
    assert.equal(typeof claims.jti, 'string');
    assert.ok('org' in claims, 'org is present');
    assert.equal(claims.org, null);
    assert.ok(Array.isArray(claims.roles) && claims.roles.every((r: unknown) => typeof r === 'string'), 'roles is an array of strings');
    assert.ok(Array.isArray(claims.scope) && claims.scope.every((s: unknown) => typeof s === 'string'), 'scope is an array of strings');
    assert.equal(claims.email_verified, true);
    assert.equal(claims.mfa, false);
    assert.deepEqual(claims.amr, ['pwd']);
    assert.ok(Number.isInteger(claims.auth_time), 'auth_time is integer epoch seconds');
    const sessions = await h.get('/auth/sessions', { token: user.accessToken });
    assert.equal(sessions.status, 200);
    assert.deepEqual(sessions.body.data.sessions.map((s: { id: string }) => s.id), [claims.sid], 'sid is the session');
  });

  test('2.8: a batch holds 10 distinct codes of the form xxxxx-xxxxx', async () => {
    const user = await h.signUp(uniqueEmail('codes'));
    const { recoveryCodes } = await enrollTotp(h, user.accessToken);
    assert.equal(recoveryCodes.length, 10);
    assert.equal(new Set(recoveryCodes.map((c) => c.toLowerCase())).size, 10, 'distinct');
    for (const code of recoveryCodes) assert.match(code, /^[a-z2-7]{5}-[a-z2-7]{5}$/i);
  });

  test('2.12 / 4.3: only the cloned owner role is frozen: the cloned admin and member roles can be edited', async () => {
    const org = await createOrg(h);
    for (const slug of ['admin', 'member']) {
      const id = await roleIdOf(h, org.id, org.owner.token, slug);
      const edited = await h.patch(`/orgs/${org.id}/roles/${id}`, { name: `Renamed ${slug}`, description: 'edited' }, { token: org.owner.token });
      assert.equal(edited.status, 200, `${slug}: ${edited.text}`);
      assert.equal(edited.body.data.name, `Renamed ${slug}`);
      assert.equal(edited.body.data.slug, slug, 'slug unchanged');
      assert.equal(edited.body.data.is_system, true);
    }
  });

  test('3 member status: suspended then active again: GET /orgs lists the organization and switch-org works again', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    const suspended = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
    assert.equal(suspended.status, 200, suspended.text);
    const login = await h.post('/auth/login', { email: member.email, password: member.password });
    const token = login.body.data.access_token as string;
    assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token })).status, 403);
    const reactivated = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'active' }, { token: org.owner.token });
    assert.equal(reactivated.status, 200, reactivated.text);
    assert.equal(reactivated.body.data.status, 'active');
    assert.deepEqual(reactivated.body.data.roles, ['member'], 'the roles held before the suspension');
    const orgs = await h.get('/orgs', { token });
    assert.ok((orgs.body.data as Array<{ id: string }>).some((o) => o.id === org.id), 'listed again');
    await switchOrg(h, token, org.id);
  });

  /** A member of two organizations with three sessions: one scoped to each organization, one to none. */
  async function memberOfTwoWithThreeSessions() {
    const org = await createOrg(h);
    const other = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    // The helper re-points the member's first session to the other organization.
    const otherToken = (await addMember(h, other, other.owner.token, ['member'], member)).token;
    const second = await h.post('/auth/login', { email: member.email, password: member.password });
    const scopedToken = await switchOrg(h, second.body.data.access_token, org.id);
    const third = await h.post('/auth/login', { email: member.email, password: member.password });
    return { org, other, member, otherToken, scopedToken, third };
  }

  test('3 member status: suspension revokes only the sessions scoped to that organization', async () => {
    const { org, member, otherToken, scopedToken, third } = await memberOfTwoWithThreeSessions();
    assert.equal((await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token })).status, 200);
    assert.equal((await h.get('/auth/me', { token: scopedToken })).status, 401, 'the session scoped to the organization ends');
    assert.equal((await h.get('/auth/me', { token: otherToken })).status, 200, 'a session scoped to another organization stays');
    assert.equal((await h.get('/auth/me', { token: third.body.data.access_token })).status, 200, 'a session scoped to none stays');
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: third.body.data.refresh_token })).status, 200);
  });

  test('3 organization status: deletion revokes only the sessions scoped to it', async () => {
    const { org, other, otherToken, scopedToken, third } = await memberOfTwoWithThreeSessions();
    const deleted = await h.delete(`/orgs/${org.id}`, { token: org.owner.token });
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal((await h.get('/auth/me', { token: scopedToken })).status, 401);
    assert.equal((await h.get('/auth/me', { token: otherToken })).status, 200, 'scoped to another organization: stays');
    assert.equal((await h.get('/auth/me', { token: third.body.data.access_token })).status, 200, 'scoped to none: stays');
    const me = await h.get('/auth/me', { token: third.body.data.access_token });
    assert.deepEqual((me.body.data.orgs as Array<{ id: string }>).map((o) => o.id), [other.id]);
    const orgs = await h.get('/orgs', { token: third.body.data.access_token });
    assert.deepEqual((orgs.body.data as Array<{ id: string }>).map((o) => o.id), [other.id], 'GET /orgs lists active memberships of active organizations');
  });

  test('3 MFA factor / 4.2: after the last confirmed factor is removed, the next confirmed one is a first factor again: recovery codes and mfa.enrolled', async () => {
    const user = await signUpWithTotp(h);
    assert.equal((await h.delete(`/auth/mfa/factors/${user.factorId}`, { token: user.accessToken })).status, 200);
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const before = h.events.length;
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: enrolled.body.data.factor_id, code: nextTotpCode(h, enrolled.body.data.secret) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.body.data.status, 'confirmed');
    assert.equal(confirmed.body.data.recovery_codes?.length, 10, 'a fresh batch: the old one was retired with the last factor');
    assert.deepEqual(h.events.slice(before).filter((e) => e.user_id === user.userId).map((e) => e.type), ['mfa.enrolled']);
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors.map((f: { id: string; default: boolean; confirmed: boolean }) => [f.id, f.default, f.confirmed]), [[enrolled.body.data.factor_id, true, true]], 'the only confirmed factor is the default');
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    const verified = await h.post('/auth/mfa/verify', { code: confirmed.body.data.recovery_codes[0] }, { token: login.body.data.mfa_token });
    assert.equal(verified.status, 200, 'a code of the new batch signs in');
    const stale = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal((await h.post('/auth/mfa/verify', { code: user.recoveryCodes[1] }, { token: stale.body.data.mfa_token })).status, 422, 'the old batch stays retired');
  });
});
