/*
 * Federated and passwordless flows end to end, attacked (docs/social-login.md, docs/sso.md,
 * docs/passwordless.md). Each test names its threat. Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/social/flow-attacks.test.ts
 *
 * The ID-token checks run against a scripted provider (below): the in-process oidc-provider only
 * ever issues well-formed tokens, so it cannot show that a wrong `aud`, `azp`, `iss`, `nonce`,
 * signature or UserInfo subject is refused. The other tests use the real provider of
 * test/helpers/oidc.ts.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { createExampleApp } from '../../examples/basic/app.js';
import { assertError, countRows } from '../helpers/account.js';
import { type Harness, harnessesClosedAfterFile, uniqueEmail } from '../helpers/harness.js';
import {
  authorizeAtProvider,
  callRouterCallback,
  CLIENT_ID,
  CLIENT_SECRET,
  exchangeCode,
  handoffPair,
  newSubject,
  PROVIDER_ID,
  REDIRECT_BASE,
  RETURN_URL,
  type ProviderAccount,
  type SocialStart,
  socialConfig,
  socialLogin,
  socialRoundTrip,
  TestOpenIdProvider,
} from '../helpers/oidc.js';
import { createOrg } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns } from '../helpers/sso.js';

const start = harnessesClosedAfterFile();

// ------------------------------------------------------------------ a scripted OpenID provider

const SCRIPTED_CLIENT_ID = 'scripted-client';
const SCRIPTED_SECRET = 'scripted-client-secret-0123456789abcdef';

interface TokenRequest {
  grant_type: string | null;
  code: string | null;
  code_verifier: string | null;
  redirect_uri: string | null;
}

/** What the next token answer carries: the ID token's claims (from the well-formed ones), how it is signed, or none. */
interface TokenScript {
  claims?: (wellFormed: Record<string, unknown>) => Record<string, unknown>;
  signing?: 'published-key' | 'unpublished-key' | 'none' | 'hs256-client-secret';
  withoutIdToken?: boolean;
  userInfo?: Record<string, unknown>;
}

/**
 * Discovery, JWKS, token and UserInfo endpoints whose ID token the test writes. The token
 * endpoint knows the flow's nonce because the test reads it from the authorization URL, as the
 * real provider would read it from the authorization request.
 */
class ScriptedProvider {
  issuer!: string;
  readonly tokenRequests: TokenRequest[] = [];
  private server!: Server;
  private publishedKey!: CryptoKey;
  private unpublishedKey!: CryptoKey;
  private jwk!: JWK;
  private next: { nonce: string; script: TokenScript; subject: string } | undefined;

  constructor(private readonly advertisesIssParameter: boolean) {}

