import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before } from 'node:test';
// oidc-provider ships no types; the tests use the small surface docs/social-login.md names.
// eslint-disable-next-line @typescript-eslint/ban-ts-comment
// @ts-expect-error
import Provider from 'oidc-provider';
import { Harness, type HarnessOptions, type TestResponse } from './harness.js';

/*
 * A real OpenID provider in the test process (docs/social-login.md): oidc-provider on a loopback
 * port, a static client, PKCE required, and a programmatic interaction that logs in the
 * account the test names. The browser is the test itself: it follows redirects with
 * fetch(..., {redirect: 'manual'}) and a small cookie map until the router's callback appears.
 */

export const PROVIDER_ID = 'test';
export const CLIENT_ID = 'identity-router-test';
export const CLIENT_SECRET = 'client-secret-of-the-test-provider-0123456789';
/** Never fetched by the test: only where the router sends the browser back. */
export const RETURN_URL = 'http://127.0.0.1:5173/app/social';
/** The router's public base as the provider knows it; the test maps it onto the harness. */
export const REDIRECT_BASE = 'http://127.0.0.1/identity';
export const REDIRECT_URI = `${REDIRECT_BASE}/auth/social/${PROVIDER_ID}/callback`;

export interface ProviderAccount {
  sub: string;
  email?: string;
  /** Passed through as given, so tests can send `false`, a string, or leave it out. */
  email_verified?: unknown;
  name?: string;
}

export class TestOpenIdProvider {
  readonly accounts = new Map<string, ProviderAccount>();
  /** Who logs in at the next interaction. */
  current: ProviderAccount | undefined;
  /** The next interaction answers `error=access_denied` instead. */
  denyNext = false;
  /** Requests to the UserInfo endpoint, so a test can tell where the e-mail came from. */
  userInfoRequests = 0;
  /** Runs before the next discovery request is answered: a change made while the router discovers. */
  beforeNextDiscovery: (() => Promise<void>) | undefined;
  issuer!: string;
  private server!: Server;
  private provider: any;

  static async start(options: { conformIdTokenClaims?: boolean } = {}): Promise<TestOpenIdProvider> {
    const op = new TestOpenIdProvider();
    await op.listen(options.conformIdTokenClaims ?? false);
    return op;
  }

  /**
   * Lets the static client also use redirect URIs under `prefix`: a single sign-on
   * connection's callback carries its id, known only once the connection exists (docs/sso.md).
   */
  allowRedirectPrefix(prefix: string): void {
    const original = this.provider.Client.prototype.redirectUriAllowed;
    this.provider.Client.prototype.redirectUriAllowed = function (this: unknown, value: string) {
      return (typeof value === 'string' && value.startsWith(prefix)) || original.call(this, value);
    };
  }

  /** Logs `account` in at the next interaction (and remembers it for findAccount). */
  use(account: ProviderAccount): ProviderAccount {
    this.accounts.set(account.sub, account);
    this.current = account;
    return account;
  }

  private async listen(conformIdTokenClaims: boolean): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', () => resolve()));
    this.issuer = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    this.provider = new Provider(this.issuer, {
      clients: [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [REDIRECT_URI], grant_types: ['authorization_code'], response_types: ['code'] }],
      pkce: { required: () => true, methods: ['S256'] },
      features: { devInteractions: { enabled: false } },
      cookies: { keys: [randomBytes(16).toString('hex')] },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
      conformIdTokenClaims,
      findAccount: (_ctx: unknown, sub: string) => {
        const account = this.accounts.get(sub);
        if (!account) return undefined;
        return {
          accountId: sub,
          claims: () => {
            const claims: Record<string, unknown> = { sub };
            if (account.email !== undefined) claims.email = account.email;
            if (account.email_verified !== undefined) claims.email_verified = account.email_verified;
            if (account.name !== undefined) claims.name = account.name;
            return claims;
          },
        };
      },
      interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    });
    // The provider runs on plain http on loopback; it must not complain about insecure cookies.
    this.provider.proxy = false;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (req.url?.startsWith('/interaction/')) {
        const details = await this.provider.interactionDetails(req, res);
        if (this.denyNext) {
          this.denyNext = false;
          await this.provider.interactionFinished(req, res, { error: 'access_denied', error_description: 'the user said no' }, { mergeWithLastSubmission: false });
          return;
        }
        const account = this.current;
        if (!account) throw new Error('no provider account chosen for this interaction');
        const grant = new this.provider.Grant({ accountId: account.sub, clientId: details.params.client_id });
        grant.addOIDCScope(details.params.scope);
        const grantId = await grant.save();
        await this.provider.interactionFinished(req, res, { login: { accountId: account.sub }, consent: { grantId } }, { mergeWithLastSubmission: false });
        return;
      }
      if (req.url?.startsWith('/me')) this.userInfoRequests += 1;
      if (req.url?.startsWith('/.well-known/openid-configuration') && this.beforeNextDiscovery) {
        const hook = this.beforeNextDiscovery;
        this.beforeNextDiscovery = undefined;
        await hook();
      }
      this.provider.callback()(req, res);
    } catch (error) {
      res.statusCode = 500;
      res.end(String(error));
    }
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The `social` config pointing at a test provider. */
export function socialConfig(op: TestOpenIdProvider, overrides: Record<string, unknown> = {}, providerOverrides: Record<string, unknown> = {}) {
  return {
    redirectBase: REDIRECT_BASE,
    returnUrls: [RETURN_URL],
    ...overrides,
    providers: {
      [PROVIDER_ID]: { issuer: op.issuer, clientId: CLIENT_ID, clientSecret: CLIENT_SECRET, name: 'Test provider', ...providerOverrides },
    },
  };
}

