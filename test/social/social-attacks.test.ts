import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError, countRows } from '../helpers/account.js';
import { Harness, uniqueEmail } from '../helpers/harness.js';
import {
  authorizeAtProvider,
  callRouterCallback,
  CLIENT_ID,
  handoffPair,
  newSubject,
  PROVIDER_ID,
  RETURN_URL,
  socialConfig,
  socialLogin,
  socialRoundTrip,
  socialRoundTripAndExchange,
  startLogin,
  startSocialHarness,
  type TestOpenIdProvider,
  type ProviderAccount,
  type SocialStart,
  withSocialHarness,
} from '../helpers/oidc.js';

// docs/social-login.md: each attack the issue lists, refused as section 9 says, against a real provider.
// Every test states the threat it guards against.

let op: TestOpenIdProvider;
let h: Harness;
withSocialHarness((started) => ({ op, h } = started));

function verifiedAccount(overrides: Partial<ProviderAccount> = {}): ProviderAccount {
  return { sub: newSubject(), email: uniqueEmail('social'), email_verified: true, ...overrides };
}

function startLink(target: Harness, token: string): () => Promise<SocialStart> {
  return async () => {
    const handoff = handoffPair();
    const started = await target.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token });
    assert.equal(started.status, 200, started.text);
    return { handoff, authorizationUrl: started.body.data.authorization_url };
  };
}

/** Replaces one query parameter of a URL or of a path with a query. */
function withParameter(urlOrPath: string, name: string, value: string): string {
  const url = new URL(urlOrPath, 'http://placeholder.invalid');
  url.searchParams.set(name, value);
  return url.origin === 'http://placeholder.invalid' ? `${url.pathname}${url.search}` : url.href;
}

describe('state', () => {
  test('a replayed callback URL (state already used) is 400 social_state_invalid and signs no one in', async () => {
    // Threat: a finished callback URL from history, logs or a proxy is replayed to get a second session.
    op.use(verifiedAccount());
    const started = await startLogin(h);
    const callbackPath = await authorizeAtProvider(started.authorizationUrl);
    const first = await callRouterCallback(h, callbackPath);
    assert.ok(first.code);
    const replay = await h.get(callbackPath);
    assertError(replay, 400, 'social_state_invalid');
    assert.equal(replay.headers.get('referrer-policy'), 'no-referrer');
  });

  test('an expired state is 400 social_state_invalid (the injected clock decides)', async () => {
    // Threat: a stale authorization response, e.g. captured long ago, is completed later.
    op.use(verifiedAccount());
    const started = await startLogin(h);
    const callbackPath = await authorizeAtProvider(started.authorizationUrl);
    h.clock.advance(601);
    assertError(await h.get(callbackPath), 400, 'social_state_invalid');
  });

  test('a callback without state, or with a state nobody issued, is 400; with errorUrl configured it is a 303 there', async () => {
    // Threat: forged callbacks with no binding to a flow of this router.
    assertError(await h.get(`/auth/social/${PROVIDER_ID}/callback?code=abc`), 400, 'social_state_invalid');
    assertError(await h.get(`/auth/social/${PROVIDER_ID}/callback?code=abc&state=made-up`), 400, 'social_state_invalid');
    const withErrorUrl = await startSocialHarness(op, { social: { errorUrl: `${RETURN_URL}/error` } });
    try {
      const response = await withErrorUrl.get(`/auth/social/${PROVIDER_ID}/callback?code=abc&state=made-up`);
      assert.equal(response.status, 303);
      assert.equal(response.headers.get('location'), `${RETURN_URL}/error?social_error=social_state_invalid`);
    } finally {
      await withErrorUrl.close();
    }
  });

  test('a state issued for another provider never signs anyone in, and is burned', async () => {
    // Threat: mix-up between providers: a response meant for one provider is fed to another's callback.
    const twoProviders = await Harness.start({
      config: {
        social: {
          ...socialConfig(op),
          providers: {
            ...socialConfig(op).providers,
            other: { issuer: op.issuer, clientId: CLIENT_ID, clientSecret: 'client-secret-of-the-test-provider-0123456789' },
          },
        },
      },
    });
    try {
      op.use(verifiedAccount());
      const started = await startLogin(twoProviders);
      const callbackPath = await authorizeAtProvider(started.authorizationUrl);
      assertError(await twoProviders.get(callbackPath.replace(`/social/${PROVIDER_ID}/`, '/social/other/')), 400, 'social_state_invalid');
      assertError(await twoProviders.get(callbackPath), 400, 'social_state_invalid');
      assert.equal(await countRows(twoProviders, 'users'), 0);
    } finally {
      await twoProviders.close();
    }
  });
});

