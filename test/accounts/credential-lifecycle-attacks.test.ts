import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { assertError, countRows } from '../helpers/account.js';
import { Harness, STRONG_PASSWORD, TEST_DB, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { enrollTotp, uniquePhone } from '../helpers/mfa.js';
import { newSubject, PROVIDER_ID, RETURN_URL, handoffPair, socialLogin, socialRoundTrip, startSocialHarness, TestOpenIdProvider, withSocialHarness } from '../helpers/oidc.js';
import { createOrg, switchOrg, addMember } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, passwordlessLogin, registerRecorded } from '../helpers/passkeys.js';
import { servicesOf } from '../../src/create-identity-router.js';

/*
 * Issue 21, one credential lifecycle: the seven findings of the review, each as the attacker
 * played it over HTTP (docs/security.md, "One credential lifecycle").
 * Threats:
 *  1. a pre-hijacker's passkey (registered on the victim's address before the victim proves
 *     it, directly or through a provider sign-up) survives the owner's proof;
 *  2. a link flow started by the attacker and finished in the victim's browser links the
 *     victim's provider identity to the attacker's account (or verifies a squatter's account);
 *  3. a stolen, stale access token mints a permanent passkey;
 *  4. a stale token mints a 365-day API key that survives account recovery;
 *  5. `return_to` climbs out of the allowed prefix with encoded traversal;
 *  6. passkey login options tell accounts with passkeys apart and hand out credential ids;
 *  7. the host middleware reports an organization the member was removed from.
 * The clock is the harness's frozen clock; nothing sleeps.
 */

const generous = { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } };
const STALE_SECONDS = 14 * 60; // older than security.stepUp.maxAge (300 s), younger than the access token (900 s)
const { primary } = fixtures;
const [a0, a1] = primary.assertions as [(typeof primary.assertions)[0], (typeof primary.assertions)[0]];

/** Registers an account with a password and logs in without verifying the address: the squatter. */
async function squat(h: Harness, email: string): Promise<SignedUpUser> {
  return h.signUp(email, STRONG_PASSWORD, { verify: false });
}

/**
 * Runs `bind` as if the account's address were verified, then makes it unverified again:
 * credentials bound before the gate existed (the data the first proof must still clear).
 */
async function bindAsBeforeTheGate(h: Harness, userId: string, bind: () => Promise<void>): Promise<void> {
  const users = `${h.tablePrefix}users`;
  const cache = servicesOf(h.identity).context.accessCache;
  await h.knex(users).where({ id: userId }).update({ email_verified: true });
  cache.invalidate([{ user: userId }]);
  try {
    await bind();
  } finally {
    await h.knex(users).where({ id: userId }).update({ email_verified: false });
    cache.invalidate([{ user: userId }]);
  }
}

interface HostApp {
  url: string;
  close(): Promise<void>;
}

