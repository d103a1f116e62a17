import Joi from 'joi';
import type { IdentityServices } from '../../services/build-services.js';
import { accepted, ok, type RouteDefinition } from '../route.js';
import { displayNameSchema, emailSchema, idSchema, opaqueTokenSchema, passwordSchema, storedPasswordSchema } from '../schemas.js';

const userParams = Joi.object({ userId: idSchema.required() });

const GENERIC_REGISTER = 'If the address can be registered, a verification e-mail is on its way.';
const GENERIC_RESEND = 'If the address belongs to an unverified account, a new verification e-mail is on its way.';
const GENERIC_FORGOT = 'If the address belongs to an account, a password reset e-mail is on its way.';

/** docs/security.md (registration, e-mail proof, passwords, the profile) and 4.4 (users). */
export function accountRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'post',
      path: '/auth/register',
      auth: 'public',
      rateLimit: 'register',
      body: Joi.object({ email: emailSchema.required(), password: passwordSchema.required(), display_name: displayNameSchema }),
      handler: async ({ body, meta }) => {
        await services.accounts.register({ email: body.email, password: body.password, displayName: body.display_name ?? undefined }, meta);
        return accepted(GENERIC_REGISTER);
      },
    },
    {
      method: 'post',
      path: '/auth/email/verify',
      auth: 'public',
      rateLimit: 'token_consume',
      body: Joi.object({ token: opaqueTokenSchema.required() }),
      handler: async ({ body, meta }) => {
        await services.accounts.verifyEmail(body.token, meta);
        return { status: 200, body: { message: 'E-mail address verified.' } };
      },
    },
    {
      method: 'post',
      path: '/auth/email/verify/resend',
      auth: 'public',
      rateLimit: 'token_consume',
      body: Joi.object({ email: emailSchema.required() }),
      handler: async ({ body, meta }) => {
        await services.accounts.resendVerification(body.email, meta);
        return accepted(GENERIC_RESEND);
      },
    },
    {
      method: 'post',
      path: '/auth/password/forgot',
      auth: 'public',
      rateLimit: 'password_forgot',
      body: Joi.object({ email: emailSchema.required() }),
      handler: async ({ body, meta }) => {
        await services.accounts.forgotPassword(body.email, meta);
        return accepted(GENERIC_FORGOT);
      },
    },
    {
      method: 'post',
      path: '/auth/password/reset',
      auth: 'public',
      rateLimit: 'token_consume',
      body: Joi.object({ token: opaqueTokenSchema.required(), new_password: passwordSchema.required() }),
      handler: async ({ body, meta }) => {
        await services.accounts.resetPassword({ token: body.token, newPassword: body.new_password }, meta);
        return ok({ status: 'password_reset' });
      },
    },
    {
      method: 'post',
      path: '/auth/password/change',
      auth: 'bearer',
      stepUp: true,
      body: Joi.object({ current_password: storedPasswordSchema.required(), new_password: passwordSchema.required() }),
      handler: async ({ body, principal, meta }) => {
        await services.accounts.changePassword(principal, { currentPassword: body.current_password, newPassword: body.new_password }, meta);
        return ok({ status: 'password_changed' });
      },
    },
    {
      method: 'get',
      path: '/auth/me',
      auth: 'bearer',
      allowedDuringEnrollment: true,
      handler: async ({ principal }) => ok(await services.me.me(principal)),
    },
  ];
}

/**
 * User administration (docs/security.md): the caller themself or a holder of the permission, decided by the
 * policy before the target is looked up. Kept apart from `accountRoutes` so the router can
 * declare them after the organization routes, which are matched far more often.
 */
export function userRoutes(services: IdentityServices): RouteDefinition[] {
  return [
    {
      method: 'get',
      path: '/users/:userId',
      auth: 'bearer',
      user: { permission: 'users.read', self: true },
      params: userParams,
      handler: async ({ params }) => ok(await services.users.read(params.userId)),
    },
    {
      method: 'patch',
      path: '/users/:userId',
      auth: 'bearer',
      // The per-user MFA flag is an administrative control: holding it over yourself would let
      // a user switch off a policy an administrator set.
      user: { permission: 'users.manage', self: true, exceptFields: ['mfa_enforced'] },
      params: userParams,
      body: Joi.object({ display_name: displayNameSchema, mfa_enforced: Joi.boolean() }).min(1),
      handler: async ({ params, body, grant, meta }) =>
        ok(await services.users.updateProfile(grant, params.userId, { displayName: body.display_name, mfaEnforced: body.mfa_enforced }, meta)),
    },
    {
      method: 'post',
      path: '/users/:userId/disable',
      auth: 'bearer',
      stepUp: true,
      user: { permission: 'users.manage', self: false },
      params: userParams,
      body: Joi.object({}),
      handler: async ({ params, grant, meta }) => ok(await services.users.disable(grant, params.userId, meta)),
    },
    {
      method: 'post',
      path: '/users/:userId/enable',
      auth: 'bearer',
      user: { permission: 'users.manage', self: false },
      params: userParams,
      body: Joi.object({}),
      handler: async ({ params, grant, meta }) => ok(await services.users.enable(grant, params.userId, meta)),
    },
    {
      method: 'delete',
      path: '/users/:userId',
      auth: 'bearer',
      stepUp: true,
      user: { permission: 'users.manage', self: true },
      params: userParams,
      handler: async ({ params, grant, meta }) => {
        await services.users.deleteAccount(grant, params.userId, meta);
        return ok({ status: 'deleted' });
      },
    },
  ];
}
