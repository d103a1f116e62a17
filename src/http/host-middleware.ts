import express, { type Request, type RequestHandler } from 'express';
import type { Logger } from '../adapters/types.js';
import { errors } from '../errors.js';
import type { IdentityServices } from '../services/identity-services.js';
import { asyncStep } from './build-router.js';
import { presentedCredential } from './credentials.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { findApiKeyCaller, findPrincipal, setApiKeyCaller, setPrincipal } from './request-state.js';

/** What the host middleware needs from the router. */
export interface HostMiddlewareParts {
  services: IdentityServices;
  readiness: Readiness;
  logger: Logger;
  /** The router's own `authenticated` limiter, so a key has one budget wherever it is used. */
  authenticatedLimiter: RequestHandler;
}

export interface HostMiddlewareOptions {
  /** Also accept API keys (CONTRACT 10), from `Authorization: Bearer irk_…` or `X-API-Key`. Default false. */
  apiKeys?: boolean;
}

/** Who called a host route, as `identity.caller(req)` answers it. */
export type IdentityCaller =
  | { kind: 'session'; user_id: string; session_id: string; organization_id: string | null }
  | { kind: 'api_key'; user_id: string; organization_id: string; api_key_id: string; permissions: string[] };

/** `identity.authenticate()`: any live access token (or, with `apiKeys`, a working key). */
export function authenticateMiddleware(parts: HostMiddlewareParts, options: HostMiddlewareOptions = {}): RequestHandler {
  return hostChain(parts, options, undefined);
}

/**
 * `identity.requirePermission('invoices.read')` for the host's own routes: the permission in
 * the caller's organization, resolved from the database on this request. For a token that
 * is the active organization; for a key, the key's own organization and the key's share of
 * its owner's live authority.
 */
export function requirePermissionMiddleware(parts: HostMiddlewareParts, permission: string, options: HostMiddlewareOptions = {}): RequestHandler {
  if (!parts.services.catalog.has(permission)) {
    throw new TypeError(`requirePermission: "${permission}" is not in the permission catalog; add it to config.permissions`);
  }
  return hostChain(parts, options, permission);
}

function hostChain({ services, readiness, logger, authenticatedLimiter }: HostMiddlewareParts, options: HostMiddlewareOptions, permission: string | undefined): RequestHandler {
  const chain = express.Router();
  chain.use(
    asyncStep(async (req, res) => {
      await readiness.ensure().catch((error: unknown) => {
        throw errors.unavailable(error);
      });
      const credential = presentedCredential(req);
      if (credential.kind === 'none') throw errors.unauthorized();
      if (credential.kind === 'api_key') {
        if (!options.apiKeys) throw errors.unauthorized('This route does not accept API keys.');
        setApiKeyCaller(res, await services.apiKeys.authenticate(credential.key));
        return;
      }
      const principal = await services.authentication.authenticateBearer(credential.token);
      if (permission !== undefined) {
        if (!principal.organizationId) throw errors.forbidden('Select an organization first (POST /auth/switch-org).');
        await services.organizations.assertPermission(principal, principal.organizationId, permission);
      }
      setPrincipal(res, principal);
    }),
  );
  // Each key has its own budget in the `authenticated` group (CONTRACT 10), counted before
  // the permission check so a key probing for permissions spends it too.
  chain.use((req, res, next) => (findApiKeyCaller(res) ? authenticatedLimiter(req, res, next) : next()));
  if (permission !== undefined) {
    chain.use((_req, res, next) => {
      const apiKey = findApiKeyCaller(res);
      next(apiKey && !apiKey.permissions.has(permission) ? errors.forbidden() : undefined);
    });
  }
  chain.use(errorHandler(logger));
  return chain;
}

/** The caller the host middleware authenticated, for the host's handler. */
export function callerOf(req: Request): IdentityCaller {
  const res = req.res;
  const apiKey = res ? findApiKeyCaller(res) : undefined;
  if (apiKey) {
    return { kind: 'api_key', user_id: apiKey.userId, organization_id: apiKey.organizationId, api_key_id: apiKey.apiKeyId, permissions: [...apiKey.permissions].sort() };
  }
  const principal = res ? findPrincipal(res) : undefined;
  if (principal) return { kind: 'session', user_id: principal.userId, session_id: principal.sessionId, organization_id: principal.organizationId };
  throw new TypeError('identity.caller(req) was called on a request that identity.authenticate() or identity.requirePermission() did not authenticate');
}
