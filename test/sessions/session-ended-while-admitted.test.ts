import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { allRoutes } from '../../src/http/routes/index.js';
import { AccessPolicy } from '../../src/services/access/access-policy.js';
import { assertError, assertUnauthorized, countRows } from '../helpers/account.js';
import { decodeJwt, Harness, type SignedUpUser, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { enrollEmail, enrollTotp, lastMailCode, lastSmsCode, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, roleIdOf, superadmin } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';
import { addVerifiedDomain, connect, ssoOrg, startSsoHarness, StubDns, uniqueDomain } from '../helpers/sso.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import {
  authorizeAtProvider,
  CLIENT_ID,
  CLIENT_SECRET,
  callRouterCallback,
  exchangeCode,
  handoffPair,
  newSubject,
  PROVIDER_ID,
  type SocialStart,
  socialRoundTripAndExchange,
  startSocialHarness,
  TestOpenIdProvider,
} from '../helpers/oidc.js';
import { eventually } from '../helpers/eventually.js';

/*
 * Threat: a thief's request is admitted while its session is live, and the owner ends that
 * session (logout-all) before the request writes. A credential, codes standing in for one, or a
 * webhook and its secret must not be added by a session that had already ended when the write
 * committed, nor any other write: every write re-checks its caller's session inside its
 * transaction, its row locked (`AccessPolicy.assertSessionLive`, called by the credential gate,
 * `grant.recheck` and the account's own writes, docs/security.md). Where the write goes through
 * `grant.recheck`, an authority taken away meanwhile refuses it too.
 */

let h: Harness;
before(async () => {
  h = await Harness.start({
    config: { webauthn: fixtureWebauthnConfig, webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true }, events: { delivery: { pollMs: 3_600_000 } } },
  });
});
after(async () => {
  await h.close();
});

/** A second sign-in of `user`: the owner's own session, beside the one a thief holds. */
async function ownersSession(user: Pick<SignedUpUser, 'email' | 'password'>, on: Harness = h): Promise<string> {
  const login = await on.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  return login.body.data.access_token;
}

/**
 * Every route a case reached, as `method path` (a path alone is not unique: PATCH and DELETE
 * share `/orgs/:orgId`, for one): the last test checks that every write a session can call is
 * among them.
 */
const covered = new Set<string>();

/**
 * Sends `request`, and runs `change` once, after the access policy admitted the request to
 * `path` and before its service writes anything.
 */
async function changedAfterAdmission(path: string, change: () => Promise<void>, request: () => ReturnType<Harness['post']>) {
  const admit = AccessPolicy.prototype.admit;
  let changed = false;
  AccessPolicy.prototype.admit = async function (this: AccessPolicy, ...args: Parameters<typeof admit>) {
    const grant = await admit.apply(this, args);
    // The router admits with the route itself as the requirement: its method and declared path.
    const route = args[1] as { method?: string; path?: string };
    if (!changed && route.path === path) {
      changed = true;
      covered.add(`${route.method} ${route.path}`);
      await change();
    }
    return grant;
  } as typeof admit;
  try {
    const answer = await request();
    assert.ok(changed, 'the change ran after the admission');
    return answer;
  } finally {
    AccessPolicy.prototype.admit = admit;
  }
}

/** `changedAfterAdmission`, the change being the owner's logout-all with `ownerToken`. */
function endedAfterAdmission(path: string, ownerToken: string, request: () => ReturnType<Harness['post']>, on: Harness = h) {
  return changedAfterAdmission(
    path,
    async () => {
      const logoutAll = await on.post('/auth/logout-all', undefined, { token: ownerToken });
      assert.equal(logoutAll.status, 200, logoutAll.text);
    },
    request,
  );
}

