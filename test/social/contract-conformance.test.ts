import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { decodeJwt, Harness, uniqueEmail } from '../helpers/harness.js';
import { enrollTotp, totpCodeAt } from '../helpers/mfa.js';
import {
  authorizeAtProvider,
  callRouterCallback,
  exchangeCode,
  handoffPair,
  newSubject,
  PROVIDER_ID,
  RETURN_URL,
  socialLogin,
  socialRoundTrip,
  startLogin,
  startSocialHarness,
  TestOpenIdProvider,
  type ProviderAccount,
  type SocialStart,
} from '../helpers/oidc.js';
import { fixtures, fixtureWebauthnConfig, passGateWithRecorded, passwordlessLogin, registerRecorded } from '../helpers/passkeys.js';

/*
 * CONTRACT sections 8 (passkeys) and 9 (social login), sentence by sentence: the requirements
 * the other social and passkey files leave unproven. Each test names the sentence it checks.
 */

let op: TestOpenIdProvider;
let h: Harness;

before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSocialHarness(op, { config: { webauthn: fixtureWebauthnConfig } });
});
after(async () => {
  await h.close();
  await op.close();
});

function verifiedAccount(overrides: Partial<ProviderAccount> = {}): ProviderAccount {
  return { sub: newSubject(), email: uniqueEmail('conform'), email_verified: true, ...overrides };
}

function linkStart(target: Harness, token: string): () => Promise<SocialStart> {
  return async () => {
    const handoff = handoffPair();
    const started = await target.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token });
    assert.equal(started.status, 200, started.text);
    return { handoff, authorizationUrl: started.body.data.authorization_url };
  };
}

function stateOf(start: SocialStart): string {
  return new URL(start.authorizationUrl).searchParams.get('state')!;
}

