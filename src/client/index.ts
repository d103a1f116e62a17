/// <reference lib="dom" />
/**
 * identity-router/client: the browser side of the router (docs/client.md).
 * ESM with relative imports only: no Node built-in, no framework, nothing of the server entry.
 *
 * One session per router mount (`key`) and origin, shared by every instance over a
 * BroadcastChannel. Refresh rotation is single-use (a replayed refresh token revokes the whole
 * session), so a refresh is sent only under one Web Lock for all tabs. A lock and a channel
 * message arrive separately, so the tab that refreshed also holds a shared lock named after its
 * new generation while it has it: the next lock holder sees, in `navigator.locks.query`, that a
 * newer generation exists and waits for its message instead of replaying the old token.
 */
import { IdentityClientError } from './error.js';
import type {
  Answer,
  Factor,
  HttpMethod,
  IdentityClientOptions,
  LoginResult,
  MfaGate,
  RequestBody,
  Session,
  SessionEndReason,
  SocialResult,
  StepUpPrompt,
  VerifyBody,
} from './types.js';
import { runCeremony, toBase64Url } from './webauthn.js';

export { IdentityClientError };
export type * from './types.js';

// biome-ignore lint/suspicious/noExplicitAny: router answers inside the client; callers see the generated types instead.
type Json = Record<string, any>;

/** The tokens of one session generation; `stamp` grows with every new access token. */
interface Held {
  access: string;
  refresh?: string;
  expiresAt: number;
  stamp: number;
}

type Message = { type: 'hello' } | { type: 'set'; held: Held } | { type: 'end'; reason: SessionEndReason; sessionId: string };

/** Refresh ahead of expiry when less than this remains. */
const EARLY_REFRESH_MS = 30_000;
/** The longest `ready` waits for an open tab's session, and a lock holder for a newer generation's message. */
const READY_WAIT_MS = 500;
const CATCH_UP_MS = 1000;
const STEP_UP_ASKS = 5;

export interface IdentityClient {
  readonly ready: Promise<void>;
  register(body: RequestBody<'/auth/register', 'POST'>): Promise<Answer<'/auth/register', 'POST'>>;
  verifyEmail(token: string): Promise<Answer<'/auth/email/verify', 'POST'>>;
  login(body: { email: string; password: string }): Promise<LoginResult>;
  logout(): Promise<void>;
  logoutAll(): Promise<void>;
  switchOrg(organizationId: string): Promise<Answer<'/auth/switch-org', 'POST'>>;
  request<M extends HttpMethod, T extends string>(method: M, path: T, options?: { body?: RequestBody<T, M>; query?: Record<string, string | number | boolean | undefined> }): Promise<Answer<T, M>>;
  fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response>;
  getAccessToken(): Promise<string | null>;
  getSession(): Session | null;
  onSessionEnded(callback: (event: { reason: SessionEndReason }) => void): () => void;
  withStepUp<R>(fn: () => Promise<R>, askForCode: (prompt: StepUpPrompt) => Promise<VerifyBody | null> | VerifyBody | null): Promise<R>;
  passkeys: {
    register(options?: { label?: string }): Promise<Answer<'/auth/passkeys/register/verify', 'POST'>>;
    login(): Promise<{ session: Session }>;
  };
  social: {
    /** `link: true` links the provider account to the signed-in user instead of signing in. */
    start(provider: string, options?: { returnTo?: string; redirect?: boolean; link?: boolean }): Promise<{ authorizationUrl: string }>;
    complete(href?: string): Promise<SocialResult | null>;
  };
  sso: {
    /**
     * Single sign-on, identifier-first: the router finds the organization by the address's
     * verified domain and the browser leaves for its identity provider. The return is
     * completed by `social.complete()`, through the same handoff.
     */
    start(email: string, options?: { returnTo?: string; redirect?: boolean }): Promise<{ authorizationUrl: string }>;
  };
  passwordless: {
    start(body: RequestBody<'/auth/passwordless/start', 'POST'>): Promise<Answer<'/auth/passwordless/start', 'POST'>>;
    /** `{challenge_id, code}` (the mailed code) or `{token}` (the mailed link, POSTed on a click); answers as login(), plus `isNewUser`. */
    verify(body: { challenge_id: string; code: string } | { token: string }): Promise<LoginResult & { isNewUser?: boolean }>;
  };
}