describe(`a session ended between a request's admission and its write, on ${TEST_DB}`, () => {
  test('confirming a TOTP factor: 401, and the factor stays unconfirmed', async () => {
    const user = await h.signUp(uniqueEmail('totp-ended'));
    const owner = await ownersSession(user);
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const { factor_id: factorId, secret } = enrolled.body.data;
    const confirmed = await endedAfterAdmission('/auth/mfa/totp/confirm', owner, () =>
      h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: user.accessToken }),
    );
    assertUnauthorized(confirmed);
    await assertNoFactorBound(user);
  });

  test('registering a passkey: 401, and no passkey', async () => {
    const user = await h.signUp(uniqueEmail('passkey-ended'));
    const owner = await ownersSession(user);
    const registered = await endedAfterAdmission('/auth/passkeys/register/verify', owner, () => registerRecorded(h, user.accessToken, fixtures.primary));
    assertUnauthorized(registered);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
  });

  test('regenerating recovery codes: 401, and the old codes stay the account’s', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const owner = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
    assert.equal(owner.status, 200, owner.text);
    const before = await recoveryCodeRows(user.userId);
    const regenerated = await endedAfterAdmission('/auth/mfa/recovery-codes/regenerate', owner.body.data.access_token, () =>
      h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken }),
    );
    assertUnauthorized(regenerated);
    assert.deepEqual(await recoveryCodeRows(user.userId), before);
  });

  test('creating an API key: 401, and no key', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const created = await endedAfterAdmission('/orgs/:orgId/api-keys', owner, () =>
      h.post(`/orgs/${org.id}/api-keys`, { name: 'Exporter', permission_keys: ['org.read'] }, { token: org.owner.token }),
    );
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'api_keys', { user_id: org.owner.userId }), 0);
  });

  test('creating a webhook: 401, and no webhook', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const created = await endedAfterAdmission('/orgs/:orgId/webhooks', owner, () =>
      h.post(`/orgs/${org.id}/webhooks`, { url: 'http://127.0.0.1:9/hooks', events: ['*'] }, { token: org.owner.token }),
    );
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'webhooks', { organization_id: org.id }), 0);
  });

  test('rotating a webhook’s secret: 401, and the secret stays', async () => {
    const org = await createOrg(h);
    const webhookId = await webhookOf(org);
    const stored = () => storedRow('webhooks', { id: webhookId });
    const before = await stored();
    const owner = await ownersSession(org.owner);
    const rotated = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId/rotate-secret', owner, () =>
      h.post(`/orgs/${org.id}/webhooks/${webhookId}/rotate-secret`, {}, { token: org.owner.token }),
    );
    assertUnauthorized(rotated);
    assert.deepEqual(await stored(), before);
  });

  test('renaming the organization: 401, and the name stays', async () => {
    const org = await createOrg(h, { name: 'Before the logout' });
    const owner = await ownersSession(org.owner);
    const renamed = await endedAfterAdmission('/orgs/:orgId', owner, () => h.patch(`/orgs/${org.id}`, { name: 'After the logout' }, { token: org.owner.token }));
    assertUnauthorized(renamed);
    assert.equal((await storedRow('organizations', { id: org.id })).name, 'Before the logout');
  });

  test('inviting a member: 401, and no invitation', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const invited = await endedAfterAdmission('/orgs/:orgId/invites', owner, () =>
      h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invited-late'), role_slugs: ['member'] }, { token: org.owner.token }),
    );
    assertUnauthorized(invited);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id }), 0);
  });

  test('changing the password: 401, and the old password still signs in', async () => {
    const user = await h.signUp(uniqueEmail('change-ended'));
    const owner = await ownersSession(user);
    const changed = await endedAfterAdmission('/auth/password/change', owner, () =>
      h.post('/auth/password/change', { current_password: user.password, new_password: 'a thief’s new passphrase 7' }, { token: user.accessToken }),
    );
    assertUnauthorized(changed);
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  });

  test('deleting the organization: 401, and the organization stays', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const deleted = await endedAfterAdmission('/orgs/:orgId', owner, () => h.delete(`/orgs/${org.id}`, { token: org.owner.token }));
    assertUnauthorized(deleted);
    const stored = await storedRow('organizations', { id: org.id });
    assert.equal(stored.status, 'active');
    assert.equal(stored.deleted_at, null);
    assert.equal(h.eventsOfType('org.deleted').filter((event) => event.organization_id === org.id).length, 0);
  });

  test('changing a member’s roles: 401, and the member keeps theirs', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const owner = await ownersSession(org.owner);
    const changed = await endedAfterAdmission('/orgs/:orgId/members/:userId/roles', owner, () =>
      h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token }),
    );
    assertUnauthorized(changed);
    assert.deepEqual(await roleSlugsOf(org.id, member.userId), ['member']);
  });

  test('suspending a member: 401, and the membership stays active', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const owner = await ownersSession(org.owner);
    const suspended = await endedAfterAdmission('/orgs/:orgId/members/:userId', owner, () =>
      h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token }),
    );
    assertUnauthorized(suspended);
    assert.equal((await membershipOf(org.id, member.userId)).status, 'active');
    assert.equal((await h.get(`/orgs/${org.id}`, { token: member.token })).status, 200, 'the member still reads the organization');
  });

  test('removing a member: 401, and the membership stays', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const owner = await ownersSession(org.owner);
    const removed = await endedAfterAdmission('/orgs/:orgId/members/:userId', owner, () => h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token }));
    assertUnauthorized(removed);
    assert.equal((await membershipOf(org.id, member.userId)).status, 'active');
    assert.deepEqual(await roleSlugsOf(org.id, member.userId), ['member']);
  });

  test('creating a role: 401, and no role', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const created = await endedAfterAdmission('/orgs/:orgId/roles', owner, () =>
      h.post(`/orgs/${org.id}/roles`, { name: 'Made after the logout', slug: 'late', permission_keys: ['org.read'] }, { token: org.owner.token }),
    );
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'roles', { organization_id: org.id, slug: 'late' }), 0);
  });

  test('changing a role: 401, and the role stays as it was', async () => {
    const org = await createOrg(h);
    const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Before the logout', slug: 'auditor', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(role.status, 201, role.text);
    const roleId = await roleIdOf(h, org.id, org.owner.token, 'auditor');
    const stored = () => storedRow('roles', { id: roleId });
    const before = await stored();
    const owner = await ownersSession(org.owner);
    const changed = await endedAfterAdmission('/orgs/:orgId/roles/:roleId', owner, () =>
      h.patch(`/orgs/${org.id}/roles/${roleId}`, { name: 'After the logout', permission_keys: ['org.read', 'audit.read'] }, { token: org.owner.token }),
    );
    assertUnauthorized(changed);
    assert.deepEqual(await stored(), before);
  });

  test('deleting a role: 401, and the role stays', async () => {
    const org = await createOrg(h);
    const role = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(role.status, 201, role.text);
    const roleId = await roleIdOf(h, org.id, org.owner.token, 'auditor');
    const owner = await ownersSession(org.owner);
    const deleted = await endedAfterAdmission('/orgs/:orgId/roles/:roleId', owner, () => h.delete(`/orgs/${org.id}/roles/${roleId}`, { token: org.owner.token }));
    assertUnauthorized(deleted);
    assert.equal(await countRows(h, 'roles', { id: roleId }), 1);
  });

  test('revoking an API key: 401, and the key stays unrevoked', async () => {
    const org = await createOrg(h);
    const key = await h.post(`/orgs/${org.id}/api-keys`, { name: 'Exporter', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(key.status, 201, key.text);
    const owner = await ownersSession(org.owner);
    const revoked = await endedAfterAdmission('/orgs/:orgId/api-keys/:keyId', owner, () => h.delete(`/orgs/${org.id}/api-keys/${key.body.data.id}`, { token: org.owner.token }));
    assertUnauthorized(revoked);
    const stored = await storedRow('api_keys', { id: key.body.data.id });
    assert.equal(stored.revoked_at, null);
    assert.equal(stored.revoked_reason, null);
    assert.equal(h.eventsOfType('api_key.revoked').filter((event) => event.organization_id === org.id).length, 0);
  });

  test('changing a webhook: 401, and the webhook stays as it was', async () => {
    const org = await createOrg(h);
    const webhookId = await webhookOf(org);
    const stored = () => storedRow('webhooks', { id: webhookId });
    const before = await stored();
    const owner = await ownersSession(org.owner);
    const changed = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId', owner, () =>
      h.patch(`/orgs/${org.id}/webhooks/${webhookId}`, { events: ['org.updated'], status: 'disabled' }, { token: org.owner.token }),
    );
    assertUnauthorized(changed);
    assert.deepEqual(await stored(), before);
  });

  test('deleting a webhook: 401, and the webhook stays', async () => {
    const org = await createOrg(h);
    const webhookId = await webhookOf(org);
    const owner = await ownersSession(org.owner);
    const deleted = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId', owner, () =>
      h.delete(`/orgs/${org.id}/webhooks/${webhookId}`, { token: org.owner.token }),
    );
    assertUnauthorized(deleted);
    assert.equal(await countRows(h, 'webhooks', { id: webhookId }), 1);
  });

  test('replaying a delivery: 401, and the delivery stays as it was', async () => {
    const receiver = await WebhookReceiver.start();
    try {
      const org = await createOrg(h);
      const webhookId = await webhookOf(org, { url: receiver.url(), events: ['org.updated'] });
      // The test event makes the delivery to replay; its instance attempts it at once.
      const sent = await h.post(`/orgs/${org.id}/webhooks/${webhookId}/test`, undefined, { token: org.owner.token });
      assert.equal(sent.status, 202, sent.text);
      const deliveryId = sent.body.data.delivery_id;
      const stored = () => storedRow('event_deliveries', { id: deliveryId });
      await eventually(async () => (await stored()).status === 'delivered', 'the test event is delivered');
      // A replay that wrote would stamp the row with a time of its own.
      h.clock.advance(1);
      const before = await stored();
      const owner = await ownersSession(org.owner);
      const replayed = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId/deliveries/:deliveryId/replay', owner, () =>
        h.post(`/orgs/${org.id}/webhooks/${webhookId}/deliveries/${deliveryId}/replay`, undefined, { token: org.owner.token }),
      );
      assertUnauthorized(replayed);
      assert.deepEqual(await stored(), before);
      assert.equal(receiver.withId(sent.body.data.event_id).length, 1);
    } finally {
      await receiver.close();
    }
  });

  test('sending a test event: 401, no delivery, and no webhook.test event', async () => {
    const org = await createOrg(h);
    const webhookId = await webhookOf(org, { events: ['org.updated'] });
    const owner = await ownersSession(org.owner);
    const sent = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId/test', owner, () =>
      h.post(`/orgs/${org.id}/webhooks/${webhookId}/test`, undefined, { token: org.owner.token }),
    );
    assertUnauthorized(sent);
    assert.equal(await countRows(h, 'event_deliveries', { webhook_id: webhookId }), 0);
    assert.equal(await countRows(h, 'audit_events', { organization_id: org.id, type: 'webhook.test' }), 0);
  });

});