describe('9.2 authorize: the flow row', () => {
  test('a login flow stores purpose login, no user or session, the checked return_to, the handoff challenge, expires_at = now + stateTtl; the state only as a keyed hash', async () => {
    const started = await startLogin(h, { return_to: `${RETURN_URL}/next` });
    const row = await h.knex(`${h.tablePrefix}social_flows`).where({ handoff_challenge: started.handoff.challenge }).first();
    assert.ok(row, 'one flow row holds the handoff challenge');
    assert.equal(row.purpose, 'login');
    assert.equal(row.user_id, null);
    assert.equal(row.session_id, null);
    assert.equal(row.return_to, `${RETURN_URL}/next`);
    assert.equal(Number(row.expires_at), h.clock.now() + 600 * 1000);
    assert.equal(row.consumed_at, null);
    const state = stateOf(started);
    const nonce = new URL(started.authorizationUrl).searchParams.get('nonce')!;
    assert.ok(!JSON.stringify(row).includes(state), 'the state is never stored in clear');
    assert.ok(!JSON.stringify(row).includes(nonce), 'the nonce is sealed');
  });

  test('a link flow stores purpose link with the user and the session that started it', async () => {
    const user = await h.signUp();
    const started = await linkStart(h, user.accessToken)();
    const row = await h.knex(`${h.tablePrefix}social_flows`).where({ handoff_challenge: started.handoff.challenge }).first();
    assert.equal(row.purpose, 'link');
    assert.equal(row.user_id, user.userId);
    assert.equal(row.session_id, decodeJwt(user.accessToken).sid);
    assert.equal(row.return_to, RETURN_URL, 'return_to defaults to returnUrls[0]');
  });

  test('GET authorize checks return_to like POST: 422 return_to is not allowed', async () => {
    const handoff = handoffPair();
    const response = await h.get(`/auth/social/${PROVIDER_ID}/authorize?handoff_challenge=${handoff.challenge}&handoff_challenge_method=S256&return_to=${encodeURIComponent('https://evil.example/app/social')}`);
    assert.equal(response.status, 422);
    assert.deepEqual(response.body, { errors: ['return_to is not allowed'] });
  });

  test('return_to refuses ;, %2f, %5c and a single-dot segment in the path', async () => {
    for (const returnTo of [`${RETURN_URL}/..;/admin`, `${RETURN_URL}/a%2fb`, `${RETURN_URL}/a%5Cb`, `${RETURN_URL}/./x`, `${RETURN_URL}/a%2F..%2Fb`]) {
      const response = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { return_to: returnTo, handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' });
      assert.equal(response.status, 422, returnTo);
      assert.deepEqual(response.body, { errors: ['return_to is not allowed'] }, returnTo);
    }
  });
});

describe('9.1 provider options', () => {
  test('authorizationParams travel in the authorization URL; allowSignup false refuses a new subject with no event (warn log only)', async () => {
    const harness = await startSocialHarness(op, { provider: { authorizationParams: { ui_locales: 'en' }, allowSignup: false } });
    try {
      const started = await startLogin(harness);
      assert.equal(new URL(started.authorizationUrl).searchParams.get('ui_locales'), 'en');
      const eventsBefore = harness.events.length;
      const trip = await socialRoundTrip(harness, op, verifiedAccount());
      assertError(await exchangeCode(harness, trip), 403, 'signup_disabled');
      assert.equal(await countRows(harness, 'users'), 0);
      assert.deepEqual(harness.events.slice(eventsBefore).map((event) => event.type), [], 'a refusal tied to no user emits nothing');
      assert.ok(harness.logs.some((line) => line.level === 'warn' && JSON.stringify(line.meta ?? {}).includes('signup_disabled')));
    } finally {
      await harness.close();
    }
  });
});

describe('9.2 callback', () => {
  test('an unknown state is 400 social_state_invalid, with Cache-Control no-store and Referrer-Policy no-referrer', async () => {
    const response = await h.get(`/auth/social/${PROVIDER_ID}/callback?state=never-issued-state&code=abc`);
    assertError(response, 400, 'social_state_invalid');
    assert.equal(response.headers.get('cache-control'), 'no-store');
    assert.equal(response.headers.get('referrer-policy'), 'no-referrer');
    assert.equal(response.headers.get('set-cookie'), null);
  });

  test('a provider error outside the RFC 6749 list comes back as provider_error without social_error_detail; the state is burned', async () => {
    const started = await startLogin(h);
    const callback = await callRouterCallback(h, `/auth/social/${PROVIDER_ID}/callback?state=${encodeURIComponent(stateOf(started))}&error=made_up_error&error_description=${encodeURIComponent('<script>')}`);
    assert.equal(callback.response.status, 303);
    assert.equal(callback.response.headers.get('cache-control'), 'no-store');
    assert.equal(callback.response.headers.get('referrer-policy'), 'no-referrer');
    assert.equal(callback.error, 'provider_error');
    assert.equal(callback.location?.searchParams.has('social_error_detail'), false, 'only RFC 6749 codes are forwarded');
    assert.equal(`${callback.location!.origin}${callback.location!.pathname}`, RETURN_URL);
    const again = await h.get(`/auth/social/${PROVIDER_ID}/callback?state=${encodeURIComponent(stateOf(started))}&error=access_denied`);
    assertError(again, 400, 'social_state_invalid');
  });

  test('every forwarded RFC 6749 code travels as social_error_detail', async () => {
    for (const code of ['server_error', 'temporarily_unavailable', 'invalid_scope', 'login_required', 'consent_required', 'interaction_required']) {
      const started = await startLogin(h);
      const callback = await callRouterCallback(h, `/auth/social/${PROVIDER_ID}/callback?state=${encodeURIComponent(stateOf(started))}&error=${code}`);
      assert.equal(callback.error, 'provider_error', code);
      assert.equal(callback.location?.searchParams.get('social_error_detail'), code);
    }
  });

  test('a token endpoint that cannot be reached at the callback is a 303 with social_error=provider_unavailable', async () => {
    const provider = await TestOpenIdProvider.start();
    const harness = await startSocialHarness(provider);
    try {
      provider.use(verifiedAccount());
      const started = await startLogin(harness);
      const callbackPath = await authorizeAtProvider(started.authorizationUrl);
      await provider.close();
      const callback = await callRouterCallback(harness, callbackPath);
      assert.equal(callback.response.status, 303, callback.response.text);
      assert.equal(callback.error, 'provider_unavailable');
      assert.equal(callback.code, null);
    } finally {
      await harness.close();
    }
  });

  test('the callback changes no account: a sign-up round trip creates no user until the exchange', async () => {
    const usersBefore = await countRows(h, 'users');
    const trip = await socialRoundTrip(h, op, verifiedAccount());
    assert.ok(trip.code);
    assert.equal(await countRows(h, 'users'), usersBefore);
    const exchanged = await exchangeCode(h, trip);
    assert.equal(exchanged.status, 200, exchanged.text);
    assert.equal(await countRows(h, 'users'), usersBefore + 1);
  });
});

describe('9.2 exchange: the answer of a login', () => {
  test('exactly the token response of POST /auth/login, plus is_new_user', async () => {
    const local = await h.signUp();
    const password = await h.post('/auth/login', { email: local.email, password: local.password });
    const social = await socialLogin(h, op, verifiedAccount());
    assert.equal(social.status, 200, social.text);
    const socialKeys = Object.keys(social.body.data).filter((key) => key !== 'is_new_user').sort();
    assert.deepEqual(socialKeys, Object.keys(password.body.data).sort());
    assert.deepEqual(Object.keys(social.body.data.user).sort(), ['email', 'email_verified', 'id']);
    assert.equal(typeof social.body.data.is_new_user, 'boolean');
    assert.equal(social.body.data.token_type, password.body.data.token_type);
    assert.equal(social.body.data.expires_in, 900);
  });
});

describe('9.3 claims', () => {
  test('name seeds display_name cut to 120 characters', async () => {
    const name = `Ada ${'x'.repeat(200)}`;
    const login = await socialLogin(h, op, verifiedAccount({ name }));
    assert.equal(login.status, 200, login.text);
    const me = await h.get('/auth/me', { token: login.body.data.access_token });
    assert.equal(me.body.data.display_name, name.slice(0, 120));
  });

  test('name seeds display_name for a new account only: a later login does not change it', async () => {
    const account = verifiedAccount({ name: 'First Name' });
    const first = await socialLogin(h, op, account);
    account.name = 'Second Name';
    const second = await socialLogin(h, op, account);
    assert.equal(second.body.data.user.id, first.body.data.user.id);
    const me = await h.get('/auth/me', { token: second.body.data.access_token });
    assert.equal(me.body.data.display_name, 'First Name');
  });

  for (const [label, value] of [
    ['the string "TRUE"', 'TRUE'],
    ['the number 1', 1],
    ['the string "yes"', 'yes'],
  ] as const) {
    test(`email_verified as ${label} does not count as true`, async () => {
      const login = await socialLogin(h, op, verifiedAccount({ email_verified: value }));
      assert.equal(login.status, 200, login.text);
      assert.equal(login.body.data.user.email_verified, false);
      const identities = await h.get('/auth/social/identities', { token: login.body.data.access_token });
      assert.equal(identities.body.data.identities[0].email_verified, false);
    });
  }
});

describe('9.5 linking: who may link', () => {
  test('link start needs a verified account e-mail: 403 email_unverified, and no flow is stored', async () => {
    const user = await h.signUp(uniqueEmail('unverified'), undefined, { verify: false });
    const flowsBefore = await countRows(h, 'social_flows', { user_id: user.userId });
    const handoff = handoffPair();
    const response = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
    assertError(response, 403, 'email_unverified');
    assert.equal(await countRows(h, 'social_flows', { user_id: user.userId }), flowsBefore);
  });

  test('a link exchange with the bearer of another session of the same user is 401 unauthorized, burned, and links nothing', async () => {
    const user = await h.signUp();
    const otherSession = await h.post('/auth/login', { email: user.email, password: user.password });
    const trip = await socialRoundTrip(h, op, verifiedAccount(), linkStart(h, user.accessToken));
    assert.ok(trip.code, `${trip.error}`);
    const wrongSession = await exchangeCode(h, trip, otherSession.body.data.access_token);
    assertError(wrongSession, 401, 'unauthorized');
    assert.match(wrongSession.headers.get('www-authenticate') ?? '', /^Bearer/);
    assertError(await exchangeCode(h, trip, user.accessToken), 400, 'invalid_token');
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 0);
    assert.equal(h.eventsOfType('user.social_linked').some((event) => event.user_id === user.userId), false);
  });

  test('an identity linked to another user cannot be linked explicitly: 409 identity_already_linked at the exchange', async () => {
    const account = verifiedAccount();
    const owner = await socialLogin(h, op, account);
    assert.equal(owner.status, 200, owner.text);
    const user = await h.signUp();
    const trip = await socialRoundTrip(h, op, account, linkStart(h, user.accessToken));
    assert.equal(trip.error, null, 'the callback refuses nothing');
    assertError(await exchangeCode(h, trip, user.accessToken), 409, 'identity_already_linked');
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 0);
  });

  test('the provider e-mail may differ from the account e-mail; the local e-mail is unchanged', async () => {
    const user = await h.signUp();
    const account = verifiedAccount();
    const trip = await socialRoundTrip(h, op, account, linkStart(h, user.accessToken));
    const linked = await exchangeCode(h, trip, user.accessToken);
    assert.equal(linked.status, 200, linked.text);
    assert.deepEqual(Object.keys(linked.body.data.identity).sort(), ['created_at', 'email', 'email_verified', 'id', 'last_login_at', 'provider']);
    assert.equal(linked.body.data.identity.email, account.email);
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.email, user.email);
  });
});