  static async start(options: { advertisesIssParameter?: boolean } = {}): Promise<ScriptedProvider> {
    const provider = new ScriptedProvider(options.advertisesIssParameter ?? false);
    const published = await generateKeyPair('RS256');
    provider.publishedKey = published.privateKey as CryptoKey;
    provider.jwk = { ...(await exportJWK(published.publicKey)), kid: 'published', alg: 'RS256', use: 'sig' };
    provider.unpublishedKey = (await generateKeyPair('RS256')).privateKey as CryptoKey;
    provider.server = createServer((req, res) => {
      void provider.answer(req).then(
        ({ status, body }) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify(body));
        },
        (error: unknown) => {
          res.writeHead(500);
          res.end(String(error));
        },
      );
    });
    await new Promise<void>((resolve) => provider.server.listen(0, '127.0.0.1', () => resolve()));
    provider.issuer = `http://127.0.0.1:${(provider.server.address() as AddressInfo).port}`;
    return provider;
  }

  /** The answer the token endpoint gives to the next code, for the flow whose nonce this is. */
  expect(nonce: string, script: TokenScript, subject: string): void {
    this.next = { nonce, script, subject };
  }

  private async answer(req: IncomingMessage): Promise<{ status: number; body: unknown }> {
    const url = new URL(req.url ?? '/', this.issuer);
    if (url.pathname === '/.well-known/openid-configuration') {
      return {
        status: 200,
        body: {
          issuer: this.issuer,
          authorization_endpoint: `${this.issuer}/authorize`,
          token_endpoint: `${this.issuer}/token`,
          jwks_uri: `${this.issuer}/jwks`,
          userinfo_endpoint: `${this.issuer}/userinfo`,
          response_types_supported: ['code'],
          subject_types_supported: ['public'],
          id_token_signing_alg_values_supported: ['RS256'],
          code_challenge_methods_supported: ['S256'],
          ...(this.advertisesIssParameter ? { authorization_response_iss_parameter_supported: true } : {}),
        },
      };
    }
    if (url.pathname === '/jwks') return { status: 200, body: { keys: [this.jwk] } };
    if (url.pathname === '/userinfo') return { status: 200, body: this.next?.script.userInfo ?? { sub: this.next?.subject } };
    if (url.pathname === '/token') {
      const form = new URLSearchParams(await readBody(req));
      this.tokenRequests.push({ grant_type: form.get('grant_type'), code: form.get('code'), code_verifier: form.get('code_verifier'), redirect_uri: form.get('redirect_uri') });
      const next = this.next;
      if (!next) return { status: 400, body: { error: 'invalid_grant' } };
      const body: Record<string, unknown> = { access_token: randomBytes(16).toString('hex'), token_type: 'Bearer', expires_in: 300 };
      if (!next.script.withoutIdToken) body.id_token = await this.idToken(next);
      return { status: 200, body };
    }
    return { status: 404, body: { error: 'not_found' } };
  }

  private async idToken(next: { nonce: string; script: TokenScript; subject: string }): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const wellFormed: Record<string, unknown> = { iss: this.issuer, sub: next.subject, aud: SCRIPTED_CLIENT_ID, iat: now, exp: now + 300, nonce: next.nonce };
    const claims = next.script.claims ? next.script.claims(wellFormed) : wellFormed;
    switch (next.script.signing ?? 'published-key') {
      case 'none':
        return `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`;
      case 'hs256-client-secret':
        return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'published' }).sign(new TextEncoder().encode(SCRIPTED_SECRET));
      case 'unpublished-key':
        return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'published' }).sign(this.unpublishedKey);
      default:
        return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'published' }).sign(this.publishedKey);
    }
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      text += chunk;
    });
    req.on('end', () => resolve(text));
    req.on('error', reject);
  });
}

const s256 = (value: string) => createHash('sha256').update(value).digest('base64url');

