import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { decodeJwt, Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { enrollTotp, nextTotpCode, totpCodeAt } from '../helpers/mfa.js';
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
  socialRoundTripAndExchange,
  startLink,
  startSocialHarness,
  TestOpenIdProvider,
  type ProviderAccount,
} from '../helpers/oidc.js';

// docs/social-login.md: social login against a real OpenID provider (oidc-provider in this process).
// Happy paths, MFA, events; the attacks are in social-attacks.test.ts.

let op: TestOpenIdProvider;
let h: Harness;

before(async () => {
  op = await TestOpenIdProvider.start({ conformIdTokenClaims: false });
  h = await startSocialHarness(op);
});
after(async () => {
  await h.close();
  await op.close();
});

function verifiedAccount(overrides: Partial<ProviderAccount> = {}): ProviderAccount {
  return { sub: newSubject(), email: uniqueEmail('social'), email_verified: true, name: 'Ada Lovelace', ...overrides };
}

describe('configuration and discovery', () => {
  test('GET /auth/social/providers lists the configured providers by id and name', async () => {
    const listed = await h.get('/auth/social/providers');
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body.data, [{ id: PROVIDER_ID, name: 'Test provider' }]);
  });

  test('the authorization URL carries code flow, PKCE S256, state, nonce, scope and the configured redirect_uri', async () => {
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { headers: { host: 'evil.example', 'x-forwarded-host': 'evil.example' } });
    assert.equal(started.status, 200, started.text);
    assert.equal(started.body.data.expires_in, 600);
    const url = new URL(started.body.data.authorization_url);
    assert.equal(url.origin, op.issuer);
    const params = url.searchParams;
    assert.equal(params.get('response_type'), 'code');
    assert.equal(params.get('code_challenge_method'), 'S256');
    assert.match(params.get('code_challenge') ?? '', /^[A-Za-z0-9_-]{43}$/);
    assert.ok((params.get('state') ?? '').length >= 32);
    assert.ok((params.get('nonce') ?? '').length >= 32);
    assert.equal(params.get('scope'), 'openid email profile');
    // Never derived from Host or X-Forwarded-*.
    assert.equal(params.get('redirect_uri'), 'http://127.0.0.1/identity/auth/social/test/callback');
    // Nothing secret is stored in clear: the state is hashed, the verifier and nonce sealed.
    const [row] = await h.knex(`${h.tablePrefix}social_flows`).orderBy('created_at', 'desc').limit(1);
    assert.notEqual(row.state_hash, params.get('state'));
    assert.ok(!String(row.secrets_enc).includes(params.get('nonce')!));
  });

  test('flows older than one day are pruned (injected clock)', async () => {
    const handoff = handoffPair();
    await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    const createdBefore = h.clock.now();
    const oldFlows = async () => Number((await h.knex(`${h.tablePrefix}social_flows`).where('created_at', '<=', createdBefore).count({ count: '*' }).first())!.count);
    assert.ok((await oldFlows()) > 0);
    h.clock.advance(24 * 3600 + 1);
    await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    assert.equal(await oldFlows(), 0);
  });

  test('GET authorize answers 302 to the provider', async () => {
    const handoff = handoffPair();
    const response = await h.get(`/auth/social/${PROVIDER_ID}/authorize?handoff_challenge=${handoff.challenge}&handoff_challenge_method=S256`);
    assert.equal(response.status, 302);
    assert.ok(response.headers.get('location')?.startsWith(`${op.issuer}/`));
    assert.equal(response.headers.get('cache-control'), 'no-store');
  });

  test('an unknown provider is 404 not_found', async () => {
    const handoff = handoffPair();
    assertError(await h.post('/auth/social/nope/authorize', { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }), 404, 'not_found');
  });

  test('handoff_challenge is required, base64url, 43 to 128 characters, method S256 only', async () => {
    const handoff = handoffPair();
    for (const body of [{}, { handoff_challenge: 'short', handoff_challenge_method: 'S256' }, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'plain' }, { handoff_challenge: `${handoff.challenge}!!`, handoff_challenge_method: 'S256' }]) {
      const response = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, body);
      assert.equal(response.status, 422, JSON.stringify(body));
    }
  });

  test('a provider that cannot be reached answers 502 provider_unavailable; the others keep working', async () => {
    const down = await Harness.start({
      config: {
        social: {
          redirectBase: 'http://127.0.0.1/identity',
          returnUrls: [RETURN_URL],
          providers: {
            down: { issuer: 'http://127.0.0.1:9', clientId: 'x', clientSecret: 'y' },
            [PROVIDER_ID]: { issuer: op.issuer, clientId: 'identity-router-test', clientSecret: 'client-secret-of-the-test-provider-0123456789' },
          },
        },
      },
    });
    try {
      const handoff = handoffPair();
      assertError(await down.post('/auth/social/down/authorize', { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }), 502, 'provider_unavailable');
      assert.equal((await down.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' })).status, 200);
    } finally {
      await down.close();
    }
  });

  test('without a social config every social route answers 404, even unauthenticated', async () => {
    const plain = await Harness.start();
    try {
      const handoff = handoffPair();
      assertError(await plain.get('/auth/social/providers'), 404, 'not_found');
      assertError(await plain.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }), 404, 'not_found');
      assertError(await plain.get(`/auth/social/${PROVIDER_ID}/callback?state=x&code=y`), 404, 'not_found');
      assertError(await plain.post('/auth/social/exchange', { code: 'x', handoff_verifier: handoff.verifier }), 404, 'not_found');
      assertError(await plain.post(`/auth/social/${PROVIDER_ID}/link`, {}), 404, 'not_found');
      assertError(await plain.get('/auth/social/identities'), 404, 'not_found');
      assertError(await plain.delete('/auth/social/identities/abc'), 404, 'not_found');
    } finally {
      await plain.close();
    }
  });
});

