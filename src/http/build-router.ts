import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { Logger } from '../adapters/types.js';
import type { RateLimitGroup } from '../config/types.js';
import { errors, IdentityError } from '../errors.js';
import type { IdentityServices } from '../services/build-services.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { bearerValue, presentedCredential } from './credentials.js';
import { abandonmentOf, grantOf, principalOf, requestMeta, setGrant, setPrincipal, setRoute, setTicket, ticketOf } from './request-state.js';
import type { Principal } from '../services/access/principal.js';
import type { AccessGrant } from '../services/access/access-policy.js';
import type { MfaTicket } from '../services/mfa/mfa-ticket.js';
import type { RequestMeta } from '../services/shared/service-context.js';
import type { RouteDefinition, RouteRequest } from './route.js';
import { countAgainst } from './rate-limits.js';
import { sendJson } from './send-json.js';
import { validateInput } from './validate.js';
import { RouteTable } from './route-table.js';

/** Express 4 does not forward rejected promises; every async step goes through this. */
export function asyncStep(step: (req: Request, res: Response) => Promise<void>): RequestHandler {
  return (req, res, next) => {
    step(req, res).then(() => next(), next);
  };
}

export interface RouterParts {
  services: IdentityServices;
  routes: RouteDefinition[];
  limiters: Record<RateLimitGroup, RequestHandler>;
  readiness: Readiness;
  logger: Logger;
}

export function buildRouter({ services, routes, limiters, readiness, logger }: RouterParts): Router {
  const router = express.Router();
  const whenReady = readinessGate(readiness);
  // Not strict: a JSON string or number is valid JSON and answers 422 from the schema, not 400 invalid_json.
  const json = express.json({ limit: BODY_LIMIT_BYTES, strict: false, type: JSON_MEDIA_TYPES });

  const chainOf = (route: RouteDefinition): RequestHandler[] => {
    if (route.unavailable) return [whenReady, (_req, _res, next) => next(errors.notFound())];
    const chain: RequestHandler[] = [whenReady];
    // Per-IP groups count before anything else, so even malformed requests are budgeted (docs/configuration.md).
    if (route.rateLimit) chain.push(limiters[route.rateLimit]);
    // Only routes that take a body read one; elsewhere a body (and its encoding) is ignored.
    if (route.body) chain.push(requireJsonBody, json);
    if (route.auth === 'bearer') {
      // Admission and the handler in one step: the grant goes straight on to the service.
      chain.push((req, res, next) => {
        admit(services, route, limiters.authenticated, req, res)
          .then(() => respond(route, req, res))
          .catch(next);
      });
      return chain;
    }
    if (route.auth === 'ticket') chain.push(authenticateTicket(services));
    chain.push(handle(route));
    return chain;
  };

  const table = new RouteTable<RoutedDefinition>(routes.map((route) => ({ method: route.method, path: route.path, definition: route, chain: chainOf(route) })));

  const answerError = errorHandler(logger);
  router.use(unmatched(table));
  router.use(answerError);

  /**
   * A request for one of the router's routes runs its chain directly; any other goes through
   * the Router's stack above (404, 405). Express's dispatch inside a mounted Router, whose
   * matching the table already does, cost every request about 7 µs (bench/mounted-dispatch.ts,
   * docs/performance.md). An error thrown while matching is answered, as it was in the stack.
   */
  const mounted = router as Router & { handle(req: Request, res: Response, done: NextFunction): void };
  const dispatch = mounted.handle.bind(router);
  mounted.handle = (req, res, done) => {
    // Answers carry tokens, TOTP secrets and recovery codes: no cache may keep them. The JWKS route overrides this.
    res.setHeader('Cache-Control', 'no-store');
    let matched: ReturnType<typeof table.match>;
    try {
      matched = table.match(req.method, req.path);
    } catch (undecodable) {
      answerError(undecodable, req, res, done);
      return;
    }
    if (!matched) return dispatch(req, res, done);
    req.params = matched.params;
    setRoute(res, matched.route.definition);
    // Every chain answers or fails; a failure is answered as the stack's error handler would.
    runChain(matched.route.chain, req, res, (error?: unknown) => (error === undefined || error === null ? done() : answerError(error, req, res, done)));
  };
  return router;
}

