import type { IdentityServices } from '../../services/identity-services.js';
import type { RouteDefinition } from '../route.js';

/** Spec 4.4. */
export function userRoutes(_services: IdentityServices): RouteDefinition[] {
  return [];
}
