import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, Harness, TEST_DB, type TestResponse, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, loginChallengeFor, registerRecorded } from '../helpers/passkeys.js';
import { SessionRepository } from '../../src/store/session-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';
import { PasskeyRepository } from '../../src/store/passkey-repository.js';

/*
 * Interleavings of sessions, sign-in and account services on PostgreSQL (READ COMMITTED): a
 * second request starts between two reads of one write path, from inside a wrapped repository
 * method, and commits there unless a lock makes it wait. Each test asks for an answer some
 * serial order of the two requests would give.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } }, webauthn: fixtureWebauthnConfig } });
});
after(async () => {
  await h.close();
});

async function sessionRow(sessionId: string): Promise<{ revoked_at: unknown; organization_id: unknown; revoked_reason: unknown }> {
  return h.knex(`${h.tablePrefix}sessions`).where({ id: sessionId }).first();
}

/** Runs `inner` in the window of switch-org: after its reads and recheck, before the session is re-pointed. */
function switchWithRequestInTheWindow(token: string, organizationId: string, inner: () => Promise<TestResponse>): Promise<{ outer: TestResponse; inner: TestResponse | undefined }> {
  return withRequestInTheWindow(
    h,
    { prototype: SessionRepository.prototype, method: 'setOrganization', when: (_id, orgId) => orgId === organizationId, at: 'before' },
    inner,
    () => h.post('/auth/switch-org', { organization_id: organizationId }, { token }),
  );
}

/** An organization and a member of it signed in with a session of its own, not yet switched into it. */
async function memberSignedIn() {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token);
  const login = await h.post('/auth/login', { email: member.email, password: member.password });
  assert.equal(login.status, 200, login.text);
  return { org, member, login, sessionId: decodeJwt(login.body.data.access_token).sid as string };
}

describe(`session interleavings on ${TEST_DB}`, () => {
  test('a member removed while switch-org runs: 403, or the switched session is revoked with the membership', PG_ONLY, async () => {
    const { org, member, login, sessionId } = await memberSignedIn();
    const { outer: switched, inner: removed } = await switchWithRequestInTheWindow(login.body.data.access_token, org.id, () =>
      h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token }),
    );
    assert.equal(removed?.status, 200, removed?.text);
    const row = await sessionRow(sessionId);
    // Removal first: 403. Switch first: a token scoped to the organization, then the removal revokes the session.
    if (switched.status === 200) {
      assert.equal(decodeJwt(switched.body.data.access_token).org, org.id, `switch-org answered 200 with a token outside the organization: ${switched.text}`);
      assert.notEqual(row.revoked_at, null, `the switched session outlived the removal: ${JSON.stringify(row)}`);
    } else {
      assert.equal(switched.status, 403, switched.text);
    }
  });

  test('an organization deleted while switch-org runs: 404, or the switched session is revoked with it', PG_ONLY, async () => {
    const { org, login, sessionId } = await memberSignedIn();
    const { outer: switched, inner: deleted } = await switchWithRequestInTheWindow(login.body.data.access_token, org.id, () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }));
    assert.equal(deleted?.status, 200, deleted?.text);
    const row = await sessionRow(sessionId);
    if (switched.status === 200) {
      assert.equal(decodeJwt(switched.body.data.access_token).org, org.id, `switch-org answered 200 with a token outside the organization: ${switched.text}`);
      assert.notEqual(row.revoked_at, null, `the switched session lives on in the deleted organization: ${JSON.stringify(row)}`);
    } else {
      assert.equal(switched.status, 404, switched.text);
    }
  });

  test('an account deleted between verify-email\'s account read and its write: 400, or the proof comes before the deletion', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('verify-deleted'), undefined, { verify: false });
    const verifyToken = h.tokenFromMail(user.email, 'verify_email');
    // The account's read, locked or not: the deletion starts right after it.
    const { outer: verified, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: ['findById', 'findByIdForUpdate'], when: (id) => id === user.userId },
      () => h.delete(`/users/${user.userId}`, { token: user.accessToken }),
      () => h.post('/auth/email/verify', { token: verifyToken }),
    );
    assert.equal(deleted?.status, 200, deleted?.text);
    const order = h.events.filter((event) => event.user_id === user.userId).map((event) => event.type);
    if (verified.status === 200) {
      assert.ok(order.indexOf('user.email_verified') >= 0 && order.indexOf('user.email_verified') < order.indexOf('user.deleted'), `events: ${order.join(', ')}`);
    } else {
      assert.equal(verified.status, 400, verified.text);
      assert.ok(!order.includes('user.email_verified'), `a deleted account's address was proven: ${order.join(', ')}`);
    }
  });
});

describe(`passkey sign-in interleavings on ${TEST_DB}`, () => {
  /** Signs in with `outer`; a sign-in with `inner` commits right after `outer` looked its passkey up. */
  async function loginWithLoginInTheWindow(outer: (typeof fixtures.primary.assertions)[0], inner: (typeof fixtures.primary.assertions)[0]): Promise<{ outer: TestResponse; inner: TestResponse | undefined }> {
    const outerChallenge = await loginChallengeFor(h, outer);
    const innerChallenge = await loginChallengeFor(h, inner);
    return withRequestInTheWindow(
      h,
      { prototype: PasskeyRepository.prototype, method: 'findByCredentialId' },
      () => h.post('/auth/passkeys/login/verify', { challenge_id: innerChallenge, response: inner.response }),
      () => h.post('/auth/passkeys/login/verify', { challenge_id: outerChallenge, response: outer.response }),
    );
  }

  test('two sign-ins with one passkey, the lower counter committed first: both sign in', PG_ONLY, async () => {
    const owner = await h.signUp(uniqueEmail('passkey-twice'));
    const registered = await registerRecorded(h, owner.accessToken, fixtures.primary);
    assert.equal(registered.status, 200, registered.text);
    const [, a1, , a3] = fixtures.primary.assertions;
    // Serially, a1 (counter 3) then a3 (counter 5) both sign in: the counter moves forward each time.
    const { outer, inner } = await loginWithLoginInTheWindow(a3!, a1!);
    assert.equal(inner?.status, 200, inner?.text);
    const failed = h.eventsOfType('user.login_failed').filter((event) => event.user_id === owner.userId).map((event) => event.data);
    assert.equal(outer.status, 200, `${outer.text} ${JSON.stringify(failed)}`);
  });

  test('a cloned passkey signing in right after the genuine one moved the counter past it: reported as a regression', PG_ONLY, async () => {
    const owner = await h.signUp(uniqueEmail('passkey-clone'));
    const registered = await registerRecorded(h, owner.accessToken, fixtures.second);
    assert.equal(registered.status, 200, registered.text);
    const [s0, s1] = fixtures.second.assertions;
    // Serially, s1 (counter 3) then s0 (counter 2): the second is a regression, refused and reported.
    const { outer, inner } = await loginWithLoginInTheWindow(s0!, s1!);
    assert.equal(inner?.status, 200, inner?.text);
    assert.equal(outer.status, 422, outer.text);
    const failed = h.eventsOfType('user.login_failed').filter((event) => event.user_id === owner.userId).map((event) => event.data.reason);
    assert.deepEqual(failed, ['counter_regressed']);
    assert.equal(h.eventsOfType('mfa.passkey_counter_regressed').filter((event) => event.user_id === owner.userId).length, 1);
  });
});