function decodeClaims(token: string): Json {
  try {
    const part = token.split('.')[1] ?? '';
    const binary = atob(part.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (part.length % 4)) % 4));
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(binary, (char) => char.charCodeAt(0)))) as Json;
  } catch {
    return {};
  }
}

function sessionOf(held: Held): Session {
  const claims = decodeClaims(held.access);
  return { userId: String(claims.sub ?? ''), sessionId: String(claims.sid ?? ''), claims, expiresAt: held.expiresAt };
}

async function readJson(response: Response): Promise<unknown> {
  try {
    return await response.clone().json();
  } catch {
    return undefined;
  }
}

/** What `underLock` answers when the lock manager refused: the caller goes on as without Web Locks. */
const refused: unique symbol = Symbol('refused');

/** The tabs' channel, or none where the browser has none or refuses to open one (the tab then shares nothing). */
function openChannel(name: string): BroadcastChannel | undefined {
  try {
    return typeof BroadcastChannel === 'function' ? new BroadcastChannel(name) : undefined;
  } catch {
    return undefined;
  }
}

/** A 401 after which a refresh may help: `unauthorized`, or one with no JSON body. */
const worthRefreshing = (status: number, body: unknown) => status === 401 && ((body as Json | undefined)?.error ?? 'unauthorized') === 'unauthorized';

