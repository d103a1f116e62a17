import type { IdentityServices } from '../../services/identity-services.js';
import type { RouteDefinition } from '../route.js';

/** Spec 4.3. */
export function organizationRoutes(_services: IdentityServices): RouteDefinition[] {
  return [];
}
