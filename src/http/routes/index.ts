import type { IdentityServices } from '../../services/identity-services.js';
import type { RouteDefinition } from '../route.js';
import { accountRoutes } from './account.js';
import { apiKeyRoutes } from './api-keys.js';
import { mfaRoutes } from './mfa.js';
import { organizationRoutes } from './orgs.js';
import { passkeyRoutes } from './passkeys.js';
import { socialRoutes } from './social.js';
import { userRoutes } from './users.js';
import { webhookRoutes } from './webhooks.js';

/** Every route of the spec, by section. */
export function allRoutes(services: IdentityServices): RouteDefinition[] {
  return [...accountRoutes(services), ...mfaRoutes(services), ...passkeyRoutes(services), ...organizationRoutes(services), ...userRoutes(services), ...apiKeyRoutes(services), ...webhookRoutes(services), ...socialRoutes(services)];
}
