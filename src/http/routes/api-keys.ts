import Joi from 'joi';
import type { IdentityServices } from '../../services/build-services.js';
import { API_KEY_MAX_TTL_SECONDS, API_KEY_NAME_MAX_LENGTH } from '../../services/api-keys/api-key-service.js';
import { created, ok, type RouteDefinition } from '../route.js';
import { idSchema, typedText } from '../schemas.js';

const orgParams = Joi.object({ orgId: idSchema.required() });
const keyParams = Joi.object({ orgId: idSchema.required(), keyId: idSchema.required() });

/**
 * docs/api-keys.md: API keys of the token's active organization, for its active members (the
 * policy's `member` requirement). Whose keys a member may list and revoke (their own, every
 * member's with members.update) depends on the key, so the service decides that.
 */
export function apiKeyRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'post',
      path: '/orgs/:orgId/api-keys',
      auth: 'bearer',
      member: true,
      // The credential gate (docs/api-keys.md): a key outlives sessions, so a stale token must not mint one.
      addsCredential: 'sign_in_method',
      params: orgParams,
      body: Joi.object({
        name: typedText(API_KEY_NAME_MAX_LENGTH).min(1).required(),
        permission_keys: Joi.array().items(Joi.string().min(1).max(200)).max(500).required(),
        expires_in: Joi.number().integer().min(60).max(API_KEY_MAX_TTL_SECONDS),
      }),
      handler: async ({ body, meta, grant }) =>
        created(await services.apiKeys.create(grant, { name: body.name, permissionKeys: body.permission_keys, expiresIn: body.expires_in }, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/api-keys',
      auth: 'bearer',
      member: true,
      params: orgParams,
      handler: async ({ grant }) => ok({ keys: await services.apiKeys.list(grant) }),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/api-keys/:keyId',
      auth: 'bearer',
      member: true,
      params: keyParams,
      handler: async ({ params, meta, grant }) => {
        await services.apiKeys.revoke(grant, params.keyId, meta);
        return ok({ status: 'revoked' });
      },
    },
  ];
}