describe('nonce, PKCE and iss', () => {
  test('a tampered nonce in the authorization request is caught in the ID token: provider_response_invalid', async () => {
    // Threat: ID-token replay or injection; the nonce binds the ID token to this flow.
    op.use(verifiedAccount());
    const started = await startLogin(h);
    const callbackPath = await authorizeAtProvider(withParameter(started.authorizationUrl, 'nonce', 'attacker-chosen-nonce-0123456789abcdef'));
    const callback = await callRouterCallback(h, callbackPath);
    assert.equal(callback.error, 'provider_response_invalid');
    assert.equal(callback.code, null);
  });

  test('a tampered PKCE challenge makes the code unredeemable with the flow\'s verifier: provider_response_invalid', async () => {
    // Threat: authorization-code interception; PKCE binds the code to the verifier this router holds.
    op.use(verifiedAccount());
    const started = await startLogin(h);
    const attackerChallenge = handoffPair().challenge;
    const callbackPath = await authorizeAtProvider(withParameter(started.authorizationUrl, 'code_challenge', attackerChallenge));
    assert.equal((await callRouterCallback(h, callbackPath)).error, 'provider_response_invalid');
  });

  test('a forged iss response parameter (RFC 9207) is provider_response_invalid', async () => {
    // Threat: mix-up attack, a response from another issuer presented as this provider's.
    op.use(verifiedAccount());
    const started = await startLogin(h);
    const callbackPath = await authorizeAtProvider(started.authorizationUrl);
    assert.ok(new URL(callbackPath, 'http://x').searchParams.get('iss'), 'the provider sends iss');
    const forged = withParameter(callbackPath, 'iss', 'https://evil.example');
    assert.equal((await callRouterCallback(h, forged)).error, 'provider_response_invalid');
  });

  test('an attacker\'s code injected into a victim\'s link flow links nothing', async () => {
    // Threat: code injection; the attacker completes a login for their own provider account and
    // pastes the code into the victim's pending link flow so the victim's account links to them.
    const victim = await h.signUp();
    op.use(verifiedAccount());
    const victimFlow = await startLink(h, victim.accessToken)();
    const victimState = new URL(victimFlow.authorizationUrl).searchParams.get('state')!;
    op.use(verifiedAccount({ sub: newSubject() }));
    const attackerFlow = await startLogin(h);
    const attackerCallback = await authorizeAtProvider(attackerFlow.authorizationUrl);
    const injected = withParameter(attackerCallback, 'state', victimState);
    assert.equal((await callRouterCallback(h, injected)).error, 'provider_response_invalid');
    assert.equal(await countRows(h, 'social_identities', { user_id: victim.userId }), 0);
  });
});

