import type { IdentityServices } from '../../services/identity-services.js';
import type { RouteDefinition } from '../route.js';

/** Spec 4.2. */
export function mfaRoutes(_services: IdentityServices): RouteDefinition[] {
  return [];
}
