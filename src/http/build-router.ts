import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { Logger } from '../adapters/types.js';
import type { RateLimitGroup } from '../config/types.js';
import { errors, IdentityError } from '../errors.js';
import type { IdentityServices } from '../services/identity-services.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { bearerValue, principalOf, requestMeta, setPrincipal, setTicket, ticketOf } from './request-state.js';
import type { RouteDefinition, RouteRequest } from './route.js';
import { validateInput } from './validate.js';

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
  const json = express.json({ limit: '100kb', strict: false });

  for (const route of routes) {
    if (route.unavailable) {
      router[route.method](route.path, whenReady, (_req, _res, next) => next(errors.notFound()));
      continue;
    }
    const chain: RequestHandler[] = [whenReady];
    // Per-IP groups count before anything else, so even malformed requests are budgeted (spec 8).
    if (route.rateLimit) chain.push(limiters[route.rateLimit]);
    chain.push(json);
    if (route.auth === 'bearer') {
      chain.push(authenticateBearer(services), limiters.authenticated);
      if (!route.allowedDuringEnrollment) chain.push(asyncStep((_req, res) => services.authentication.assertEnrollmentNotPending(principalOf(res))));
    } else if (route.auth === 'ticket') {
      chain.push(authenticateTicket(services));
    }
    if (route.permission !== undefined) {
      chain.push(asyncStep((req, res) => services.organizations.assertPermission(principalOf(res), String(req.params.orgId), route.permission!)));
    }
    if (route.stepUp) chain.push(asyncStep((_req, res) => services.authentication.assertRecentStrongAuthentication(principalOf(res))));
    chain.push(handle(route));
    router[route.method](route.path, ...chain);
  }

  router.use(errorHandler(logger));
  return router;
}

function readinessGate(readiness: Readiness): RequestHandler {
  // Requests that arrive during start-up wait for it instead of failing (CONTRACT 1).
  return (_req, _res, next) => {
    readiness.ensure().then(() => next(), (error: unknown) => next(errors.unavailable(error)));
  };
}

function authenticateBearer(services: IdentityServices): RequestHandler {
  return asyncStep(async (req, res) => {
    const token = bearerValue(req);
    if (!token) throw errors.unauthorized();
    setPrincipal(res, await services.authentication.authenticateBearer(token));
  });
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
    const run = async () => {
      const request: RouteRequest = {
        params: validateInput(route.params, req.params, { convert: true }),
        query: validateInput(route.query, req.query, { convert: true }),
        body: validateInput(route.body, bodyOf(req), { convert: false }),
        meta: requestMeta(req),
        get principal() {
          return principalOf(res);
        },
        get ticket() {
          return ticketOf(res);
        },
        get bearer() {
          return bearerValue(req);
        },
      };
      const response = await route.handler(request);
      for (const [name, value] of Object.entries(response.headers ?? {})) res.setHeader(name, value);
      if (response.location !== undefined) {
        res.status(response.status).location(response.location).end();
        return;
      }
      res.status(response.status).json(response.body);
    };
    run().catch(next);
  };
}

/** A missing body is an empty object; a JSON body that is not an object fails the schema. */
function bodyOf(req: Request): unknown {
  const body: unknown = req.body;
  if (body === undefined || body === null) return {};
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0 && !req.is('application/json')) return {};
  if (Array.isArray(body) || typeof body !== 'object') throw new IdentityError(422, 'validation_failed', 'Validation failed.', { errors: ['the request body must be a JSON object'] });
  return body;
}
