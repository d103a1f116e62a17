/*
 * Issue 9: the attacks a security review made with one stolen access token (older than
 * security.stepUp.maxAge) of an owner who uses MFA, and the rules of the one access policy
 * that refuse them. Each test names its threat. Run on both databases:
 *   node scripts/run-tests.mjs test/access/access-policy-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { Harness, STRONG_PASSWORD, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { assertError, registerOnly } from '../helpers/account.js';
import { enrollTotp, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, roleIdOf, switchOrg } from '../helpers/orgs.js';
import { listening } from '../helpers/host-app.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

/** The same session, its last strong authentication now older than the step-up window. */
async function staleToken(refreshToken: string): Promise<string> {
  h.clock.advance(301);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  return refreshed.body.data.access_token;
}

function assertStepUpRequired(response: { status: number; text: string; body: any }, context = ''): void {
  assert.equal(response.status, 401, `${context} ${response.text}`);
  assert.equal(response.body.error, 'step_up_required', `${context} ${response.text}`);
}

/** An owner with a confirmed TOTP factor whose token is scoped to a new organization. */
async function mfaOwnerWithOrg() {
  const org = await createOrg(h, { owner: await signUpWithTotp(h) });
  return { owner: org.owner, org };
}

describe('attack 1: step-up satisfied by a factor the attacker just enrolled', () => {
  test('with a confirmed factor, enrolling or confirming another needs step-up', async () => {
    // Threat: a stolen stale token enrolls the attacker's authenticator, steps up with it,
    // then removes the victim's factor and takes the account.
    const victim = await signUpWithTotp(h);
    const pendingWhileFresh = await h.post('/auth/mfa/totp/enroll', undefined, { token: victim.accessToken });
    assert.equal(pendingWhileFresh.status, 200, pendingWhileFresh.text);
    const stale = await staleToken(victim.refreshToken);
    assertStepUpRequired(await h.post('/auth/mfa/totp/enroll', undefined, { token: stale }), 'totp/enroll');
    assertStepUpRequired(await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: stale }), 'sms/enroll');
    assertStepUpRequired(await h.post('/auth/mfa/email/enroll', {}, { token: stale }), 'email/enroll');
    const { factor_id: factorId, secret } = pendingWhileFresh.body.data;
    assertStepUpRequired(await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: stale }), 'totp/confirm');
    const stepUp = await h.post('/auth/mfa/step-up', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: stale });
    assert.equal(stepUp.status, 404, `the unconfirmed factor cannot step up: ${stepUp.text}`);
  });

  test('a later confirmed factor emits mfa.factor_added', async () => {
    // Threat: a second factor added silently never reaches the audit log.
    const user = await signUpWithTotp(h);
    const second = await enrollTotp(h, user.accessToken);
    const added = h.eventsOfType('mfa.factor_added').filter((event) => event.user_id === user.userId);
    assert.equal(added.length, 1);
    assert.deepEqual(added[0]!.data, { factor_id: second.factorId, type: 'totp' });
  });
});