describe('ID-token checks: a token that is not for this flow, this client or this issuer signs no one in', () => {
  let scripted: ScriptedProvider;
  let announcing: ScriptedProvider;
  let h: Harness;

  before(async () => {
    scripted = await ScriptedProvider.start();
    announcing = await ScriptedProvider.start({ advertisesIssParameter: true });
    const provider = (issuer: string) => ({ issuer, clientId: SCRIPTED_CLIENT_ID, clientSecret: SCRIPTED_SECRET });
    h = await start({ config: { social: { redirectBase: REDIRECT_BASE, returnUrls: [RETURN_URL], providers: { scripted: provider(scripted.issuer), announcing: provider(announcing.issuer) } } } });
  });
  after(async () => {
    await scripted.close();
    await announcing.close();
  });

  /** Authorize, have the provider answer the token request with `script`, and come back through the callback. */
  async function trip(script: TokenScript, options: { providerId?: 'scripted' | 'announcing'; iss?: string | null; email?: string } = {}) {
    const providerId = options.providerId ?? 'scripted';
    const provider = providerId === 'scripted' ? scripted : announcing;
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${providerId}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
    const authorization = new URL(started.body.data.authorization_url);
    const subject = newSubject();
    const email = options.email ?? uniqueEmail('scripted');
    const withEmail: TokenScript = {
      ...script,
      claims: (wellFormed) => (script.claims ?? ((claims) => claims))({ ...wellFormed, email, email_verified: true }),
    };
    provider.expect(authorization.searchParams.get('nonce')!, withEmail, subject);
    const query = new URLSearchParams({ code: randomBytes(12).toString('base64url'), state: authorization.searchParams.get('state')! });
    const iss = options.iss === undefined ? provider.issuer : options.iss;
    if (iss !== null) query.set('iss', iss);
    const result = await callRouterCallback(h, `/auth/social/${providerId}/callback?${query}`);
    return { ...result, handoff, authorization, email, provider };
  }

  test('control: the well-formed token signs in, and the token request carries this flow\'s PKCE verifier and redirect_uri', async () => {
    // Without this the refusals below could pass for a provider the router cannot use at all.
    const first = await trip({});
    assert.ok(first.code, `${first.error}`);
    const exchanged = await h.post('/auth/social/exchange', { code: first.code, handoff_verifier: first.handoff.verifier });
    assert.equal(exchanged.status, 200, exchanged.text);
    assert.equal(exchanged.body.data.user.email, first.email);
    // PKCE: the verifier sent to the token endpoint is the one whose S256 the authorization URL carried.
    const request = scripted.tokenRequests.at(-1)!;
    assert.equal(request.grant_type, 'authorization_code');
    assert.equal(request.redirect_uri, `${REDIRECT_BASE}/auth/social/scripted/callback`);
    assert.equal(s256(request.code_verifier!), first.authorization.searchParams.get('code_challenge'));
    // Every flow has its own state, nonce and verifier.
    const second = await trip({});
    for (const name of ['state', 'nonce', 'code_challenge']) assert.notEqual(second.authorization.searchParams.get(name), first.authorization.searchParams.get(name), name);
    assert.equal(second.authorization.searchParams.get('code_challenge_method'), 'S256');
  });

  const refusals: Array<[string, TokenScript]> = [
    ['an ID token for another client (aud)', { claims: (claims) => ({ ...claims, aud: 'another-client' }) }],
    ['an ID token for this client and another, without azp', { claims: (claims) => ({ ...claims, aud: [SCRIPTED_CLIENT_ID, 'another-client'] }) }],
    ['an ID token for this client and another, authorized for the other (azp)', { claims: (claims) => ({ ...claims, aud: [SCRIPTED_CLIENT_ID, 'another-client'], azp: 'another-client' }) }],
    ['an ID token from another issuer (iss)', { claims: (claims) => ({ ...claims, iss: 'https://accounts.attacker.example' }) }],
    ['an ID token without the nonce', { claims: ({ nonce: _nonce, ...claims }) => claims }],
    ['an ID token with another flow\'s nonce', { claims: (claims) => ({ ...claims, nonce: randomBytes(16).toString('base64url') }) }],
    ['an ID token expired two minutes ago', { claims: (claims) => ({ ...claims, iat: Math.floor(Date.now() / 1000) - 600, exp: Math.floor(Date.now() / 1000) - 120 }) }],
    ['an ID token without a subject', { claims: ({ sub: _sub, ...claims }) => claims }],
    ['an ID token signed by a key the provider does not publish', { signing: 'unpublished-key' }],
    ['an unsigned ID token (alg none)', { signing: 'none' }],
    ['an ID token MACed with the client secret (HS256 where RS256 is published)', { signing: 'hs256-client-secret' }],
    ['a token answer without an ID token', { withoutIdToken: true }],
  ];
  for (const [what, script] of refusals) {
    test(`${what}: provider_response_invalid at the callback, no code, nobody signed in`, async () => {
      // Threat: a token minted for another client or flow (a malicious relying party replaying
      // its users' ID tokens, a stolen token, a forged one) accepted as this user's sign-in.
      const result = await trip(script);
      assert.equal(result.response.status, 303, result.response.text);
      assert.equal(result.error, 'provider_response_invalid', result.location?.href);
      assert.equal(result.code, null);
      assert.equal(await countRows(h, 'users', { email: result.email }), 0);
    });
  }

  test('UserInfo answering for another subject is refused: the ID token\'s subject is the only identity', async () => {
    // Threat: the e-mail of UserInfo (used when the ID token carries none) taken from a response
    // about someone else (a substituted access token): the victim's verified address on the attacker's subject.
    const victim = uniqueEmail('userinfo-victim');
    const omitEmail = (claims: Record<string, unknown>) => {
      const { email: _email, email_verified: _verified, ...rest } = claims;
      return rest;
    };
    const swapped = await trip({ claims: omitEmail, userInfo: { sub: 'someone-else', email: victim, email_verified: true } });
    assert.equal(swapped.error, 'provider_response_invalid', swapped.location?.href);
    assert.equal(await countRows(h, 'users', { email: victim }), 0);
    // Control: the same answer about the ID token's own subject gives its address.
    const own = await trip({ claims: omitEmail });
    assert.ok(own.code, `${own.error}`);
  });

  test("an organization's IdP is held to the same checks: an ID token its keys never signed is provider_response_invalid", async () => {
    // Threat: the same forgery through single sign-on, where whoever runs the organization's
    // IdP (or a token endpoint its discovery document names) would sign in any member.
    const dns = new StubDns();
    const sso = await start({ dns: dns.adapter, config: { sso: { redirectBase: REDIRECT_BASE, returnUrls: [RETURN_URL], allowPrivateNetworks: [scripted.issuer] } } });
    const org = await createOrg(sso);
    const { domain } = await addVerifiedDomain(sso, dns, org);
    const created = await sso.post(`/orgs/${org.id}/sso`, { issuer: scripted.issuer, client_id: SCRIPTED_CLIENT_ID, client_secret: SCRIPTED_SECRET, jit: true }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const callback = async (signing: TokenScript['signing']) => {
      const email = addressAt(domain, 'forged');
      const handoff = handoffPair();
      const started = await sso.post('/auth/sso/authorize', { email, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
      assert.equal(started.status, 200, started.text);
      const authorization = new URL(started.body.data.authorization_url);
      scripted.expect(authorization.searchParams.get('nonce')!, { signing, claims: (claims) => ({ ...claims, email, email_verified: true }) }, newSubject());
      const query = new URLSearchParams({ code: randomBytes(12).toString('base64url'), state: authorization.searchParams.get('state')!, iss: scripted.issuer });
      return { email, ...(await callRouterCallback(sso, `/auth/sso/${created.body.data.id}/callback?${query}`)) };
    };
    const forged = await callback('unpublished-key');
    assert.equal(forged.error, 'provider_response_invalid', forged.location?.href);
    assert.equal(await countRows(sso, 'users', { email: forged.email }), 0);
    const signed = await callback('published-key');
    assert.ok(signed.code, `${signed.error}`);
  });

  describe('RFC 9207: the iss response parameter', () => {
    test('from a provider that announces it: missing or another issuer is provider_response_invalid; its own passes', async () => {
      // Threat: mix-up: an authorization response of another provider (which announces no `iss`
      // of ours) replayed to this provider's callback.
      const missing = await trip({}, { providerId: 'announcing', iss: null });
      assert.equal(missing.error, 'provider_response_invalid', missing.location?.href);
      const foreign = await trip({}, { providerId: 'announcing', iss: scripted.issuer });
      assert.equal(foreign.error, 'provider_response_invalid', foreign.location?.href);
      const own = await trip({}, { providerId: 'announcing' });
      assert.ok(own.code, `${own.error}`);
    });

    test('from a provider that does not announce it, a present iss must still be its own', async () => {
      const foreign = await trip({}, { iss: announcing.issuer });
      assert.equal(foreign.error, 'provider_response_invalid', foreign.location?.href);
      const absent = await trip({}, { iss: null });
      assert.ok(absent.code, `${absent.error}`);
    });
  });
});

// ------------------------------------------------------------------ the real provider

function verifiedAccount(overrides: Partial<ProviderAccount> = {}): ProviderAccount {
  return { sub: newSubject(), email: uniqueEmail('flow'), email_verified: true, ...overrides };
}

function startLinkOn(h: Harness, providerId: string, token: string): () => Promise<SocialStart> {
  return async () => {
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${providerId}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token });
    assert.equal(started.status, 200, started.text);
    return { handoff, authorizationUrl: started.body.data.authorization_url };
  };
}

describe('the exchange', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await start({ config: { social: socialConfig(op) } });
  });
  after(async () => op.close());

  test('one exchange code sent 20 times at once, with the right verifier, opens exactly one session', async () => {
    // Threat: a leaked code and its tab racing: two sessions from one sign-in (PostgreSQL runs them concurrently).
    const trip = await socialRoundTrip(h, op, verifiedAccount());
    assert.ok(trip.code, `${trip.error}`);
    const answers = await Promise.all(Array.from({ length: 20 }, () => h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier })));
    const signedIn = answers.filter((answer) => answer.status === 200);
    assert.equal(signedIn.length, 1, answers.map((answer) => answer.status).join(','));
    for (const answer of answers.filter((candidate) => candidate.status !== 200)) assertError(answer, 400, 'invalid_token');
    assert.equal(await countRows(h, 'sessions', { user_id: signedIn[0]!.body.data.user.id }), 1);
  });
});

