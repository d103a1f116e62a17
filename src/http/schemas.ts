import Joi from 'joi';

/** Spec 2.4: RFC 5321 address, at most 320 octets. */
export const emailSchema = Joi.string()
  .trim()
  .email({ tlds: { allow: false }, ignoreLength: true })
  .custom((value: string, helpers) => (Buffer.byteLength(value, 'utf8') > 320 ? helpers.error('string.maxBytes') : value))
  .messages({ 'string.maxBytes': '{{#label}} must be at most 320 octets' });

/** Bounded before any hashing so a megabyte "password" costs nothing; the policy gives the precise message. */
export const passwordSchema = Joi.string().min(1).max(1024);

/** Opaque tokens we issued are 43 base64url characters; anything far longer is not one of ours. */
export const opaqueTokenSchema = Joi.string().min(1).max(512);

export const idSchema = Joi.string().min(1).max(64);

export const displayNameSchema = Joi.string().trim().max(120).allow(null, '');

export const paginationQuery = {
  limit: Joi.number().integer().min(1).max(100).default(50),
  cursor: Joi.string().max(512),
};
