import type { IdentityServices } from '../../services/build-services.js';
import type { RouteDefinition } from '../route.js';
import { accountRoutes, userRoutes } from './accounts.js';
import { apiKeyRoutes } from './api-keys.js';
import { mfaRoutes, passkeyRoutes } from './mfa.js';
import { organizationRoutes } from './orgs.js';
import { sessionRoutes } from './sessions.js';
import { passwordlessRoutes } from './passwordless.js';
import { socialRoutes } from './social.js';
import { ssoRoutes } from './sso.js';
import { webhookRoutes } from './webhooks.js';

/**
 * Every route, by domain: each file of this folder serves one folder of `src/services/`.
 * Express tries routes in this order, so the ones read most (sessions, `/auth/me`, the
 * organization routes) come before the rarely used user administration.
 */
export function allRoutes(services: IdentityServices): RouteDefinition[] {
  return [...accountRoutes(services), ...sessionRoutes(services), ...mfaRoutes(services), ...passkeyRoutes(services), ...passwordlessRoutes(services), ...organizationRoutes(services), ...userRoutes(services), ...apiKeyRoutes(services), ...webhookRoutes(services), ...socialRoutes(services), ...ssoRoutes(services)];
}
