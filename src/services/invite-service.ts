import type { ServiceContext } from './context.js';
import type { PermissionCatalog } from './permission-catalog.js';

/** Spec 4.3 (filled in by the organizations work). */
export class InviteService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
  ) {}
}
