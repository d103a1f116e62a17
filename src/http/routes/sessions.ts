import Joi from 'joi';
import type { IdentityServices } from '../../services/build-services.js';
import { loginAnswer, ok, type RouteDefinition } from '../route.js';
import { emailSchema, idSchema, opaqueTokenSchema, paginationQuery, storedPasswordSchema } from '../schemas.js';

/** docs/security.md: sessions (login, refresh, logout, switch-org) and the signing keys. */
export function sessionRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'get',
      path: '/auth/.well-known/jwks.json',
      auth: 'public',
      handler: async () => ({ status: 200, body: await services.keyRing.jwks(), headers: { 'Cache-Control': 'public, max-age=300' } }),
    },
    {
      method: 'post',
      path: '/auth/login',
      auth: 'public',
      rateLimit: 'login',
      body: Joi.object({ email: emailSchema.required(), password: storedPasswordSchema.required() }),
      handler: async ({ body, meta, abandoned }) => {
        return loginAnswer(await services.accounts.login({ email: body.email, password: body.password }, meta, abandoned));
      },
    },
    {
      method: 'post',
      path: '/auth/token/refresh',
      auth: 'public',
      rateLimit: 'token_refresh',
      body: Joi.object({ refresh_token: opaqueTokenSchema.required() }),
      handler: async ({ body, meta }) => ok(await services.sessions.refresh(body.refresh_token, meta)),
    },
    {
      method: 'post',
      path: '/auth/logout',
      auth: 'bearer',
      allowedDuringEnrollment: true,
      body: Joi.object({}),
      handler: async ({ principal, meta }) => {
        await services.sessions.logout(principal, meta);
        return ok({ status: 'logged_out' });
      },
    },
    {
      method: 'post',
      path: '/auth/logout-all',
      auth: 'bearer',
      body: Joi.object({}),
      handler: async ({ principal, meta }) => {
        await services.sessions.logoutAll(principal, meta);
        return ok({ status: 'logged_out_all' });
      },
    },
    {
      method: 'post',
      path: '/auth/switch-org',
      auth: 'bearer',
      answersSessionEnded: true,
      entersOrganization: true,
      body: Joi.object({ organization_id: idSchema.required() }),
      handler: async ({ grant, meta }) => ok(await services.sessions.switchOrganization(grant, meta)),
    },
    {
      method: 'get',
      path: '/auth/sessions',
      auth: 'bearer',
      query: Joi.object(paginationQuery),
      handler: async ({ query, principal }) => {
        const page = await services.sessions.list(principal, { limit: query.limit, cursor: query.cursor });
        return ok({ sessions: page.sessions }, page.nextCursor ? { 'X-Next-Cursor': page.nextCursor } : undefined);
      },
    },
    {
      method: 'delete',
      path: '/auth/sessions/:sessionId',
      auth: 'bearer',
      params: Joi.object({ sessionId: idSchema.required() }),
      handler: async ({ params, principal, meta }) => {
        await services.sessions.revokeOwned(principal, params.sessionId, meta);
        return ok({ status: 'revoked' });
      },
    },
  ];
}