describe('sign-in', () => {
  test('sign-up: a new subject with a new e-mail creates a password-less user, links it, and signs in with amr [fed]', async () => {
    const account = verifiedAccount();
    const trip = await socialRoundTrip(h, op, account);
    assert.equal(trip.response.status, 303);
    assert.equal(trip.response.headers.get('cache-control'), 'no-store');
    assert.equal(trip.response.headers.get('referrer-policy'), 'no-referrer');
    assert.equal(trip.response.headers.get('set-cookie'), null, 'the callback never sets a cookie');
    assert.equal(`${trip.location!.origin}${trip.location!.pathname}`, RETURN_URL);
    assert.deepEqual([...trip.location!.searchParams.keys()], ['social_code'], 'only the one-time code travels in the URL');

    const exchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
    assert.equal(exchanged.status, 200, exchanged.text);
    const data = exchanged.body.data;
    assert.equal(data.is_new_user, true);
    assert.equal(data.user.email, account.email);
    assert.equal(data.user.email_verified, true);
    assert.ok(data.refresh_token);
    const claims = decodeJwt(data.access_token);
    assert.deepEqual(claims.amr, ['fed']);
    assert.equal(claims.mfa, false);
    assert.ok(!JSON.stringify(claims).includes(account.sub), 'the provider sub is not in our token');

    const me = await h.get('/auth/me', { token: data.access_token });
    assert.equal(me.body.data.display_name, 'Ada Lovelace');
    const user = await h.knex(`${h.tablePrefix}users`).where({ id: data.user.id }).first();
    assert.equal(user.password_hash, null);

    const registered = h.eventsOfType('user.registered').find((event) => event.user_id === data.user.id);
    assert.deepEqual(registered?.data, { method: 'social', provider: PROVIDER_ID });
    const linked = h.eventsOfType('user.social_linked').find((event) => event.user_id === data.user.id);
    assert.equal(linked?.data.method, 'signup');
    assert.equal(linked?.data.provider, PROVIDER_ID);
    const loggedIn = h.eventsOfType('user.logged_in').find((event) => event.user_id === data.user.id);
    assert.equal(loggedIn?.data.method, 'social');
    assert.equal(loggedIn?.data.provider, PROVIDER_ID);
    // Neither the log nor the events carry the subject, the provider e-mail, codes or tokens.
    const logText = JSON.stringify(h.logs);
    assert.ok(!logText.includes(trip.code!) && !logText.includes(account.sub) && !logText.includes(data.refresh_token), 'the log holds no code, subject or token');
    for (const event of h.events.filter((candidate) => candidate.user_id === data.user.id)) {
      const text = JSON.stringify(event.data);
      assert.ok(!text.includes(account.sub) && !text.includes(account.email!) && !text.includes(trip.code!), `${event.type} leaks: ${text}`);
    }
  });

  test('a second login of the same subject signs the same user in, is_new_user false, and refreshes the link', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    h.clock.advance(60);
    account.email_verified = 'true';
    const second = await socialLogin(h, op, account);
    assert.equal(second.status, 200, second.text);
    assert.equal(second.body.data.is_new_user, false);
    assert.equal(second.body.data.user.id, first.body.data.user.id);
    const identities = await h.get('/auth/social/identities', { token: second.body.data.access_token });
    assert.equal(identities.status, 200);
    assert.equal(identities.body.data.identities.length, 1);
    const identity = identities.body.data.identities[0];
    assert.deepEqual(Object.keys(identity).sort(), ['created_at', 'email', 'email_verified', 'id', 'last_login_at', 'provider']);
    assert.equal(identity.email_verified, true, 'the string "true" counts as verified');
    assert.equal(identity.last_login_at, new Date(h.clock.now()).toISOString());
  });

  test('a link whose stored issuer differs from the configured one is never matched (warn log)', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    await h.knex(`${h.tablePrefix}social_identities`).where({ user_id: first.body.data.user.id }).update({ issuer: 'https://old-issuer.example' });
    const { exchanged } = await socialRoundTripAndExchange(h, op, account);
    assertError(exchanged, 409, 'account_link_required');
    assert.ok(h.logs.some((line) => line.level === 'warn' && /issuer differs/.test(line.msg)));
  });

  test('a user disabled between the callback and the exchange gets 403 account_disabled from the exchange', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const trip = await socialRoundTrip(h, op, account);
    await h.knex(`${h.tablePrefix}users`).where({ id: first.body.data.user.id }).update({ status: 'disabled' });
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }), 403, 'account_disabled');
  });

  test('the local e-mail never changes when the provider e-mail does', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const originalEmail = account.email;
    account.email = uniqueEmail('changed');
    const second = await socialLogin(h, op, account);
    assert.equal(second.body.data.user.id, first.body.data.user.id);
    assert.equal(second.body.data.user.email, originalEmail);
  });

  test('auto-link: a verified local account and a verified provider e-mail link and sign in (rule 3)', async () => {
    const local = await h.signUp();
    const login = await socialLogin(h, op, verifiedAccount({ email: local.email.toUpperCase() }));
    assert.equal(login.status, 200, login.text);
    assert.equal(login.body.data.user.id, local.userId);
    assert.equal(login.body.data.is_new_user, false);
    const linked = h.eventsOfType('user.social_linked').find((event) => event.user_id === local.userId);
    assert.equal(linked?.data.method, 'auto_email');
  });

  test('a provider that gives no e-mail cannot sign up: social_email_required, no account', async () => {
    const before = await countRows(h, 'users');
    const { exchanged } = await socialRoundTripAndExchange(h, op, { sub: newSubject() });
    assertError(exchanged, 422, 'social_email_required');
    assert.equal(await countRows(h, 'users'), before);
  });

  test('a disabled user is refused at the exchange with 403 account_disabled; a locked one with 401 invalid_credentials', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const userId = first.body.data.user.id;
    await h.knex(`${h.tablePrefix}users`).where({ id: userId }).update({ status: 'disabled' });
    assertError((await socialRoundTripAndExchange(h, op, account)).exchanged, 403, 'account_disabled');
    const failed = h.eventsOfType('user.login_failed').find((event) => event.user_id === userId);
    assert.deepEqual(failed?.data, { method: 'social', provider: PROVIDER_ID, reason: 'account_disabled' });
    await h.knex(`${h.tablePrefix}users`).where({ id: userId }).update({ status: 'active', locked_until: h.clock.now() + 60_000 });
    assertError((await socialRoundTripAndExchange(h, op, account)).exchanged, 401, 'invalid_credentials');
    await h.knex(`${h.tablePrefix}users`).where({ id: userId }).update({ locked_until: null });
  });

  test('the provider answering error=access_denied comes back as social_error=provider_error with the RFC 6749 code', async () => {
    op.denyNext = true;
    const trip = await socialRoundTrip(h, op, verifiedAccount());
    assert.equal(trip.error, 'provider_error');
    assert.equal(trip.location?.searchParams.get('social_error_detail'), 'access_denied');
    assert.equal(trip.code, null);
  });

  test('a social-only user sets a password through forgot/reset, can then log in with it; change without one is 403', async () => {
    const account = verifiedAccount();
    const login = await socialLogin(h, op, account);
    const token = login.body.data.access_token;
    assertError(await h.post('/auth/password/change', { current_password: 'whatever-it-is', new_password: STRONG_PASSWORD }, { token }), 403, 'invalid_credentials');
    assert.equal((await h.post('/auth/password/forgot', { email: account.email })).status, 202);
    const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(account.email!, 'password_reset'), new_password: STRONG_PASSWORD });
    assert.equal(reset.status, 200, reset.text);
    const passwordLogin = await h.post('/auth/login', { email: account.email, password: STRONG_PASSWORD });
    assert.equal(passwordLogin.status, 200);
    assert.equal(passwordLogin.body.data.user.id, login.body.data.user.id);
    // The provider had vouched for the address, so the proof evicts nothing.
    const identities = await h.get('/auth/social/identities', { token: passwordLogin.body.data.access_token });
    assert.equal(identities.body.data.identities.length, 1);
  });
});