describe(`an account's own write, its session ended between admission and write, on ${TEST_DB}`, () => {
  test('enrolling a TOTP factor: 401, and no factor', async () => {
    const user = await h.signUp(uniqueEmail('totp-enroll-ended'));
    const owner = await ownersSession(user);
    const enrolled = await endedAfterAdmission('/auth/mfa/totp/enroll', owner, () => h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }));
    assertUnauthorized(enrolled);
    // Even a pending factor is a secret the thief would hold; none is kept.
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
  });

  test('enrolling an e-mail factor: 401, no factor, and no code sent', async () => {
    const user = await h.signUp(uniqueEmail('email-enroll-ended'));
    const owner = await ownersSession(user);
    const enrolled = await endedAfterAdmission('/auth/mfa/email/enroll', owner, () => h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken }));
    assertUnauthorized(enrolled);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId }), 0);
    assert.equal(codeMails(user.email), 0);
  });

  test('asking for a step-up code: 401, and no code sent', async () => {
    const user = await h.signUp(uniqueEmail('step-up-code-ended'));
    const owner = await ownersSession(user);
    const factor = await enrollEmail(h, user);
    // Past the enrollment code's cooldown, so only the ended session can refuse the send.
    h.clock.advance(31);
    const sent = codeMails(user.email);
    const challenged = await endedAfterAdmission('/auth/mfa/step-up/challenge', owner, () =>
      h.post('/auth/mfa/step-up/challenge', { factor_id: factor.factorId }, { token: user.accessToken }),
    );
    assertUnauthorized(challenged);
    assert.equal(codeMails(user.email), sent);
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId, purpose: 'step_up' }), 0);
  });

  test('stepping up with a right TOTP code: 401 session_ended, and the session keeps its auth_time', async () => {
    const user = await h.signUp(uniqueEmail('step-up-ended'));
    const owner = await ownersSession(user);
    const totp = await enrollTotp(h, user.accessToken);
    const sessionId = String(decodeJwt(user.accessToken).sid);
    const before = await authTimeOf(sessionId);
    // A code of the next period: a step-up that wrote would move auth_time with the clock.
    const stepped = await endedAfterAdmission('/auth/mfa/step-up', owner, () =>
      h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: user.accessToken }),
    );
    // docs/security.md: the step-up alone names the ended session.
    assertError(stepped, 401, 'session_ended');
    assert.equal(await authTimeOf(sessionId), before);
    assert.equal(h.eventsOfType('mfa.step_up_completed').filter((event) => event.user_id === user.userId).length, 0);
  });

  test('renaming a factor: 401, and the label stays', async () => {
    const user = await h.signUp(uniqueEmail('factor-label-ended'));
    const owner = await ownersSession(user);
    const totp = await enrollTotp(h, user.accessToken);
    const labelled = await h.patch(`/auth/mfa/factors/${totp.factorId}`, { label: 'Before the logout' }, { token: user.accessToken });
    assert.equal(labelled.status, 200, labelled.text);
    const renamed = await endedAfterAdmission('/auth/mfa/factors/:factorId', owner, () =>
      h.patch(`/auth/mfa/factors/${totp.factorId}`, { label: 'After the logout' }, { token: user.accessToken }),
    );
    assertUnauthorized(renamed);
    assert.equal((await storedRow('mfa_factors', { id: totp.factorId })).label, 'Before the logout');
  });

  test('removing a factor: 401, and the factor stays', async () => {
    const user = await h.signUp(uniqueEmail('factor-remove-ended'));
    const owner = await ownersSession(user);
    const totp = await enrollTotp(h, user.accessToken);
    // MFA is not enforced: the last factor could go, and the password alone would sign in.
    const removed = await endedAfterAdmission('/auth/mfa/factors/:factorId', owner, () => h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: user.accessToken }));
    assertUnauthorized(removed);
    assert.equal(await countRows(h, 'mfa_factors', { id: totp.factorId }), 1);
    assert.equal(h.eventsOfType('mfa.factor_removed').filter((event) => event.user_id === user.userId).length, 0);
    // The login gate still asks for the factor.
    await loginForTicket(h, user);
  });

  test('asking for passkey registration options: 401, and no challenge', async () => {
    const user = await h.signUp(uniqueEmail('passkey-options-ended'));
    const owner = await ownersSession(user);
    const options = await endedAfterAdmission('/auth/passkeys/register/options', owner, () => h.post('/auth/passkeys/register/options', {}, { token: user.accessToken }));
    assertUnauthorized(options);
    assert.equal(await countRows(h, 'webauthn_challenges', { user_id: user.userId }), 0);
  });

  test('creating an organization: 401, and no organization', async () => {
    const user = await h.signUp(uniqueEmail('org-create-ended'));
    const owner = await ownersSession(user);
    const name = `Made after the logout ${user.userId.slice(0, 8)}`;
    const created = await endedAfterAdmission('/orgs', owner, () => h.post('/orgs', { name }, { token: user.accessToken }));
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'organizations', { name }), 0);
    assert.equal(await countRows(h, 'memberships', { user_id: user.userId }), 0);
    assert.equal(h.eventsOfType('org.created').filter((event) => event.user_id === user.userId).length, 0);
  });

  test('revoking an invitation: 401, and the invitation stays pending', async () => {
    const org = await createOrg(h);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invited-early'), role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    const owner = await ownersSession(org.owner);
    const revoked = await endedAfterAdmission('/orgs/:orgId/invites/:inviteId', owner, () =>
      h.delete(`/orgs/${org.id}/invites/${invite.body.data.id}`, { token: org.owner.token }),
    );
    assertUnauthorized(revoked);
    assert.equal((await storedRow('invites', { id: invite.body.data.id })).status, 'pending');
  });

  test('accepting an invitation: 401, no membership, and the invitation stays pending', async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('accept-ended'));
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    // The invitee's own second session ends the one the thief holds.
    const owner = await ownersSession(invitee);
    const accepted = await endedAfterAdmission('/auth/invites/accept', owner, () =>
      h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: invitee.accessToken }),
    );
    assertUnauthorized(accepted);
    // The invitation's own row (status invited) stays as it was; only an active one would let the invitee in.
    assert.equal(await countRows(h, 'memberships', { organization_id: org.id, user_id: invitee.userId, status: 'active' }), 0);
    assert.equal((await storedRow('invites', { id: invite.body.data.id })).status, 'pending');
  });

  test('changing one’s own profile: 401, and the name stays', async () => {
    const user = await h.signUp(uniqueEmail('profile-ended'));
    const named = await h.patch(`/users/${user.userId}`, { display_name: 'Before the logout' }, { token: user.accessToken });
    assert.equal(named.status, 200, named.text);
    const owner = await ownersSession(user);
    const renamed = await endedAfterAdmission('/users/:userId', owner, () => h.patch(`/users/${user.userId}`, { display_name: 'After the logout' }, { token: user.accessToken }));
    assertUnauthorized(renamed);
    assert.equal((await storedRow('users', { id: user.userId })).display_name, 'Before the logout');
  });

  test('a superadmin disabling an account: 401, and the account stays active', async () => {
    const admin = await superadmin(h);
    const target = await h.signUp(uniqueEmail('disable-target'));
    // The superadmin's own second session ends the one a thief holds.
    const owner = await ownersSession(admin);
    const disabled = await endedAfterAdmission('/users/:userId/disable', owner, () => h.post(`/users/${target.userId}/disable`, {}, { token: admin.accessToken }));
    assertUnauthorized(disabled);
    assert.equal((await storedRow('users', { id: target.userId })).status, 'active');
    assert.equal((await h.get('/auth/me', { token: target.accessToken })).status, 200, 'the target’s sessions live on');
  });

  test('a superadmin enabling a disabled account: 401, and the account stays disabled', async () => {
    const admin = await superadmin(h);
    const target = await h.signUp(uniqueEmail('enable-target'));
    const disabled = await h.post(`/users/${target.userId}/disable`, {}, { token: admin.accessToken });
    assert.equal(disabled.status, 200, disabled.text);
    const owner = await ownersSession(admin);
    const enabled = await endedAfterAdmission('/users/:userId/enable', owner, () => h.post(`/users/${target.userId}/enable`, {}, { token: admin.accessToken }));
    assertUnauthorized(enabled);
    assert.equal((await storedRow('users', { id: target.userId })).status, 'disabled');
    assertError(await h.post('/auth/login', { email: target.email, password: target.password }), 403, 'account_disabled');
  });

  test('deleting one’s own account: 401, and the owner still signs in', async () => {
    const user = await h.signUp(uniqueEmail('delete-ended'));
    const owner = await ownersSession(user);
    const deleted = await endedAfterAdmission('/users/:userId', owner, () => h.delete(`/users/${user.userId}`, { token: user.accessToken }));
    assertUnauthorized(deleted);
    assert.equal((await storedRow('users', { id: user.userId })).deleted_at, null);
    assert.equal(h.eventsOfType('user.deleted').filter((event) => event.user_id === user.userId).length, 0);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
  });

  test('enrolling an SMS factor: 401, no factor, and no code sent', async () => {
    const user = await h.signUp(uniqueEmail('sms-enroll-ended'));
    const owner = await ownersSession(user);
    const phone = uniquePhone();
    const enrolled = await endedAfterAdmission('/auth/mfa/sms/enroll', owner, () => h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken }));
    assertUnauthorized(enrolled);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId }), 0);
    assert.equal(h.sms.filter((message) => message.to === phone).length, 0);
  });

  test('confirming an SMS factor: 401, and the factor stays unconfirmed', async () => {
    const user = await h.signUp(uniqueEmail('sms-confirm-ended'));
    const owner = await ownersSession(user);
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const confirmed = await endedAfterAdmission('/auth/mfa/sms/confirm', owner, () =>
      h.post('/auth/mfa/sms/confirm', { factor_id: enrolled.body.data.factor_id, code: lastSmsCode(h, phone) }, { token: user.accessToken }),
    );
    assertUnauthorized(confirmed);
    await assertNoFactorBound(user);
  });

  test('confirming an e-mail factor: 401, and the factor stays unconfirmed', async () => {
    const user = await h.signUp(uniqueEmail('email-confirm-ended'));
    const owner = await ownersSession(user);
    const enrolled = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const confirmed = await endedAfterAdmission('/auth/mfa/email/confirm', owner, () =>
      h.post('/auth/mfa/email/confirm', { factor_id: enrolled.body.data.factor_id, code: lastMailCode(h, user.email) }, { token: user.accessToken }),
    );
    assertUnauthorized(confirmed);
    await assertNoFactorBound(user);
  });

  test('switching organization: 401 session_ended, no token, and the session stays in its organization', async () => {
    const org = await createOrg(h);
    const other = await h.post('/orgs', { name: `Switched to after the logout ${org.id.slice(0, 8)}` }, { token: org.owner.token });
    assert.equal(other.status, 201, other.text);
    const sessionId = String(decodeJwt(org.owner.token).sid);
    const owner = await ownersSession(org.owner);
    const switched = await endedAfterAdmission('/auth/switch-org', owner, () => h.post('/auth/switch-org', { organization_id: other.body.data.id }, { token: org.owner.token }));
    // docs/security.md: switch-org alone names the ended session.
    assertError(switched, 401, 'session_ended');
    assert.equal((switched.body as { data?: unknown }).data, undefined, 'no new token');
    assert.equal((await storedRow('sessions', { id: sessionId })).organization_id, org.id);
    assert.equal(h.eventsOfType('auth.org_switched').filter((event) => event.organization_id === other.body.data.id).length, 0);
  });
});

