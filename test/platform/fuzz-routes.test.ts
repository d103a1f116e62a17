import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { after, before, test } from 'node:test';
import { deflateSync, gzipSync } from 'node:zlib';
import type { RouteDefinition } from '../../src/http/route.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { type Harness, TEST_DB, type SignedUpUser } from '../helpers/harness.js';
import { loginForTicket, signUpWithTotp } from '../helpers/mfa.js';
import { PROVIDER_ID, RETURN_URL, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';
import { matchTemplate, validateResponse } from '../helpers/openapi.js';
import { servicesOf } from '../../src/create-identity-router.js';

// Issue 10: a seeded fuzzer over every route of the route table. Each route gets 40 hostile
// requests (half with a valid credential of the route's kind, half without) mixing hostile
// JSON values, broken encodings and media types, oversize and nested bodies, hostile path
// parameters and query strings, and prototype-pollution keys. Every answer must be < 500,
// JSON in the spec's shapes (and docs/openapi.yaml's), `no-store` outside the JWKS, and the
// process's Object.prototype must stay untouched. The seed is printed; set
// IDENTITY_FUZZ_SEED to replay a run.

const SEED = Number(process.env.IDENTITY_FUZZ_SEED ?? 10_2026);
const REQUESTS_PER_ROUTE = 40;

/** mulberry32: small, seeded, good enough to pick cases reproducibly. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HOSTILE_STRINGS = [
  '\u0000', 'a\u0000b', 'ok\u0000@example.com', 'x\u001fy', '\u007f', 'line\nbreak', 'tab\there', '\r\n\r\n',
  'x'.repeat(5000), '💥'.repeat(120), '\ud800', 'Ω≈ç√∫˜µ≤≥÷', "' OR 1=1 --", '"; drop table users; --', '<script>alert(1)</script>',
  '__proto__', 'constructor', '../../etc/passwd', '%00', '%FF', 'null', '', ' ', '0', '-1', '1e400', 'true', '+15550000000\u0000',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a log4j-style payload, sent as a plain string
  '${jndi:ldap://x}', '{{7*7}}', 'ada@example.com', randomUUID(),
];

const HOSTILE_VALUES: unknown[] = [
  ...HOSTILE_STRINGS,
  null, true, false, 0, -1, 1.5, 1e308, -1e308, [], ['\u0000'], [null], [[[]]], {}, { $ne: null }, { $gt: '' },
  { toString: 'x' }, { valueOf: 1 }, ['a', { b: '\u0000' }], Array.from({ length: 60 }, (_, i) => `s${i}`),
];

const PATH_VALUES = ['%00', 'a%00b', '%FF', '%E2%82', 'x'.repeat(300), '__proto__', 'constructor', '..', '%2e%2e', 'null', '-1', '1e400', '%0A', '%7F', '%F0%9F%92%A5', 'a%2Fb', '%09', '%20', "'%20OR%201=1"];

const QUERY_STRINGS = [
  '?limit=1e400', '?limit=-1', '?limit=%00', '?cursor=%00', '?limit=1&limit=2', '?cursor[]=x', `?cursor=${'x'.repeat(2000)}`,
  '?__proto__[polluted]=yes', '?constructor[prototype][polluted]=yes', '?__proto__=x', '?limit=0', '?limit=abc', '?format=%00', '?format=pdf', '?cursor=%FF',
];

const POLLUTION_BODIES = [
  '{"__proto__":{"polluted":"yes"}}',
  '{"constructor":{"prototype":{"polluted":"yes"}}}',
  '{"email":"a@b.io","__proto__":{"isAdmin":true,"polluted":"yes"}}',
  '{"settings":{"__proto__":{"polluted":"yes"}},"name":"x"}',
];

interface HostileRequest {
  description: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer | string;
}

type Credential = 'none' | 'bearer' | 'ticket';

let h: Harness;
/** Social login is configured (against a real loopback provider) so its eight routes are fuzzed too, not their 404. */
let op: TestOpenIdProvider;
let owner: SignedUpUser & { orgId: string };
let mfaUser: SignedUpUser;
let ticket = '';
let routes: RouteDefinition[];
const prototypeNames = Object.getOwnPropertyNames(Object.prototype).sort().join(',');

async function ownerWithOrganization(): Promise<SignedUpUser & { orgId: string }> {
  const user = await h.signUp();
  const org = await h.post('/orgs', { name: 'Fuzz Org' }, { token: user.accessToken });
  assert.equal(org.status, 201, org.text);
  const switched = await h.post('/auth/switch-org', { organization_id: org.body.data.id }, { token: user.accessToken });
  assert.equal(switched.status, 200, switched.text);
  return { ...user, accessToken: switched.body.data.access_token, orgId: org.body.data.id };
}

/** Re-establishes the credentials a previous request may have ended (logout, org delete, exhausted ticket). */
async function refreshCredentials(): Promise<void> {
  const me = await h.get('/auth/me', { token: owner.accessToken });
  const org = await h.get(`/orgs/${owner.orgId}`, { token: owner.accessToken });
  if (me.status !== 200 || org.status !== 200) {
    const login = await h.post('/auth/login', { email: owner.email, password: owner.password });
    if (login.status === 200 && org.status !== 404) {
      const switched = await h.post('/auth/switch-org', { organization_id: owner.orgId }, { token: login.body.data.access_token });
      if (switched.status === 200) owner = { ...owner, accessToken: switched.body.data.access_token };
      else owner = await ownerWithOrganization();
    } else owner = await ownerWithOrganization();
  }
  ticket = (await loginForTicket(h, mfaUser)).ticket;
}

before(async () => {
  // With passkeys and a social provider configured, so the fuzzer reaches their real route definitions, not the 404 stand-ins.
  op = await TestOpenIdProvider.start();
  h = await startSocialHarness(op, { config: { webauthn: { rpId: 'localhost', origins: ['http://localhost:3000'] } } });
  owner = await ownerWithOrganization();
  mfaUser = await signUpWithTotp(h);
  ticket = (await loginForTicket(h, mfaUser)).ticket;
  routes = allRoutes(servicesOf(h.identity));
});
after(async () => {
  await h.close();
  await op.close();
});

function bodyKeys(route: RouteDefinition): string[] {
  if (!route.body) return ['email', 'password', 'token'];
  return Object.keys((route.body.describe() as { keys?: Record<string, unknown> }).keys ?? {});
}

function pick<T>(random: () => number, values: readonly T[]): T {
  return values[Math.floor(random() * values.length)]!;
}

function concretePath(route: RouteDefinition, random: () => number, hostile: boolean): string {
  return route.path.replace(/:([A-Za-z]+)/g, (_match, name: string) => {
    if (hostile && random() < 0.5) return pick(random, PATH_VALUES);
    if (name === 'orgId') return owner.orgId;
    if (name === 'userId') return random() < 0.5 ? owner.userId : mfaUser.userId;
    if (name === 'provider') return random() < 0.8 ? PROVIDER_ID : randomUUID();
    return randomUUID();
  });
}

function hostileObject(route: RouteDefinition, random: () => number): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const key of bodyKeys(route)) if (random() < 0.8) body[key] = pick(random, HOSTILE_VALUES);
  if (random() < 0.2) body[pick(random, ['a\u0000b', 'nested', 'extra', '\u0000'])] = pick(random, HOSTILE_VALUES);
  return body;
}

