import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RouteDefinition } from '../../src/http/route.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { RouteTable } from '../../src/http/route-table.js';
import { Harness } from '../helpers/harness.js';
import { documentedOperations, loadOpenApiDocument, matchTemplate, resolveRef, validateResponse } from '../helpers/openapi.js';
import { servicesOf } from '../../src/create-identity-router.js';

// docs/openapi.yaml is the reference hosts generate clients from; these tests keep it and the
// router's route table identical, so a route cannot be added, removed or re-guarded silently.

/** Express `/orgs/:orgId/members/:userId` → OpenAPI `/orgs/{orgId}/members/{userId}`. */
const toTemplate = (expressPath: string) => expressPath.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
const operationKey = (method: string, path: string) => `${method.toUpperCase()} ${path}`;

interface JoiDescription {
  keys?: Record<string, { flags?: { presence?: string } }>;
}

function joiKeys(schema: RouteDefinition['body']): { all: string[]; required: string[] } {
  if (!schema) return { all: [], required: [] };
  const keys = (schema.describe() as JoiDescription).keys ?? {};
  return {
    all: Object.keys(keys).sort(),
    required: Object.entries(keys)
      .filter(([, key]) => key.flags?.presence === 'required')
      .map(([name]) => name)
      .sort(),
  };
}

let h: Harness;
let routes: RouteDefinition[];
const document = loadOpenApiDocument();
const operations = documentedOperations();

before(async () => {
  // With passkeys configured, so their real route definitions (not the 404 stand-ins) are compared.
  h = await Harness.start({ config: { webauthn: { rpId: 'localhost', origins: ['http://localhost:3000'] } } });
  routes = allRoutes(servicesOf(h.identity));
});
after(async () => {
  await h.close();
});

describe('the document', () => {
  test('parses as OpenAPI 3.1 with paths relative to {base_url}', () => {
    assert.equal(document.openapi, '3.1.0');
    assert.equal(document.servers?.[0]?.url, '{base_url}');
    assert.ok(document.components.securitySchemes.bearerAuth, 'bearer scheme');
    assert.ok(document.components.securitySchemes.mfaTicket, 'MFA ticket scheme');
    assert.equal(document.components.securitySchemes.mfaTicket.scheme, 'bearer', 'the MFA ticket is also a bearer value');
    for (const path of Object.keys(document.paths)) assert.ok(!path.startsWith('/identity'), `${path} carries no mount prefix`);
  });

  test('operation ids are unique and every $ref resolves', () => {
    const ids = operations.map(({ operation }) => operation.operationId);
    assert.equal(new Set(ids).size, ids.length, 'unique operationIds');
    const visit = (value: unknown, where: string): void => {
      if (Array.isArray(value)) value.forEach((inner, index) => visit(inner, `${where}[${index}]`));
      else if (value && typeof value === 'object') {
        const ref = (value as { $ref?: unknown }).$ref;
        if (typeof ref === 'string') assert.doesNotThrow(() => resolveRef(value), `${where}: ${ref}`);
        for (const [key, inner] of Object.entries(value)) visit(inner, `${where}.${key}`);
      }
    };
    visit(document, '$');
  });

  test('every response schema compiles, and every operation documents 500 and 503', () => {
    for (const { method, path, operation } of operations) {
      for (const status of ['500', '503']) assert.ok(operation.responses[status], `${operationKey(method, path)} documents ${status}`);
      const concrete = path.replace(/\{[^}]+\}/g, 'x');
      for (const status of Object.keys(operation.responses)) {
        // Compiling happens on first use; a broken schema throws here rather than in an area test.
        assert.doesNotThrow(() => validateResponse(method, concrete, Number(status), {}), `${operationKey(method, path)} ${status}`);
      }
    }
  });
});