/** A webhook of `org`, made by its owner: its id. */
async function webhookOf(org: { id: string; owner: { token: string } }, options: { url?: string; events?: string[] } = {}): Promise<string> {
  const created = await h.post(`/orgs/${org.id}/webhooks`, { url: options.url ?? 'http://127.0.0.1:9/hooks', events: options.events ?? ['*'] }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  return created.body.data.id;
}

/** The row of `table` matching `where`, to compare before and after a refused write. */
async function storedRow(table: string, where: Record<string, unknown>, on: Harness = h): Promise<Record<string, unknown>> {
  return (await on.knex(`${on.tablePrefix}${table}`).where(where).first()) as Record<string, unknown>;
}

/** A refused confirm bound nothing: no confirmed factor, no recovery codes, no event, and the password alone signs in. */
async function assertNoFactorBound(user: SignedUpUser): Promise<void> {
  assert.equal(await confirmedFactors(user.userId), 0);
  assert.equal(await countRows(h, 'recovery_codes', { user_id: user.userId }), 0);
  assert.equal(h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId).length, 0);
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  assert.equal(typeof login.body.data.access_token, 'string');
}

async function confirmedFactors(userId: string): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}mfa_factors`).where({ user_id: userId }).whereNotNull('confirmed_at').count({ count: '*' });
  return Number(row?.count ?? 0);
}

async function recoveryCodeRows(userId: string): Promise<string[]> {
  const rows = await h.knex(`${h.tablePrefix}recovery_codes`).where({ user_id: userId }).orderBy('id');
  return rows.map((row: { id: string }) => row.id);
}

/** The otp_code mails sent to `address` so far. */
function codeMails(address: string): number {
  return h.mail.filter((message) => message.to === address && message.template === 'otp_code').length;
}

async function authTimeOf(sessionId: string): Promise<number> {
  return Number((await storedRow('sessions', { id: sessionId })).auth_time);
}

/** The slugs of a member's roles in an organization, sorted. */
async function roleSlugsOf(organizationId: string, userId: string): Promise<string[]> {
  const rows = await h
    .knex(`${h.tablePrefix}memberships as membership`)
    .join(`${h.tablePrefix}member_roles as granted`, 'granted.membership_id', 'membership.id')
    .join(`${h.tablePrefix}roles as role`, 'role.id', 'granted.role_id')
    .where({ 'membership.organization_id': organizationId, 'membership.user_id': userId })
    .orderBy('role.slug')
    .select('role.slug');
  return rows.map((row: { slug: string }) => row.slug);
}

async function membershipOf(organizationId: string, userId: string): Promise<{ status: string }> {
  const membership = await storedRow('memberships', { organization_id: organizationId, user_id: userId });
  assert.ok(membership, 'the membership is there');
  return membership as { status: string };
}

describe(`a provider's link and unlink, their session ended meanwhile, on ${TEST_DB}`, () => {
  let op: TestOpenIdProvider;
  let social: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    social = await startSocialHarness(op);
  });
  after(async () => {
    await social.close();
    await op.close();
  });

  test(
    'the link locks the account, then its session: a logout-all committed meanwhile refuses it with session_ended',
    { skip: TEST_DB !== 'pg' && 'SQLite runs one writer at a time; the lock order only means something on PostgreSQL' },
    async () => {
      const user = await social.signUp(uniqueEmail('link-ended'));
      const ownerLogin = await social.post('/auth/login', { email: user.email, password: user.password });
      assert.equal(ownerLogin.status, 200, ownerLogin.text);
      op.use({ sub: newSubject(), email: uniqueEmail('link-ended-provider'), email_verified: true });
      const handoff = handoffPair();
      const started = await social.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
      assert.equal(started.status, 200, started.text);
      const callback = await callRouterCallback(social, await authorizeAtProvider(started.body.data.authorization_url));
      assert.ok(callback.code, `the callback refuses nothing: ${callback.error}`);

      // Another change of the account holds its row (as an MFA change or a disable would).
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let held!: () => void;
      const accountHeld = new Promise<void>((resolve) => (held = resolve));
      const holder = social.knex.transaction(async (trx) => {
        await trx(`${social.tablePrefix}users`).where({ id: user.userId }).forUpdate().first();
        held();
        await released;
      });
      await accountHeld;
      let exchanged: ReturnType<typeof exchangeCode> | undefined;
      try {
        exchanged = exchangeCode(social, { handoff, authorizationUrl: started.body.data.authorization_url, ...callback }, user.accessToken);
        // The exchange has checked the bearer and waits for the account's row.
        const waitingForTheAccount = async () =>
          (await social.knex.raw("select query from pg_stat_activity where wait_event_type = 'Lock'")).rows.some((row: { query: string }) => /users/.test(row.query));
        for (let attempt = 0; attempt < 2000 && !(await waitingForTheAccount()); attempt += 1) await new Promise((resolve) => setImmediate(resolve));
        assert.ok(await waitingForTheAccount(), 'the link’s transaction waits for the account');
        const logoutAll = await social.post('/auth/logout-all', undefined, { token: ownerLogin.body.data.access_token });
        assert.equal(logoutAll.status, 200, logoutAll.text);
      } finally {
        release();
        await holder;
      }
      assertError(await exchanged!, 401, 'session_ended');
      assert.equal(await countRows(social, 'social_identities', { user_id: user.userId }), 0);
    },
  );

  /** A link flow started with `token`, for socialRoundTripAndExchange. */
  function startLink(token: string): () => Promise<SocialStart> {
    return async () => {
      const handoff = handoffPair();
      const started = await social.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token });
      assert.equal(started.status, 200, started.text);
      return { handoff, authorizationUrl: started.body.data.authorization_url };
    };
  }

  test('unlinking a provider: 401, and the link stays', async () => {
    const user = await social.signUp(uniqueEmail('unlink-ended'));
    const account = { sub: newSubject(), email: uniqueEmail('unlink-ended-provider'), email_verified: true };
    const { exchanged } = await socialRoundTripAndExchange(social, op, account, { start: startLink(user.accessToken), token: user.accessToken });
    assert.equal(exchanged.status, 200, exchanged.text);
    const identityId = exchanged.body.data.identity.id;
    const owner = await ownersSession(user, social);
    const unlinked = await endedAfterAdmission(
      '/auth/social/identities/:identityId',
      owner,
      () => social.delete(`/auth/social/identities/${identityId}`, { token: user.accessToken }),
      social,
    );
    assertUnauthorized(unlinked);
    assert.equal(await countRows(social, 'social_identities', { id: identityId }), 1);
    assert.equal(social.eventsOfType('user.social_unlinked').filter((event) => event.user_id === user.userId).length, 0);
  });

  test('starting a link: 401, and no flow', async () => {
    const user = await social.signUp(uniqueEmail('link-start-ended'));
    const owner = await ownersSession(user, social);
    const handoff = handoffPair();
    const started = await endedAfterAdmission(
      '/auth/social/:provider/link',
      owner,
      () => social.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken }),
      social,
    );
    assertUnauthorized(started);
    assert.equal(await countRows(social, 'social_flows', { user_id: user.userId }), 0);
  });
});

