import { isIP } from 'node:net';
import type { Response } from 'express';
import type { AccessGrant, ApiKeyPrincipal } from '../services/access/access-policy.js';
import type { RequestMeta } from '../services/shared/service-context.js';
import type { MfaTicket } from '../services/mfa/mfa-ticket.js';
import type { Principal } from '../services/access/principal.js';
import type { Request } from 'express';
import { errors } from '../errors.js';
import { withoutControlCharacters } from '../services/shared/identity-rules.js';
import type { RouteDefinition } from './route.js';

/*
 * What the middleware chain learns about a request lives on res.locals under one key,
 * so the router never augments Express's global types in the host's program.
 */
const STATE = Symbol.for('identity-router.request-state');

interface RequestState {
  principal?: Principal;
  ticket?: MfaTicket;
  /** Set instead of `principal` when the host middleware accepted an API key (docs/api-keys.md). */
  apiKeyPrincipal?: ApiKeyPrincipal;
  /** What the access policy admitted on a bearer route. */
  grant?: AccessGrant;
  /** The router's route that answers the request. */
  route?: RouteDefinition;
}

function stateOf(res: Response): RequestState {
  const locals = res.locals as Record<symbol, RequestState | undefined>;
  locals[STATE] ??= {};
  return locals[STATE]!;
}

export function setPrincipal(res: Response, principal: Principal): void {
  stateOf(res).principal = principal;
}

export function principalOf(res: Response): Principal {
  const principal = stateOf(res).principal;
  if (!principal) throw new Error('principalOf called before authentication');
  return principal;
}

export function setGrant(res: Response, grant: AccessGrant): void {
  stateOf(res).grant = grant;
}

export function grantOf(res: Response): AccessGrant {
  const grant = stateOf(res).grant;
  if (!grant) throw new Error('grantOf called before admission');
  return grant;
}

export function setRoute(res: Response, route: RouteDefinition): void {
  stateOf(res).route = route;
}

/** The router's route that answers the request; undefined outside the router (host middleware). */
export function routeOf(res: Response): RouteDefinition | undefined {
  return stateOf(res).route;
}

export function setApiKeyPrincipal(res: Response, principal: ApiKeyPrincipal): void {
  stateOf(res).apiKeyPrincipal = principal;
}

/** The API-key actor of a host-middleware request, if a key authenticated it (docs/api-keys.md). */
export function findApiKeyPrincipal(res: Response): ApiKeyPrincipal | undefined {
  return stateOf(res).apiKeyPrincipal;
}

export function setTicket(res: Response, ticket: MfaTicket): void {
  stateOf(res).ticket = ticket;
}

export function ticketOf(res: Response): MfaTicket {
  const ticket = stateOf(res).ticket;
  if (!ticket) throw new Error('ticketOf called before ticket authentication');
  return ticket;
}

export function requestMeta(req: Request): RequestMeta {
  return { ip: clientAddress(req), userAgent: userAgentOf(req) };
}

/**
 * The `User-Agent` as sessions keep and list it (`GET /auth/sessions`): at most 512 characters,
 * without control characters. Node passes a header's tab and bytes 0x80-0xFF (read as C1
 * controls U+0080-U+009F, the 8-bit CSI and NEL among them) through, so a thief's sign-in could
 * put terminal escapes in the owner's session list; they are dropped, as from a provider's name.
 */
function userAgentOf(req: Request): string | null {
  const userAgent = withoutControlCharacters(req.get('user-agent') ?? '');
  return userAgent ? userAgent.slice(0, 512) : null;
}

/** The `ip` columns (sessions, audit events, MFA tickets) hold 64 characters. */
const MAX_ADDRESS_LENGTH = 64;

/**
 * The client's address as Express reports it, when it is one. Under the host's `trust proxy`,
 * `req.ip` is taken from `X-Forwarded-For` as sent, which a client can fill with any text
 * (`unknown`, a 100-character string): that is no address, and on PostgreSQL a value longer
 * than the column failed the login with a 500. Such a value is recorded as unknown (null).
 */
function clientAddress(req: Request): string | null {
  const address = req.ip ?? req.socket.remoteAddress;
  return address !== undefined && address.length <= MAX_ADDRESS_LENGTH && isIP(address) !== 0 ? address : null;
}

/**
 * A signal that aborts when the client closes its connection before the answer is written.
 * Built on first use only: most routes never ask.
 */
export function abandonmentOf(res: Response): AbortSignal {
  const controller = new AbortController();
  const abandon = () => controller.abort(errors.requestAbandoned());
  if (res.destroyed || res.socket?.destroyed) abandon();
  else {
    res.once('close', () => {
      if (!res.writableFinished) abandon();
    });
  }
  return controller.signal;
}