describe("a provider asserting a spelling of the victim's address", () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await start({ config: { social: socialConfig(op) } });
  });
  after(async () => op.close());

  test('a case variant is the same address: auto-linked only when the provider vouches for it', async () => {
    // Threat: `Victim@Example.COM` asserted unverified passes the lookup as another address and
    // signs in, or creates a second account beside the victim's.
    const victim = await h.signUp(uniqueEmail('victim'));
    const shouted = victim.email.replace(/^[^@]+/, (local) => local.toUpperCase()).replace('example.com', 'Example.COM');
    for (const unverified of [{ email_verified: false }, {}]) {
      const trip = await socialRoundTrip(h, op, { sub: newSubject(), email: shouted, ...unverified });
      assert.ok(trip.code, `${trip.error}`);
      assertError(await exchangeCode(h, trip), 409, 'account_link_required');
    }
    assert.equal(await countRows(h, 'users', { email: victim.email }), 1);
    assert.equal(await countRows(h, 'social_identities', { user_id: victim.userId }), 0);
    const vouched = await socialLogin(h, op, { sub: newSubject(), email: shouted, email_verified: true });
    assert.equal(vouched.status, 200, vouched.text);
    assert.equal(vouched.body.data.user.id, victim.userId);
  });

  test('full-width letters, a trailing dot or the IDNA form of the domain never reach the victim\'s account', async () => {
    // Threat: a spelling that the domain rules (IDNA, one trailing dot) read as the victim's
    // domain, matched to the victim's account by a looser lookup: a takeover by a provider that
    // vouched for another string.
    const victim = await h.signUp(uniqueEmail('victim').replace('example.com', 'bücher.example'));
    const [local] = victim.email.split('@') as [string];
    const spellings = [
      `${local}@bücher.example.`,
      `${local}@xn--bcher-kva.example`,
      `${local}@ｂücher.example`,
      `${String.fromCodePoint(0xff00 + local.charCodeAt(0) - 0x20)}${local.slice(1)}@bücher.example`,
    ];
    for (const email of spellings) {
      const answer = await socialLogin(h, op, { sub: newSubject(), email, email_verified: true });
      assert.equal(answer.status, 200, `${email}: ${answer.text}`);
      assert.notEqual(answer.body.data.user.id, victim.userId, email);
    }
    assert.equal(await countRows(h, 'social_identities', { user_id: victim.userId }), 0);
    assert.equal(await countRows(h, 'sessions', { user_id: victim.userId }), 1, 'only the victim\'s own sign-in');
  });
});

