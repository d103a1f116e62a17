import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ajv2020Module, { type ValidateFunction } from 'ajv/dist/2020.js';
import ajvFormatsModule from 'ajv-formats';
import { parse } from 'yaml';

/**
 * docs/openapi.yaml as an oracle: every response a test receives through the harness is
 * checked against it, so the document cannot drift from what the router answers.
 */

export const OPENAPI_PATH = fileURLToPath(new URL('../../docs/openapi.yaml', import.meta.url));

export const HTTP_METHODS = ['get', 'post', 'patch', 'put', 'delete'] as const;

// The document is plain JSON-compatible data once parsed; its shape is checked by test/platform/openapi.test.ts.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

export interface DocumentedOperation {
  method: string;
  /** OpenAPI template, e.g. `/orgs/{orgId}/members/{userId}`. */
  path: string;
  operation: Json;
  /** Path-level and operation-level parameters, merged. */
  parameters: Json[];
}

interface PathMatcher {
  template: string;
  pattern: RegExp;
  literalSegments: number;
}

const SCHEMA_ID = 'https://identity-router.invalid/openapi.json';

// Both packages are CommonJS with an `exports.default`; under NodeNext a default import is `module.exports`.
const Ajv2020 = ajv2020Module.default;
const addFormats = ajvFormatsModule.default;
type Ajv = InstanceType<typeof Ajv2020>;

let loaded: { document: Json; ajv: Ajv; matchers: PathMatcher[] } | undefined;
const compiled = new Map<string, ValidateFunction>();

export function loadOpenApiDocument(): Json {
  return parse(readFileSync(OPENAPI_PATH, 'utf8'), { maxAliasCount: -1 });
}

function state(): NonNullable<typeof loaded> {
  if (loaded) return loaded;
  const document = loadOpenApiDocument();
  const ajv = new Ajv2020({ strict: true, strictTypes: false, strictRequired: false, allErrors: true });
  addFormats(ajv);
  // OpenAPI's own annotations on schema objects.
  ajv.addVocabulary(['discriminator', 'xml', 'externalDocs', 'example']);
  for (const keyword of collectExtensionKeywords(document)) ajv.addKeyword(keyword);
  ajv.addSchema({ $id: SCHEMA_ID, $defs: rewriteRefs(document.components?.schemas ?? {}) });
  const matchers = Object.keys(document.paths ?? {}).map((template) => {
    const segments = template.split('/').filter(Boolean);
    const source = segments.map((segment) => (/^\{[^}]+\}$/.test(segment) ? '[^/]+' : escapeRegExp(segment))).join('/');
    return { template, pattern: new RegExp(`^/${source}/?$`), literalSegments: segments.filter((segment) => !segment.startsWith('{')).length };
  });
  // A literal segment beats a parameter when two templates could match the same path.
  matchers.sort((a, b) => b.literalSegments - a.literalSegments);
  loaded = { document, ajv, matchers };
  return loaded;
}

/** Every operation of the document. */
export function documentedOperations(): DocumentedOperation[] {
  const { document } = state();
  const operations: DocumentedOperation[] = [];
  for (const [path, item] of Object.entries<Json>(document.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (!operation) continue;
      operations.push({ method, path, operation, parameters: [...(item.parameters ?? []), ...(operation.parameters ?? [])].map(resolveRef) });
    }
  }
  return operations;
}

/** The OpenAPI template a concrete path (mount prefix already stripped) belongs to. */
export function matchTemplate(concretePath: string): string | undefined {
  const path = concretePath.split('?')[0]!.split('#')[0]!;
  return state().matchers.find((matcher) => matcher.pattern.test(path))?.template;
}

/**
 * Checks one response against the document. Answers the problems found (empty when the
 * response matches). An undocumented path, method or status is itself a problem.
 */