describe('the document and the router agree', () => {
  test('every registered route is documented, and every documented operation is registered', () => {
    const registered = routes.map((route) => operationKey(route.method, toTemplate(route.path))).sort();
    const documented = operations.map(({ method, path }) => operationKey(method, path)).sort();
    assert.deepEqual(
      registered.filter((key) => !documented.includes(key)),
      [],
      'routes missing from docs/openapi.yaml',
    );
    assert.deepEqual(
      documented.filter((key) => !registered.includes(key)),
      [],
      'documented operations the router does not register',
    );
  });

  test('the router serves every route of the table at its own path, none hidden by one declared before it', () => {
    const table = new RouteTable(routes);
    for (const route of routes) {
      const concrete = route.path.replace(/:([A-Za-z0-9_]+)/g, (_match, name: string) => `${name}-value`);
      const found = table.match(route.method.toUpperCase(), concrete);
      assert.equal(found?.route, route, `${route.method.toUpperCase()} ${route.path}`);
      assert.deepEqual(Object.keys(found!.params).sort(), [...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((match) => match[1]).sort());
    }
    // The check itself fails for a route declared after one that takes its paths.
    const shadowed: RouteDefinition = { ...routes.find((route) => route.path === '/orgs/:orgId')!, path: '/orgs/literal' };
    const shadowedTable = new RouteTable([...routes, shadowed]);
    assert.notEqual(shadowedTable.match(shadowed.method.toUpperCase(), '/orgs/literal')?.route, shadowed);
  });

  test('authentication, rate-limit group, permission, step-up, credential-gate and enrollment flags match each route', () => {
    const problems: string[] = [];
    const expect = (condition: boolean, problem: string) => void (condition || problems.push(problem));
    for (const route of routes) {
      const template = toTemplate(route.path);
      const documented = operations.find(({ method, path }) => method === route.method && path === template);
      if (!documented) continue; // reported by the route-set test
      const key = operationKey(route.method, template);
      const { operation } = documented;
      const security = JSON.stringify(operation.security ?? document.security);
      const expectedSecurity = JSON.stringify(route.auth === 'public' ? [] : route.auth === 'ticket' ? [{ mfaTicket: [] }] : [{ bearerAuth: [] }]);
      expect(security === expectedSecurity, `${key}: security is ${security}, the route is ${route.auth}`);
      expect(operation['x-rate-limit-group'] === route.rateLimit, `${key}: x-rate-limit-group ${operation['x-rate-limit-group']}, route ${route.rateLimit}`);
      expect(operation['x-permission'] === (route.permission ?? undefined), `${key}: x-permission ${operation['x-permission']}, route ${route.permission}`);
      expect((operation['x-step-up'] === true) === (route.stepUp === true), `${key}: x-step-up ${operation['x-step-up']}, route ${route.stepUp}`);
      // The credential gate (docs/security.md and docs/mfa.md and docs/social-login.md and docs/api-keys.md): declared per route, documented per operation.
      expect(operation['x-adds-credential'] === route.addsCredential, `${key}: x-adds-credential ${operation['x-adds-credential']}, route ${route.addsCredential}`);
      expect(
        (operation['x-allowed-during-enrollment'] === true) === (route.allowedDuringEnrollment === true),
        `${key}: x-allowed-during-enrollment ${operation['x-allowed-during-enrollment']}, route ${route.allowedDuringEnrollment}`,
      );
      if (route.auth !== 'public') expect(Boolean(operation.responses['401']), `${key}: documents no 401`);
      if (route.stepUp) expect(/step_up_required/.test(resolveRef(operation.responses['401'] ?? {}).description ?? ''), `${key}: 401 does not mention step_up_required`);
      if (route.addsCredential) {
        const unauthorized = resolveRef(operation.responses['401'] ?? {}).description ?? '';
        expect(/step_up_required/.test(unauthorized), `${key}: 401 does not mention step_up_required`);
        if (route.addsCredential !== 'second_factor') expect(/reauthentication_required/.test(unauthorized), `${key}: 401 does not mention reauthentication_required`);
        const forbidden = resolveRef(operation.responses['403'] ?? {}).description ?? '';
        expect(/email_unverified/.test(forbidden), `${key}: 403 does not mention email_unverified`);
        if (route.addsCredential === 'sign_in_method') expect(/sso_required/.test(forbidden), `${key}: 403 does not mention sso_required`);
      }
      if (route.rateLimit || route.auth !== 'public') expect(Boolean(operation.responses['429']), `${key}: documents no 429`);
      if (route.auth === 'bearer' && !route.allowedDuringEnrollment) expect(Boolean(operation.responses['403']), `${key}: documents no 403 (mfa_enrollment_required)`);
      if (route.body || route.query || route.params) expect(Boolean(operation.responses['422']), `${key}: documents no 422`);
    }
    assert.deepEqual(problems, []);
  });

  test('path parameters are named as the router names them', () => {
    const problems: string[] = [];
    for (const { method, path, parameters } of operations) {
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((match) => match[1]).sort();
      const declared = parameters.filter((parameter) => parameter.in === 'path').map((parameter) => parameter.name).sort();
      if (JSON.stringify(declared) !== JSON.stringify(inPath)) problems.push(`${operationKey(method, path)}: declares ${declared.join(',')}`);
    }
    assert.deepEqual(problems, []);
  });

  test('request bodies and query parameters list exactly the fields each route accepts', () => {
    const problems: string[] = [];
    const same = (a: string[], b: string[]) => JSON.stringify(a) === JSON.stringify(b);
    for (const route of routes) {
      const template = toTemplate(route.path);
      const documented = operations.find(({ method, path }) => method === route.method && path === template);
      if (!documented) continue;
      const key = operationKey(route.method, template);
      const body = joiKeys(route.body);
      const requestBody = documented.operation.requestBody ? resolveRef(documented.operation.requestBody) : undefined;
      if (!route.body) {
        if (requestBody) problems.push(`${key}: documents a body the route does not accept`);
      } else {
        const schema = requestBody?.content?.['application/json']?.schema;
        if (!schema) {
          problems.push(`${key}: request body not documented (route accepts ${body.all.join(', ')})`);
        } else {
          const fields = Object.keys(schema.properties ?? {}).sort();
          const required = [...(schema.required ?? [])].sort();
          if (!same(fields, body.all)) problems.push(`${key}: documented body fields [${fields}], route [${body.all}]`);
          if (!same(required, body.required)) problems.push(`${key}: documented required fields [${required}], route [${body.required}]`);
        }
      }
      const query = joiKeys(route.query);
      const documentedQuery = documented.parameters.filter((parameter) => parameter.in === 'query');
      const names = documentedQuery.map((parameter) => parameter.name).sort();
      if (!same(names, query.all)) problems.push(`${key}: documented query [${names}], route [${query.all}]`);
      for (const parameter of documentedQuery) {
        if ((parameter.required === true) !== query.required.includes(parameter.name)) problems.push(`${key}: ?${parameter.name} required mismatch`);
      }
    }
    assert.deepEqual(problems, []);
  });
});

describe('the response validator', () => {
  // The harness relies on it to fail tests whose responses drift; it must be able to fail.
  test('accepts a documented response and rejects drifted ones', () => {
    const tokens = { access_token: 'a', token_type: 'Bearer', expires_in: 900, refresh_token: 'r' };
    assert.deepEqual(validateResponse('POST', '/auth/token/refresh', 200, { data: tokens }), []);
    assert.deepEqual(validateResponse('POST', '/auth/token/refresh?x=1', 200, { data: tokens }), [], 'the query string is ignored');
    assert.notDeepEqual(validateResponse('POST', '/auth/token/refresh', 200, { data: { ...tokens, token_type: 'bearer' } }), []);
    assert.notDeepEqual(validateResponse('POST', '/auth/token/refresh', 200, tokens), [], 'data envelope is required');
    assert.notDeepEqual(validateResponse('POST', '/auth/token/refresh', 418, { error: 'teapot' }), [], 'undocumented status');
    assert.notDeepEqual(validateResponse('GET', '/auth/token/refresh', 200, {}), [], 'undocumented method');
    assert.notDeepEqual(validateResponse('GET', '/nowhere', 200, {}), [], 'undocumented path');
    assert.notDeepEqual(validateResponse('POST', '/auth/login', 422, { error: 'x' }), [], 'a 422 is {errors} here');
    assert.notDeepEqual(validateResponse('POST', '/auth/login', 401, { error: 'not_a_code', message: 'm' }), [], 'error codes are a closed union');
  });

  test('checks headers the document requires', () => {
    const unauthorized = { error: 'unauthorized', message: 'no' };
    assert.notDeepEqual(validateResponse('GET', '/auth/me', 401, unauthorized, new Headers()), [], 'WWW-Authenticate is required on 401');
    assert.deepEqual(validateResponse('GET', '/auth/me', 401, unauthorized, new Headers({ 'WWW-Authenticate': 'Bearer' })), []);
  });

  test('matches concrete paths to templates, literal segments first', () => {
    assert.equal(matchTemplate('/orgs/abc/members/u1/roles'), '/orgs/{orgId}/members/{userId}/roles');
    assert.equal(matchTemplate('/orgs/abc/members/u1'), '/orgs/{orgId}/members/{userId}');
    assert.equal(matchTemplate('/auth/mfa/factors/f1'), '/auth/mfa/factors/{factorId}');
    assert.equal(matchTemplate('/users/u1/disable'), '/users/{userId}/disable');
    assert.equal(matchTemplate('/auth/sessions?limit=1'), '/auth/sessions');
  });

  test('the harness validates every response it receives', async () => {
    // A real response that matches goes through; the harness would have thrown otherwise.
    const jwks = await h.get('/auth/.well-known/jwks.json');
    assert.equal(jwks.status, 200);
    // An undocumented path makes the harness throw (unless validation is switched off).
    if (process.env.IDENTITY_OPENAPI_VALIDATION !== 'off') {
      await assert.rejects(h.get('/not-a-route'), /does not match docs\/openapi\.yaml/);
    }
  });
});