describe('unlinking the last way to sign in', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    op.allowRedirectPrefix(`${REDIRECT_BASE}/auth/social/`);
    const base = socialConfig(op);
    h = await start({ config: { social: { ...base, providers: { ...base.providers, second: { issuer: op.issuer, clientId: CLIENT_ID, clientSecret: CLIENT_SECRET } } } } });
  });
  after(async () => op.close());

  /** A user with no password and two links, `test` and `second`. */
  async function twoLinks(): Promise<{ token: string; userId: string; identities: Array<{ id: string; provider: string }> }> {
    const login = await socialLogin(h, op, verifiedAccount());
    assert.equal(login.status, 200, login.text);
    const token = login.body.data.access_token as string;
    const trip = await socialRoundTrip(h, op, verifiedAccount(), startLinkOn(h, 'second', token));
    const linked = await exchangeCode(h, trip, token);
    assert.equal(linked.status, 200, linked.text);
    const identities = (await h.get('/auth/social/identities', { token })).body.data.identities;
    assert.equal(identities.length, 2);
    return { token, userId: login.body.data.user.id, identities };
  }

  test('two unlinks at once of a user\'s two links: one passes, the other is 409, one link stays', async () => {
    // Threat: each unlink sees the other link as the way back in; both pass and the account is left with none.
    const { token, identities } = await twoLinks();
    const answers = await Promise.all(identities.map((identity) => h.delete(`/auth/social/identities/${identity.id}`, { token })));
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 409], answers.map((answer) => answer.text).join(' | '));
    assertError(answers.find((answer) => answer.status === 409)!, 409, 'last_login_method_protected');
    assert.equal((await h.get('/auth/social/identities', { token })).body.data.identities.length, 1);
  });

  test('a link that can no longer sign in (its issuer is not the configured one) is no way back in', async () => {
    // Threat: the guard counts a link docs/social-login.md says is never matched (a provider
    // whose issuer changed): the user unlinks the last link that works and is locked out.
    const { token, userId, identities } = await twoLinks();
    const orphan = identities.find((identity) => identity.provider === 'second')!;
    const working = identities.find((identity) => identity.provider === PROVIDER_ID)!;
    await h.knex(`${h.tablePrefix}social_identities`).where({ id: orphan.id }).update({ issuer: 'https://old-issuer.example' });
    assertError(await h.delete(`/auth/social/identities/${working.id}`, { token }), 409, 'last_login_method_protected');
    assert.equal(await countRows(h, 'social_identities', { user_id: userId }), 2);
  });

  test('nor is a link to a provider taken out of the configuration', async () => {
    // Threat: the same lock-out after a host drops (or renames) a provider: its links stay, and sign in nowhere.
    const { token, userId, identities } = await twoLinks();
    const withoutSecond = await start({ shareDatabaseWith: h, config: { social: socialConfig(op) } });
    const working = identities.find((identity) => identity.provider === PROVIDER_ID)!;
    assertError(await withoutSecond.delete(`/auth/social/identities/${working.id}`, { token }), 409, 'last_login_method_protected');
    assert.equal(await countRows(h, 'social_identities', { user_id: userId }), 2);
    // Where the provider is still configured, the other link is a way back in.
    assert.equal((await h.delete(`/auth/social/identities/${working.id}`, { token })).status, 200);
  });
});