describe(`an organization's single sign-on settings, their session ended between admission and write, on ${TEST_DB}`, () => {
  let op: TestOpenIdProvider;
  let sso: Harness;
  const dns = new StubDns();
  before(async () => {
    op = await TestOpenIdProvider.start();
    sso = await startSsoHarness(op, dns);
  });
  after(async () => {
    await sso.close();
    await op.close();
  });

  test('adding a domain: 401, and no domain', async () => {
    const org = await createOrg(sso);
    const owner = await ownersSession(org.owner, sso);
    const added = await endedAfterAdmission('/orgs/:orgId/domains', owner, () => sso.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token }), sso);
    assertUnauthorized(added);
    assert.equal(await countRows(sso, 'org_domains', { organization_id: org.id }), 0);
  });

  test('verifying a domain whose record is published: 401, and the domain stays pending', async () => {
    const org = await createOrg(sso);
    const added = await sso.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    const owner = await ownersSession(org.owner, sso);
    const verified = await endedAfterAdmission(
      '/orgs/:orgId/domains/:domainId/verify',
      owner,
      () => sso.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token }),
      sso,
    );
    assertUnauthorized(verified);
    const stored = await sso.knex(`${sso.tablePrefix}org_domains`).where({ id: added.body.data.id }).first();
    assert.equal(stored.status, 'pending');
    assert.equal(stored.verified_domain, null);
  });

  test('removing a verified domain: 401, and the domain stays', async () => {
    const org = await createOrg(sso);
    const domain = await addVerifiedDomain(sso, dns, org);
    const owner = await ownersSession(org.owner, sso);
    const removed = await endedAfterAdmission('/orgs/:orgId/domains/:domainId', owner, () => sso.delete(`/orgs/${org.id}/domains/${domain.id}`, { token: org.owner.token }), sso);
    assertUnauthorized(removed);
    assert.equal(await countRows(sso, 'org_domains', { id: domain.id, status: 'verified' }), 1);
  });

  test('creating a connection: 401, and no connection', async () => {
    const org = await createOrg(sso);
    await addVerifiedDomain(sso, dns, org);
    const owner = await ownersSession(org.owner, sso);
    const created = await endedAfterAdmission(
      '/orgs/:orgId/sso',
      owner,
      () => sso.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET }, { token: org.owner.token }),
      sso,
    );
    assertUnauthorized(created);
    assert.equal(await countRows(sso, 'sso_connections', { organization_id: org.id }), 0);
  });

  test('changing the connection: 401, and the connection stays as it was', async () => {
    const { org, connection } = await ssoOrg(sso, dns, op);
    const stored = () => storedRow('sso_connections', { id: connection.id }, sso);
    const before = await stored();
    const owner = await ownersSession(org.owner, sso);
    const changed = await endedAfterAdmission('/orgs/:orgId/sso', owner, () => sso.patch(`/orgs/${org.id}/sso`, { enabled: false, jit: true }, { token: org.owner.token }), sso);
    assertUnauthorized(changed);
    assert.deepEqual(await stored(), before);
  });

  test('deleting the connection: 401, and the connection stays', async () => {
    const org = await createOrg(sso);
    await addVerifiedDomain(sso, dns, org);
    const connection = await connect(sso, op, org);
    const owner = await ownersSession(org.owner, sso);
    const deleted = await endedAfterAdmission('/orgs/:orgId/sso', owner, () => sso.delete(`/orgs/${org.id}/sso`, { token: org.owner.token }), sso);
    assertUnauthorized(deleted);
    assert.equal(await countRows(sso, 'sso_connections', { id: connection.id }), 1);
  });
});

