import type Joi from 'joi';
import { errors } from '../errors.js';
import { CONTROL_CHARACTER } from '../services/shared/identity-rules.js';

/*
 * CONTROL_CHARACTER: C0, DEL, C1, the bidi controls and the line separators, the one rule the
 * display name and a provider's claims use too. PostgreSQL refuses a NUL byte in text with an error, C1's U+009B is the 8-bit CSI of
 * terminal escapes and U+0085 a line break in what the router mails and logs, and no field of
 * the spec (names, e-mails, labels, slugs, ids, tokens, codes) has a use for a control
 * character, newlines included.
 */

/**
 * A key marked with this meta may hold control characters. Only a password being *checked*
 * is marked (login, current password): it is hashed, never stored as text, and an account
 * whose password was set before the rule must still be able to sign in. New passwords are
 * refused like any other field. Text a client sends unasked and the router never reads,
 * stores or shows is marked too: a provider's `error_description` at a callback, a browser's
 * WebAuthn `clientExtensionResults` (a device name of credProps). A nested key's mark counts.
 */
export const CONTROL_CHARACTERS_ALLOWED = { controlCharactersAllowed: true } as const;

interface CheckedKeys {
  /** The schema's own keys: anything else is stripped unread, so it is not checked. */
  known: Set<string>;
  /** Dotted paths of the keys marked CONTROL_CHARACTERS_ALLOWED, at any depth (`response.clientExtensionResults`). */
  exempt: Set<string>;
}

type DescribedKeys = Record<string, { metas?: Array<Record<string, unknown>>; keys?: DescribedKeys }>;

function exemptPaths(keys: DescribedKeys, prefix: string, into: Set<string>): Set<string> {
  for (const [name, key] of Object.entries(keys)) {
    const path = prefix ? `${prefix}.${name}` : name;
    if (key.metas?.some((meta) => meta.controlCharactersAllowed === true)) into.add(path);
    else if (key.keys) exemptPaths(key.keys, path, into);
  }
  return into;
}

const checkedKeysCache = new WeakMap<Joi.ObjectSchema, CheckedKeys>();

function checkedKeys(schema: Joi.ObjectSchema): CheckedKeys {
  let keys = checkedKeysCache.get(schema);
  if (!keys) {
    const described = (schema.describe() as { keys?: DescribedKeys }).keys ?? {};
    keys = { known: new Set(Object.keys(described)), exempt: exemptPaths(described, '', new Set()) };
    checkedKeysCache.set(schema, keys);
  }
  return keys;
}

/**
 * Every string under the schema's keys, nested keys included, walked without recursion (a
 * 100 kB body can nest arrays tens of thousands deep). Answers one message per offending field.
 */
function controlCharacterProblems(value: unknown, { known, exempt }: CheckedKeys): string[] {
  const problems = new Set<string>();
  const pending: Array<{ value: unknown; label: string; top: boolean }> = [{ value, label: '', top: true }];
  while (pending.length > 0 && problems.size < 20) {
    const { value: current, label, top } = pending.pop()!;
    if (typeof current === 'string') {
      if (CONTROL_CHARACTER.test(current)) problems.add(`"${label || 'value'}" must not contain control characters`);
    } else if (Array.isArray(current)) {
      current.forEach((item, index) => pending.push({ value: item, label: `${label}[${index}]`, top: false }));
    } else if (current !== null && typeof current === 'object') {
      for (const [key, inner] of Object.entries(current)) {
        const path = label ? `${label}.${key}` : key;
        if ((top && !known.has(key)) || exempt.has(path)) continue;
        if (CONTROL_CHARACTER.test(key)) {
          problems.add('field names must not contain control characters');
          continue;
        }
        pending.push({ value: inner, label: path, top: false });
      }
    }
  }
  return [...problems];
}

const VALIDATION_PREFERENCES = { abortEarly: false, stripUnknown: true, errors: { wrap: { label: '"' } } } as const;

/** The schema with its validation preferences applied once: joi merges options passed to validate() on every call. */
const preparedSchemas = new WeakMap<Joi.ObjectSchema, { convert: Joi.ObjectSchema; strict: Joi.ObjectSchema }>();

function prepared(schema: Joi.ObjectSchema, convert: boolean): Joi.ObjectSchema {
  let schemas = preparedSchemas.get(schema);
  if (!schemas) {
    schemas = { convert: schema.prefs({ ...VALIDATION_PREFERENCES, convert: true }), strict: schema.prefs({ ...VALIDATION_PREFERENCES, convert: false }) };
    preparedSchemas.set(schema, schemas);
  }
  return convert ? schemas.convert : schemas.strict;
}

/** Valid inputs remembered per schema (oldest out first): path parameters and query strings repeat from request to request. */
const rememberedInputs = new WeakMap<Joi.ObjectSchema, Map<string, unknown>>();
const REMEMBERED_INPUTS_PER_SCHEMA = 1000;

/**
 * Runs a joi schema and answers 422 `{errors: [...]}` with every problem.
 *
 * With `remember`, an input that validated before is answered from memory (frozen, since
 * every request that repeats it shares the object): for path parameters and the query strings
 * of authenticated routes, which carry no secret and repeat on every page of a list. Bodies,
 * and public routes' queries (a provider's callback code), are never remembered.
 */
export function validateInput<T>(schema: Joi.ObjectSchema | undefined, value: unknown, options: { convert: boolean; remember?: boolean }): T {
  if (!schema) return (value ?? {}) as T;
  if (!options.remember) return validateNow<T>(schema, value, options.convert);
  let remembered = rememberedInputs.get(schema);
  if (!remembered) {
    remembered = new Map();
    rememberedInputs.set(schema, remembered);
  }
  const key = JSON.stringify(value ?? {});
  const known = remembered.get(key);
  if (known !== undefined) return known as T;
  const validated = Object.freeze(validateNow<T>(schema, value, options.convert));
  if (remembered.size >= REMEMBERED_INPUTS_PER_SCHEMA) remembered.delete(remembered.keys().next().value!);
  remembered.set(key, validated);
  return validated;
}

function validateNow<T>(schema: Joi.ObjectSchema, value: unknown, convert: boolean): T {
  const controlProblems = controlCharacterProblems(value, checkedKeys(schema));
  const { error, value: validated } = prepared(schema, convert).validate(value ?? {});
  if (error || controlProblems.length > 0) {
    throw errors.validation([...new Set([...controlProblems, ...(error?.details.map((detail) => detail.message) ?? [])])]);
  }
  return validated as T;
}