describe('the handoff and the exchange code', () => {
  test('login CSRF: a finished callback opened in another browser yields a code that browser cannot exchange', async () => {
    // Threat: the attacker sends the victim their own finished callback URL so the victim's SPA
    // ends up signed in to the attacker's account (and types secrets into it).
    op.use(verifiedAccount());
    const attacker = await startLogin(h);
    const callbackPath = await authorizeAtProvider(attacker.authorizationUrl);
    const inVictimBrowser = await callRouterCallback(h, callbackPath);
    assert.ok(inVictimBrowser.code);
    const victimSpa = handoffPair();
    assertError(await h.post('/auth/social/exchange', { code: inVictimBrowser.code, handoff_verifier: victimSpa.verifier }), 400, 'invalid_token');
    // The failure burned it: not even the attacker's own verifier works now.
    assertError(await h.post('/auth/social/exchange', { code: inVictimBrowser.code, handoff_verifier: attacker.handoff.verifier }), 400, 'invalid_token');
  });

  test('an exchange code works once, expires with exchangeTtl, and a wrong verifier burns it', async () => {
    // Threat: a leaked social_code (history, logs, Referer) is replayed or used late.
    const replayed = await socialRoundTrip(h, op, verifiedAccount());
    assert.equal((await h.post('/auth/social/exchange', { code: replayed.code, handoff_verifier: replayed.handoff.verifier })).status, 200);
    assertError(await h.post('/auth/social/exchange', { code: replayed.code, handoff_verifier: replayed.handoff.verifier }), 400, 'invalid_token');

    const late = await socialRoundTrip(h, op, verifiedAccount());
    h.clock.advance(61);
    assertError(await h.post('/auth/social/exchange', { code: late.code, handoff_verifier: late.handoff.verifier }), 400, 'invalid_token');

    const guessed = await socialRoundTrip(h, op, verifiedAccount());
    assertError(await h.post('/auth/social/exchange', { code: guessed.code, handoff_verifier: handoffPair().verifier }), 400, 'invalid_token');
    assertError(await h.post('/auth/social/exchange', { code: guessed.code, handoff_verifier: guessed.handoff.verifier }), 400, 'invalid_token');

    assertError(await h.post('/auth/social/exchange', { code: 'never-issued', handoff_verifier: handoffPair().verifier }), 400, 'invalid_token');
    // Stored only as a keyed hash.
    assert.equal(await countRows(h, 'social_flows', { exchange_hash: guessed.code }), 0);
  });
});

