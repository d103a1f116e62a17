import Joi from 'joi';
import type { IdentityServices } from '../../services/identity-services.js';
import { errors } from '../../errors.js';
import { loginAnswer, ok, type RouteDefinition } from '../route.js';
import { emailSchema, idSchema } from '../schemas.js';

const base64url = Joi.string().pattern(/^[A-Za-z0-9_-]+={0,2}$/, 'base64url');
const credentialId = base64url.max(1400);

/**
 * The JSON form of a WebAuthn credential as browsers serialise it (`PublicKeyCredential.toJSON()`).
 * Bounded here; the signature, origin, RP id and challenge are checked by the service.
 */
const credentialFields = {
  id: credentialId.required(),
  rawId: credentialId.required(),
  type: Joi.string().valid('public-key').required(),
  clientExtensionResults: Joi.object().unknown(true).default({}),
  authenticatorAttachment: Joi.string().max(32).allow(null),
};

export const assertionResponseSchema = Joi.object({
  ...credentialFields,
  response: Joi.object({
    clientDataJSON: base64url.max(4096).required(),
    authenticatorData: base64url.max(8192).required(),
    signature: base64url.max(2048).required(),
    userHandle: base64url.max(128).allow(null),
  })
    .unknown(true)
    .required(),
}).unknown(true);

const attestationResponseSchema = Joi.object({
  ...credentialFields,
  response: Joi.object({
    clientDataJSON: base64url.max(4096).required(),
    attestationObject: base64url.max(65536).required(),
    transports: Joi.array().items(Joi.string().max(32)).max(10),
  })
    .unknown(true)
    .required(),
}).unknown(true);

/** CONTRACT 8: passkeys. Without `webauthn` config every one of these answers 404. */
export function passkeyRoutes(services: IdentityServices): RouteDefinition[] {
  const passkeys = services.passkeys;
  if (!passkeys.enabled) {
    const paths = ['/auth/passkeys/register/options', '/auth/passkeys/register/verify', '/auth/passkeys/login/options', '/auth/passkeys/login/verify'];
    return paths.map((path) => ({
      method: 'post' as const,
      path,
      auth: 'public' as const,
      handler: () => Promise.reject(errors.notFound('Route')),
    }));
  }
  return [
    {
      method: 'post',
      path: '/auth/passkeys/register/options',
      auth: 'bearer',
      rateLimit: 'mfa_enroll',
      // The credential gate (CONTRACT 8): a verified e-mail and a fresh authentication.
      addsCredential: 'sign_in_method',
      allowedDuringEnrollment: true,
      body: Joi.object({}),
      handler: async ({ principal, meta }) => ok(await passkeys.registrationOptions(principal, meta)),
    },
    {
      method: 'post',
      path: '/auth/passkeys/register/verify',
      auth: 'bearer',
      rateLimit: 'mfa_confirm',
      // The credential gate again (and once more under the user's row lock).
      addsCredential: 'sign_in_method',
      allowedDuringEnrollment: true,
      body: Joi.object({ response: attestationResponseSchema.required(), label: Joi.string().trim().max(100).allow(null, '') }),
      handler: async ({ body, principal, meta }) => ok(await passkeys.verifyRegistration(principal, { response: body.response, label: body.label }, meta)),
    },
    {
      method: 'post',
      path: '/auth/passkeys/login/options',
      auth: 'public',
      rateLimit: 'login',
      // `email` is accepted for older clients and ignored (CONTRACT 8).
      body: Joi.object({ email: emailSchema }),
      handler: async ({ meta }) => ok(await passkeys.loginOptions(meta)),
    },
    {
      method: 'post',
      path: '/auth/passkeys/login/verify',
      auth: 'public',
      rateLimit: 'login',
      body: Joi.object({ challenge_id: idSchema.required(), response: assertionResponseSchema.required() }),
      handler: async ({ body, meta }) => {
        return loginAnswer(await passkeys.verifyLogin({ challengeId: body.challenge_id, response: body.response }, meta));
      },
    },
  ];
}
