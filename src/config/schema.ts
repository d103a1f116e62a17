import Joi from 'joi';
import { parse as parseHost } from 'tldts';
import { DEFAULTS, DEFAULT_RATE_LIMITS, RATE_LIMIT_GROUPS } from './defaults.js';
import { seconds, secondsAtMost } from './durations.js';
import type { IdentityConfig, RateLimitGroup, RateLimitRule, ResolvedConfig } from './types.js';
import { LOOPBACK_HOSTS, resolveSocialConfig, socialConfigProblems, socialConfigSchema } from './social.js';
import { resolveSsoConfig, ssoConfigProblems, ssoConfigSchema } from './sso.js';

const windowBudget = Joi.object({ limit: Joi.number().integer().min(1).required(), windowSec: seconds.required() });
const rateLimitRule = Joi.alternatives(Joi.object({ limit: Joi.number().integer().min(1).required(), windowSec: seconds.required(), passOnStoreError: Joi.boolean() }), Joi.valid(false));
const urlTemplate = Joi.string().pattern(/\{token\}/, 'a {token} placeholder');

const tablePrefixSchema = Joi.string().pattern(/^[a-z][a-z0-9_]{0,30}$/, 'lower-case letters, digits and _');

/**
 * A Knex config object is checked before Knex sees it: Knex names no option when a connection
 * is missing (start-up then fails with "Unable to acquire a connection" or a TypeError, and every
 * request answers 503), and for a client the router cannot run on it asks for that driver.
 */
const databaseConfig = Joi.object({
  client: Joi.valid('better-sqlite3', 'pg', 'postgres', 'postgresql').required()
    .messages({ 'any.only': '"database.client" must be "better-sqlite3" (SQLite) or "pg" (PostgreSQL), the two drivers identity-router runs on, or pass a Knex instance' }),
  connection: Joi.any().required()
    .messages({ 'any.required': '"database.connection" is required: an object with filename for better-sqlite3, a URL or connection object for pg (is the environment variable it is read from set?)' }),
  tablePrefix: tablePrefixSchema,
}).unknown(true).messages({ 'object.base': '"database" must be a Knex instance or a Knex config object with client and connection' });