/** The host's own routes behind the router's middleware, on a loopback port. */
async function listen(app: express.Express): Promise<HostApp> {
  const server = await new Promise<ReturnType<typeof app.listen>>((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

async function registerPasskey(h: Harness, token: string): Promise<string> {
  const registered = await registerRecorded(h, token, primary, 'squatter key');
  assert.equal(registered.status, 200, registered.text);
  return registered.body.data.factor_id as string;
}

describe(`finding 1: a pre-hijacker's credentials never survive the owner's proof (${TEST_DB})`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await h.close();
  });

  test('an unverified account can add no credential: passkey, TOTP, SMS and e-mail factors all answer 403 email_unverified', async () => {
    const squatter = await squat(h, uniqueEmail('victim'));
    const token = squatter.accessToken;
    assertError(await h.post('/auth/passkeys/register/options', {}, { token }), 403, 'email_unverified', 'passkey options');
    assertError(await h.post('/auth/passkeys/register/verify', { response: primary.registration.response }, { token }), 403, 'email_unverified', 'passkey verify');
    assertError(await h.post('/auth/mfa/totp/enroll', {}, { token }), 403, 'email_unverified', 'totp enroll');
    assertError(await h.post('/auth/mfa/totp/confirm', { factor_id: '00000000-0000-4000-8000-000000000000', code: '123456' }, { token }), 403, 'email_unverified', 'totp confirm');
    assertError(await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token }), 403, 'email_unverified', 'sms enroll');
    assertError(await h.post('/auth/mfa/email/enroll', {}, { token }), 403, 'email_unverified', 'email enroll');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: squatter.userId }), 0);
    assert.equal(h.sms.length, 0, 'no text was sent for an unproven account');
  });

  test('full chain: the squatter\'s passkey and TOTP go at the victim\'s verification link; the squatter\'s sessions end; the victim\'s login meets no gate', async () => {
    const victimEmail = uniqueEmail('victim');
    const squatter = await squat(h, victimEmail);
    await bindAsBeforeTheGate(h, squatter.userId, async () => {
      await registerPasskey(h, squatter.accessToken);
      await enrollTotp(h, squatter.accessToken);
    });
    assert.equal(await countRows(h, 'mfa_factors', { user_id: squatter.userId }), 2);

    // The victim proves the address with the link that was mailed to it, then resets the password.
    const verified = await h.post('/auth/email/verify', { token: h.tokenFromMail(victimEmail, 'verify_email') });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: squatter.userId }), 0, 'every factor bound before the proof is gone');
    const proof = h.eventsOfType('user.email_verified').find((event) => event.user_id === squatter.userId)!;
    assert.deepEqual(proof.data, { method: 'link', credentials_removed: 2 });
    const removals = h.eventsOfType('mfa.factor_removed').filter((event) => event.user_id === squatter.userId);
    assert.deepEqual(removals.map((event) => event.data.reason), ['email_proven', 'email_proven']);
    assert.ok(h.eventsOfType('auth.sessions_revoked').some((event) => event.user_id === squatter.userId && event.data.reason === 'email_proven'));

    // The squatter's passkey login is refused, and the squatter's session is over.
    assertError(await passwordlessLogin(h, a0), 422, 'invalid_code', 'squatter passkey login');
    assertError(await h.get('/auth/me', { token: squatter.accessToken }), 401, 'unauthorized', 'squatter session');
    assertError(await h.post('/auth/token/refresh', { refresh_token: squatter.refreshToken }), 401, 'invalid_grant', 'squatter refresh');

    // The victim recovers the password and signs in straight through: no factor of the squatter's stands in the way.
    assert.equal((await h.post('/auth/password/forgot', { email: victimEmail })).status, 202);
    const newPassword = 'the victim took the account back';
    assert.equal((await h.post('/auth/password/reset', { token: h.tokenFromMail(victimEmail, 'password_reset'), new_password: newPassword })).status, 200);
    const login = await h.post('/auth/login', { email: victimEmail, password: newPassword });
    assert.equal(login.status, 200, login.text);
    assert.ok(login.body.data.access_token, 'tokens, not the MFA gate');
    assert.equal(login.body.data.user.email_verified, true);
  });
});