describe('attack 2: ownership through a custom role', () => {
  test('creating, editing, inviting with or granting an owner-equivalent role needs step-up', async () => {
    // Threat: a role holding org.delete / roles.manage is made and granted without step-up,
    // and its holder then grants itself owner and demotes the victim.
    const { owner, org } = await mfaOwnerWithOrg();
    const helper = await addMember(h, org, owner.token, ['member']);
    const fresh = await h.post(`/orgs/${org.id}/roles`, { name: 'Deputy', slug: 'deputy', permission_keys: ['org.read', 'org.delete'] }, { token: owner.token });
    assert.equal(fresh.status, 201, fresh.text);
    const suspendedDeputy = await addMember(h, org, owner.token, ['deputy']);
    assert.equal((await h.patch(`/orgs/${org.id}/members/${suspendedDeputy.userId}`, { status: 'suspended' }, { token: owner.token })).status, 200);
    const stale = await staleToken(owner.refreshToken);
    for (const keys of [['org.read', 'org.delete'], ['roles.manage']]) {
      assertStepUpRequired(await h.post(`/orgs/${org.id}/roles`, { name: 'Shadow', slug: `shadow-${keys.length}`, permission_keys: keys }, { token: stale }), `create ${keys}`);
    }
    const plain = await h.post(`/orgs/${org.id}/roles`, { name: 'Reader', slug: 'reader', permission_keys: ['org.read'] }, { token: stale });
    assert.equal(plain.status, 201, `a harmless role needs no step-up: ${plain.text}`);
    assertStepUpRequired(await h.patch(`/orgs/${org.id}/roles/${plain.body.data.id}`, { permission_keys: ['org.read', 'roles.manage'] }, { token: stale }), 'edit into owner-equivalent');
    assertStepUpRequired(await h.patch(`/orgs/${org.id}/roles/${fresh.body.data.id}`, { name: 'Deputy 2' }, { token: stale }), 'edit owner-equivalent');
    assertStepUpRequired(await h.patch(`/orgs/${org.id}/members/${helper.userId}/roles`, { role_slugs: ['deputy'] }, { token: stale }), 'grant');
    assertStepUpRequired(await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('accomplice'), role_slugs: ['deputy'] }, { token: stale }), 'invite');
    // Reactivation hands a suspended member's roles back: a grant of them like any other.
    assertStepUpRequired(await h.patch(`/orgs/${org.id}/members/${suspendedDeputy.userId}`, { status: 'active' }, { token: stale }), 'reactivate');
    const members = await h.get(`/orgs/${org.id}/members`, { token: stale });
    assert.equal(members.body.data.find((member: any) => member.user_id === suspendedDeputy.userId).status, 'suspended');
    assert.deepEqual(members.body.data.find((member: any) => member.user_id === helper.userId).roles, ['member']);
    assert.ok(await roleIdOf(h, org.id, stale, 'deputy'));
  });
});

/** A host app with the router's middleware on its own routes. */
async function hostApp(): Promise<{ url: string; close: () => Promise<void> }> {
  const app = express();
  app.get('/host/any', h.identity.authenticate(), (req, res) => {
    res.json({ caller: h.identity.caller(req) });
  });
  app.get('/host/org', h.identity.requirePermission('org.read'), (req, res) => {
    res.json({ caller: h.identity.caller(req) });
  });
  const { base, close } = await listening(app);
  return { url: base, close };
}

async function hostGet(url: string, headers: Record<string, string> | Array<[string, string]>): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { headers });
  return { status: response.status, body: await response.json() };
}

describe('attack 3: host middleware applies every gate the router applies', () => {
  let host: Awaited<ReturnType<typeof hostApp>>;
  before(async () => {
    host = await hostApp();
  });
  after(async () => {
    await host.close();
  });

  test('grace enrollment answers mfa_enrollment_required on router and host routes alike', async () => {
    // Threat: a member who must enroll MFA first reaches the host's data through requirePermission.
    const { owner, org } = await mfaOwnerWithOrg();
    const member = await addMember(h, org, owner.token, ['member']);
    const on = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: owner.token });
    assert.equal(on.status, 200, on.text);
    assertError(await h.get(`/orgs/${org.id}`, { token: member.token }), 403, 'mfa_enrollment_required', 'router');
    for (const path of ['/host/org', '/host/any']) {
      const answer = await hostGet(host.url + path, { authorization: `Bearer ${member.token}` });
      assert.equal(answer.status, 403, path);
      assert.equal(answer.body.error, 'mfa_enrollment_required', path);
    }
  });

  test('a factor confirmed mid-session does not keep an mfa=false session inside a require_mfa organization', async () => {
    // Threat: a session that never passed a second factor acts in an organization requiring one, forever (refresh is sliding).
    const { owner, org } = await mfaOwnerWithOrg();
    const member = await addMember(h, org, owner.token, ['member']);
    await enrollTotp(h, member.token);
    const on = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: owner.token });
    assert.equal(on.status, 200, on.text);
    assertError(await h.get(`/orgs/${org.id}`, { token: member.token }), 403, 'mfa_required', 'router');
    // The API-key routes need no permission, only membership: the organization's policy binds them too.
    assertError(await h.get(`/orgs/${org.id}/api-keys`, { token: member.token }), 403, 'mfa_required', 'list API keys');
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'k', permission_keys: [] }, { token: member.token }), 403, 'mfa_required', 'create an API key');
    assertError(await h.delete(`/orgs/${org.id}/api-keys/00000000-0000-4000-8000-00000000abcd`, { token: member.token }), 403, 'mfa_required', 'revoke an API key');
    for (const path of ['/host/org', '/host/any']) {
      const answer = await hostGet(host.url + path, { authorization: `Bearer ${member.token}` });
      assert.equal(answer.status, 403, path);
      assert.equal(answer.body.error, 'mfa_required', path);
    }
    // The owner's session passed a second factor: it goes on.
    assert.equal((await h.get(`/orgs/${org.id}`, { token: owner.token })).status, 200);
  });

  test('the caller accessor answers a typed session caller', async () => {
    const { owner, org } = await mfaOwnerWithOrg();
    const answer = await hostGet(`${host.url}/host/org`, { authorization: `Bearer ${owner.token}` });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.caller.kind, 'session');
    assert.equal(answer.body.caller.user_id, owner.userId);
    assert.equal(answer.body.caller.organization_id, org.id);
    assert.equal(answer.body.caller.mfa, true);
    assert.ok(answer.body.caller.permissions.includes('org.delete'));
    const any = await hostGet(`${host.url}/host/any`, { authorization: `Bearer ${owner.accessToken}` });
    assert.equal(any.status, 200);
    assert.equal(any.body.caller.organization_id, null);
  });

  test('two Authorization header lines answer 401 on router and host routes', async () => {
    // Threat: Node keeps the first line and drops the rest, so "valid, then garbage" passed.
    const user = await h.signUp();
    const other = await h.signUp();
    // fetch would join the lines into one; node:http sends each array item as its own line.
    const lines = [`Bearer ${user.accessToken}`, `Bearer ${other.accessToken}`];
    for (const [url, label] of [[`${h.baseUrl}/auth/me`, 'router'], [`${host.url}/host/any`, 'host']] as const) {
      for (const variant of [lines, [lines[0]!, 'garbage'], [lines[0]!, 'Basic YTpi']]) {
        const answer = await rawGet(url, variant);
        assert.equal(answer.status, 401, `${label} ${variant[1]?.slice(0, 12)}: ${answer.body}`);
        assert.equal(JSON.parse(answer.body).error, 'unauthorized');
      }
      assert.equal((await rawGet(url, [lines[0]!])).status, 200, `${label}: one line passes`);
    }
  });
});

