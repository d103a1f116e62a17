import Joi from 'joi';
import { errors } from '../../errors.js';
import type { IdentityServices } from '../../services/build-services.js';
import type { SocialService } from '../../services/social/social-service.js';
import { loginAnswer, ok, redirect, type RouteDefinition } from '../route.js';
import { idSchema, providerCallbackQuery } from '../schemas.js';

/** Callback and authorize redirects carry one-time values: no caching, no Referer (docs/social-login.md). */
const REDIRECT_HEADERS = { 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' };

const providerParams = Joi.object({ provider: Joi.string().max(64).required() });
const handoffFields = {
  return_to: Joi.string().max(2048),
  handoff_challenge: Joi.string().min(43).max(128).pattern(/^[A-Za-z0-9_-]+$/, 'base64url').required(),
  handoff_challenge_method: Joi.valid('S256').required(),
};

/** docs/social-login.md: social login through OpenID Connect providers. Without `social` every route answers 404. */
export function socialRoutes(services: IdentityServices): RouteDefinition[] {
  const unavailable = services.social === undefined;
  // docs/sso.md: with `sso` alone the exchange is served too.
  const exchangeUnavailable = unavailable && services.sso === undefined;
  const social = (): SocialService => {
    if (!services.social) throw errors.notFound();
    return services.social;
  };
  const routes: RouteDefinition[] = [
    {
      method: 'get',
      path: '/auth/social/providers',
      auth: 'public',
      handler: async () => ok(social().listProviders()),
    },
    {
      method: 'post',
      path: '/auth/social/:provider/authorize',
      auth: 'public',
      rateLimit: 'social',
      params: providerParams,
      body: Joi.object(handoffFields),
      handler: async ({ params, body, meta }) =>
        ok(await social().startLogin(params.provider, { returnTo: body.return_to, handoffChallenge: body.handoff_challenge }, meta)),
    },
    {
      method: 'get',
      path: '/auth/social/:provider/authorize',
      auth: 'public',
      rateLimit: 'social',
      params: providerParams,
      query: Joi.object(handoffFields),
      handler: async ({ params, query, meta }) => {
        const started = await social().startLogin(params.provider, { returnTo: query.return_to, handoffChallenge: query.handoff_challenge }, meta);
        return redirect(302, started.authorization_url, REDIRECT_HEADERS);
      },
    },
    {
      method: 'get',
      path: '/auth/social/:provider/callback',
      auth: 'public',
      rateLimit: 'social',
      params: providerParams,
      query: providerCallbackQuery,
      handler: async ({ params, query }) => {
        const location = await social().callback(params.provider, { code: query.code, state: query.state || undefined, iss: query.iss, error: query.error });
        return redirect(303, location, REDIRECT_HEADERS);
      },
    },
    {
      method: 'post',
      path: '/auth/social/exchange',
      auth: 'public',
      rateLimit: 'social',
      body: Joi.object({ code: Joi.string().min(1).max(512).required(), handoff_verifier: Joi.string().min(43).max(128).required() }),
      handler: async ({ body, bearer, meta }) => {
        const result = await services.exchange({ code: body.code, handoffVerifier: body.handoff_verifier, bearer }, meta);
        if (result.purpose === 'link') return ok({ identity: result.identity });
        return loginAnswer(result.login, { is_new_user: result.isNewUser, ...(result.organizationId ? { organization_id: result.organizationId } : {}) });
      },
    },
    {
      method: 'post',
      path: '/auth/social/:provider/link',
      auth: 'bearer',
      // The credential gate (docs/social-login.md): checked at link start, never at the callback.
      addsCredential: 'sign_in_method',
      params: providerParams,
      body: Joi.object(handoffFields),
      handler: async ({ params, body, principal, meta }) =>
        ok(await social().startLink(principal, params.provider, { returnTo: body.return_to, handoffChallenge: body.handoff_challenge }, meta)),
    },
    {
      method: 'get',
      path: '/auth/social/identities',
      auth: 'bearer',
      handler: async ({ principal }) => ok({ identities: await social().listIdentities(principal) }),
    },
    {
      method: 'delete',
      path: '/auth/social/identities/:identityId',
      auth: 'bearer',
      stepUp: true,
      params: Joi.object({ identityId: idSchema.required() }),
      handler: async ({ params, principal, meta }) => {
        await social().unlink(principal, params.identityId, meta);
        return ok({ status: 'unlinked' });
      },
    },
  ];
  return routes.map((route) => {
    const off = route.path === '/auth/social/exchange' ? exchangeUnavailable : unavailable;
    return off ? { ...route, unavailable: off } : route;
  });
}