describe('9.6 and 9.8: MFA after a social sign-in, and its events', () => {
  test('user.logged_in after the MFA gate of a social sign-in records method social and the provider', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const totp = await enrollTotp(h, first.body.data.access_token);
    h.clock.advance(30);
    const gated = await socialLogin(h, op, account);
    assert.equal(gated.body.data.mfa_required, true, gated.text);
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: gated.body.data.mfa_token });
    assert.equal(verified.status, 200, verified.text);
    const loggedIn = h.eventsOfType('user.logged_in').filter((event) => event.user_id === first.body.data.user.id).at(-1);
    assert.deepEqual(loggedIn?.data.amr, ['fed', 'otp']);
    assert.equal(loggedIn?.data.method, 'social');
    assert.equal(loggedIn?.data.provider, PROVIDER_ID);
  });

  test('a social user with a passkey: the gate gives amr [fed, hwk]; the passkey counts as a way to sign in, so the only link can be unlinked', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const userId = first.body.data.user.id;
    const registered = await registerRecorded(h, first.body.data.access_token, fixtures.primary);
    assert.equal(registered.status, 200, registered.text);
    assert.equal(registered.body.data.status, 'confirmed');
    const factorId = registered.body.data.factor_id;
    h.clock.advance(30);
    const gated = await socialLogin(h, op, account);
    assert.equal(gated.body.data.mfa_required, true, gated.text);
    assert.ok(gated.body.data.factors.some((factor: { id: string; type: string }) => factor.id === factorId && factor.type === 'webauthn'));
    const verified = await passGateWithRecorded(h, gated.body.data.mfa_token, factorId, fixtures.primary.assertions[0]!);
    assert.equal(verified.status, 200, verified.text);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.deepEqual(claims.amr, ['fed', 'hwk']);
    assert.equal(claims.mfa, true);

    const identities = await h.get('/auth/social/identities', { token: verified.body.data.access_token });
    const identityId = identities.body.data.identities[0].id;
    const unlinked = await h.delete(`/auth/social/identities/${identityId}`, { token: verified.body.data.access_token });
    assert.equal(unlinked.status, 200, unlinked.text);
    assert.deepEqual(unlinked.body.data, { status: 'unlinked' });
    // The passkey still signs in alone.
    const passkeyLogin = await passwordlessLogin(h, fixtures.primary.assertions[1]!);
    assert.equal(passkeyLogin.status, 200, passkeyLogin.text);
    assert.equal(passkeyLogin.body.data.user.id, userId);
  });
});