const configSchema = Joi.object<IdentityConfig>({
  // A Knex instance is a function; anything else is checked as a config object, every problem reported.
  // biome-ignore lint/suspicious/noThenProperty: Joi's conditional schema names its branches then and otherwise.
  database: Joi.alternatives().conditional(Joi.function(), { then: Joi.function(), otherwise: databaseConfig }).required(),
  tablePrefix: tablePrefixSchema,
  migrate: Joi.boolean(),
  // CONTRACT 2: "at least 32 characters"; Joi counts UTF-16 units, so 16 emoji would pass as 32.
  // A lone surrogate has no UTF-8 form: HKDF reads each as the same three bytes (U+FFFD), so
  // different secrets would derive the same keys.
  secret: Joi.string().min(32).required().custom((value: string, helpers) =>
    !value.isWellFormed() ? helpers.error('secret.wellFormed') : value.length >= 32 && [...value].length < 32 ? helpers.error('string.min', { limit: 32, value }) : value)
    .messages({ 'secret.wellFormed': '"secret" must be well-formed Unicode text (it holds a lone surrogate, which has no UTF-8 form)' }),
  issuer: Joi.string().min(1).required(),
  audience: Joi.string().min(1),
  appName: Joi.string().min(1),
  tokens: Joi.object({
    accessTtl: secondsAtMost(86_400),
    refreshTtl: seconds,
    refreshRotation: Joi.boolean(),
    mfaTicketTtl: secondsAtMost(3600),
    emailVerifyTtl: seconds,
    passwordResetTtl: secondsAtMost(7 * 86_400),
    inviteTtl: seconds,
    sessionMaxAge: seconds,
  }),
  password: Joi.object({
    minLength: Joi.number().integer().min(1).max(1024),
    maxLength: Joi.number().integer().min(1).max(1024),
    bcryptCost: Joi.number().integer().min(4).max(31),
    algorithm: Joi.valid('bcrypt', 'argon2id'),
    argon2: Joi.object({
      memoryCost: Joi.number().integer().min(1024).max(4_194_304),
      timeCost: Joi.number().integer().min(1).max(100),
      parallelism: Joi.number().integer().min(1).max(255),
    }),
    workers: Joi.number().integer().min(1).max(256),
  }),
  auth: Joi.object({
    requireVerifiedEmail: Joi.boolean(),
    lockout: Joi.object({ threshold: Joi.number().integer().min(1), window: secondsAtMost(86_400), duration: secondsAtMost(86_400) }),
    rateLimits: Joi.alternatives(
      Joi.valid(false),
      Joi.object(Object.fromEntries(RATE_LIMIT_GROUPS.map((group) => [group, rateLimitRule]))),
    ),
    rateLimitStore: Joi.alternatives(Joi.valid('memory', 'database'), Joi.function()),
  }),
  otp: Joi.object({
    length: Joi.number().integer().min(4).max(10),
    ttl: secondsAtMost(86_400),
    maxAttempts: Joi.number().integer().min(1).max(100),
    resendCooldown: secondsAtMost(3600, 0),
    sendBudget: Joi.object({ perDestination: windowBudget, perAccount: windowBudget }),
    verifyBudget: windowBudget,
    // Key URI format: the label is `issuer:account`, so a `:` in the issuer breaks it.
    totp: Joi.object({ issuer: Joi.string().min(1).pattern(/^[^:]*$/, 'no colon').messages({ 'string.pattern.name': '"otp.totp.issuer" must not contain ":" (the authenticator label is issuer:account)' }) }),
  }),
  invites: Joi.object({ sendBudget: Joi.object({ perOrganization: windowBudget, perAddress: windowBudget }) }),
  mfa: Joi.object({ enforce: Joi.boolean(), enforcementMode: Joi.valid('grace', 'block') }),
  security: Joi.object({ stepUp: Joi.object({ maxAge: secondsAtMost(86_400) }) }),
  permissions: Joi.array().items(
    Joi.object({
      key: Joi.string().pattern(/^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$/, 'dotted lower-case (e.g. invoices.read)').max(100).required(),
      description: Joi.string().min(1).max(500).required(),
    }),
  ).unique('key'),
  links: Joi.object({ verifyEmail: urlTemplate, resetPassword: urlTemplate, acceptInvite: urlTemplate, passwordlessLogin: urlTemplate }),
  passwordless: Joi.object({ link: Joi.boolean(), allowSignup: Joi.boolean(), ttl: seconds.max(86_400) }),
  webauthn: Joi.object({
    rpId: Joi.string().min(1).max(253).required(),
    rpName: Joi.string().min(1).max(200),
    origins: Joi.array().items(Joi.string().min(1)).min(1).required(),
  }),
  social: socialConfigSchema,
  sso: ssoConfigSchema,
  events: Joi.object({
    delivery: Joi.object({
      worker: Joi.boolean(),
      pollMs: Joi.number().integer().min(10).max(3_600_000),
      leaseSec: seconds.max(3600),
      schedule: Joi.array().items(Joi.number().integer().min(0).max(7 * 24 * 3600)).min(1).max(50),
      maxAttempts: Joi.number().integer().min(1).max(100),
      jitter: Joi.number().min(0).max(1),
      retentionDays: Joi.number().integer().min(1).max(3650),
    }),
  }),
  webhooks: Joi.object({
    enabled: Joi.boolean(),
    maxPerOrg: Joi.number().integer().min(1).max(1000),
    timeoutMs: Joi.number().integer().min(100).max(60_000),
    rotationOverlapSec: Joi.number().integer().min(0).max(30 * 24 * 3600),
    allowHttp: Joi.boolean(),
    allowPrivateNetworks: Joi.boolean(),
  }),
});