/** One hostile request for a route: a body, header, path or query mutation (often several). */
function hostileRequest(route: RouteDefinition, random: () => number): HostileRequest {
  const json = (text: string | Buffer, extra: Record<string, string> = {}) => ({ body: text, headers: { 'content-type': 'application/json', ...extra } });
  const validJson = () => JSON.stringify(hostileObject(route, random));
  const bodies: Array<[string, () => { body?: string | Buffer; headers: Record<string, string> }]> = [
    ['hostile JSON values', () => json(validJson())],
    ['hostile JSON values', () => json(validJson())],
    ['hostile JSON values', () => json(validJson())],
    ['gzip header on a plain body', () => json(validJson(), { 'content-encoding': 'gzip' })],
    ['deflate header on garbage', () => json(Buffer.from('not deflate at all'), { 'content-encoding': 'deflate' })],
    ['br header on garbage', () => json(Buffer.from('\u00ff\u00fe garbage'), { 'content-encoding': 'br' })],
    ['unknown content-encoding', () => json(validJson(), { 'content-encoding': pick(random, ['x-unknown', 'compress', 'gzip, gzip', 'identity, br', '\u00e9']) })],
    ['real gzip of hostile JSON', () => json(gzipSync(validJson()), { 'content-encoding': 'gzip' })],
    ['real deflate of hostile JSON', () => json(deflateSync(validJson()), { 'content-encoding': 'deflate' })],
    ['gzip bomb over the limit', () => json(gzipSync(Buffer.alloc(4 * 1024 * 1024, 0x20)), { 'content-encoding': 'gzip' })],
    ['truncated gzip', () => json(gzipSync(validJson()).subarray(0, 12), { 'content-encoding': 'gzip' })],
    ['malformed JSON', () => json(pick(random, ['{', '{"email":', '{"a":1,}', "{'a':1}", '\u0000', 'undefined', '{"a":"\\ud800"}', '{"a":"\u0000"}', '']))],
    ['JSON of another shape', () => json(pick(random, ['[]', '"x"', '42', 'null', 'true', '[{"email":"a@b.io"}]']))],
    ['deeply nested JSON', () => json('['.repeat(20_000) + ']'.repeat(20_000))],
    ['oversize JSON', () => json(JSON.stringify({ email: 'a@b.io', padding: 'x'.repeat(150 * 1024) }))],
    ['prototype pollution', () => json(pick(random, POLLUTION_BODIES))],
    ['unsupported charset', () => ({ body: validJson(), headers: { 'content-type': pick(random, ['application/json; charset=utf-16', 'application/json; charset=bogus', 'application/json; charset=latin1']) } })],
    ['form encoding', () => ({ body: 'email=a%40b.io&password=x&__proto__[polluted]=yes', headers: { 'content-type': 'application/x-www-form-urlencoded' } })],
    ['text body', () => ({ body: validJson(), headers: { 'content-type': pick(random, ['text/plain', 'application/xml', 'multipart/form-data; boundary=x', 'application/jsonx']) } })],
    // A Buffer body makes fetch send no content-type at all.
    ['no content-type', () => ({ body: Buffer.from(validJson()), headers: {} })],
    ['no body', () => ({ headers: {} })],
  ];
  const [bodyDescription, makeBody] = pick(random, bodies);
  const { body, headers } = makeBody();
  const hostilePath = random() < 0.3;
  const query = random() < 0.25 ? pick(random, QUERY_STRINGS) : '';
  return { description: `${bodyDescription}${hostilePath ? ' + hostile path' : ''}${query ? ` + query ${query.slice(0, 30)}` : ''}`, path: concretePath(route, random, hostilePath) + query, headers, body };
}

