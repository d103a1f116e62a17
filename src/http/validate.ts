import type Joi from 'joi';
import { errors } from '../errors.js';

/** Runs a joi schema and answers 422 `{errors: [...]}` with every problem. */
export function validateInput<T>(schema: Joi.ObjectSchema | undefined, value: unknown, options: { convert: boolean }): T {
  if (!schema) return (value ?? {}) as T;
  const { error, value: validated } = schema.validate(value ?? {}, {
    abortEarly: false,
    convert: options.convert,
    stripUnknown: true,
    errors: { wrap: { label: '"' } },
  });
  if (error) throw errors.validation([...new Set(error.details.map((detail) => detail.message))]);
  return validated as T;
}