describe('e-mail from the ID token and from UserInfo', () => {
  for (const conformIdTokenClaims of [false, true]) {
    test(`conformIdTokenClaims ${conformIdTokenClaims}: the e-mail ${conformIdTokenClaims ? 'comes from UserInfo' : 'is in the ID token'}`, async () => {
      const provider = await TestOpenIdProvider.start({ conformIdTokenClaims });
      const harness = await startSocialHarness(provider);
      try {
        const account = verifiedAccount();
        const login = await socialLogin(harness, provider, account);
        assert.equal(login.status, 200, login.text);
        assert.equal(login.body.data.user.email, account.email);
        assert.equal(login.body.data.user.email_verified, true);
        assert.equal(provider.userInfoRequests > 0, conformIdTokenClaims, 'UserInfo is asked only when the ID token has no e-mail');
      } finally {
        await harness.close();
        await provider.close();
      }
    });
  }
});

describe('MFA', () => {
  test('a social user with a confirmed TOTP factor gets the MFA gate and no token; verify gives amr [fed, otp]', async () => {
    const account = verifiedAccount();
    const first = await socialLogin(h, op, account);
    const totp = await enrollTotp(h, first.body.data.access_token);
    h.clock.advance(30);
    const gated = await socialLogin(h, op, account);
    assert.equal(gated.status, 200, gated.text);
    assert.equal(gated.body.data.mfa_required, true);
    assert.equal(gated.body.data.access_token, undefined);
    assert.equal(gated.body.data.is_new_user, false);
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: gated.body.data.mfa_token });
    assert.equal(verified.status, 200, verified.text);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.deepEqual(claims.amr, ['fed', 'otp']);
    assert.equal(claims.mfa, true);
    assert.equal(claims.auth_time, Math.floor(h.clock.now() / 1000));
  });

  test('the provider amr never satisfies the local gate; password MFA login still gives [pwd, otp]', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: login.body.data.mfa_token });
    assert.deepEqual(decodeJwt(verified.body.data.access_token).amr, ['pwd', 'otp']);
  });
});