describe(`a caller's authority revoked between admission and write, on ${TEST_DB}`, () => {
  test('a superadmin role revoked meanwhile: 403, and the account stays active', async () => {
    const admin = await superadmin(h);
    const target = await h.signUp(uniqueEmail('disable-after-revoke'));
    const disabled = await changedAfterAdmission(
      '/users/:userId/disable',
      () => h.identity.service.revokeSuperadmin(admin.userId),
      () => h.post(`/users/${target.userId}/disable`, {}, { token: admin.accessToken }),
    );
    assertError(disabled, 403, 'forbidden');
    assert.equal((await storedRow('users', { id: target.userId })).status, 'active');
  });

  test('members.invite taken away meanwhile: 403, and the invitation stays pending', async () => {
    const org = await createOrg(h);
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invited-before-demotion'), role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    const revoked = await changedAfterAdmission(
      '/orgs/:orgId/invites/:inviteId',
      async () => {
        const demoted = await h.patch(`/orgs/${org.id}/members/${admin.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
        assert.equal(demoted.status, 200, demoted.text);
      },
      () => h.delete(`/orgs/${org.id}/invites/${invite.body.data.id}`, { token: admin.token }),
    );
    assertError(revoked, 403, 'forbidden');
    assert.equal((await storedRow('invites', { id: invite.body.data.id })).status, 'pending');
  });
});

describe(`a code's send and a revocation that locks the account first, on ${TEST_DB}`, () => {
  /*
   * A revocation locks the account's row, then its sessions (a reset, a disable). A send's
   * challenge row takes a key lock on the account's row (an enrollment locks the row itself,
   * first); had the send locked its session before that, each would wait for the other. The
   * send checks its session last, so it waits for the revocation and then finds its session
   * ended.
   */
  const sends = [
    {
      route: 'step-up code',
      send: async (user: SignedUpUser, factorId: string) => h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken }),
    },
    {
      route: 'e-mail factor enrollment',
      send: async (user: SignedUpUser) => h.post('/auth/mfa/email/enroll', { email: uniqueEmail('second-address') }, { token: user.accessToken }),
    },
  ];
  for (const { route, send } of sends) {
    test(
      `${route}: waits for the revocation, then answers 401 and sends nothing`,
      { skip: TEST_DB !== 'pg' && 'SQLite runs one writer at a time; the lock order only means something on PostgreSQL' },
      async () => {
        const user = await h.signUp(uniqueEmail('send-vs-revocation'));
        const factor = await enrollEmail(h, user);
        // Past the enrollment code's cooldown.
        h.clock.advance(31);
        const mailsBefore = h.mail.length;
        let release!: () => void;
        const released = new Promise<void>((resolve) => (release = resolve));
        let held!: () => void;
        const accountHeld = new Promise<void>((resolve) => (held = resolve));
        const revocation = h.knex.transaction(async (trx) => {
          await trx(`${h.tablePrefix}users`).where({ id: user.userId }).forUpdate().first();
          held();
          await released;
          await trx(`${h.tablePrefix}sessions`).where({ user_id: user.userId }).whereNull('revoked_at').update({ revoked_at: h.clock.now(), revoked_reason: 'user_disabled' });
        });
        await accountHeld;
        let sent: ReturnType<typeof send> | undefined;
        try {
          sent = send(user, factor.factorId);
          const sendWaits = async () =>
            (await h.knex.raw("select query from pg_stat_activity where wait_event_type = 'Lock'")).rows.some((row: { query: string }) => /otp_challenges|mfa_factors|users/.test(row.query));
          for (let attempt = 0; attempt < 2000 && !(await sendWaits()); attempt += 1) await new Promise((resolve) => setImmediate(resolve));
          assert.ok(await sendWaits(), 'the send waits for the account’s row');
        } finally {
          release();
        }
        await revocation;
        assertUnauthorized(await sent!);
        assert.equal(h.mail.length, mailsBefore, 'no code was sent');
      },
    );
  }
});

/** Cases left out by name reach no route, so the guard speaks only for a run of the whole file. */
const filteredByName = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)].some((flag) => /^--test-(name|skip)-pattern/.test(flag));