export function createIdentityClient(options: IdentityClientOptions): IdentityClient {
  const send = options.fetch ?? globalThis.fetch.bind(globalThis);
  const mode = options.storage ?? 'memory';
  const key = new URL(options.baseUrl, location.href).href.replace(/\/+$/, '');
  const keyOrigin = new URL(key).origin;
  const tokenOrigins = new Set([location.origin, keyOrigin, ...(options.apiOrigins ?? []).map((origin) => new URL(origin).origin)]);
  const storageKey = `identity-router:${key}`;
  const handoffKey = `identity-router:handoff:${key}`;
  const refreshLock = `identity-router:refresh:${key}`;
  const generationPrefix = `identity-router:generation:${key}:`;
  /**
   * Web Locks, until the lock manager refuses a request or a query (a frame of another site with
   * third-party storage blocked, a sandboxed frame): from then on the tab goes on as without them.
   */
  let locks = globalThis.navigator?.locks as LockManager | undefined;
  const channel = openChannel(`identity-router:${key}`);
  const listeners = new Set<(event: { reason: SessionEndReason }) => void>();
  const waiters = new Set<() => void>();

  let held: Held | null = null;
  /** Sessions that ended here: a late answer or message for one of them must not bring it back. */
  const endedSessions = new Set<string>();
  let releaseGeneration: (() => void) | undefined;
  let refreshing: Promise<void> | undefined;

  const post = (message: Message) => channel?.postMessage(message);

  /**
   * `locks.request`, where a refusal of the lock manager (the callback never ran) turns Web Locks
   * off for this instance and answers `refused` instead of rejecting; `callback`'s own failure rejects.
   */
  async function underLock<T>(name: string, mode: LockMode, callback: () => Promise<T>): Promise<T | typeof refused> {
    const manager = locks;
    if (!manager) return refused;
    let entered = false;
    try {
      return await manager.request(name, { mode }, () => {
        entered = true;
        return callback();
      });
    } catch (error) {
      if (entered) throw error;
      locks = undefined;
      return refused;
    }
  }

  /** Holds the shared lock that tells other tabs this generation exists; resolves once it is granted (or refused). */
  function holdGeneration(stamp: number): Promise<void> {
    releaseGeneration?.();
    releaseGeneration = undefined;
    return new Promise((granted) => {
      void underLock(`${generationPrefix}${stamp}`, 'shared', () => {
        granted();
        return new Promise<void>((release) => {
          if (held?.stamp === stamp) releaseGeneration = release;
          else release();
        });
      }).finally(granted);
    });
  }

  function store(next: Held | null): void {
    if (mode !== 'session') return;
    try {
      if (next) sessionStorage.setItem(storageKey, JSON.stringify(next));
      else sessionStorage.removeItem(storageKey);
    } catch {
      // Storage refused (quota, privacy mode): the session still lives in memory. An older generation
      // left behind would be replayed after a reload (reuse detection would end the session): drop it.
      try {
        sessionStorage.removeItem(storageKey);
      } catch {
        // No storage at all: nothing was kept.
      }
    }
  }

  /** Makes `next` this instance's session; `announce` tells the other instances. */
  async function adopt(next: Held, announce: boolean): Promise<void> {
    if (endedSessions.has(sessionOf(next).sessionId)) return;
    held = next;
    store(next);
    const granted = holdGeneration(next.stamp);
    if (announce) post({ type: 'set', held: next });
    for (const wake of waiters) wake();
    await granted;
  }

  /** Takes a token answer's `data`; an answer without a refresh token keeps the current one. */
  async function adoptAnswer(data: Json): Promise<Session> {
    const refresh = mode === 'none' ? undefined : ((data.refresh_token as string | undefined) ?? held?.refresh);
    const lifetime = typeof data.expires_in === 'number' ? data.expires_in : Number(decodeClaims(data.access_token).exp) - Number(decodeClaims(data.access_token).iat);
    const next: Held = {
      access: data.access_token,
      ...(refresh ? { refresh } : {}),
      expiresAt: Date.now() + (Number.isFinite(lifetime) ? lifetime : 0) * 1000,
      stamp: Math.max(Date.now(), (held?.stamp ?? 0) + 1),
    };
    await adopt(next, true);
    return sessionOf(next);
  }

  function end(reason: SessionEndReason, announce: boolean): void {
    if (!held) return;
    const { sessionId } = sessionOf(held);
    endedSessions.add(sessionId);
    held = null;
    store(null);
    releaseGeneration?.();
    releaseGeneration = undefined;
    if (announce) post({ type: 'end', reason, sessionId });
    for (const wake of waiters) wake();
    for (const listener of [...listeners]) listener({ reason });
  }

  /** Resolves when `done()` holds or `ms` pass. */
  function waitFor(done: () => boolean, ms: number): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        waiters.delete(wake);
        resolve();
      };
      const wake = () => done() && finish();
      const timer = setTimeout(finish, ms);
      waiters.add(wake);
    });
  }

  /** The newest generation another instance holds, from the lock manager's list; undefined without Web Locks. */
  async function newestGeneration(): Promise<number | undefined> {
    let taken: LockInfo[];
    try {
      if (!locks) return undefined;
      taken = (await locks.query()).held ?? [];
    } catch {
      locks = undefined;
      return undefined;
    }
    let newest = 0;
    for (const lock of taken) {
      if (lock.name?.startsWith(generationPrefix)) newest = Math.max(newest, Number(lock.name.slice(generationPrefix.length)) || 0);
    }
    return newest;
  }

  channel?.addEventListener('message', (event: MessageEvent<Message>) => {
    const message = event.data;
    if (message.type === 'hello') {
      if (held) post({ type: 'set', held });
    } else if (message.type === 'set') {
      if (!held || message.held.stamp > held.stamp) void adopt(message.held, false);
    } else if (message.type === 'end') {
      // A session ends in every instance that holds it, whatever generation each has reached.
      if (held && sessionOf(held).sessionId === message.sessionId) end(message.reason, false);
    }
  });

  /** Takes an open instance's session, if one has it. */
  async function takeOpenSession(): Promise<void> {
    if (held || !channel) return;
    // With Web Locks an open session shows as a held generation lock; without them, ask and wait briefly.
    if ((await newestGeneration()) === 0) return;
    post({ type: 'hello' });
    await waitFor(() => held !== null, READY_WAIT_MS);
  }

  /** Runs `work` while this tab holds the refresh lock (every tab's refresh waits for it). */
  const exclusively = async (work: () => Promise<void>): Promise<void> => {
    if ((await underLock(refreshLock, 'exclusive', work)) === refused) await work();
  };

  /**
   * Cookie mode after a reload: the session lives on in the host's httpOnly cookie, so one refresh
   * with `{}` brings it back. Under the refresh lock, and only when no open tab has the session by
   * then: two tabs reloaded together must not send the same cookie twice.
   */
  function restoreFromCookie(): Promise<void> {
    return exclusively(async () => {
      await takeOpenSession();
      if (held) return;
      const response = await call('POST', '/auth/token/refresh', {}, false).catch(() => undefined);
      const data = response?.ok ? ((await readJson(response)) as Json | undefined)?.data : undefined;
      // A refusal (no cookie, an ended session) or an answer without tokens leaves the page signed out.
      if (typeof data?.access_token === 'string') await adoptAnswer(data);
    });
  }

  const restoreWanted = () => mode === 'none' && (typeof options.restore === 'function' ? options.restore() : options.restore !== false);

  const initialised = (async () => {
    if (mode === 'session') {
      try {
        const saved = sessionStorage.getItem(storageKey);
        if (saved) await adopt(JSON.parse(saved) as Held, false);
      } catch {
        // An unreadable entry is no session.
      }
    }
    await takeOpenSession();
    if (!held && restoreWanted()) await restoreFromCookie();
  })();
  /**
   * CONTRACT 14: never longer than 500 ms. A cookie-mode recovery still on the network then goes
   * on: getAccessToken(), request() and fetch() wait for it, and getSession() has it once it lands.
   */
  const ready: Promise<void> = Promise.race([initialised, new Promise<void>((resolve) => setTimeout(resolve, READY_WAIT_MS))]);

  /** One refresh for every caller that saw generation `seen`, in this tab and (under the lock) in every tab. */
  function refresh(seen: number): Promise<void> {
    if (held?.stamp !== seen) return Promise.resolve();
    refreshing ??= (async () => {
      const work = async () => {
        const newest = (await newestGeneration()) ?? 0;
        if (newest > seen) await waitFor(() => held === null || held.stamp >= newest, CATCH_UP_MS);
        if (!held || held.stamp !== seen) return;
        const response = await call('POST', '/auth/token/refresh', mode === 'none' ? {} : { refresh_token: held.refresh }, false);
        const body = await readJson(response);
        if (response.ok) {
          await adoptAnswer((body as Json).data);
          return;
        }
        if (response.status === 401) end('revoked', true);
        throw IdentityClientError.fromAnswer(response.status, body);
      };
      await exclusively(work);
    })().finally(() => {
      refreshing = undefined;
    });
    return refreshing;
  }

  /**
   * `refresh`, where a refusal that ended the session (401) is no failure of the caller: it goes
   * on signed out, so getAccessToken() answers null and a request's first answer stays its answer.
   */
  async function refreshOrEnd(seen: number): Promise<void> {
    try {
      await refresh(seen);
    } catch (error) {
      if (!(error instanceof IdentityClientError && error.status === 401 && held === null)) throw error;
    }
  }

  async function getAccessToken(): Promise<string | null> {
    await initialised;
    if (held && held.expiresAt - Date.now() < EARLY_REFRESH_MS) await refreshOrEnd(held.stamp);
    return held?.access ?? null;
  }

  function routerUrl(path: string, query?: Record<string, string | number | boolean | undefined>): string {
    // Only a path from the mount's root names a route under it: `key + 'auth/me'` or `key + '.evil.example/x'`
    // would be another host, and the session's bearer would go with it.
    if (!path.startsWith('/')) throw new TypeError(`A router path starts with "/": ${JSON.stringify(path)} names no route under ${key}.`);
    const url = new URL(key + path);
    // Nor does one whose dot segments (`/../`, `/%2e%2e/`, `/..\`) the URL parser resolves above the mount:
    // an id taken from input (`/orgs/${id}`) would carry the bearer to any path of the router's origin.
    if (!url.href.startsWith(`${key}/`)) throw new TypeError(`${JSON.stringify(path)} climbs out of ${key}: it names no route under it.`);
    for (const [name, value] of Object.entries(query ?? {})) if (value !== undefined) url.searchParams.set(name, String(value));
    return url.href;
  }

  /** One HTTP call to the router; `bearer` is the token to carry (false: none). */
  async function call(method: string, path: string, body: unknown, bearer: string | false, query?: Record<string, string | number | boolean | undefined>): Promise<Response> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    const url = routerUrl(path, query);
    try {
      return await send(url, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        ...(mode === 'none' ? { credentials: 'include' as const } : {}),
      });
    } catch (cause) {
      throw new IdentityClientError(0, 'network_error', { message: 'The router could not be reached.', cause });
    }
  }

  /** Sends with the session's bearer; after a 401 that a refresh may cure, refreshes and retries once. */
  async function authorized(attempt: (token: string | null) => Promise<Response>): Promise<Response> {
    const token = await getAccessToken();
    const stamp = held?.stamp;
    let response = await attempt(token);
    if (token && stamp !== undefined && worthRefreshing(response.status, await readJson(response))) {
      await refreshOrEnd(stamp);
      if (held) response = await attempt(held.access);
    }
    if (response.status === 401 && (await readJson(response) as Json | undefined)?.error === 'session_ended') end('revoked', true);
    return response;
  }

  async function request(method: string, path: string, requestOptions: { body?: unknown; query?: Record<string, string | number | boolean | undefined> } = {}): Promise<Json> {
    const response = await authorized((token) => call(method, path, requestOptions.body, token ?? false, requestOptions.query));
    const body = await readJson(response);
    if (!response.ok) throw IdentityClientError.fromAnswer(response.status, body);
    const data = body && typeof body === 'object' && 'data' in body ? (body as Json).data : body;
    if (data && typeof data === 'object' && typeof (data as Json).access_token === 'string') await adoptAnswer(data as Json);
    return data;
  }

  /** A call made with the MFA ticket instead of a session. */
  async function withTicket(path: string, ticket: string, body: unknown): Promise<Json> {
    const response = await call('POST', path, body, ticket);
    const answer = await readJson(response);
    if (!response.ok) throw IdentityClientError.fromAnswer(response.status, answer);
    return (answer as Json).data;
  }

  /** A `verify` body for a factor, running the passkey ceremony when it names a webauthn factor without a code. */
  async function verifyBody(body: VerifyBody, factors: Array<{ id: string; type: string }>, challenge: (factorId: string) => Promise<unknown>): Promise<Json> {
    const factor = 'factor_id' in body && !('code' in body) ? factors.find((candidate) => candidate.id === body.factor_id) : undefined;
    if (factor?.type !== 'webauthn') return body;
    const answer = (await challenge(factor.id)) as Json;
    return { factor_id: factor.id, response: await runCeremony('get', answer.options) };
  }

  function gate(data: Json): MfaGate {
    const ticket = data.mfa_token as string;
    const factors = data.factors as MfaGate['factors'];
    const challenge = (factorId: string) => withTicket('/auth/mfa/challenge', ticket, { factor_id: factorId });
    return {
      factors,
      challenge,
      async verify(body) {
        const tokens = await withTicket('/auth/mfa/verify', ticket, await verifyBody(body, factors, challenge));
        return { session: await adoptAnswer(tokens) };
      },
    };
  }

  async function signedIn(data: Json): Promise<LoginResult> {
    if (data.mfa_required) return { mfa: gate(data) };
    return { session: await adoptAnswer(data) };
  }

  /** A first factor's route (password, passwordless): answered as login() is, sent without a bearer. */
  async function signInWith(path: string, body: unknown): Promise<LoginResult & { isNewUser?: boolean }> {
    const response = await call('POST', path, body, false);
    const answer = await readJson(response);
    if (!response.ok) throw IdentityClientError.fromAnswer(response.status, answer);
    const data = (answer as Json).data;
    return { ...(await signedIn(data)), ...(typeof data.is_new_user === 'boolean' ? { isNewUser: data.is_new_user } : {}) };
  }

  async function endWith(reason: SessionEndReason, path: string): Promise<void> {
    try {
      await request('POST', path);
    } finally {
      end(reason, true);
    }
  }

  async function withStepUp<R>(fn: () => Promise<R>, askForCode: (prompt: StepUpPrompt) => Promise<VerifyBody | null> | VerifyBody | null): Promise<R> {
    let refusal: IdentityClientError;
    try {
      const outcome = await fn();
      if (!(outcome instanceof Response) || outcome.status !== 401) return outcome;
      const body = await readJson(outcome);
      if ((body as Json | undefined)?.error !== 'step_up_required') return outcome;
      refusal = IdentityClientError.fromAnswer(401, body);
    } catch (error) {
      if (!(error instanceof IdentityClientError) || error.code !== 'step_up_required') throw error;
      refusal = error;
    }
    const listed = (await request('GET', '/auth/mfa/factors')) as { factors: Factor[] };
    const factors = listed.factors.filter((factor) => factor.confirmed);
    const challenge = (factorId: string) => request('POST', '/auth/mfa/step-up/challenge', { body: { factor_id: factorId } });
    let error: IdentityClientError | undefined;
    for (let ask = 0; ask < STEP_UP_ASKS; ask++) {
      const answer = await askForCode({ factors, challenge, ...(error ? { error } : {}) });
      if (answer === null || answer === undefined) throw refusal;
      try {
        await request('POST', '/auth/mfa/step-up', { body: await verifyBody(answer, factors, challenge) });
      } catch (failure) {
        if (failure instanceof IdentityClientError && failure.code === 'invalid_code') {
          error = failure;
          continue;
        }
        throw failure;
      }
      return fn();
    }
    throw error ?? refusal;
  }

  /** Sends a host request: any status is its answer, and no answer at all is `network_error`, as for the router's routes. */
  async function sendToHost(request: Request): Promise<Response> {
    try {
      return await send(request);
    } catch (cause) {
      // The caller's own abort (its signal) is not a failure of the network: it stays an AbortError.
      if (cause instanceof DOMException && cause.name === 'AbortError') throw cause;
      throw new IdentityClientError(0, 'network_error', { message: 'The request could not be sent.', cause });
    }
  }

  async function hostFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const original = new Request(input, init);
    if (original.headers.has('authorization') || !tokenOrigins.has(new URL(original.url).origin)) return sendToHost(original);
    return authorized((token) => {
      const attempt = original.clone();
      if (token) attempt.headers.set('authorization', `Bearer ${token}`);
      return sendToHost(attempt);
    });
  }

  /**
   * The handoff of a federated sign-in: a verifier kept in this tab's sessionStorage, only its
   * S256 challenge sent; kept once the router accepted the start, so a refusal leaves nothing.
   */
  async function leaveWithHandoff(path: string, body: Json, options: { redirect?: boolean }): Promise<{ authorizationUrl: string }> {
    const verifier = toBase64Url(crypto.getRandomValues(new Uint8Array(32)));
    const challenge = toBase64Url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
    const answer = (await request('POST', path, { body: { ...body, handoff_challenge: challenge, handoff_challenge_method: 'S256' } })) as { authorization_url: string };
    try {
      sessionStorage.setItem(handoffKey, verifier);
    } catch (cause) {
      // No verifier kept, no return could complete: the browser does not leave.
      throw new IdentityClientError(0, 'handoff_missing', { message: 'This tab cannot keep the sign-in\'s verifier: sessionStorage is unavailable here.', cause });
    }
    if (options.redirect !== false) location.assign(answer.authorization_url);
    return { authorizationUrl: answer.authorization_url };
  }

  const returnTo = (value: string | undefined): Json => (value ? { return_to: value } : {});

  function startSocial(provider: string, socialOptions: { returnTo?: string; redirect?: boolean; link?: boolean } = {}): Promise<{ authorizationUrl: string }> {
    // Linking starts on its own route, with the session's bearer; the return and the exchange are the same.
    return leaveWithHandoff(`/auth/social/${encodeURIComponent(provider)}/${socialOptions.link ? 'link' : 'authorize'}`, returnTo(socialOptions.returnTo), socialOptions);
  }

  function startSso(email: string, ssoOptions: { returnTo?: string; redirect?: boolean } = {}): Promise<{ authorizationUrl: string }> {
    return leaveWithHandoff('/auth/sso/authorize', { email, ...returnTo(ssoOptions.returnTo) }, ssoOptions);
  }

  async function completeSocial(href: string = location.href): Promise<SocialResult | null> {
    const url = new URL(href, location.href);
    const code = url.searchParams.get('social_code');
    const failure = url.searchParams.get('social_error');
    if (code === null && failure === null) return null;
    if (url.href === location.href) {
      const clean = new URL(url);
      // Every social_* parameter (social_error_detail too) leaves the address and the history.
      for (const name of [...url.searchParams.keys()]) if (name.startsWith('social_')) clean.searchParams.delete(name);
      history.replaceState(history.state, '', clean.href);
    }
    if (failure !== null) throw new IdentityClientError(0, failure, { message: `Social sign-in failed: ${failure}` });
    let verifier: string | null;
    try {
      verifier = sessionStorage.getItem(handoffKey);
      if (verifier) sessionStorage.removeItem(handoffKey);
    } catch (cause) {
      throw new IdentityClientError(0, 'handoff_missing', { message: 'This tab has no sign-in verifier: sessionStorage is unavailable here.', cause });
    }
    if (!verifier) throw new IdentityClientError(0, 'handoff_missing', { message: 'This tab did not start the social sign-in.' });
    const data = (await request('POST', '/auth/social/exchange', { body: { code, handoff_verifier: verifier } })) as Json;
    if (data.identity) return { identity: data.identity };
    if (data.mfa_required) return { mfa: gate(data), isNewUser: Boolean(data.is_new_user) };
    // request() has already taken the tokens.
    return { session: sessionOf(held!), isNewUser: Boolean(data.is_new_user) };
  }

  const typed = request as IdentityClient['request'];
  return {
    ready,
    register: (body) => typed('POST', '/auth/register', { body }),
    verifyEmail: (token) => typed('POST', '/auth/email/verify', { body: { token } }),
    login: (body) => signInWith('/auth/login', body),
    logout: () => endWith('logout', '/auth/logout'),
    logoutAll: () => endWith('logout', '/auth/logout-all'),
    switchOrg: (organizationId) => typed('POST', '/auth/switch-org', { body: { organization_id: organizationId } }),
    request: typed,
    fetch: hostFetch,
    getAccessToken,
    getSession: () => (held ? sessionOf(held) : null),
    onSessionEnded(callback) {
      listeners.add(callback);
      return () => void listeners.delete(callback);
    },
    withStepUp,
    passkeys: {
      async register(passkeyOptions = {}) {
        const creation = await request('POST', '/auth/passkeys/register/options', { body: {} });
        const response = (await runCeremony('create', creation)) as RequestBody<'/auth/passkeys/register/verify', 'POST'>['response'];
        return typed('POST', '/auth/passkeys/register/verify', { body: { response, ...(passkeyOptions.label ? { label: passkeyOptions.label } : {}) } });
      },
      async login() {
        const { challenge_id, options: assertion } = (await request('POST', '/auth/passkeys/login/options', { body: {} })) as Json;
        const response = await runCeremony('get', assertion);
        await request('POST', '/auth/passkeys/login/verify', { body: { challenge_id, response } });
        return { session: sessionOf(held!) };
      },
    },
    social: { start: startSocial, complete: completeSocial },
    sso: { start: startSso },
    passwordless: {
      start: (body) => typed('POST', '/auth/passwordless/start', { body }),
      verify: (body) => signInWith('/auth/passwordless/verify', body),
    },
  };
}