describe('return_to', () => {
  test('every open-redirect shape is refused with 422 return_to is not allowed; entries and paths below them pass', async () => {
    // Threat: open redirect: the social_code (or the user) is sent to a host the attacker controls.
    const refused = [
      '//evil.example/app/social',
      'https://evil.example/app/social',
      'http://evil.example/app/social',
      'http://127.0.0.1:5173@evil.example/app/social',
      'http://user:pass@127.0.0.1:5173/app/social',
      'http://127.0.0.1:5173.evil.example/app/social',
      'http://127.0.0.1.evil.example:5173/app/social',
      'http://127.0.0.1:5174/app/social',
      'https://127.0.0.1:5173/app/social',
      'http://127.0.0.1:5173/app/socialx',
      'http://127.0.0.1:5173/app',
      'http://127.0.0.1:5173/app/social/../admin',
      'http://127.0.0.1:5173/app/social/%2e%2e/admin',
      'http://127.0.0.1:5173/app/social/%2E%2E/%2E%2E/admin',
      'http://127.0.0.1:5173/app/social\\@evil.example',
      'http://127.0.0.1:5173\\@evil.example/app/social',
      '/\\evil.example',
      '\\\\evil.example\\app\\social',
      'javascript:alert(document.domain)//http://127.0.0.1:5173/app/social',
      'data:text/html,<script>alert(1)</script>',
      'http://127.0.0.1:5173/app/social#access_token',
      '/app/social',
      ' http://127.0.0.1:5173/app/social',
      'http://127.0.0.1:5173/app/social\n',
    ];
    for (const returnTo of refused) {
      const response = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { return_to: returnTo, handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' });
      assert.equal(response.status, 422, `${JSON.stringify(returnTo)} was accepted`);
      // A control character is refused earlier, by the validation layer, with its own message.
      const expected = /[\u0000-\u001f\u007f]/.test(returnTo) ? '"return_to" must not contain control characters' : 'return_to is not allowed';
      assert.deepEqual(response.body, { errors: [expected] }, returnTo);
    }
    for (const returnTo of [RETURN_URL, `${RETURN_URL}/done`, `${RETURN_URL}?tab=security`]) {
      const response = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { return_to: returnTo, handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' });
      assert.equal(response.status, 200, `${returnTo}: ${response.text}`);
    }
  });

  test('the callback sends the browser to the checked return_to, keeping its own query', async () => {
    op.use(verifiedAccount());
    const started = await startLogin(h, { return_to: `${RETURN_URL}/done?tab=security` });
    const callback = await callRouterCallback(h, await authorizeAtProvider(started.authorizationUrl));
    assert.equal(callback.location?.pathname, '/app/social/done');
    assert.equal(callback.location?.searchParams.get('tab'), 'security');
    assert.ok(callback.code);
  });
});

describe('account takeover through linking', () => {
  for (const [label, emailVerified] of [
    ['false', false],
    ['missing', undefined],
    ['the string "false"', 'false'],
  ] as const) {
    test(`email_verified ${label} against a verified local account: account_link_required, no link, no second account`, async () => {
      // Threat ("nOAuth"): an attacker sets the victim's address at a provider that does not verify
      // it, and signs in to the victim's account through the e-mail match.
      const victim = await h.signUp();
      const usersBefore = await countRows(h, 'users');
      const { trip, exchanged } = await socialRoundTripAndExchange(h, op, { sub: newSubject(), email: victim.email, ...(emailVerified === undefined ? {} : { email_verified: emailVerified }) });
      assert.equal(trip.error, null, 'the callback decides nothing: the account is resolved at the exchange');
      assertError(exchanged, 409, 'account_link_required');
      assert.equal(exchanged.body.data, undefined, 'no token, no session');
      assert.equal(await countRows(h, 'social_identities', { user_id: victim.userId }), 0);
      assert.equal(await countRows(h, 'users'), usersBefore);
      const failed = h.eventsOfType('user.login_failed').find((event) => event.user_id === victim.userId && event.data.method === 'social');
      assert.deepEqual(failed?.data, { method: 'social', provider: PROVIDER_ID, reason: 'account_link_required' });
    });
  }

  test('an unverified local account is never auto-linked, even by a verified provider address', async () => {
    // Threat (pre-hijack): whoever registered the address first without proving it.
    const email = uniqueEmail('unverified');
    const squatter = await h.signUp(email, undefined, { verify: false });
    const { exchanged } = await socialRoundTripAndExchange(h, op, verifiedAccount({ email }));
    assertError(exchanged, 409, 'account_link_required');
    assert.equal(await countRows(h, 'social_identities', { user_id: squatter.userId }), 0);
  });

  test('autoLinkByEmail false: even two verified addresses are account_link_required', async () => {
    const explicitOnly = await startSocialHarness(op, { social: { autoLinkByEmail: false } });
    try {
      const local = await explicitOnly.signUp();
      assertError((await socialRoundTripAndExchange(explicitOnly, op, verifiedAccount({ email: local.email }))).exchanged, 409, 'account_link_required');
      assert.equal(await countRows(explicitOnly, 'social_identities', { user_id: local.userId }), 0);
    } finally {
      await explicitOnly.close();
    }
  });

  test('a local user who already has an identity at this provider is not auto-linked to a second one', async () => {
    // Threat: one provider, two provider accounts on one local user (one per provider per user).
    const first = await socialLogin(h, op, verifiedAccount());
    const email = first.body.data.user.email;
    assertError((await socialRoundTripAndExchange(h, op, verifiedAccount({ email }))).exchanged, 409, 'account_link_required');
    assert.equal(await countRows(h, 'social_identities', { user_id: first.body.data.user.id }), 1);
  });

  test('an identity already linked to another user cannot be linked again: identity_already_linked', async () => {
    // Threat: one provider account linked to several users (then signing in to whichever it finds).
    const ownerAccount = verifiedAccount();
    await socialLogin(h, op, ownerAccount);
    const other = await h.signUp();
    const { trip, exchanged } = await socialRoundTripAndExchange(h, op, ownerAccount, { start: startLink(h, other.accessToken), token: other.accessToken });
    assert.equal(trip.error, null, 'the callback links nothing: the link is made at the exchange');
    assertError(exchanged, 409, 'identity_already_linked');
    assert.equal(await countRows(h, 'social_identities', { user_id: other.userId }), 0);
  });

  test('a squatter\'s unverified account is proven by the real owner\'s password reset: the squatter\'s link is evicted', async () => {
    // Threat (reverse pre-hijack): the attacker signs up socially with the victim's address at a
    // provider that does not verify it; the victim later takes the account over by resetting the
    // password, while the attacker keeps a way in through the link.
    const victimEmail = uniqueEmail('victim');
    const squatterAccount: ProviderAccount = { sub: newSubject(), email: victimEmail, email_verified: false };
    const squatterLogin = await socialLogin(h, op, squatterAccount);
    assert.equal(squatterLogin.status, 200, squatterLogin.text);
    const userId = squatterLogin.body.data.user.id;
    assert.equal(squatterLogin.body.data.user.email_verified, false);

    assert.equal((await h.post('/auth/password/forgot', { email: victimEmail })).status, 202);
    const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(victimEmail, 'password_reset'), new_password: 'the real owner chose this' });
    assert.equal(reset.status, 200, reset.text);

    assert.equal(await countRows(h, 'social_identities', { user_id: userId }), 0, 'the squatter link is gone');
    const evicted = h.eventsOfType('user.social_unlinked').find((event) => event.user_id === userId);
    assert.equal(evicted?.data.reason, 'email_proven');
    assert.equal((await h.get('/auth/me', { token: squatterLogin.body.data.access_token })).status, 401, 'the squatter session is revoked');
    // Coming back through the provider now meets a verified account and an unverified claim.
    assertError((await socialRoundTripAndExchange(h, op, squatterAccount)).exchanged, 409, 'account_link_required');
    const owner = await h.post('/auth/login', { email: victimEmail, password: 'the real owner chose this' });
    assert.equal(owner.status, 200);
    assert.equal(owner.body.data.user.email_verified, true);
  });

  test('the same eviction runs when the address is proven by e-mail verification', async () => {
    const victimEmail = uniqueEmail('victim');
    const squatter = await socialLogin(h, op, { sub: newSubject(), email: victimEmail, email_verified: false });
    const userId = squatter.body.data.user.id;
    assert.equal((await h.post('/auth/email/verify/resend', { email: victimEmail })).status, 202);
    assert.equal((await h.post('/auth/email/verify', { token: h.tokenFromMail(victimEmail, 'verify_email') })).status, 200);
    assert.equal(await countRows(h, 'social_identities', { user_id: userId }), 0);
    assert.equal((await h.get('/auth/me', { token: squatter.body.data.access_token })).status, 401);
  });

  test('a link from a provider that did vouch for the address survives the proof', async () => {
    const email = uniqueEmail('owner');
    const login = await socialLogin(h, op, { sub: newSubject(), email, email_verified: true });
    assert.equal((await h.post('/auth/password/forgot', { email })).status, 202);
    assert.equal((await h.post('/auth/password/reset', { token: h.tokenFromMail(email, 'password_reset'), new_password: 'a brand new passphrase' })).status, 200);
    assert.equal(await countRows(h, 'social_identities', { user_id: login.body.data.user.id }), 1);
  });
});