export function validateResponse(method: string, concretePath: string, status: number, body: unknown, headers?: Headers): string[] {
  const { document } = state();
  const lowerMethod = method.toLowerCase();
  const label = `${method.toUpperCase()} ${concretePath} → ${status}`;
  const template = matchTemplate(concretePath);
  if (!template) return [`${label}: path is not documented in docs/openapi.yaml`];
  const operation = document.paths[template][lowerMethod];
  if (!operation) return [`${label}: ${method.toUpperCase()} ${template} is not documented`];
  const responses = operation.responses ?? {};
  const rawResponse = responses[String(status)] ?? responses[`${String(status)[0]}XX`] ?? responses.default;
  if (!rawResponse) return [`${label}: status ${status} is not documented for ${method.toUpperCase()} ${template} (documented: ${Object.keys(responses).join(', ')})`];
  const response = resolveRef(rawResponse);
  const problems: string[] = [];

  for (const [name, header] of Object.entries<Json>(response.headers ?? {})) {
    if (resolveRef(header).required && headers && !headers.has(name)) problems.push(`${label}: required header ${name} is missing`);
  }

  const schema = response.content?.['application/json']?.schema;
  if (!schema) {
    if (body !== undefined) problems.push(`${label}: the document declares no body, but one was returned`);
    return problems;
  }
  if (body === undefined) return [...problems, `${label}: the body is not JSON (the document declares a JSON body)`];
  const validate = compile(`${lowerMethod} ${template} ${status}`, schema);
  if (!validate(body)) {
    for (const error of validate.errors ?? []) {
      problems.push(`${label}: body${error.instancePath || ''} ${error.message ?? 'is invalid'}${error.params && Object.keys(error.params).length ? ` ${JSON.stringify(error.params)}` : ''}`);
    }
    problems.push(`${label}: body was ${truncate(JSON.stringify(body))}`);
  }
  return problems;
}

/** Every violation seen by {@link recordResponse} in this process, for a final look. */
export const openApiViolations: string[] = [];

/** Whether the harness fails a request whose response does not match the document. */
export function openApiValidationEnabled(): boolean {
  return process.env.IDENTITY_OPENAPI_VALIDATION !== 'off';
}

/** Validates a response the harness received and records its violations. */
export function recordResponse(method: string, concretePath: string, status: number, body: unknown, headers?: Headers): string[] {
  const problems = validateResponse(method, concretePath, status, body, headers);
  openApiViolations.push(...problems);
  return problems;
}

function compile(key: string, schema: Json): ValidateFunction {
  const cached = compiled.get(key);
  if (cached) return cached;
  const validate = state().ajv.compile(rewriteRefs(schema));
  compiled.set(key, validate);
  return validate;
}

/** `#/components/schemas/X` → the registered `$defs` document, so Ajv resolves them. */
function rewriteRefs(value: Json): Json {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([key, inner]) => {
        if (key === '$ref' && typeof inner === 'string' && inner.startsWith('#/components/schemas/')) {
          return [key, `${SCHEMA_ID}#/$defs/${inner.slice('#/components/schemas/'.length)}`];
        }
        return [key, rewriteRefs(inner)];
      }),
    );
  }
  return value;
}

/** Resolves a local `$ref` (responses, parameters, headers, request bodies). */
export function resolveRef(value: Json): Json {
  let current = value;
  for (let depth = 0; current && typeof current === 'object' && typeof current.$ref === 'string'; depth += 1) {
    if (depth > 10) throw new Error(`$ref loop at ${current.$ref}`);
    const ref: string = current.$ref;
    if (!ref.startsWith('#/')) throw new Error(`only local $refs are supported: ${ref}`);
    current = ref
      .slice(2)
      .split('/')
      .reduce<Json>((node, part) => node?.[part.replaceAll('~1', '/').replaceAll('~0', '~')], state().document);
    if (current === undefined) throw new Error(`unresolved $ref ${ref}`);
  }
  return current;
}

function collectExtensionKeywords(value: Json, found = new Set<string>()): Set<string> {
  if (Array.isArray(value)) value.forEach((inner) => collectExtensionKeywords(inner, found));
  else if (value && typeof value === 'object') {
    for (const [key, inner] of Object.entries(value)) {
      if (key.startsWith('x-')) found.add(key);
      collectExtensionKeywords(inner, found);
    }
  }
  return found;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function truncate(text: string | undefined, max = 600): string {
  if (text === undefined) return 'undefined';
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