describe('linking and unlinking', () => {
  test('explicit link after step-up: a password user with a factor links, the exchange reports the identity', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    h.clock.advance(400);
    const stale = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
    assertError(stale, 401, 'step_up_required');
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    const token = stepped.body.data.access_token;
    // The provider's e-mail may differ from the account's: an explicit link is proof enough.
    const account = verifiedAccount();
    const trip = await socialRoundTrip(h, op, account, startLink(h, token));
    assert.ok(trip.code, `link callback: ${trip.error}`);
    const exchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }, { token });
    assert.equal(exchanged.status, 200, exchanged.text);
    assert.equal(exchanged.body.data.identity.provider, PROVIDER_ID);
    assert.equal(exchanged.body.data.identity.email, account.email);
    const linked = h.eventsOfType('user.social_linked').find((event) => event.user_id === user.userId);
    assert.equal(linked?.data.method, 'explicit');
    // Step-up stays local: the round trip did not touch auth_time.
    const session = await h.knex(`${h.tablePrefix}sessions`).where({ id: decodeJwt(token).sid }).first();
    assert.equal(Number(session.auth_time), decodeJwt(token).auth_time * 1000);
    // Signing in with the provider now reaches this user (after the MFA gate).
    const gated = await socialLogin(h, op, account);
    assert.equal(gated.body.data.mfa_required, true);
    // Linking the same identity again is idempotent.
    h.clock.advance(30);
    const again = await socialRoundTrip(h, op, account, startLink(h, token));
    assert.ok(again.code, `${again.error}`);
    const relinked = await exchangeCode(h, again, token);
    assert.equal(relinked.status, 200, relinked.text);
    assert.equal(relinked.body.data.identity.id, exchanged.body.data.identity.id);
  });

  test('a user without a factor needs a recent sign-in to link: 401 reauthentication_required', async () => {
    const user = await h.signUp();
    h.clock.advance(301);
    const stale = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
    assertError(stale, 401, 'reauthentication_required');
    assert.equal(stale.headers.get('www-authenticate'), 'Bearer error="reauthentication_required"');
  });

  test('one identity per provider per user: a second subject is provider_already_linked', async () => {
    const user = await h.signUp();
    const first = await socialRoundTripAndExchange(h, op, verifiedAccount(), { start: startLink(h, user.accessToken), token: user.accessToken });
    assert.equal(first.exchanged.status, 200, first.exchanged.text);
    const second = await socialRoundTripAndExchange(h, op, verifiedAccount(), { start: startLink(h, user.accessToken), token: user.accessToken });
    assert.equal(second.trip.error, null, 'the callback refuses nothing: the link is made at the exchange');
    assertError(second.exchanged, 409, 'provider_already_linked');
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 1);
  });

  test('a link flow whose session was revoked meanwhile ends with session_ended', async () => {
    const user = await h.signUp();
    op.use(verifiedAccount());
    const started = await startLink(h, user.accessToken)();
    assert.equal((await h.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
    const callback = await callRouterCallback(h, await authorizeAtProvider(started.authorizationUrl));
    assert.ok(callback.code, `the callback refuses nothing: ${callback.error}`);
    const exchanged = await exchangeCode(h, { ...started, ...callback }, user.accessToken);
    assertError(exchanged, 401, 'session_ended');
    assert.equal(await countRows(h, 'social_identities', { user_id: user.userId }), 0);
  });

  test('a link exchange code without the bearer of its user is 401 and burned', async () => {
    const user = await h.signUp();
    const other = await h.signUp();
    const trip = await socialRoundTrip(h, op, verifiedAccount(), startLink(h, user.accessToken));
    const withoutBearer = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
    assertError(withoutBearer, 401, 'unauthorized');
    const trip2 = await socialRoundTrip(h, op, verifiedAccount({ sub: newSubject() }), startLink(h, other.accessToken));
    assertError(await h.post('/auth/social/exchange', { code: trip2.code, handoff_verifier: trip2.handoff.verifier }, { token: user.accessToken }), 401, 'unauthorized');
    // Burned: even the right bearer cannot use it now.
    assertError(await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }, { token: user.accessToken }), 400, 'invalid_token');
  });

  test('unlink needs step-up, removes the link without revoking sessions, and is 404 for another user\'s identity', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const trip = await socialRoundTrip(h, op, verifiedAccount(), startLink(h, user.accessToken));
    const exchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }, { token: user.accessToken });
    const identityId = exchanged.body.data.identity.id;

    const stranger = await h.signUp();
    assertError(await h.delete(`/auth/social/identities/${identityId}`, { token: stranger.accessToken }), 404, 'not_found');

    h.clock.advance(400);
    assertError(await h.delete(`/auth/social/identities/${identityId}`, { token: user.accessToken }), 401, 'step_up_required');
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: user.accessToken });
    const unlinked = await h.delete(`/auth/social/identities/${identityId}`, { token: stepped.body.data.access_token });
    assert.equal(unlinked.status, 200, unlinked.text);
    assert.deepEqual(unlinked.body.data, { status: 'unlinked' });
    const event = h.eventsOfType('user.social_unlinked').find((candidate) => candidate.user_id === user.userId);
    assert.deepEqual(event?.data, { identity_id: identityId, provider: PROVIDER_ID, reason: 'user' });
    assert.equal((await h.get('/auth/me', { token: stepped.body.data.access_token })).status, 200, 'unlinking does not revoke sessions');
    const identities = await h.get('/auth/social/identities', { token: stepped.body.data.access_token });
    assert.deepEqual(identities.body.data.identities, []);
  });

  test('deleting a user deletes their links (user.social_unlinked reason user_deleted)', async () => {
    const account = verifiedAccount();
    const login = await socialLogin(h, op, account);
    const userId = login.body.data.user.id;
    const deleted = await h.delete(`/users/${userId}`, { token: login.body.data.access_token });
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal(await countRows(h, 'social_identities', { user_id: userId }), 0);
    const event = h.eventsOfType('user.social_unlinked').find((candidate) => candidate.user_id === userId);
    assert.equal(event?.data.reason, 'user_deleted');
    // The subject is free again: it signs up as a new account.
    const again = await socialLogin(h, op, account);
    assert.equal(again.body.data.is_new_user, true);
    assert.notEqual(again.body.data.user.id, userId);
  });
});

describe('the social rate group', () => {
  test('authorize, callback and exchange count per IP in group social (default 20 per 300 s), each route separately', async () => {
    const limited = await startSocialHarness(op, { rateLimits: true, config: { auth: { rateLimits: { social: { limit: 2, windowSec: 300 } } } } });
    try {
      const body = () => ({ handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' });
      assert.equal((await limited.post(`/auth/social/${PROVIDER_ID}/authorize`, body())).status, 200);
      assert.equal((await limited.post(`/auth/social/${PROVIDER_ID}/authorize`, body())).status, 200);
      const over = await limited.post(`/auth/social/${PROVIDER_ID}/authorize`, body());
      assertError(over, 429, 'rate_limited');
      assert.ok(over.headers.get('retry-after'));
      assert.equal((await limited.post('/auth/social/exchange', { code: 'x', handoff_verifier: handoffPair().verifier })).status, 400, 'exchange has its own budget');
    } finally {
      await limited.close();
    }
  });
});