describe('sign-up policy and login rules', () => {
  test('allowSignup false: a new subject with a new address gets signup_disabled and no account', async () => {
    const closed = await startSocialHarness(op, { provider: { allowSignup: false } });
    try {
      assertError((await socialRoundTripAndExchange(closed, op, verifiedAccount())).exchanged, 403, 'signup_disabled');
      assert.equal(await countRows(closed, 'users'), 0);
    } finally {
      await closed.close();
    }
  });

  test('requireVerifiedEmail: an unverified provider address creates the account but the login is email_unverified', async () => {
    const strict = await startSocialHarness(op, { config: { auth: { requireVerifiedEmail: true } } });
    try {
      const { trip, exchanged } = await socialRoundTripAndExchange(strict, op, { sub: newSubject(), email: uniqueEmail(), email_verified: false });
      assert.equal(trip.response.status, 303, 'a callback never answers 403 to the browser');
      assert.equal(trip.error, null);
      assertError(exchanged, 403, 'email_unverified');
      assert.equal(await countRows(strict, 'users'), 1);
    } finally {
      await strict.close();
    }
  });

  test('MFA enforced in block mode: the exchange answers 403 mfa_enrollment_required, as login does', async () => {
    const blocking = await startSocialHarness(op, { config: { mfa: { enforce: true, enforcementMode: 'block' } } });
    try {
      assertError(await socialLogin(blocking, op, verifiedAccount()), 403, 'mfa_enrollment_required');
    } finally {
      await blocking.close();
    }
  });

  test('MFA enforced in grace mode: the social session is under grace enrollment', async () => {
    const grace = await startSocialHarness(op, { config: { mfa: { enforce: true } } });
    try {
      const login = await socialLogin(grace, op, verifiedAccount());
      assert.equal(login.status, 200, login.text);
      assertError(await grace.get('/auth/social/identities', { token: login.body.data.access_token }), 403, 'mfa_enrollment_required');
      assert.equal((await grace.get('/auth/me', { token: login.body.data.access_token })).status, 200);
    } finally {
      await grace.close();
    }
  });

  test('unlinking the last way to sign in is 409 last_login_method_protected', async () => {
    // Threat: a user (or a stolen session) leaves the account with no way back in.
    const login = await socialLogin(h, op, verifiedAccount());
    const token = login.body.data.access_token;
    const [identity] = (await h.get('/auth/social/identities', { token })).body.data.identities;
    assertError(await h.delete(`/auth/social/identities/${identity.id}`, { token }), 409, 'last_login_method_protected');
    assert.equal(await countRows(h, 'social_identities', { id: identity.id }), 1);
  });
});