/**
 * What makes a `secret` of 32 characters or more still easy to guess, or undefined: fewer than 8
 * distinct characters (`aaaa…`, `0123` repeated), or one shorter string repeated (`abcdefgh` four
 * times). A random secret (`openssl rand -base64 48`) is neither. The start-up checks
 * (adapters/production-guard.ts) refuse it under NODE_ENV=production and warn elsewhere.
 */
export function weakSecretReason(secret: string): string | undefined {
  const characters = [...secret];
  const distinct = new Set(characters).size;
  if (distinct < 8) return `holds only ${distinct} distinct character${distinct === 1 ? '' : 's'}`;
  for (let period = 1; period * 2 <= characters.length; period += 1) {
    if (characters.every((character, index) => index < period || character === characters[index - period])) return `is ${period} characters repeated`;
  }
  return undefined;
}

/** Thrown by `createIdentityRouter` when the config is wrong; lists every problem at once. */
export class IdentityConfigError extends Error {
  override readonly name = 'IdentityConfigError';
  constructor(readonly problems: string[]) {
    super(`Invalid identity-router config:\n  - ${problems.join('\n  - ')}`);
  }
}

function resolveRateLimits(input: NonNullable<IdentityConfig['auth']>['rateLimits']): Record<RateLimitGroup, RateLimitRule | false> {
  if (input === false) return Object.fromEntries(RATE_LIMIT_GROUPS.map((group) => [group, false])) as Record<RateLimitGroup, false>;
  return { ...DEFAULT_RATE_LIMITS, ...(input ?? {}) } as Record<RateLimitGroup, RateLimitRule | false>;
}

/**
 * docs/configuration.md: `otp.totp.issuer`, else `appName`, else the host name of `issuer` (a URL's
 * `https:` and port would put a `:` in the label), else `issuer` as written.
 */
function defaultTotpIssuer(input: IdentityConfig): string {
  if (input.otp?.totp?.issuer !== undefined) return input.otp.totp.issuer;
  if (input.appName !== undefined) return input.appName;
  try {
    const { hostname } = new URL(input.issuer);
    if (hostname) return hostname;
  } catch {
    // Not a URL: the issuer is a plain name.
  }
  return input.issuer;
}

