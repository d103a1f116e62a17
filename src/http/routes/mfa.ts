import Joi from 'joi';
import { errors } from '../../errors.js';
import type { IdentityServices } from '../../services/build-services.js';
import { loginAnswer, ok, type RouteDefinition } from '../route.js';
import { emailSchema, idSchema, typedText } from '../schemas.js';
import { CONTROL_CHARACTERS_ALLOWED } from '../validate.js';

/** A factor's or passkey's label: null or an empty string clears it. */
const factorLabelSchema = typedText(100).allow(null, '');

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
  // The browser's unsigned extension outputs, which the router never stores (a credProps device name may be in any script): validate.ts.
  clientExtensionResults: Joi.object().unknown(true).default({}).meta(CONTROL_CHARACTERS_ALLOWED),
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

/** docs/mfa.md: passkeys. Without `webauthn` config every one of these answers 404. */
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
      // The credential gate (docs/mfa.md): a verified e-mail and a fresh authentication.
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
      body: Joi.object({ response: attestationResponseSchema.required(), label: factorLabelSchema }),
      handler: async ({ body, principal, meta }) => ok(await passkeys.verifyRegistration(principal, { response: body.response, label: body.label }, meta)),
    },
    {
      method: 'post',
      path: '/auth/passkeys/login/options',
      auth: 'public',
      rateLimit: 'login',
      // `email` is accepted for older clients and ignored (docs/mfa.md).
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

/** Codes are checked strictly by the service; the schema only bounds what reaches it. */
const codeSchema = Joi.string().min(1).max(64);
/** E.164: a plus, a non-zero country digit, 7 to 15 digits in all. */
const phoneSchema = Joi.string().pattern(/^\+[1-9][0-9]{6,14}$/).messages({ 'string.pattern.base': '{{#label}} must be an E.164 phone number such as +15551234567' });
const confirmBody = Joi.object({ factor_id: idSchema.required(), code: codeSchema.required() });
const factorParams = Joi.object({ factorId: idSchema.required() });

/** docs/mfa.md: multi-factor authentication. */
export function mfaRoutes(services: IdentityServices): RouteDefinition[] {
  const mfa = services.mfa;
  return [
    // ------------------------------------------------------------ enrollment
    {
      method: 'post',
      path: '/auth/mfa/totp/enroll',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_enroll',
      allowedDuringEnrollment: true,
      body: Joi.object({}),
      query: Joi.object({ format: Joi.string().valid('svg', 'png').default('svg') }),
      handler: async ({ query, principal, meta }) => ok(await mfa.enrollTotp(principal, query.format, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/totp/confirm',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_confirm',
      allowedDuringEnrollment: true,
      body: confirmBody,
      handler: async ({ body, principal, meta }) => ok(await mfa.confirmFactor(principal, 'totp', body.factor_id, body.code, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/sms/enroll',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_send',
      allowedDuringEnrollment: true,
      body: Joi.object({ phone_e164: phoneSchema.required() }),
      handler: async ({ body, principal, meta }) => ok(await mfa.enrollCodeFactor(principal, 'sms', body.phone_e164, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/sms/confirm',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_confirm',
      allowedDuringEnrollment: true,
      body: confirmBody,
      handler: async ({ body, principal, meta }) => ok(await mfa.confirmFactor(principal, 'sms', body.factor_id, body.code, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/email/enroll',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_send',
      allowedDuringEnrollment: true,
      body: Joi.object({ email: emailSchema }),
      handler: async ({ body, principal, meta }) => ok(await mfa.enrollCodeFactor(principal, 'email', body.email, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/email/confirm',
      auth: 'bearer',
      // The credential gate: a verified e-mail, and step-up once a factor is confirmed (docs/mfa.md).
      addsCredential: 'second_factor',
      rateLimit: 'mfa_confirm',
      allowedDuringEnrollment: true,
      body: confirmBody,
      handler: async ({ body, principal, meta }) => ok(await mfa.confirmFactor(principal, 'email', body.factor_id, body.code, meta)),
    },

    // ------------------------------------------------------------ login gate (MFA ticket)
    {
      method: 'post',
      path: '/auth/mfa/challenge',
      auth: 'ticket',
      rateLimit: 'mfa_send',
      body: Joi.object({ factor_id: idSchema.required() }),
      handler: async ({ body, ticket, meta }) => ok(await mfa.sendLoginCode(ticket, body.factor_id, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/verify',
      auth: 'ticket',
      rateLimit: 'mfa_confirm',
      // A code, or for a passkey factor the assertion (docs/mfa.md).
      body: Joi.object({ code: codeSchema, response: assertionResponseSchema, factor_id: idSchema, type: Joi.string().valid('totp', 'sms', 'email', 'webauthn', 'recovery') }).xor('code', 'response').with('response', 'factor_id'),
      handler: async ({ body, ticket, meta }) => ok(await mfa.verifyLogin(ticket, { code: body.code, response: body.response, factorId: body.factor_id, type: body.type }, meta)),
    },

    // ------------------------------------------------------------ step-up
    {
      method: 'post',
      path: '/auth/mfa/step-up/challenge',
      auth: 'bearer',
      rateLimit: 'mfa_send',
      body: Joi.object({ factor_id: idSchema.required() }),
      handler: async ({ body, principal, meta }) => ok(await mfa.sendStepUpCode(principal, body.factor_id, meta)),
    },
    {
      method: 'post',
      path: '/auth/mfa/step-up',
      auth: 'bearer',
      rateLimit: 'mfa_confirm',
      body: Joi.object({ code: codeSchema, response: assertionResponseSchema, factor_id: idSchema }).xor('code', 'response').with('response', 'factor_id'),
      handler: async ({ body, principal, meta }) => ok(await mfa.stepUp(principal, { code: body.code, response: body.response, factorId: body.factor_id }, meta)),
    },

    // ------------------------------------------------------------ management
    {
      method: 'post',
      path: '/auth/mfa/recovery-codes/regenerate',
      auth: 'bearer',
      stepUp: true,
      body: Joi.object({}),
      handler: async ({ principal, meta }) => ok({ recovery_codes: await mfa.regenerateRecoveryCodes(principal, meta) }),
    },
    {
      method: 'get',
      path: '/auth/mfa/factors',
      auth: 'bearer',
      rateLimit: 'mfa_enroll',
      allowedDuringEnrollment: true,
      handler: async ({ principal, meta }) => ok({ factors: await mfa.listFactors(principal, meta) }),
    },
    {
      method: 'patch',
      path: '/auth/mfa/factors/:factorId',
      auth: 'bearer',
      rateLimit: 'mfa_enroll',
      params: factorParams,
      body: Joi.object({ label: factorLabelSchema, default: Joi.boolean() }).or('label', 'default'),
      handler: async ({ params, body, principal, meta }) => ok(await mfa.updateFactor(principal, params.factorId, { label: body.label, default: body.default }, meta)),
    },
    {
      method: 'delete',
      path: '/auth/mfa/factors/:factorId',
      auth: 'bearer',
      rateLimit: 'mfa_enroll',
      stepUp: true,
      params: factorParams,
      handler: async ({ params, principal, meta }) => {
        await mfa.removeFactor(principal, params.factorId, meta);
        return ok({ status: 'removed' });
      },
    },
  ];
}
