import Joi from 'joi';

/**
 * A duration in whole seconds, at least one and at most a hundred years: an expiry is written as
 * epoch milliseconds and answered as an ISO date, which past year 275760 is none (an invitation
 * made under a larger `tokens.inviteTtl` answered 500).
 */
export const seconds = Joi.number().integer().min(1).max(100 * 365 * 86_400).messages({ 'number.max': '{{#label}} must be at most {{#limit}} seconds (a hundred years)' });

/**
 * A lifetime that protects a credential or bounds an attack, with a ceiling well under 1000 times
 * its default: a value written in milliseconds (3600000 for an hour) would otherwise be read as
 * weeks of validity (or of lockout).
 */
export const secondsAtMost = (limit: number, min = 1) =>
  Joi.number().integer().min(min).max(limit).messages({ 'number.max': '{{#label}} must be at most {{#limit}} seconds (durations are in seconds, not milliseconds)' });