export function resolveConfig(input: IdentityConfig): ResolvedConfig {
  // A JavaScript host can call without one; answer like any other config problem, not with a TypeError.
  if (typeof input !== 'object' || input === null) throw new IdentityConfigError(['a config object is required']);
  const { error } = configSchema.validate(input, { abortEarly: false, convert: false });
  const problems = error ? error.details.map((detail) => detail.message) : [];
  const { argon2, workers, ...passwordInput } = input?.password ?? {};
  const password = {
    ...DEFAULTS.password,
    ...passwordInput,
    argon2: { ...DEFAULTS.argon2, ...argon2 },
    workers,
  };
  if (password.minLength > password.maxLength) problems.push('"password.minLength" must not exceed "password.maxLength"');
  problems.push(...socialConfigProblems(input.social));
  problems.push(...ssoConfigProblems(input.sso));
  // A rule across options runs unless an option it reads is itself wrong (that one is listed already),
  // so every other problem is listed beside the schema's.
  const invalid = (...fields: string[]) =>
    (error?.details ?? []).some((detail) => {
      const at = detail.path.join('.');
      return fields.some((field) => at === field || field.startsWith(`${at}.`) || at.startsWith(`${field}.`));
    });
  const totpIssuer = defaultTotpIssuer(input);
  if (!invalid('appName', 'issuer', 'otp.totp.issuer') && totpIssuer.includes(':')) problems.push(`the TOTP issuer "${totpIssuer}" (from ${input.appName !== undefined ? 'appName' : 'issuer'}) contains ":", which the authenticator label issuer:account forbids: set "otp.totp.issuer"`);
  if (input.webauthn && !error?.details.some((detail) => detail.path[0] === 'webauthn')) problems.push(...webauthnProblems(input.webauthn));
  // An attempt must end under its lease, or a second instance could make the same attempt (docs/events.md).
  const leaseSec = input.events?.delivery?.leaseSec ?? DEFAULTS.eventDelivery.leaseSec;
  const timeoutMs = input.webhooks?.timeoutMs ?? DEFAULTS.webhooks.timeoutMs;
  if (!invalid('events.delivery.leaseSec', 'webhooks.timeoutMs') && leaseSec * 1000 < 2 * timeoutMs) problems.push(`"events.delivery.leaseSec" (${leaseSec} s) must be at least twice "webhooks.timeoutMs" (${timeoutMs} ms): an attempt must end under its lease`);
  if (input.passwordless?.link === true && input.links?.passwordlessLogin === undefined) {
    problems.push('"passwordless.link" needs "links.passwordlessLogin", the URL of the page that POSTs the token (docs/passwordless.md)');
  }
  if (input.links && !invalid('links')) problems.push(...linkProblems(input.links));
  // The root of every key at rest would travel to the provider with each code exchange.
  for (const [id, provider] of Object.entries(input.social?.providers ?? {})) {
    if (typeof input.secret === 'string' && provider?.clientSecret === input.secret) problems.push(`"social.providers.${id}.clientSecret" must not be "secret": it would send the root of every key to the provider`);
  }
  if (problems.length > 0) throw new IdentityConfigError(problems);

  const databaseObject = typeof input.database === 'function' ? undefined : input.database;
  const tablePrefix = input.tablePrefix ?? databaseObject?.tablePrefix ?? DEFAULTS.tablePrefix;
  return {
    database: input.database,
    tablePrefix,
    migrate: input.migrate ?? true,
    secret: input.secret,
    issuer: input.issuer,
    audience: input.audience,
    appName: input.appName ?? input.issuer,
    tokens: { ...DEFAULTS.tokens, ...input.tokens },
    password,
    auth: {
      requireVerifiedEmail: input.auth?.requireVerifiedEmail ?? false,
      lockout: { ...DEFAULTS.lockout, ...input.auth?.lockout },
      rateLimits: resolveRateLimits(input.auth?.rateLimits),
      rateLimitStore: input.auth?.rateLimitStore ?? 'memory',
    },
    otp: {
      length: input.otp?.length ?? DEFAULTS.otp.length,
      ttl: input.otp?.ttl ?? DEFAULTS.otp.ttl,
      maxAttempts: input.otp?.maxAttempts ?? DEFAULTS.otp.maxAttempts,
      resendCooldown: input.otp?.resendCooldown ?? DEFAULTS.otp.resendCooldown,
      sendBudget: { ...DEFAULTS.otp.sendBudget, ...input.otp?.sendBudget },
      verifyBudget: input.otp?.verifyBudget ?? DEFAULTS.otp.verifyBudget,
      totp: { issuer: totpIssuer },
    },
    invites: { sendBudget: { ...DEFAULTS.invites.sendBudget, ...input.invites?.sendBudget } },
    mfa: { enforce: input.mfa?.enforce ?? false, enforcementMode: input.mfa?.enforcementMode ?? 'grace' },
    security: { stepUp: { maxAge: input.security?.stepUp?.maxAge ?? DEFAULTS.stepUpMaxAge } },
    permissions: input.permissions ?? [],
    links: input.links ?? {},
    passwordless: input.passwordless
      ? { link: input.passwordless.link ?? false, allowSignup: input.passwordless.allowSignup ?? false, ttl: input.passwordless.ttl ?? DEFAULTS.passwordlessTtl }
      : undefined,
    webauthn: input.webauthn
      ? { rpId: input.webauthn.rpId, rpName: input.webauthn.rpName ?? input.appName ?? input.issuer, origins: [...input.webauthn.origins] }
      : undefined,
    social: resolveSocialConfig(input.social),
    sso: resolveSsoConfig(input.sso),
    events: { delivery: { ...DEFAULTS.eventDelivery, schedule: [...(input.events?.delivery?.schedule ?? DEFAULTS.eventDelivery.schedule)], ...withoutSchedule(input.events?.delivery) } },
    webhooks: { ...DEFAULTS.webhooks, ...input.webhooks },
  };
}