export async function startSocialHarness(op: TestOpenIdProvider, options: HarnessOptions & { social?: Record<string, unknown>; provider?: Record<string, unknown> } = {}): Promise<Harness> {
  const { social, provider, config, ...rest } = options;
  return Harness.start({ ...rest, config: { ...config, social: socialConfig(op, social, provider) } });
}

/** The SPA's side of the handoff: a verifier it keeps, and the challenge it sends. */
export function handoffPair(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/**
 * Plays the browser at the provider: from the authorization URL through the provider's
 * login and consent to the redirect back to the router. Answers the callback path (under
 * the mount) with its query, ready for `h.get`.
 */
export async function authorizeAtProvider(authorizationUrl: string): Promise<string> {
  const cookies = new Map<string, string>();
  let url = authorizationUrl;
  for (let hop = 0; hop < 12; hop += 1) {
    const response = await fetch(url, { redirect: 'manual', headers: { cookie: [...cookies].map(([name, value]) => `${name}=${value}`).join('; ') } });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const index = pair!.indexOf('=');
      cookies.set(pair!.slice(0, index).trim(), pair!.slice(index + 1).trim());
    }
    await response.arrayBuffer();
    const location = response.headers.get('location');
    if (!location) throw new Error(`the provider stopped at ${url} with ${response.status}`);
    const next = new URL(location, url).href;
    if (next.startsWith(`${REDIRECT_BASE}/`)) return next.slice(REDIRECT_BASE.length);
    url = next;
  }
  throw new Error('too many redirects at the provider');
}

export interface SocialStart {
  handoff: { verifier: string; challenge: string };
  authorizationUrl: string;
}

export async function startLogin(h: Harness, body: Record<string, unknown> = {}): Promise<SocialStart> {
  const handoff = handoffPair();
  const started = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256', ...body });
  if (started.status !== 200) throw new Error(`authorize failed: ${started.status} ${started.text}`);
  return { handoff, authorizationUrl: started.body.data.authorization_url };
}

/** A link flow started by the session of `token`, for socialRoundTrip. */
export function startLink(h: Harness, token: string): () => Promise<SocialStart> {
  return async () => {
    const handoff = handoffPair();
    const started = await h.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token });
    if (started.status !== 200) throw new Error(`link start failed: ${started.status} ${started.text}`);
    return { handoff, authorizationUrl: started.body.data.authorization_url };
  };
}

/** What the router's callback said: the social_code or social_error on the redirect. */
export interface CallbackResult {
  response: TestResponse;
  location: URL | undefined;
  code: string | null;
  error: string | null;
}

export async function callRouterCallback(h: Harness, callbackPath: string): Promise<CallbackResult> {
  const response = await h.get(callbackPath);
  const locationHeader = response.headers.get('location');
  const location = locationHeader ? new URL(locationHeader) : undefined;
  return { response, location, code: location?.searchParams.get('social_code') ?? null, error: location?.searchParams.get('social_error') ?? null };
}

/** Authorize, log in at the provider as `account`, come back: the callback's result and the handoff. */
export async function socialRoundTrip(h: Harness, op: TestOpenIdProvider, account: ProviderAccount, start?: () => Promise<SocialStart>): Promise<CallbackResult & SocialStart> {
  op.use(account);
  const started = await (start ?? (() => startLogin(h)))();
  const callbackPath = await authorizeAtProvider(started.authorizationUrl);
  return { ...started, ...(await callRouterCallback(h, callbackPath)) };
}

/**
 * The SPA's exchange of a round trip's social_code (docs/social-login.md): where the account is
 * resolved or the link made, and where every refusal but the provider's own is answered.
 */
export async function exchangeCode(h: Harness, trip: CallbackResult & SocialStart, token?: string): Promise<TestResponse> {
  if (!trip.code) throw new Error(`no social_code: ${trip.error} (${trip.response.status})`);
  return h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier }, token ? { token } : {});
}

/** Round trip plus exchange (with `token` for a link flow): the callback's result and the exchange's answer. */
export async function socialRoundTripAndExchange(
  h: Harness,
  op: TestOpenIdProvider,
  account: ProviderAccount,
  options: { start?: () => Promise<SocialStart>; token?: string } = {},
): Promise<{ trip: CallbackResult & SocialStart; exchanged: TestResponse }> {
  const trip = await socialRoundTrip(h, op, account, options.start);
  return { trip, exchanged: await exchangeCode(h, trip, options.token) };
}

/** A complete social sign-in: round trip plus exchange. */
export async function socialLogin(h: Harness, op: TestOpenIdProvider, account: ProviderAccount): Promise<TestResponse> {
  const trip = await socialRoundTrip(h, op, account);
  if (!trip.code) throw new Error(`no social_code: ${trip.error} (${trip.response.status})`);
  return h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
}

let subjectCounter = 0;
export function newSubject(): string {
  subjectCounter += 1;
  return `sub-${subjectCounter}-${randomBytes(4).toString('hex')}`;
}

/**
 * The test provider and a router configured for it, started before the tests of the file (or
 * describe) that calls this and closed after them; `started` hands both over for the caller's
 * `op` and `h`.
 */
export function withSocialHarness(started: (running: { op: TestOpenIdProvider; h: Harness }) => void): void {
  let running: { op: TestOpenIdProvider; h: Harness } | undefined;
  before(async () => {
    const op = await TestOpenIdProvider.start();
    running = { op, h: await startSocialHarness(op) };
    started(running);
  });
  after(async () => {
    await running?.h.close();
    await running?.op.close();
  });
}