describe('single sign-on flows', () => {
  let op: TestOpenIdProvider;
  const dns = new StubDns();
  let h: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    h = await startSsoHarness(op, dns, { config: { social: socialConfig(op) } });
  });
  after(async () => {
    await h.close();
    await op.close();
  });

  test('an expired single sign-on flow is social_state_invalid; nobody is created', async () => {
    // Threat: an authorization response captured long ago completed later.
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'late');
    op.use({ sub: newSubject(), email, email_verified: true });
    const handoff = handoffPair();
    const started = await h.post('/auth/sso/authorize', { email, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
    const callbackPath = await authorizeAtProvider(started.body.data.authorization_url);
    h.clock.advance(601);
    assertError(await h.get(callbackPath), 400, 'social_state_invalid');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test("JIT never provisions or links an address at a domain the organization has only claimed (pending)", async () => {
    // Threat: an organization adds a domain it does not own (its TXT record never published) and
    // its IdP asserts addresses there: JIT accounts, and links to existing ones, at someone else's domain.
    const { org } = await ssoOrg(h, dns, op, { jit: true });
    const claimed = `pending-${Math.random().toString(36).slice(2, 8)}.test`;
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: claimed }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    const victim = await h.signUp(addressAt(claimed, 'victim'));
    for (const email of [victim.email, addressAt(claimed, 'newcomer')]) {
      const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email, email_verified: true }, { organization_slug: org.slug });
      assert.equal(trip.error, 'sso_email_outside_domain', `${email}: ${trip.location?.href}`);
    }
    assert.equal(await countRows(h, 'sso_identities', { user_id: victim.userId }), 0);
    assert.equal(await countRows(h, 'memberships', { organization_id: org.id }), 1, 'only the owner');
  });
});

