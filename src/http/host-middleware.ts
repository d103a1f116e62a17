import express, { type Request, type RequestHandler } from 'express';
import type { Logger } from '../adapters/types.js';
import { errors } from '../errors.js';
import type { AccessRequirement, Caller } from '../services/access-policy.js';
import type { IdentityServices } from '../services/identity-services.js';
import { asyncStep } from './build-router.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { bearerValue, setPrincipal } from './request-state.js';

/*
 * The caller of a host route, keyed by the request object itself: nothing is added to
 * Express's global types in the host's program, and `identity.caller(req)` is typed.
 */
const callers = new WeakMap<Request, Caller>();

/** The caller set by `authenticate()` or `requirePermission()`, or undefined on a request they did not pass. */
export function callerOf(req: Request): Caller | undefined {
  return callers.get(req);
}

/**
 * Host middleware (CONTRACT 6). `identity.authenticate()` with no permission,
 * `identity.requirePermission(key)` with one: both evaluate the same access policy as the
 * router's own routes (grace enrollment, the active organization's `require_mfa`, a live
 * session of a user who may authenticate, the active-organization rule) and answer in the
 * router's error shapes.
 */
export function hostMiddleware(services: IdentityServices, readiness: Readiness, logger: Logger, permission?: string): RequestHandler {
  if (permission !== undefined && !services.catalog.has(permission)) {
    throw new TypeError(`requirePermission: "${permission}" is not in the permission catalog; add it to config.permissions`);
  }
  const requirement: AccessRequirement = permission === undefined ? { auth: 'bearer', actsInActiveOrganization: true } : { auth: 'bearer', permission };
  const chain = express.Router();
  chain.use(
    asyncStep(async (req, res) => {
      await readiness.ensure().catch((error: unknown) => {
        throw errors.unavailable(error);
      });
      const token = bearerValue(req);
      if (!token) throw errors.unauthorized();
      const principal = await services.policy.authenticate(token);
      services.policy.assertNotLocked(principal);
      const authority =
        (await services.policy.authorize(principal, requirement, principal.organizationId ?? undefined)) ?? (await services.policy.authorityOf(principal));
      setPrincipal(res, principal);
      callers.set(req, services.policy.caller(principal, authority));
    }),
  );
  chain.use(errorHandler(logger));
  return chain;
}