describe(`finding 1 through a provider sign-up, and finding 2: links complete at the exchange (${TEST_DB})`, () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await startSocialHarness(op, { config: { ...generous, webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await h.close();
    await op.close();
  });

  test('a provider sign-up with an unverified e-mail adds no passkey; what it bound before the gate goes at the owner\'s proof', async () => {
    const victimEmail = uniqueEmail('victim');
    const attackerAtProvider = { sub: newSubject(), email: victimEmail, email_verified: false };
    const signup = await socialLogin(h, op, attackerAtProvider);
    assert.equal(signup.status, 200, signup.text);
    assert.equal(signup.body.data.is_new_user, true);
    const attacker = { userId: signup.body.data.user.id as string, token: signup.body.data.access_token as string };
    assertError(await h.post('/auth/passkeys/register/options', {}, { token: attacker.token }), 403, 'email_unverified', 'passkey after provider sign-up');

    await bindAsBeforeTheGate(h, attacker.userId, async () => {
      await registerPasskey(h, attacker.token);
    });
    // The owner proves the address through account recovery (the account has no password).
    assert.equal((await h.post('/auth/password/forgot', { email: victimEmail })).status, 202);
    const newPassword = 'the owner proves the address';
    assert.equal((await h.post('/auth/password/reset', { token: h.tokenFromMail(victimEmail, 'password_reset'), new_password: newPassword })).status, 200);

    assert.equal(await countRows(h, 'mfa_factors', { user_id: attacker.userId }), 0, 'the passkey went with the proof');
    assert.equal(await countRows(h, 'social_identities', { user_id: attacker.userId }), 0, 'the unvouched link went with the proof (9.4 rule 5)');
    assertError(await passwordlessLogin(h, a1), 422, 'invalid_code', 'attacker passkey login');
    const again = await socialLogin(h, op, attackerAtProvider);
    assertError(again, 409, 'account_link_required', 'attacker provider sign-in');
    const login = await h.post('/auth/login', { email: victimEmail, password: newPassword });
    assert.equal(login.status, 200, login.text);
    assert.ok(login.body.data.access_token, 'the owner meets no factor of the attacker\'s');
  });

  test('a link flow finished in the victim\'s browser links nothing: the victim\'s later sign-in lands in the victim\'s own account', async () => {
    const attacker = await h.signUp(uniqueEmail('attacker'));
    const handoff = handoffPair();
    const victimAtProvider = { sub: newSubject(), email: uniqueEmail('victim'), email_verified: true };
    // The attacker starts a link flow and sends its provider URL to the victim, who signs in at the provider.
    const trip = await socialRoundTrip(h, op, victimAtProvider, async () => {
      const started = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: attacker.accessToken });
      assert.equal(started.status, 200, started.text);
      return { handoff, authorizationUrl: started.body.data.authorization_url };
    });
    assert.ok(trip.code, 'the callback answers with a code, in the victim\'s browser');
    assert.equal(await countRows(h, 'social_identities', { user_id: attacker.userId }), 0, 'the callback linked nothing');
    assert.equal(h.eventsOfType('user.social_linked').filter((event) => event.user_id === attacker.userId).length, 0);
    // The victim's tab holds no verifier for this flow: the code burns.
    const victimTab = handoffPair();
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: victimTab.verifier }), 400, 'invalid_token', 'victim tab');

    const victimSignIn = await socialLogin(h, op, victimAtProvider);
    assert.equal(victimSignIn.status, 200, victimSignIn.text);
    assert.equal(victimSignIn.body.data.is_new_user, true);
    assert.notEqual(victimSignIn.body.data.user.id, attacker.userId, 'the victim is not signed in to the attacker\'s account');
  });

  test('a link is made at the exchange, with the bearer of the session that started it', async () => {
    const user = await h.signUp(uniqueEmail('linker'));
    const other = await h.signUp(uniqueEmail('other'));
    const link = async () =>
      socialRoundTrip(h, op, { sub: newSubject(), email: uniqueEmail('provider'), email_verified: true }, async () => {
        const handoff = handoffPair();
        const started = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
        assert.equal(started.status, 200, started.text);
        return { handoff, authorizationUrl: started.body.data.authorization_url };
      });
    const foreign = await link();
    assertError(await h.post('/auth/social/exchange', { code: foreign.code, handoff_verifier: foreign.handoff.verifier }, { token: other.accessToken }), 401, 'unauthorized', 'another user\'s bearer');
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 0);
    const own = await link();
    const linked = await h.post('/auth/social/exchange', { code: own.code, handoff_verifier: own.handoff.verifier }, { token: user.accessToken });
    assert.equal(linked.status, 200, linked.text);
    assert.equal(linked.body.data.identity.provider, PROVIDER_ID);
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 1);
  });

  test('a squatter cannot start a link, so no provider can verify the squatted address for them', async () => {
    const victimEmail = uniqueEmail('victim');
    const squatter = await squat(h, victimEmail);
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: squatter.accessToken });
    assertError(started, 403, 'email_unverified', 'link start');
    const row = await h.knex(`${h.tablePrefix}users`).where({ id: squatter.userId }).first();
    assert.ok(!row.email_verified, 'the squatted account stays unverified');
  });
});