describe('every write a session can call has a case above', () => {
  test('each bearer route that is not a GET was reached by a case of this file', { skip: filteredByName && 'cases were left out by name (--test-name-pattern)' }, () => {
    // Runs last (node:test runs a file's tests in order), so `covered` holds every case that ran.
    // The PostgreSQL-only case goes through the public exchange, not `changedAfterAdmission`: the
    // route it guards, the link's start, has its own case on both databases.
    const exempt = [
      // Routes that end sessions: a session ended meanwhile leaves them nothing to do (docs/security.md).
      'post /auth/logout',
      'post /auth/logout-all',
      'delete /auth/sessions/:sessionId',
    ];
    // Stands in for every service: the routes are only listed, never called.
    const anything: any = new Proxy(() => {}, { get: () => anything, apply: () => anything });
    const writes = allRoutes(anything)
      .filter((route) => route.auth === 'bearer' && route.method !== 'get')
      .map((route) => `${route.method} ${route.path}`);
    assert.deepEqual(
      exempt.filter((route) => !writes.includes(route)),
      [],
      'every exemption names a route',
    );
    const uncovered = writes.filter((route) => !exempt.includes(route) && !covered.has(route));
    assert.deepEqual(uncovered, [], `writes with no case that ends the session between admission and write: ${uncovered.join(', ')}`);
  });
});