const JSON_MEDIA_TYPES = ['application/json', 'application/*+json'];

/** CONTRACT 1: the router's JSON bodies are limited to 100 kB. */
const BODY_LIMIT_BYTES = 100 * 1024;

/** A route in the table: its definition and the handlers it runs. */
interface RoutedDefinition {
  method: string;
  path: string;
  definition: RouteDefinition;
  chain: RequestHandler[];
}

/**
 * A route's handlers in turn, as Express runs a route's stack: `next()` goes on, `next(error)`
 * leaves for the error handler, a handler that throws or whose promise rejects does too, and
 * the end of the chain goes on to the router's next layer.
 */
function runChain(chain: RequestHandler[], req: Request, res: Response, done: NextFunction): void {
  let index = 0;
  const next = (error?: unknown): void => {
    if (error) {
      done(error);
      return;
    }
    const handler = chain[index++];
    if (!handler) {
      done();
      return;
    }
    try {
      const returned: unknown = handler(req, res, next);
      if (returned instanceof Promise) returned.catch((rejection: unknown) => next(rejection ?? new Error('Rejected promise')));
    } catch (thrown) {
      next(thrown);
    }
  };
  next();
}

/**
 * A body of another media type (curl's default form encoding, text) is refused rather than read as "no fields".
 *
 * A body whose declared length is over the limit is refused before any of it is read. The JSON
 * parser would refuse it too, but only once the client had sent all of it (it reads off the
 * whole request before answering): a client announcing gigabytes waited for no answer, holding
 * its connection, which is closed after this answer instead.
 */
const requireJsonBody: RequestHandler = (req, _res, next) => {
  const declaredLength = Number(req.headers['content-length'] ?? 0);
  const announcesBody = req.headers['transfer-encoding'] !== undefined || declaredLength > 0;
  if (announcesBody && !req.is(JSON_MEDIA_TYPES)) {
    next(new IdentityError(415, 'unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).'));
    return;
  }
  // Whatever its Content-Encoding: a compressed body over the limit inflates over it, and the
  // parser's refusal of one (too large, or bytes that do not decode) also waits for the whole
  // announced length first. A body the host's own parser has already read is left to the JSON
  // parser, which skips it.
  if (declaredLength > BODY_LIMIT_BYTES && req.body === undefined) {
    next(new IdentityError(413, 'payload_too_large', 'The request body is too large (limit 100 kB).', { headers: { Connection: 'close' } }));
    return;
  }
  next();
};

/**
 * Every answer under the router is JSON: a path no route has is 404 `not_found`, a known
 * path with another method is 405 `method_not_allowed` with `Allow`.
 */
function unmatched(table: RouteTable<RoutedDefinition>): RequestHandler {
  return (req, _res, next) => {
    // The same matching as the routes' own (route-table.ts), whatever the method.
    const matching = table.routesAt(req.path).map(({ definition }) => definition);
    const allowed = matching.map(({ method }) => method.toUpperCase());
    const scannerProof = (req.method === 'GET' || req.method === 'HEAD') && matching.some(({ noGet }) => noGet === true);
    if (allowed.length === 0 || scannerProof) {
      next(errors.notFound());
      return;
    }
    if (allowed.includes('GET')) allowed.push('HEAD');
    next(new IdentityError(405, 'method_not_allowed', `${req.method} is not allowed here.`, { headers: { Allow: [...new Set(allowed)].join(', ') } }));
  };
}

function readinessGate(readiness: Readiness): RequestHandler {
  // Requests that arrive during start-up wait for it instead of failing (docs/getting-started.md).
  return (_req, _res, next) => {
    if (readiness.ready) return next();
    readiness.ensure().then(() => next(), (error: unknown) => next(errors.unavailable(error)));
  };
}

/**
 * The route's declared requirement, through the policy's one sequence (the host middleware
 * uses the same): authentication, the caller's `authenticated` budget, then the requirement,
 * evaluated against the path's organization or user. The grant travels to the service.
 */
