import express, { type RequestHandler } from 'express';
import type { Logger } from '../adapters/types.js';
import { errors } from '../errors.js';
import type { IdentityServices } from '../services/identity-services.js';
import { asyncStep } from './build-router.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { bearerValue, setPrincipal } from './request-state.js';

/**
 * `identity.requirePermission('invoices.read')` for the host's own routes: authenticates
 * the bearer token and checks the permission in the token's active organization, resolved
 * from the database. Failures answer in the router's error shape.
 */
export function requirePermissionMiddleware(services: IdentityServices, readiness: Readiness, logger: Logger, permission: string): RequestHandler {
  if (!services.catalog.has(permission)) {
    throw new TypeError(`requirePermission: "${permission}" is not in the permission catalog; add it to config.permissions`);
  }
  const chain = express.Router();
  chain.use(
    asyncStep(async (req, res) => {
      await readiness.ensure().catch((error: unknown) => {
        throw errors.unavailable(error);
      });
      const token = bearerValue(req);
      if (!token) throw errors.unauthorized();
      const principal = await services.authentication.authenticateBearer(token);
      services.authentication.assertNotLocked(principal);
      if (!principal.organizationId) throw errors.forbidden('Select an organization first (POST /auth/switch-org).');
      await services.organizations.assertPermission(principal, principal.organizationId, permission);
      setPrincipal(res, principal);
    }),
  );
  chain.use(errorHandler(logger));
  return chain;
}
