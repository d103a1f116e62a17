import type { Response } from 'express';
import type { RequestMeta } from '../services/context.js';
import type { MfaTicket } from '../services/mfa-ticket.js';
import type { Principal } from '../services/principal.js';
import type { Request } from 'express';

/*
 * What the middleware chain learns about a request lives on res.locals under one key,
 * so the router never augments Express's global types in the host's program.
 */
const STATE = Symbol.for('identity-router.request-state');

interface RequestState {
  principal?: Principal;
  ticket?: MfaTicket;
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

export function setTicket(res: Response, ticket: MfaTicket): void {
  stateOf(res).ticket = ticket;
}

export function ticketOf(res: Response): MfaTicket {
  const ticket = stateOf(res).ticket;
  if (!ticket) throw new Error('ticketOf called before ticket authentication');
  return ticket;
}

export function requestMeta(req: Request): RequestMeta {
  const userAgent = req.get('user-agent');
  return { ip: req.ip ?? req.socket.remoteAddress ?? null, userAgent: userAgent ? userAgent.slice(0, 512) : null };
}

/**
 * The bearer value of `Authorization: Bearer <value>`, or undefined. Two `Authorization`
 * lines are ambiguous (Node keeps the first and drops the rest), so they answer undefined
 * and the request is refused (CONTRACT 6).
 */
export function bearerValue(req: Request): string | undefined {
  if (authorizationLineCount(req) > 1) return undefined;
  const header = req.get('authorization');
  if (!header) return undefined;
  const match = /^Bearer[ ]+([A-Za-z0-9\-._~+/]+=*)\s*$/i.exec(header);
  return match?.[1];
}

function authorizationLineCount(req: Request): number {
  let count = 0;
  for (let index = 0; index < req.rawHeaders.length; index += 2) {
    if (req.rawHeaders[index]!.toLowerCase() === 'authorization') count += 1;
  }
  return count;
}