function credentialHeader(kind: Credential, random: () => number): Record<string, string> {
  if (kind === 'none') {
    const variants = ['', 'Bearer', 'Basic YTpi', `Bearer ${'a'.repeat(5000)}`, 'Bearer a.b.c', 'Bearer eyJhbGciOiJub25lIn0.e30.'];
    const value = pick(random, variants);
    return value ? { authorization: value } : {};
  }
  return { authorization: `Bearer ${kind === 'ticket' ? ticket : owner.accessToken}` };
}

interface RawResponse {
  status: number;
  headers: Headers;
  text: string;
}

/** node:http rather than fetch: fetch refuses a body on GET, and hostile GETs with bodies are part of the point. */
function rawRequest(method: string, url: string, headers: Record<string, string>, body: string | Buffer | undefined): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    // Host, port and path given apart: a URL would resolve `%2e%2e` segments before sending.
    const { hostname, port, pathname } = new URL(h.baseUrl);
    const outgoing = httpRequest({ hostname, port, path: pathname + url, method, headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (incoming) => {
      const chunks: Buffer[] = [];
      incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
      incoming.on('end', () => {
        const responseHeaders = new Headers();
        for (const [name, value] of Object.entries(incoming.headers)) if (value !== undefined) responseHeaders.set(name, Array.isArray(value) ? value.join(', ') : value);
        resolve({ status: incoming.statusCode ?? 0, headers: responseHeaders, text: Buffer.concat(chunks).toString('utf8') });
      });
      incoming.on('error', reject);
    });
    // The server may answer (413, 415) and close before the whole body is written.
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

/** README.md response shapes, independent of the OpenAPI document. */
function shapeProblem(status: number, body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return 'the body is not a JSON object';
  const record = body as Record<string, unknown>;
  if (status >= 200 && status < 300) return 'data' in record || typeof record.message === 'string' || Array.isArray(record.keys) ? undefined : 'success without data or message';
  if (status === 422 && 'errors' in record) return Array.isArray(record.errors) && record.errors.length > 0 && record.errors.every((item) => typeof item === 'string') ? undefined : 'bad errors array';
  return typeof record.error === 'string' && typeof record.message === 'string' ? undefined : 'an error without error and message';
}

const HANDOFF_CHALLENGE = createHash('sha256').update('fuzz-handoff-verifier-0123456789-abcdefghijklmnop').digest('base64url');

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function maybeHostile(random: () => number, name: string): string {
  if (random() < 0.5) return '';
  // PATH_VALUES are already percent-encoded (some as broken UTF-8); a lone surrogate cannot be encoded.
  const value = random() < 0.3 ? pick(random, PATH_VALUES) : encodeURIComponent(pick(random, HOSTILE_STRINGS).replace(LONE_SURROGATE, '\ufffd'));
  return `&${name}=${value}`;
}

function authorizeQuery(random: () => number): string {
  return `/auth/social/${PROVIDER_ID}/authorize?handoff_challenge=${HANDOFF_CHALLENGE}&handoff_challenge_method=S256${maybeHostile(random, 'return_to')}`;
}

/** A callback for a flow the router really started, with hostile provider parameters. */
async function callbackWithLiveState(random: () => number): Promise<string> {
  const started = await h.post(`/auth/social/${PROVIDER_ID}/authorize`, { handoff_challenge: HANDOFF_CHALLENGE, handoff_challenge_method: 'S256' });
  assert.equal(started.status, 200, started.text);
  const state = new URL(started.body.data.authorization_url).searchParams.get('state') ?? '';
  return `/auth/social/${PROVIDER_ID}/callback?state=${encodeURIComponent(state)}${maybeHostile(random, 'code')}${maybeHostile(random, 'iss')}${maybeHostile(random, 'error')}${maybeHostile(random, 'error_description')}`;
}

const REDIRECTING_ROUTES: Record<string, number> = { 'GET /auth/social/:provider/authorize': 302, 'GET /auth/social/:provider/callback': 303 };

function redirectProblems(method: string, path: string, response: RawResponse): string[] {
  const problems: string[] = [];
  const expected = REDIRECTING_ROUTES[`${method} ${path}`];
  if (expected !== response.status) problems.push(`an unexpected ${response.status} redirect`);
  const location = response.headers.get('location') ?? '';
  const allowed = expected === 302 ? `${op.issuer}/` : `${RETURN_URL}?`;
  if (!location.startsWith(allowed)) problems.push(`redirect to ${location.slice(0, 120)}`);
  if (response.text !== '') problems.push(`a redirect with a body: ${response.text.slice(0, 120)}`);
  if (response.headers.get('cache-control') !== 'no-store') problems.push(`cache-control ${response.headers.get('cache-control')}`);
  return problems;
}

test(`${REQUESTS_PER_ROUTE} hostile requests per route, with and without credentials: no 5xx, spec-shaped JSON, no prototype pollution`, async () => {
  const random = seededRandom(SEED);
  const counts = new Map<number, number>();
  const failures: string[] = [];
  assert.ok(routes.length >= 50, `the route table has ${routes.length} routes`);
  const socialRoutes = routes.filter((route) => route.path.startsWith('/auth/social'));
  assert.equal(socialRoutes.length, 8);
  assert.ok(socialRoutes.every((route) => !route.unavailable), 'social login is configured, so its routes are fuzzed for real');
  for (const route of routes) {
    const credentialKind: Credential = route.auth === 'public' ? 'bearer' : route.auth;
    for (let index = 0; index < REQUESTS_PER_ROUTE; index += 1) {
      const credential: Credential = index % 2 === 0 ? credentialKind : 'none';
      const request = hostileRequest(route, random);
      // Half the social redirect requests carry what gets past validation (a live flow's state, a
      // well-formed handoff challenge), so the 302/303 answers and the provider round trip are fuzzed too.
      if (route.method === 'get' && route.path === '/auth/social/:provider/callback' && index % 4 < 2) request.path = await callbackWithLiveState(random);
      if (route.method === 'get' && route.path === '/auth/social/:provider/authorize' && index % 4 < 2) request.path = authorizeQuery(random);
      const method = route.method.toUpperCase();
      const label = `${method} ${route.path} [${credential}] ${request.description} (${request.path.slice(0, 60)})`;
      const response = await rawRequest(method, request.path, { ...request.headers, ...credentialHeader(credential, random) }, request.body);
      const text = response.text;
      counts.set(response.status, (counts.get(response.status) ?? 0) + 1);
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      const problems: string[] = [];
      if (response.status >= 500) problems.push(`answered ${response.status}: ${text.slice(0, 200)}`);
      // The social authorize (GET) and callback answer redirects (docs/social-login.md): no body, an absolute
      // Location at the provider or at a configured return URL, and still no-store.
      if (response.status === 302 || response.status === 303) {
        problems.push(...redirectProblems(method, route.path, response));
        if (problems.length > 0) failures.push(`${label}: ${problems.join('; ')}`);
        continue;
      }
      if (!(response.headers.get('content-type') ?? '').startsWith('application/json')) problems.push(`content-type ${response.headers.get('content-type')}: ${text.slice(0, 120)}`);
      const shape = shapeProblem(response.status, parsed);
      if (shape) problems.push(`${shape}: ${text.slice(0, 200)}`);
      if (/\bat .+\(.+:\d+:\d+\)|node_modules|select |insert into|SQLITE|syntax error|violates/i.test(text)) problems.push(`internals in the body: ${text.slice(0, 200)}`);
      const isJwks = route.path.endsWith('jwks.json') && response.status === 200;
      if (!isJwks && response.headers.get('cache-control') !== 'no-store') problems.push(`cache-control ${response.headers.get('cache-control')}`);
      const concrete = request.path.split('?')[0]!;
      if (parsed !== undefined && matchTemplate(concrete)) problems.push(...validateResponse(method, concrete, response.status, parsed, response.headers));
      if (({} as Record<string, unknown>).polluted !== undefined || Object.getOwnPropertyNames(Object.prototype).sort().join(',') !== prototypeNames) {
        problems.push('Object.prototype was polluted');
      }
      if (problems.length > 0) failures.push(`${label}: ${problems.join('; ')}`);
      if (credential !== 'none' && (response.status === 401 || response.status === 404 || (response.status < 300 && method !== 'GET') || index % 8 === 0)) await refreshCredentials();
    }
  }
  const summary = [...counts.entries()].sort(([a], [b]) => a - b).map(([status, count]) => `${status}: ${count}`).join(', ');
  const total = [...counts.values()].reduce((sum, count) => sum + count, 0);
  console.log(`fuzz (${TEST_DB}, seed ${SEED}, ${routes.length} routes, ${total} requests) status counts: ${summary}`);
  assert.equal(total, routes.length * REQUESTS_PER_ROUTE);
  assert.deepEqual(failures.slice(0, 40), [], `${failures.length} hostile requests were answered badly`);
  assert.equal(h.logs.filter((line) => line.msg === 'unexpected error').length, 0, 'no unexpected error was logged');
});