describe('passwordless', () => {
  test("a code is its own challenge's: the superseded challenge's code on the new challenge, and the new code on the old one, are 422", async () => {
    // Threat: an old mail's code (or a code read off another tab) opening the address's current challenge.
    const h = await start({ config: { passwordless: {} } });
    const user = await h.signUp();
    const first = (await h.post('/auth/passwordless/start', { email: user.email })).body.data.challenge_id as string;
    const firstCode = String(h.lastMail(user.email, 'login_code')!.context.code);
    h.clock.advance(61);
    const second = (await h.post('/auth/passwordless/start', { email: user.email })).body.data.challenge_id as string;
    const secondCode = String(h.lastMail(user.email, 'login_code')!.context.code);
    if (firstCode !== secondCode) assertError(await h.post('/auth/passwordless/verify', { challenge_id: second, code: firstCode }), 422, 'invalid_code');
    assertError(await h.post('/auth/passwordless/verify', { challenge_id: first, code: secondCode }), 422, 'invalid_code');
    const signedIn = await h.post('/auth/passwordless/verify', { challenge_id: second, code: secondCode });
    assert.equal(signedIn.status, 200, signedIn.text);
  });

  test("a sign-up code for an address a provider squatter registered meanwhile: the owner gets the account, the squatter's link and session go", async () => {
    // Threat: the address's owner asks for a sign-up code; before they use it, an attacker signs
    // up at the address through a provider that does not vouch for it. The code must not leave
    // the attacker's link (a way in) or session on the account the owner then uses.
    const op = await TestOpenIdProvider.start();
    try {
      const h = await start({ config: { passwordless: { allowSignup: true }, social: socialConfig(op) } });
      const email = uniqueEmail('owner');
      const challengeId = (await h.post('/auth/passwordless/start', { email })).body.data.challenge_id as string;
      const code = String(h.lastMail(email, 'login_code')!.context.code);
      const squatter = { sub: newSubject(), email, email_verified: false };
      const squatted = await socialLogin(h, op, squatter);
      assert.equal(squatted.status, 200, squatted.text);
      const squatterUserId = squatted.body.data.user.id;

      const owner = await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
      assert.equal(owner.status, 200, owner.text);
      assert.equal(owner.body.data.user.id, squatterUserId, 'the one account at the address');
      assert.equal(owner.body.data.is_new_user, false);
      assert.equal(await countRows(h, 'social_identities', { user_id: squatterUserId }), 0);
      assert.equal(h.eventsOfType('user.social_unlinked').at(-1)?.data.reason, 'email_proven');
      assertError(await h.post('/auth/token/refresh', { refresh_token: squatted.body.data.refresh_token }), 401, 'invalid_grant');
      // The squatter's provider no longer signs in to it: the account's address is proven, theirs is not vouched.
      const again = await socialRoundTrip(h, op, squatter);
      assertError(await exchangeCode(h, again), 409, 'account_link_required');
    } finally {
      await op.close();
    }
  });
});

describe('the example app keeps one-time values out of Referer', () => {
  test('the passwordless link page and the social return page answer Referrer-Policy: no-referrer', async () => {
    // Threat: a token in the link page's address (a host that puts it in the query) or a
    // social_code on the return page sent to a third party in Referer.
    const directory = mkdtempSync(join(tmpdir(), 'flow-attacks-example-'));
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const example = createExampleApp({ publicUrl: url, databaseFile: join(directory, 'example.sqlite'), secret: randomBytes(32).toString('hex'), development: false });
    server.on('request', example.app);
    try {
      await example.identity.ready;
      for (const path of ['/passwordless/link', '/social-return', '/sso-return', '/reset-password?token=x', '/verify-email?token=x', '/accept-invite?token=x']) {
        const page = await fetch(`${url}${path}`, { headers: { accept: 'text/html' } });
        await page.arrayBuffer();
        assert.equal(page.status, 200, path);
        assert.equal(page.headers.get('referrer-policy'), 'no-referrer', path);
      }
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await example.identity.close();
      rmSync(directory, { recursive: true, force: true });
    }
  });
});