// Threat: a provider's answer as input: a subject past the identity column, or a NUL that
// PostgreSQL refuses, answered 500 and wrote what it could on SQLite.
describe("what a provider asserts is checked like any input (the same rule as single sign-on's)", () => {
  test('a subject longer than 255 characters, or a control character in the subject or the address, is provider_response_invalid at the callback; nothing created', async () => {
    const email = uniqueEmail('social-malformed');
    for (const account of [
      verifiedAccount({ sub: `s${'x'.repeat(300)}`, email }),
      verifiedAccount({ sub: `s\u0000${newSubject()}`, email }),
      verifiedAccount({ email: email.replace('@', '\u0000x@') }),
    ]) {
      const trip = await socialRoundTrip(h, op, account);
      assert.equal(trip.error, 'provider_response_invalid', `${JSON.stringify(account.sub.slice(0, 12))} ${JSON.stringify(account.email)}`);
      assert.equal(trip.code, null);
    }
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test("control characters in the asserted name are dropped from a new account's display name", async () => {
    const signedIn = await socialLogin(h, op, verifiedAccount({ name: 'Ada\u0000 Love\u001blace\u007f' }));
    assert.equal(signedIn.status, 200, signedIn.text);
    const me = await h.get('/auth/me', { token: signedIn.body.data.access_token });
    assert.equal(me.body.data.display_name, 'Ada Lovelace');
  });
});
