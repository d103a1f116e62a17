import Joi from 'joi';
import type { IdentityServices } from '../../services/build-services.js';
import { OUTBOUND_URL_MAX_LENGTH } from '../../outbound/outbound-guard.js';
import { created, ok, type RouteDefinition } from '../route.js';
import { idSchema, paginationQuery } from '../schemas.js';

const orgParams = Joi.object({ orgId: idSchema.required() });
const webhookParams = Joi.object({ orgId: idSchema.required(), webhookId: idSchema.required() });
const deliveryParams = Joi.object({ orgId: idSchema.required(), webhookId: idSchema.required(), deliveryId: idSchema.required() });
// The guard gives the precise reason for a bad URL (422 invalid_webhook_url); here only its type and bound.
const urlSchema = Joi.string().min(1).max(OUTBOUND_URL_MAX_LENGTH + 1);
const eventsSchema = Joi.array().items(Joi.string().min(1).max(64)).min(1).max(100);

/**
 * docs/webhooks.md: an organization's webhooks, for holders of webhooks.manage in the token's
 * active organization. Without `webhooks.enabled` every route answers 404.
 */
export function webhookRoutes(services: IdentityServices): RouteDefinition[] {
  const webhooks = services.webhooks;
  const routes: RouteDefinition[] = [
    {
      method: 'post',
      path: '/orgs/:orgId/webhooks',
      auth: 'bearer',
      permission: 'webhooks.manage',
      stepUp: true,
      params: orgParams,
      body: Joi.object({ url: urlSchema.required(), events: eventsSchema.required() }),
      handler: async ({ body, meta, grant }) => created(await webhooks.create(grant, { url: body.url, events: body.events }, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/webhooks',
      auth: 'bearer',
      permission: 'webhooks.manage',
      params: orgParams,
      handler: async ({ params }) => ok({ webhooks: await webhooks.list(params.orgId) }),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/webhooks/:webhookId',
      auth: 'bearer',
      permission: 'webhooks.manage',
      params: webhookParams,
      handler: async ({ params }) => ok(await webhooks.get(params.orgId, params.webhookId)),
    },
    {
      method: 'patch',
      path: '/orgs/:orgId/webhooks/:webhookId',
      auth: 'bearer',
      permission: 'webhooks.manage',
      stepUp: true,
      params: webhookParams,
      body: Joi.object({ url: urlSchema, events: eventsSchema, status: Joi.valid('active', 'disabled') }).min(1),
      handler: async ({ params, body, meta, grant }) => ok(await webhooks.update(grant, params.webhookId, { url: body.url, events: body.events, status: body.status }, meta)),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/webhooks/:webhookId',
      auth: 'bearer',
      permission: 'webhooks.manage',
      stepUp: true,
      params: webhookParams,
      handler: async ({ params, meta, grant }) => {
        await webhooks.delete(grant, params.webhookId, meta);
        return ok({ status: 'deleted' });
      },
    },
    {
      method: 'post',
      path: '/orgs/:orgId/webhooks/:webhookId/rotate-secret',
      auth: 'bearer',
      permission: 'webhooks.manage',
      stepUp: true,
      params: webhookParams,
      body: Joi.object({}),
      handler: async ({ params, meta, grant }) => ok(await webhooks.rotateSecret(grant, params.webhookId, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/webhooks/:webhookId/deliveries',
      auth: 'bearer',
      permission: 'webhooks.manage',
      params: webhookParams,
      query: Joi.object({ ...paginationQuery, status: Joi.valid('pending', 'delivered', 'dead') }),
      handler: async ({ params, query }) => ok(await webhooks.deliveries(params.orgId, params.webhookId, { status: query.status, limit: query.limit, cursor: query.cursor })),
    },
    {
      method: 'post',
      path: '/orgs/:orgId/webhooks/:webhookId/deliveries/:deliveryId/replay',
      auth: 'bearer',
      permission: 'webhooks.manage',
      params: deliveryParams,
      handler: async ({ params, meta, grant }) => ({ status: 202, body: { data: await webhooks.replay(grant, params.webhookId, params.deliveryId, meta) } }),
    },
    {
      method: 'post',
      path: '/orgs/:orgId/webhooks/:webhookId/test',
      auth: 'bearer',
      permission: 'webhooks.manage',
      params: webhookParams,
      handler: async ({ params, meta, grant }) => ({ status: 202, body: { data: await webhooks.sendTest(grant, params.webhookId, meta) } }),
    },
  ];
  const unavailable = !services.context.config.webhooks.enabled;
  return routes.map((route) => (unavailable ? { ...route, unavailable } : route));
}