function rawGet(url: string, authorizationLines: string[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(url, { method: 'GET' }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    outgoing.setHeader('authorization', authorizationLines);
    outgoing.on('error', reject);
    outgoing.end();
  });
}

describe('attack 4: second-factor guessing has a hard cap', () => {
  test('a correct password does not reset the count: 5 wrong TOTP codes over several logins lock the account', async () => {
    // Threat: 5 logins x 4 wrong codes, forever, because each correct password cleared the count.
    const user = await signUpWithTotp(h);
    for (let round = 0; round < 2; round += 1) {
      const { ticket } = await loginForTicket(h, user);
      for (let attempt = 0; attempt < (round === 0 ? 3 : 2); attempt += 1) {
        assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: '000000' }, { token: ticket }), 422, 'invalid_code');
      }
    }
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
    assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials', 'locked after second-factor failures');
  });

  test('step-up checks the lock and counts its failures', async () => {
    // Threat: a stolen token guesses step-up codes without limit.
    const user = await signUpWithTotp(h);
    const stale = await staleToken(user.refreshToken);
    for (let attempt = 0; attempt < 5; attempt += 1) {
      assertError(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: '000000' }, { token: stale }), 422, 'invalid_code');
    }
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
    // The right code is not even looked at while the lock lasts.
    assertError(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: stale }), 422, 'invalid_code', 'locked');
  });

  test('the verify budget is checked and recorded atomically', async () => {
    // Threat: concurrent guesses all read the budget before any failure is recorded.
    const budgeted = await Harness.start({ config: { auth: { lockout: { threshold: 100 } }, otp: { verifyBudget: { limit: 3, windowSec: 900 } } } });
    try {
      const user = await budgetedUser(budgeted);
      const { ticket } = await loginForTicket(budgeted, user);
      const answers = await Promise.all(
        Array.from({ length: 12 }, () => budgeted.post('/auth/mfa/verify', { factor_id: user.factorId, code: '000000' }, { token: ticket })),
      );
      const failures = budgeted.eventsOfType('mfa.verify_failed').filter((event) => event.user_id === user.userId).length;
      assert.ok(failures <= 3, `at most the budget is evaluated, got ${failures}: ${answers.map((a) => a.status).join(',')}`);
    } finally {
      await budgeted.close();
    }
  });
});

