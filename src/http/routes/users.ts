import Joi from 'joi';
import type { IdentityServices } from '../../services/identity-services.js';
import { ok, type RouteDefinition } from '../route.js';
import { idSchema } from '../schemas.js';

/** Only bounded here: the display-name rule itself lives in services/identity-rules.ts (one rule for every route). */
const profileDisplayNameSchema = Joi.string().allow(null, '').max(1024);

const userParams = Joi.object({ userId: idSchema.required() });

/** Spec 4.4. Permission checks live in the service: they must run before the target is looked up. */
export function userRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'get',
      path: '/users/:userId',
      auth: 'bearer',
      params: userParams,
      handler: async ({ params, principal }) => ok(await services.users.read(principal, params.userId)),
    },
    {
      method: 'patch',
      path: '/users/:userId',
      auth: 'bearer',
      params: userParams,
      body: Joi.object({ display_name: profileDisplayNameSchema, mfa_enforced: Joi.boolean() }).min(1),
      handler: async ({ params, body, principal, meta }) =>
        ok(await services.users.updateProfile(principal, params.userId, { displayName: body.display_name, mfaEnforced: body.mfa_enforced }, meta)),
    },
    {
      method: 'post',
      path: '/users/:userId/disable',
      auth: 'bearer',
      stepUp: true,
      params: userParams,
      body: Joi.object({}),
      handler: async ({ params, principal, meta }) => ok(await services.users.disable(principal, params.userId, meta)),
    },
    {
      method: 'post',
      path: '/users/:userId/enable',
      auth: 'bearer',
      params: userParams,
      body: Joi.object({}),
      handler: async ({ params, principal, meta }) => ok(await services.users.enable(principal, params.userId, meta)),
    },
    {
      method: 'delete',
      path: '/users/:userId',
      auth: 'bearer',
      stepUp: true,
      params: userParams,
      handler: async ({ params, principal, meta }) => {
        await services.users.deleteAccount(principal, params.userId, meta);
        return ok({ status: 'deleted' });
      },
    },
  ];
}
