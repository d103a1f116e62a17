import type { ServiceContext } from './context.js';
import type { PermissionCatalog } from './permission-catalog.js';

/** User administration and the account lifecycle (spec 4.4; filled in by the users work). */
export class UserAdminService {
  constructor(
    protected readonly context: ServiceContext,
    protected readonly catalog: PermissionCatalog,
  ) {}
}