async function budgetedUser(harness: Harness): Promise<SignedUpUser & { factorId: string }> {
  const user = await harness.signUp();
  const totp = await enrollTotp(harness, user.accessToken);
  return { ...user, factorId: totp.factorId };
}

describe('attack 5: password change is not a password oracle', () => {
  test('wrong current passwords count toward the lockout', async () => {
    // Threat: a stolen access token tries current passwords at 600/min with no lockout.
    const user = await h.signUp();
    for (let attempt = 0; attempt < 5; attempt += 1) {
      assertError(await h.post('/auth/password/change', { current_password: `wrong guess ${attempt} horse`, new_password: 'another horse battery staple' }, { token: user.accessToken }), 403, 'invalid_credentials');
    }
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
    assertError(await h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'another horse battery staple' }, { token: user.accessToken }), 403, 'invalid_credentials', 'the right one is not compared while locked');
    assertError(await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD }), 401, 'invalid_credentials');
  });
});

describe('attack 6: pre-hijack and invites', () => {
  test('accepting an invite needs a verified e-mail', async () => {
    // Threat: a squatter registers the victim's address unverified and joins organizations meant for the victim.
    const { owner, org } = await mfaOwnerWithOrg();
    const email = uniqueEmail('squatted');
    await registerOnly(h, email, STRONG_PASSWORD);
    const login = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal(login.status, 200, login.text);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: owner.token });
    assert.equal(invite.status, 201, invite.text);
    assertError(await h.post('/auth/invites/accept', { token: h.tokenFromMail(email, 'invite') }, { token: login.body.data.access_token }), 403, 'email_unverified');
  });

  test("a password reset of an unverified account verifies it and removes the squatter's factors", async () => {
    // Threat: the squatter's authenticator survives the real owner's password reset and keeps the account.
    const email = uniqueEmail('prehijack');
    await registerOnly(h, email, STRONG_PASSWORD);
    const squatter = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    // docs/security.md: an unproven address binds no factor today ...
    assertError(await h.post('/auth/mfa/totp/enroll', undefined, { token: squatter.body.data.access_token }), 403, 'email_unverified');
    // ... but one enrolled before that rule (simulated here) must not survive the owner's proof either.
    const users = () => h.knex(`${h.tablePrefix}users`).where({ id: squatter.body.data.user.id });
    await users().update({ email_verified: true });
    const before = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    await enrollTotp(h, before.body.data.access_token);
    await users().update({ email_verified: false });
    assert.equal((await h.post('/auth/password/forgot', { email })).status, 202);
    const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(email, 'password_reset'), new_password: 'the real owner horse staple' });
    assert.equal(reset.status, 200, reset.text);
    const login = await h.post('/auth/login', { email, password: 'the real owner horse staple' });
    assert.equal(login.status, 200, login.text);
    assert.equal(login.body.data.mfa_required, undefined, 'no squatter factor gates the login');
    assert.equal(login.body.data.user.email_verified, true);
  });
});

describe('one e-mail normalisation and one display-name rule', () => {
  test('an invite to a decomposed address is accepted by the account registered with the composed one', async () => {
    // Threat (drift): invites used trim+lowercase, registration NFC; the invitee could never accept.
    const { owner, org } = await mfaOwnerWithOrg();
    const local = `jos${Math.random().toString(36).slice(2, 7)}`;
    const composed = `${local}\u00e9@example.com`;
    const invitee = await h.signUp(composed);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: `${local}e\u0301@EXAMPLE.com`, role_slugs: ['member'] }, { token: owner.token });
    assert.equal(invite.status, 201, invite.text);
    const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(composed, 'invite') }, { token: invitee.accessToken });
    assert.equal(accepted.status, 200, accepted.text);
  });

  test('PATCH /users/{id} refuses a control character in display_name, like registration', async () => {
    const user = await h.signUp();
    const answer = await h.patch(`/users/${user.userId}`, { display_name: 'Ada\u0007Lovelace' }, { token: user.accessToken });
    assert.equal(answer.status, 422, answer.text);
  });
});

describe('switch-org keeps working for the owner', () => {
  test('sanity: a fresh owner with MFA can switch organizations', async () => {
    const { owner } = await mfaOwnerWithOrg();
    const second = await createOrg(h, { owner });
    assert.ok(await switchOrg(h, owner.accessToken, second.id));
  });
});