describe(`findings 3 and 4: a stale token mints no passkey and no API key; recovery revokes keys (${TEST_DB})`, () => {
  let h: Harness;
  let host: HostApp;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig, permissions: [{ key: 'invoices.read', description: 'Read invoices' }] } });
    const app = express();
    app.get('/invoices', h.identity.requirePermission('invoices.read', { apiKeys: true }), (_req, res) => void res.json({ ok: true }));
    host = await listen(app);
  });
  after(async () => {
    await host.close();
    await h.close();
  });

  test('finding 3: a 14-minute-old token of a user without a factor gets 401 reauthentication_required at both passkey steps; a fresh sign-in passes', async () => {
    const user = await h.signUp(uniqueEmail('stolen'));
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    assert.equal(options.status, 200, 'a fresh sign-in may ask for options');
    h.clock.advance(STALE_SECONDS);
    const stale = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    assertError(stale, 401, 'reauthentication_required', 'stale options');
    assert.equal(stale.headers.get('www-authenticate'), 'Bearer error="reauthentication_required"');
    assertError(await h.post('/auth/passkeys/register/verify', { response: primary.registration.response }, { token: user.accessToken }), 401, 'reauthentication_required', 'stale verify');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    const fresh = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal((await registerRecorded(h, fresh.body.data.access_token, primary)).status, 200, 'a fresh sign-in registers');
    await h.knex(`${h.tablePrefix}mfa_factors`).where({ user_id: user.userId }).delete();
  });

  test('finding 4: a stale token mints no API key; a key made fresh is revoked by a password reset, with api_key.revoked reason password_reset', async () => {
    const org = await createOrg(h);
    const body = { name: 'ci', permission_keys: ['invoices.read'], expires_in: 365 * 24 * 3600 };
    h.clock.advance(STALE_SECONDS);
    assertError(await h.post(`/orgs/${org.id}/api-keys`, body, { token: org.owner.token }), 401, 'reauthentication_required', 'stale key');
    assert.equal(await countRows(h, 'api_keys', { user_id: org.owner.userId }), 0);

    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    const token = await switchOrg(h, login.body.data.access_token, org.id);
    const created = await h.post(`/orgs/${org.id}/api-keys`, body, { token });
    assert.equal(created.status, 201, created.text);
    const key = created.body.data.key as string;
    assert.equal((await fetch(`${host.url}/invoices`, { headers: { 'x-api-key': key } })).status, 200);

    assert.equal((await h.post('/auth/password/forgot', { email: org.owner.email })).status, 202);
    assert.equal((await h.post('/auth/password/reset', { token: h.tokenFromMail(org.owner.email, 'password_reset'), new_password: 'recovered after a theft' })).status, 200);
    assert.equal((await fetch(`${host.url}/invoices`, { headers: { 'x-api-key': key } })).status, 401, 'the key died with the recovery');
    const revoked = h.eventsOfType('api_key.revoked').filter((event) => event.data.api_key_id === created.body.data.id);
    assert.deepEqual(revoked.map((event) => event.data.reason), ['password_reset']);
    assert.equal(revoked[0]!.organization_id, org.id);
  });

  test('finding 4: a member whose address is unverified cannot mint a key (403 email_unverified)', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    await h.knex(`${h.tablePrefix}users`).where({ id: member.userId }).update({ email_verified: false });
    servicesOf(h.identity).context.accessCache.invalidate([{ user: member.userId }]);
    assertError(await h.post(`/orgs/${org.id}/api-keys`, { name: 'x', permission_keys: [] }, { token: member.token }), 403, 'email_unverified', 'unverified member');
  });
});