async function admit(services: IdentityServices, route: RouteDefinition, authenticatedLimiter: RequestHandler, req: Request, res: Response): Promise<void> {
  const credential = presentedCredential(req);
  if (credential.kind === 'none') throw errors.unauthorized();
  const target = {
    organizationId: req.params.orgId === undefined ? undefined : String(req.params.orgId),
    userId: req.params.userId === undefined ? undefined : String(req.params.userId),
    body: () => validateInput(route.body, bodyOf(req), { convert: false }),
  };
  try {
    const grant = await services.policy.admit(credential, route, target, async (actor) => {
      setPrincipal(res, actor as Principal);
      await countAgainst(authenticatedLimiter, req, res);
    });
    setGrant(res, grant);
  } catch (error) {
    if (route.answersSessionEnded && credential.kind === 'access_token' && error instanceof IdentityError && error.code === 'unauthorized' && (await services.sessions.isEndedSession(credential.token))) throw errors.sessionEnded();
    throw error;
  }
}

function authenticateTicket(services: IdentityServices): RequestHandler {
  return asyncStep(async (req, res) => {
    const token = bearerValue(req);
    if (!token) throw errors.unauthorized('An MFA ticket is required.');
    setTicket(res, await services.mfa.authenticateTicket(token));
  });
}

function handle(route: RouteDefinition): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    respond(route, req, res).catch(next);
  };
}

/** Validates the request, runs the route's handler and writes its answer. */
async function respond(route: RouteDefinition, req: Request, res: Response): Promise<void> {
  const response = await route.handler(new RouteCall(route, req, res));
  if (response.headers) for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value);
  if (response.location !== undefined) {
    res.status(response.status).location(response.location).end();
    return;
  }
  sendJson(res, response.status, response.body);
}

/**
 * What a handler sees of its request. A class with getters on its prototype rather than an
 * object literal with its own: one is made for every request, and most of what it offers
 * (the request's metadata, the abandonment signal, the raw query) is read by few routes.
 */
class RouteCall implements RouteRequest {
  readonly params: Record<string, string>;
  readonly body: Record<string, unknown>;
  private readonly validatedQuery: Record<string, unknown> | undefined;
  private metaValue: RequestMeta | undefined;
  private abandonedSignal: AbortSignal | undefined;

  constructor(
    route: RouteDefinition,
    private readonly req: Request,
    private readonly res: Response,
  ) {
    // In this order: a bad path parameter is reported before a bad query or body.
    this.params = validateInput(route.params, req.params, { convert: true, remember: true });
    // A public route's query is not remembered: a provider's callback carries its one-time code
    // and state there, and a sign-in's start a challenge of its own; neither repeats.
    this.validatedQuery = route.query ? validateInput(route.query, req.query, { convert: true, remember: route.auth !== 'public' }) : undefined;
    this.body = validateInput(route.body, bodyOf(req), { convert: false });
  }

  get query(): Record<string, unknown> {
    return this.validatedQuery ?? (this.req.query as Record<string, unknown>) ?? {};
  }

  get meta(): RequestMeta {
    this.metaValue ??= requestMeta(this.req);
    return this.metaValue;
  }

  get principal(): Principal {
    return principalOf(this.res);
  }

  get grant(): AccessGrant {
    return grantOf(this.res);
  }

  get ticket(): MfaTicket {
    return ticketOf(this.res);
  }

  get bearer(): string | undefined {
    return bearerValue(this.req);
  }

  get abandoned(): AbortSignal {
    this.abandonedSignal ??= abandonmentOf(this.res);
    return this.abandonedSignal;
  }
}

/** A missing body is an empty object; a JSON body that is not an object fails the schema. */
function bodyOf(req: Request): unknown {
  const body: unknown = req.body;
  if (body === undefined || body === null) return {};
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0 && !req.is('application/json')) return {};
  if (Array.isArray(body) || typeof body !== 'object') throw new IdentityError(422, 'validation_failed', 'Validation failed.', { errors: ['the request body must be a JSON object'] });
  return body;
}
