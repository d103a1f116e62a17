import Joi from 'joi';
import { errors } from '../../errors.js';
import type { IdentityServices } from '../../services/build-services.js';
import type { SsoService } from '../../services/sso/sso-service.js';
import { created, ok, redirect, type RouteDefinition } from '../route.js';
import { emailSchema, idSchema, providerCallbackQuery } from '../schemas.js';

/** Callback redirects carry one-time values: no caching, no Referer (docs/social-login.md). */
const REDIRECT_HEADERS = { 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' };
const orgParams = Joi.object({ orgId: idSchema.required() });
const domainParams = Joi.object({ orgId: idSchema.required(), domainId: idSchema.required() });
const scopeToken = Joi.string().pattern(/^[\x21\x23-\x5b\x5d-\x7e]+$/, 'a scope token').max(128);
const connectionFields = {
  issuer: Joi.string().min(1).max(2048),
  client_id: Joi.string().min(1).max(255),
  client_secret: Joi.string().min(1).max(1024),
  scopes: Joi.array().items(scopeToken).min(1).max(20),
  token_endpoint_auth_method: Joi.valid('client_secret_basic', 'client_secret_post'),
  enabled: Joi.boolean(),
  jit: Joi.boolean(),
  default_role: Joi.string().min(1).max(64),
  enforce: Joi.boolean(),
};

/**
 * docs/sso.md: an organization's verified domains and single sign-on connection (holders
 * of `sso.manage` in their active organization; changes need a fresh authentication), and the
 * identifier-first sign-in. Without `sso` every route answers 404.
 */
export function ssoRoutes(services: IdentityServices): RouteDefinition[] {
  const unavailable = services.sso === undefined;
  const sso = (): SsoService => {
    if (!services.sso) throw errors.notFound();
    return services.sso;
  };
  // "Fresh authentication" (docs/api-keys.md): step-up with a factor, else a recent sign-in; the
  // credential gate declares exactly that, with a verified e-mail (a connection signs people in).
  const fresh = { addsCredential: 'sign_in_connection' } as const;
  const routes: RouteDefinition[] = [
    {
      method: 'post',
      path: '/orgs/:orgId/domains',
      auth: 'bearer',
      permission: 'sso.manage',
      ...fresh,
      params: orgParams,
      body: Joi.object({ domain: Joi.string().min(1).max(300).required() }),
      handler: async ({ body, meta, grant }) => created(await sso().addDomain(grant, body.domain, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/domains',
      auth: 'bearer',
      permission: 'sso.manage',
      params: orgParams,
      handler: async ({ grant }) => ok({ domains: await sso().listDomains(grant) }),
    },
    {
      method: 'post',
      path: '/orgs/:orgId/domains/:domainId/verify',
      auth: 'bearer',
      permission: 'sso.manage',
      params: domainParams,
      handler: async ({ params, meta, grant }) => ok(await sso().verifyDomain(grant, params.domainId, meta)),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/domains/:domainId',
      auth: 'bearer',
      permission: 'sso.manage',
      ...fresh,
      params: domainParams,
      handler: async ({ params, meta, grant }) => {
        await sso().deleteDomain(grant, params.domainId, meta);
        return ok({ status: 'deleted' });
      },
    },
    {
      method: 'post',
      path: '/orgs/:orgId/sso',
      auth: 'bearer',
      permission: 'sso.manage',
      ...fresh,
      params: orgParams,
      body: Joi.object({ ...connectionFields, issuer: connectionFields.issuer.required(), client_id: connectionFields.client_id.required(), client_secret: connectionFields.client_secret.required() }),
      handler: async ({ body, meta, grant }) => created(await sso().createConnection(grant, body, meta)),
    },
    {
      method: 'get',
      path: '/orgs/:orgId/sso',
      auth: 'bearer',
      permission: 'sso.manage',
      params: orgParams,
      handler: async ({ grant }) => ok(await sso().getConnection(grant)),
    },
    {
      method: 'patch',
      path: '/orgs/:orgId/sso',
      auth: 'bearer',
      permission: 'sso.manage',
      ...fresh,
      params: orgParams,
      body: Joi.object(connectionFields).min(1),
      handler: async ({ body, meta, grant }) => ok(await sso().updateConnection(grant, body, meta)),
    },
    {
      method: 'delete',
      path: '/orgs/:orgId/sso',
      auth: 'bearer',
      permission: 'sso.manage',
      ...fresh,
      params: orgParams,
      handler: async ({ meta, grant }) => {
        await sso().deleteConnection(grant, meta);
        return ok({ status: 'deleted' });
      },
    },
    {
      method: 'post',
      path: '/auth/sso/authorize',
      auth: 'public',
      rateLimit: 'social',
      body: Joi.object({
        email: emailSchema,
        organization_slug: Joi.string().min(1).max(160),
        return_to: Joi.string().max(2048),
        handoff_challenge: Joi.string().min(43).max(128).pattern(/^[A-Za-z0-9_-]+$/, 'base64url').required(),
        handoff_challenge_method: Joi.valid('S256').required(),
      }).xor('email', 'organization_slug'),
      handler: async ({ body, meta }) =>
        ok(await sso().authorize({ email: body.email, organizationSlug: body.organization_slug, returnTo: body.return_to, handoffChallenge: body.handoff_challenge }, meta)),
    },
    {
      method: 'get',
      path: '/auth/sso/:connectionId/callback',
      auth: 'public',
      rateLimit: 'social',
      params: Joi.object({ connectionId: idSchema.required() }),
      query: providerCallbackQuery,
      handler: async ({ params, query, meta }) => {
        const location = await sso().callback(params.connectionId, { code: query.code, state: query.state || undefined, iss: query.iss, error: query.error }, meta);
        return redirect(303, location, REDIRECT_HEADERS);
      },
    },
  ];
  return routes.map((route) => (unavailable ? { ...route, unavailable } : route));
}