describe(`finding 5: return_to refuses encoded traversal (${TEST_DB})`, () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  withSocialHarness((started) => ({ op, h } = started));

  for (const path of ['/..%2fadmin', '/..%2Fadmin', '/%2e%2e%2fadmin', '/%2E%2E/admin', '/..;/admin', '/x;y', '/a%5cb', '/./x', '/../x']) {
    test(`return_to ${RETURN_URL}${path} answers 422`, async () => {
      const handoff = handoffPair();
      const started = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { return_to: `${RETURN_URL}${path}`, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
      assert.equal(started.status, 422, started.text);
      assert.deepEqual(started.body.errors, ['return_to is not allowed']);
    });
  }

  test('a path below the entry on a segment boundary, with a query, is still allowed', async () => {
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { return_to: `${RETURN_URL}/done?tab=2`, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
  });
});

describe(`finding 6: passkey login options tell nothing about accounts (${TEST_DB})`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await h.close();
  });

  test('an address with passkeys, one without, an unknown one and none at all get the same answer, with no credential listed', async () => {
    const holder = await h.signUp(uniqueEmail('holder'));
    assert.equal((await registerRecorded(h, holder.accessToken, primary)).status, 200);
    const plain = await h.signUp(uniqueEmail('plain'));
    const shapes: string[] = [];
    for (const body of [{ email: holder.email }, { email: plain.email }, { email: uniqueEmail('nobody') }, {}]) {
      const options = await h.post('/auth/passkeys/login/options', body);
      assert.equal(options.status, 200, options.text);
      const { challenge, ...rest } = options.body.data.options;
      assert.ok(typeof challenge === 'string' && challenge.length > 0);
      assert.ok(!rest.allowCredentials || rest.allowCredentials.length === 0, `no credential listed for ${JSON.stringify(body)}`);
      assert.ok(!JSON.stringify(options.body).includes(primary.registration.response.id), 'the credential id is never handed out');
      shapes.push(JSON.stringify(rest));
    }
    assert.equal(new Set(shapes).size, 1, 'every answer has the same shape and values');
  });
});

describe(`finding 7: host middleware never serves an organization the user has left (${TEST_DB})`, () => {
  let h: Harness;
  let host: HostApp;
  before(async () => {
    h = await Harness.start();
    const app = express();
    app.get('/host/any', h.identity.authenticate(), (req, res) => void res.json({ caller: h.identity.caller(req) }));
    app.get('/host/org', h.identity.requirePermission('org.read'), (req, res) => void res.json({ caller: h.identity.caller(req) }));
    host = await listen(app);
  });
  after(async () => {
    await host.close();
    await h.close();
  });

  const hostGet = async (path: string, token: string) => {
    const response = await fetch(`${host.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: response.status, body: (await response.json()) as any };
  };

  test('a token scoped to the organization a member was removed from answers 403 forbidden, while the session lives on in another', async () => {
    const left = await createOrg(h);
    const stays = await createOrg(h);
    const member = await addMember(h, left, left.owner.token, ['member']);
    const tokenForLeft = member.token;
    const before = await hostGet('/host/any', tokenForLeft);
    assert.equal(before.status, 200);
    assert.equal(before.body.caller.organization_id, left.id);

    // The member joins another organization and moves the session there; then leaves the first.
    const invite = await h.post(`/orgs/${stays.id}/invites`, { email: member.email, role_slugs: ['member'] }, { token: stays.owner.token });
    assert.equal(invite.status, 201, invite.text);
    assert.equal((await h.post('/auth/invites/accept', { token: h.tokenFromMail(member.email, 'invite') }, { token: member.accessToken })).status, 200);
    const tokenForStays = await switchOrg(h, member.accessToken, stays.id);
    assert.equal((await h.delete(`/orgs/${left.id}/members/${member.userId}`, { token: left.owner.token })).status, 200);

    const any = await hostGet('/host/any', tokenForLeft);
    assert.equal(any.status, 403, JSON.stringify(any.body));
    assert.equal(any.body.error, 'forbidden');
    assert.equal((await hostGet('/host/org', tokenForLeft)).status, 403);
    const current = await hostGet('/host/any', tokenForStays);
    assert.equal(current.status, 200, 'the session itself lives on');
    assert.equal(current.body.caller.organization_id, stays.id);
  });

  test('a superadmin removed from the organization of its token still passes (CONTRACT 6: superadmins aside)', async () => {
    const left = await createOrg(h);
    const stays = await createOrg(h);
    const root = await addMember(h, left, left.owner.token, ['member']);
    await h.identity.service.grantSuperadmin(root.userId);
    await addMember(h, stays, stays.owner.token, ['member'], root);
    assert.equal((await h.delete(`/orgs/${left.id}/members/${root.userId}`, { token: left.owner.token })).status, 200);
    const passed = await hostGet('/host/any', root.token);
    assert.equal(passed.status, 200, JSON.stringify(passed.body));
    assert.equal(passed.body.caller.organization_id, left.id);
  });
});
