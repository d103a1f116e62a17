import Joi from 'joi';
import { errors } from '../../errors.js';
import type { IdentityServices } from '../../services/build-services.js';
import type { PasswordlessService } from '../../services/passwordless/passwordless-service.js';
import { loginAnswer, type RouteDefinition } from '../route.js';
import { emailSchema, opaqueTokenSchema } from '../schemas.js';

const verifyBody = Joi.object({
  challenge_id: Joi.string().guid({ version: ['uuidv4'] }),
  code: Joi.string().max(32),
  token: opaqueTokenSchema,
})
  // Exactly one of {challenge_id, code} and {token} (docs/passwordless.md).
  .xor('challenge_id', 'token')
  .and('challenge_id', 'code')
  .without('token', ['challenge_id', 'code']);

/**
 * docs/passwordless.md: passwordless sign-in by e-mail. Without `passwordless` both routes answer 404.
 * There is no GET: the mailed link opens the host's page, which POSTs the token, so a mail
 * scanner's prefetch spends nothing (docs/passwordless.md).
 */
export function passwordlessRoutes(services: IdentityServices): RouteDefinition[] {
  const unavailable = services.passwordless === undefined;
  const passwordless = (): PasswordlessService => {
    if (!services.passwordless) throw errors.notFound();
    return services.passwordless;
  };
  return [
    {
      method: 'post',
      path: '/auth/passwordless/start',
      auth: 'public',
      rateLimit: 'login',
      unavailable,
      noGet: true,
      body: Joi.object({ email: emailSchema.required() }),
      handler: async ({ body, meta }) => ({ status: 202, body: { data: await passwordless().start(body.email, meta) } }),
    },
    {
      method: 'post',
      path: '/auth/passwordless/verify',
      auth: 'public',
      rateLimit: 'login',
      unavailable,
      noGet: true,
      body: verifyBody,
      handler: async ({ body, meta }) => {
        const proof = body.token !== undefined ? { token: body.token as string } : { challengeId: body.challenge_id as string, code: body.code as string };
        const signedIn = await passwordless().verify(proof, meta);
        // An answer with tokens adds is_new_user; the MFA gate's answer stays that of POST /auth/login.
        return loginAnswer(signedIn.login, signedIn.login.kind === 'session' ? { is_new_user: signedIn.isNewUser } : {});
      },
    },
  ];
}