function withoutSchedule(delivery: NonNullable<IdentityConfig['events']>['delivery']): Omit<NonNullable<typeof delivery>, 'schedule'> {
  const { schedule: _schedule, ...rest } = delivery ?? {};
  return rest;
}

/**
 * A mailed link carries a reset, verification, invite or sign-in token: an absolute URL (a mail
 * client cannot resolve a relative one), never plain `http:` but on a loopback host (the token
 * would cross the network in the clear), never with userinfo. Other schemes (an app's own
 * `myapp://`) are the host's choice.
 */
function linkProblems(links: NonNullable<IdentityConfig['links']>): string[] {
  const problems: string[] = [];
  for (const [name, template] of Object.entries(links)) {
    if (typeof template !== 'string') continue;
    let url: URL;
    try {
      url = new URL(template);
    } catch {
      problems.push(`"links.${name}" must be an absolute URL such as https://app.example.com/page?token={token}`);
      continue;
    }
    if (url.protocol === 'http:' && !LOOPBACK_HOSTS.has(url.hostname)) problems.push(`"links.${name}" must use https: (http: only for localhost, 127.0.0.1 or [::1]): the link carries a token`);
    if (url.username || url.password) problems.push(`"links.${name}" must not carry userinfo`);
  }
  return problems;
}
const HOST_NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * The browser's own rules, checked up front so a typo fails at start-up instead of at the
 * first ceremony: the RP id is a bare host name, and every origin is HTTPS (plain HTTP only on
 * localhost, which browsers treat as a secure context) on the RP id or a subdomain of it.
 */
function webauthnProblems(webauthn: NonNullable<IdentityConfig['webauthn']>): string[] {
  const problems: string[] = [];
  if (!HOST_NAME.test(webauthn.rpId)) problems.push('"webauthn.rpId" must be a lower-case host name such as example.com (no scheme, port or path)');
  // Browsers refuse a public suffix (ICANN or private, such as github.io) as an RP id; localhost and intranet names are not listed.
  const host = parseHost(webauthn.rpId, { allowPrivateDomains: true });
  if (host.publicSuffix === webauthn.rpId && (host.isIcann === true || host.isPrivate === true)) {
    problems.push(`"webauthn.rpId" (${webauthn.rpId}) is a public suffix; use your registrable domain such as example.${webauthn.rpId}`);
  }
  for (const origin of webauthn.origins) {
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      problems.push(`"webauthn.origins" entry "${origin}" is not an absolute URL`);
      continue;
    }
    if (url.origin !== origin) {
      problems.push(`"webauthn.origins" entry "${origin}" must be a bare origin such as https://app.example.com (no path, query or trailing slash)`);
      continue;
    }
    // Browsers treat localhost and *.localhost (RFC 6761) as secure contexts, so WebAuthn runs there over http.
    const loopback = LOOPBACK_HOSTS.has(url.hostname) || url.hostname.endsWith('.localhost');
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
      problems.push(`"webauthn.origins" entry "${origin}" must use https (http is accepted only for localhost)`);
    }
    if (url.hostname !== webauthn.rpId && !url.hostname.endsWith(`.${webauthn.rpId}`)) {
      problems.push(`"webauthn.origins" entry "${origin}" is not on "webauthn.rpId" (${webauthn.rpId}) or a subdomain of it`);
    }
  }
  return problems;
}
