import Joi from 'joi';
import type { IdentityServices } from '../../services/build-services.js';
import { created, ok, type RouteDefinition } from '../route.js';
import { emailSchema, idSchema, opaqueTokenSchema, paginationQuery, typedText } from '../schemas.js';

const nameSchema = typedText(160).min(1);
const slugSchema = Joi.string().max(160).pattern(/^[a-z0-9-]+$/).messages({ 'string.pattern.base': '{{#label}} may contain only a-z, 0-9 and -' });
const roleSlugsSchema = Joi.array().items(Joi.string().min(1).max(160)).max(50);
const permissionKeysSchema = Joi.array().items(Joi.string().min(1).max(200)).max(500);
const descriptionSchema = typedText(500).allow(null, '');

const orgParams = Joi.object({ orgId: idSchema.required() });
const memberParams = Joi.object({ orgId: idSchema.required(), userId: idSchema.required() });
const inviteParams = Joi.object({ orgId: idSchema.required(), inviteId: idSchema.required() });
const roleParams = Joi.object({ orgId: idSchema.required(), roleId: idSchema.required() });

const nextCursorHeader = (cursor: string | null) => (cursor ? { 'X-Next-Cursor': cursor } : undefined);

/** docs/organizations.md: organizations, members, invitations, roles, the permission catalog (+ the audit log of docs/organizations.md). */
export function organizationRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'get',
      path: '/permissions',
      auth: 'bearer',
      handler: async () => ok(services.organizations.permissions()),
    },

    // Organizations
    {
      method: 'post',
      path: '/orgs',
      auth: 'bearer',
      body: Joi.object({ name: nameSchema.required(), slug: slugSchema }),
      handler: async ({ body, principal, meta }) => created(await services.organizations.create(principal, { name: body.name, slug: body.slug }, meta)),
    },
    {
      method: 'get',
      path: '/orgs',
      auth: 'bearer',
      handler: async ({ principal }) => ok(await services.organizations.listForUser(principal)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId',
      auth: 'bearer',
      permission: 'org.read',
      params: orgParams,
      handler: async ({ params }) => ok(await services.organizations.get(params.orgId)),
    },
    {
      method: 'patch',
      path: '/orgs/:orgId',
      auth: 'bearer',
      permission: 'org.update',
      params: orgParams,
      body: Joi.object({ name: nameSchema, settings: Joi.object({ require_mfa: Joi.boolean() }) }).min(1),
      handler: async ({ body, meta, grant }) =>
        ok(await services.organizations.update(grant, { name: body.name, requireMfa: body.settings?.require_mfa }, meta)),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId',
      auth: 'bearer',
      permission: 'org.delete',
      stepUp: true,
      params: orgParams,
      handler: async ({ meta, grant }) => {
        await services.organizations.delete(grant, meta);
        return ok({ deleted: true });
      },
    },
    {
      method: 'get',
      path: '/orgs/:orgId/audit-log',
      auth: 'bearer',
      permission: 'audit.read',
      params: orgParams,
      query: Joi.object(paginationQuery),
      handler: async ({ params, query }) => ok(await services.organizations.auditLog(params.orgId, { limit: query.limit, cursor: query.cursor })),
    },

    // Members
    {
      method: 'get',
      path: '/orgs/:orgId/members',
      auth: 'bearer',
      permission: 'members.read',
      params: orgParams,
      query: Joi.object(paginationQuery),
      handler: async ({ query, grant }) => {
        const page = await services.members.list(grant, { limit: query.limit, cursor: query.cursor });
        return ok(page.members, nextCursorHeader(page.nextCursor));
      },
    },
    {
      method: 'patch',
      path: '/orgs/:orgId/members/:userId/roles',
      auth: 'bearer',
      permission: 'members.update',
      params: memberParams,
      body: Joi.object({ role_slugs: roleSlugsSchema.required() }),
      handler: async ({ params, body, meta, grant }) => ok(await services.members.changeRoles(grant, params.userId, body.role_slugs, meta)),
    },
    {
      method: 'patch',
      path: '/orgs/:orgId/members/:userId',
      auth: 'bearer',
      permission: 'members.update',
      params: memberParams,
      body: Joi.object({ status: Joi.string().valid('active', 'suspended').required() }),
      handler: async ({ params, body, meta, grant }) => ok(await services.members.changeStatus(grant, params.userId, body.status, meta)),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/members/:userId',
      auth: 'bearer',
      permission: 'members.remove',
      params: memberParams,
      handler: async ({ params, meta, grant }) => {
        await services.members.remove(grant, params.userId, meta);
        return ok({ status: 'removed' });
      },
    },

    // Invitations
    {
      method: 'post',
      path: '/orgs/:orgId/invites',
      auth: 'bearer',
      permission: 'members.invite',
      params: orgParams,
      body: Joi.object({ email: emailSchema.required(), role_slugs: roleSlugsSchema.required() }),
      handler: async ({ body, meta, grant }) =>
        created(await services.invites.create(grant, { email: body.email, roleSlugs: body.role_slugs }, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/invites',
      auth: 'bearer',
      permission: 'members.invite',
      params: orgParams,
      query: Joi.object(paginationQuery),
      handler: async ({ params, query }) => {
        const page = await services.invites.listPending(params.orgId, { limit: query.limit, cursor: query.cursor });
        return ok(page.invites, nextCursorHeader(page.nextCursor));
      },
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/invites/:inviteId',
      auth: 'bearer',
      permission: 'members.invite',
      params: inviteParams,
      handler: async ({ params, meta, grant }) => {
        await services.invites.revoke(grant, params.inviteId, meta);
        return ok({ status: 'revoked' });
      },
    },
    {
      method: 'post',
      path: '/auth/invites/accept',
      auth: 'bearer',
      rateLimit: 'token_consume',
      body: Joi.object({ token: opaqueTokenSchema.required() }),
      handler: async ({ body, principal, meta }) => ok(await services.invites.accept(principal, body.token, meta)),
    },

    // Roles
    {
      method: 'get',
      path: '/orgs/:orgId/roles',
      auth: 'bearer',
      permission: 'roles.read',
      params: orgParams,
      handler: async ({ params }) => ok(await services.roles.list(params.orgId)),
    },
    {
      method: 'post',
      path: '/orgs/:orgId/roles',
      auth: 'bearer',
      permission: 'roles.manage',
      params: orgParams,
      body: Joi.object({ name: nameSchema.required(), slug: slugSchema.required(), description: descriptionSchema, permission_keys: permissionKeysSchema.required() }),
      handler: async ({ body, meta, grant }) =>
        created(await services.roles.create(grant, { name: body.name, slug: body.slug, description: body.description || null, permissionKeys: body.permission_keys }, meta)),
    },
    {
      method: 'patch',
      path: '/orgs/:orgId/roles/:roleId',
      auth: 'bearer',
      permission: 'roles.manage',
      params: roleParams,
      // The slug is immutable: sending one is a validation failure.
      body: Joi.object({ name: nameSchema, description: descriptionSchema, permission_keys: permissionKeysSchema }).min(1),
      handler: async ({ params, body, meta, grant }) =>
        ok(
          await services.roles.update(
            grant,
            params.roleId,
            { name: body.name, description: body.description === undefined ? undefined : body.description || null, permissionKeys: body.permission_keys },
            meta,
          ),
        ),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/roles/:roleId',
      auth: 'bearer',
      permission: 'roles.manage',
      params: roleParams,
      handler: async ({ params, meta, grant }) => {
        await services.roles.delete(grant, params.roleId, meta);
        return ok({ status: 'deleted' });
      },
    },
  ];
}