describe('8 passkeys: registration needs a proven address and a fresh authentication', () => {
  test('register/options answers 403 email_unverified before the address is proven', async () => {
    const user = await h.signUp(uniqueEmail('unverified-passkey'), undefined, { verify: false });
    assertError(await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken }), 403, 'email_unverified');
  });

  test('a user without a factor and a stale sign-in gets 401 reauthentication_required on options and verify', async () => {
    const user = await h.signUp();
    h.clock.advance(301);
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    assertError(options, 401, 'reauthentication_required');
    assert.equal(options.headers.get('www-authenticate'), 'Bearer error="reauthentication_required"');
    const verify = await h.post('/auth/passkeys/register/verify', { response: fixtures.second.registration.response }, { token: user.accessToken });
    assertError(verify, 401, 'reauthentication_required');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
  });

  test('a fresh sign-in within security.stepUp.maxAge may register: options answer creation options', async () => {
    const user = await h.signUp();
    h.clock.advance(299);
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    assert.equal(options.status, 200, options.text);
    assert.equal(typeof options.body.data.challenge, 'string');
    assert.equal(options.body.data.rp.id, fixtureWebauthnConfig.rpId);
  });
});

describe('8 and 9.9: rate groups', () => {
  test('the passkey login routes are in the per-IP group login', async () => {
    const limited = await Harness.start({ rateLimits: true, config: { webauthn: fixtureWebauthnConfig, auth: { rateLimits: { login: { limit: 1, windowSec: 300 } } } } });
    try {
      assert.equal((await limited.post('/auth/passkeys/login/options', {})).status, 200);
      const over = await limited.post('/auth/passkeys/login/options', {});
      assertError(over, 429, 'rate_limited');
      assert.ok(over.headers.get('retry-after'));
      const statuses: number[] = [];
      for (let attempt = 0; attempt < 2; attempt += 1) {
        statuses.push((await limited.post('/auth/passkeys/login/verify', { challenge_id: '00000000-0000-4000-8000-000000000000', response: fixtures.primary.assertions[0]!.response })).status);
      }
      assert.ok(statuses.includes(429), `login/verify was never limited: ${statuses.join(', ')}`);
    } finally {
      await limited.close();
    }
  });

  test('the social group covers GET authorize and callback, each route apart; link and identities fall under authenticated', async () => {
    const limited = await startSocialHarness(op, { rateLimits: true, config: { auth: { rateLimits: { social: { limit: 1, windowSec: 300 } } } } });
    try {
      const handoff = handoffPair();
      const getAuthorize = () => limited.get(`/auth/social/${PROVIDER_ID}/authorize?handoff_challenge=${handoff.challenge}&handoff_challenge_method=S256`);
      assert.equal((await getAuthorize()).status, 302);
      assertError(await getAuthorize(), 429, 'rate_limited');
      assert.equal((await limited.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' })).status, 200, 'POST authorize has its own budget');
      const callback = () => limited.get(`/auth/social/${PROVIDER_ID}/callback?state=unknown&code=x`);
      assertError(await callback(), 400, 'social_state_invalid');
      assertError(await callback(), 429, 'rate_limited');
      const user = await limited.signUp();
      for (let attempt = 0; attempt < 3; attempt += 1) {
        const link = await limited.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
        assert.equal(link.status, 200, `link ${attempt}: ${link.text}`);
        assert.equal((await limited.get('/auth/social/identities', { token: user.accessToken })).status, 200);
      }
    } finally {
      await limited.close();
    }
  });
});
