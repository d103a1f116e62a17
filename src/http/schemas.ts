import Joi from 'joi';
import { CONTROL_CHARACTERS_ALLOWED } from './validate.js';
import { CONTROL_CHARACTER } from '../services/shared/identity-rules.js';

/**
 * docs/database.md: RFC 5321 address, at most 320 octets. Bodies are validated without type
 * conversion, but an address is trimmed (convert on for this schema only), so ` A@x.io `
 * signs in like `a@x.io`.
 */
export const emailSchema = Joi.string()
  .prefs({ convert: true })
  .trim()
  .email({ tlds: { allow: false }, ignoreLength: true })
  .custom((value: string, helpers) => {
    if (Buffer.byteLength(value, 'utf8') > 320) return helpers.error('string.maxBytes');
    // RFC 5321 has no unquoted space in an address, and mail libraries split on any Unicode one:
    // nodemailer delivers `x\u00a0ada@example.com` to `ada@example.com`, so each spelling would be an
    // account, invite and send budget of its own for one mailbox (docs/security.md).
    return /\s/u.test(value) ? helpers.error('string.space') : value;
  })
  .messages({ 'string.maxBytes': '{{#label}} must be at most 320 octets', 'string.space': '{{#label}} must not contain a space' });

/** Bounded before any hashing so a megabyte "password" costs nothing; the policy gives the precise message. */
export const passwordSchema = Joi.string().min(1).max(1024);

/** A password being checked against the stored hash (login, current password) may hold control characters; see validate.ts. */
export const storedPasswordSchema = passwordSchema.meta(CONTROL_CHARACTERS_ALLOWED);

/**
 * The query of a federated callback (social login and SSO, CONTRACT 9.2): the provider's values
 * are opaque strings, bounded so a megabyte query costs nothing. `error_description` and
 * `error_uri` are the IdP's own text, never read, stored or shown: they may hold what
 * CONTROL_CHARACTER refuses (an Arabic or Hebrew IdP's U+200F, Entra ID's CR LF between lines),
 * and a callback answers a provider's `error` with its 303 (9.7), never a 422.
 */
const providerValue = Joi.string().max(4096).allow('');
export const providerCallbackQuery = Joi.object({
  code: providerValue,
  state: providerValue,
  iss: providerValue,
  error: providerValue,
  error_description: providerValue.meta(CONTROL_CHARACTERS_ALLOWED),
  error_uri: providerValue.meta(CONTROL_CHARACTERS_ALLOWED),
});

/** Opaque tokens we issued are 43 base64url characters; anything far longer is not one of ours. */
export const opaqueTokenSchema = Joi.string().min(1).max(512);

/** PostgreSQL refuses a NUL byte in text with an error; control characters have no place in names or ids anyway (the one rule, CONTROL_CHARACTER). */
const noControlCharacters = { 'string.pattern.invert.name': '{{#label}} must not contain control characters' };

export const idSchema = Joi.string().min(1).max(64).pattern(CONTROL_CHARACTER, { name: 'no control characters', invert: true }).messages(noControlCharacters);

/**
 * Only bounded here, for registration and PATCH /users/{id} alike: the display-name rule itself
 * (at most 120 characters, trimmed, no control characters) lives in
 * services/shared/identity-rules.ts, one rule for every route. Joi's `max` counts UTF-16 code
 * units, so a copy of the rule here refused names of 61 to 120 characters outside the Basic
 * Multilingual Plane (spec 2.4, 8).
 */
export const displayNameSchema = Joi.string().allow(null, '').max(1024);

/**
 * Text a person types (a name, a label, a description): trimmed, so ` Acme ` is `Acme` and not
 * a 422 (converted for these fields only; a body is otherwise checked as sent), and at most
 * `max` characters counted as characters, as the spec's "chars" and docs/openapi.yaml's
 * `maxLength` count them. Joi's `max` counts UTF-16 code units, so an emoji counted twice.
 */
export const typedText = (max: number) =>
  Joi.string()
    .prefs({ convert: true })
    .trim()
    .custom((value: string, helpers) => ([...value].length > max ? helpers.error('string.maxCharacters', { limit: max }) : value))
    .messages({ 'string.maxCharacters': '{{#label}} must be at most {{#limit}} characters long' });

export const paginationQuery = {
  limit: Joi.number().integer().min(1).max(100).default(50),
  cursor: Joi.string().max(512),
};
