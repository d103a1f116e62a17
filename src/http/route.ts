import type Joi from 'joi';
import type { LoginResult } from '../services/sessions/sign-in-result.js';
import type { RateLimitGroup } from '../config/types.js';
import type { RequestMeta } from '../services/shared/service-context.js';
import type { Principal } from '../services/access/principal.js';
import type { MfaTicket } from '../services/mfa/mfa-ticket.js';
import type { AccessGrant, AccessRequirement } from '../services/access/access-policy.js';


export interface RouteRequest<Body = Record<string, unknown>, Query = Record<string, unknown>, Params = Record<string, string>> {
  body: Body;
  query: Query;
  params: Params;
  meta: RequestMeta;
  /** Present on bearer routes. */
  principal: Principal;
  /** Present on bearer routes: what the access policy admitted, for the service to re-check in its transaction. */
  grant: AccessGrant;
  /** Present on ticket routes. */
  ticket: MfaTicket;
  /** The raw `Authorization: Bearer` value on a public route that takes one optionally (the social exchange of a link). */
  bearer: string | undefined;
  /** Aborts when the client closes its connection before the answer is sent (reason: `request_abandoned`). */
  abandoned: AbortSignal;
}

export interface RouteResponse {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
  /** A redirect (302/303) to this absolute URL, with no body. */
  location?: string;
}

/**
 * A route is data: method, path, schemas, its access requirement (evaluated by the one
 * access policy), and a handler that calls one service method.
 */
export interface RouteDefinition extends AccessRequirement {
  method: 'get' | 'post' | 'patch' | 'delete';
  path: string;
  /** The per-IP group of docs/configuration.md this route counts against. */
  rateLimit?: RateLimitGroup;
  /** A feature the host did not configure (e.g. social login): the route answers 404 before any guard. */
  unavailable?: boolean;
  /**
   * GET and HEAD of this path answer 404 `not_found`, not 405: a path whose every use spends a
   * one-time value offers no method a mail scanner's prefetch could call (docs/passwordless.md).
   */
  noGet?: boolean;
  /** A valid token of a session that has ended answers 401 `session_ended`, not `unauthorized` (docs/openapi.yaml: switch-org). */
  answersSessionEnded?: boolean;
  body?: Joi.ObjectSchema;
  query?: Joi.ObjectSchema;
  params?: Joi.ObjectSchema;
  // The schemas above guarantee the shapes the handler declares.
  // biome-ignore lint/suspicious/noExplicitAny: each route's schemas fix its own request shape
  handler: (request: RouteRequest<any, any, any>) => Promise<RouteResponse>;
}

export const ok = (data: unknown, headers?: Record<string, string>): RouteResponse => ({ status: 200, body: { data }, ...(headers ? { headers } : {}) });
export const created = (data: unknown): RouteResponse => ({ status: 201, body: { data } });
export const accepted = (message: string): RouteResponse => ({ status: 202, body: { message } });
export const redirect = (status: 302 | 303, location: string, headers?: Record<string, string>): RouteResponse => ({ status, body: undefined, location, ...(headers ? { headers } : {}) });

/**
 * The answer of a login, the same wherever it opens (docs/security.md login; a passkey login and the
 * social exchange answer "exactly that of POST /auth/login", docs/mfa.md and docs/social-login.md): tokens and
 * the user, or the MFA gate. `extra` adds route-specific fields such as `is_new_user`.
 */
export const loginAnswer = (result: LoginResult, extra: Record<string, unknown> = {}): RouteResponse =>
  result.kind === 'mfa_required'
    ? ok({ mfa_required: true, mfa_token: result.mfaToken, factors: result.factors, ...extra })
    : // Object.assign: a spread followed by more properties is slow on Node 20 (docs/performance.md).
      ok(Object.assign({}, result.tokens, { user: result.user }, extra));
