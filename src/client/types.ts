/**
 * The client's request and answer types, derived from the OpenAPI document (docs/openapi.yaml)
 * through the generated `openapi.d.ts`, so no body shape is written twice.
 */
import type { components, paths } from './openapi.js';

export type { components, paths };
export type Schemas = components['schemas'];

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** A documented path with its `{param}` segments opened to any string: `/orgs/{orgId}` -> `/orgs/${string}`. */
type Filled<S extends string> = S extends `${infer Head}{${string}}${infer Tail}` ? `${Head}${string}${Filled<Tail>}` : S;

/** How many `/`-separated segments a path has (a `{param}` is one segment, never several). */
type Segments<S extends string, Count extends unknown[] = []> = S extends `${string}/${infer Rest}` ? Segments<Rest, [...Count, 0]> : Count['length'];

/** The documented path a concrete path matches. */
export type MatchPath<T extends string> = {
  [P in keyof paths & string]: T extends Filled<P> ? (Segments<T> extends Segments<P> ? P : never) : never;
}[keyof paths & string];

type Operation<P, M extends HttpMethod> = P extends keyof paths ? (Lowercase<M> extends keyof paths[P] ? paths[P][Lowercase<M>] : never) : never;
type JsonOf<R> = R extends { content: { 'application/json': infer J } } ? J : never;
type Success<O> = O extends { responses: infer R } ? JsonOf<R[200 & keyof R]> | JsonOf<R[201 & keyof R]> | JsonOf<R[202 & keyof R]> : never;

/** The body a route takes (`unknown` for a path the document does not know). */
export type RequestBody<T extends string, M extends HttpMethod> = [MatchPath<T>] extends [never]
  ? unknown
  : Operation<MatchPath<T>, M> extends { requestBody?: { content: { 'application/json': infer B } } }
    ? B
    : never;

/** What `request()` answers: the success body's `data`, or the whole body when it has none (`{message}`). */
export type Answer<T extends string, M extends HttpMethod> = [MatchPath<T>] extends [never]
  ? unknown
  : Success<Operation<MatchPath<T>, M>> extends infer B
    ? B extends { data: infer D }
      ? D
      : B
    : never;

export type LoginFactor = Schemas['LoginFactor'];
export type Factor = Schemas['Factor'];

/** What the client knows of the signed-in session; `claims` is the access token's payload, a hint only. */
export interface Session {
  userId: string;
  sessionId: string;
  claims: Record<string, unknown>;
  /** Epoch milliseconds on the browser's clock. */
  expiresAt: number;
}

/** A body for `POST /auth/mfa/verify` or `/auth/mfa/step-up`: a code, a recovery code, or a passkey factor (the client runs the ceremony). */
export type VerifyBody = { factor_id: string; code: string } | { code: string } | { factor_id: string };

export interface MfaGate {
  factors: LoginFactor[];
  challenge(factorId: string): Promise<unknown>;
  verify(body: VerifyBody): Promise<{ session: Session }>;
}

export type LoginResult = { session: Session; mfa?: undefined } | { mfa: MfaGate; session?: undefined };
export type SocialResult = (LoginResult & { isNewUser?: boolean }) | { identity: Schemas['SocialIdentity']; session?: undefined; mfa?: undefined };

export interface StepUpPrompt {
  /** The confirmed factors of `GET /auth/mfa/factors`. */
  factors: Factor[];
  challenge(factorId: string): Promise<unknown>;
  /** The refusal of the previous answer (`invalid_code`), when there was one. */
  error?: Error;
}

export type StorageMode = 'memory' | 'session' | 'none';

export interface IdentityClientOptions {
  /** Where the router is mounted, absolute or relative to the page. */
  baseUrl: string;
  storage?: StorageMode;
  fetch?: typeof fetch;
  /** Other origins of the host's API that `client.fetch()` may send the access token to. */
  apiOrigins?: string[];
  /**
   * `'none'` only: whether the client recovers the session with one refresh through the host's
   * cookie when no open tab has it (default true). `ready` waits for it 500 ms at most;
   * getAccessToken(), request() and fetch() wait for it to end. A function is asked at that moment,
   * e.g. for a script-readable "signed in" hint cookie, so a signed-out visit sends no refresh that must fail.
   */
  restore?: boolean | (() => boolean);
}

export type SessionEndReason = 'logout' | 'revoked';
