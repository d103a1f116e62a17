import Joi from 'joi';
import { secondsAtMost } from './durations.js';

/** One OpenID Connect provider (docs/social-login.md). */
export interface SocialProviderConfig {
  /** OIDC discovery runs at `{issuer}/.well-known/openid-configuration`. */
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Display name for `GET /auth/social/providers`. Default: the provider id. */
  name?: string;
  /** Default `['openid', 'email', 'profile']`; must include `openid` and `email`. */
  scopes?: string[];
  /** Default `client_secret_basic`. */
  tokenEndpointAuthMethod?: 'client_secret_basic' | 'client_secret_post';
  /** Extra authorization parameters (e.g. `{prompt: 'select_account'}`); the router's own cannot be overridden. */
  authorizationParams?: Record<string, string>;
  /** Default true; false: only existing or linked users may sign in with this provider. */
  allowSignup?: boolean;
}

/** `social` (docs/social-login.md); without it the social routes answer 404. */
export interface SocialConfig {
  /** Public URL where the router is mounted; `redirect_uri` is `{redirectBase}/auth/social/{id}/callback`. */
  redirectBase: string;
  /** Where the browser may be sent back (no query, no fragment). */
  returnUrls: string[];
  /** Must be covered by `returnUrls`; default `returnUrls[0]`. */
  errorUrl?: string;
  /** docs/social-login.md rule 3; default true. */
  autoLinkByEmail?: boolean;
  /** seconds, default 600: the authorization round trip. */
  stateTtl?: number;
  /** seconds, default 60: the one-time exchange code. */
  exchangeTtl?: number;
  /** Keyed by provider id (`[a-z0-9-]{1,32}`), stored with every link. */
  providers: Record<string, SocialProviderConfig>;
}

export interface ResolvedSocialProvider {
  id: string;
  issuer: string;
  clientId: string;
  clientSecret: string;
  name: string;
  scopes: string[];
  tokenEndpointAuthMethod: 'client_secret_basic' | 'client_secret_post';
  authorizationParams: Record<string, string>;
  allowSignup: boolean;
  /** `http:` loopback issuer: openid-client needs `allowInsecureRequests` (tests, local stand-ins). */
  insecureLoopback: boolean;
}

export interface ResolvedSocialConfig {
  redirectBase: string;
  returnUrls: string[];
  errorUrl: string | undefined;
  autoLinkByEmail: boolean;
  stateTtl: number;
  exchangeTtl: number;
  providers: Map<string, ResolvedSocialProvider>;
  /** Loopback `http:` URLs accepted, for the one start-up warning. */
  insecureUrls: string[];
}

export const SOCIAL_DEFAULTS = {
  scopes: ['openid', 'email', 'profile'],
  stateTtl: 600,
  exchangeTtl: 60,
} as const;

export const PROVIDER_ID_PATTERN = /^[a-z0-9-]{1,32}$/;

/** Parameters the router sets itself; `authorizationParams` may not override them. */
const RESERVED_AUTHORIZATION_PARAMS = ['response_type', 'client_id', 'redirect_uri', 'scope', 'state', 'nonce', 'code_challenge', 'code_challenge_method', 'response_mode', 'request', 'request_uri'];

const providerSchema = Joi.object({
  issuer: Joi.string().required(),
  clientId: Joi.string().min(1).required(),
  clientSecret: Joi.string().min(1).required(),
  name: Joi.string().min(1).max(100),
  scopes: Joi.array().items(Joi.string().pattern(/^[\x21\x23-\x5b\x5d-\x7e]+$/, 'a scope token')).min(1),
  tokenEndpointAuthMethod: Joi.valid('client_secret_basic', 'client_secret_post'),
  authorizationParams: Joi.object().pattern(Joi.string(), Joi.string()),
  allowSignup: Joi.boolean(),
});

export const socialConfigSchema = Joi.object({
  redirectBase: Joi.string().required(),
  returnUrls: Joi.array().items(Joi.string()).min(1).required(),
  errorUrl: Joi.string(),
  autoLinkByEmail: Joi.boolean(),
  stateTtl: secondsAtMost(86_400),
  exchangeTtl: secondsAtMost(3600),
  providers: Joi.object().pattern(Joi.string().pattern(PROVIDER_ID_PATTERN), providerSchema).min(1).required()
    .messages({ 'object.unknown': '{{#label}} is not allowed: provider ids are 1 to 32 of a-z, 0-9 and -' }),
});

/** Hosts on which plain `http:` is accepted for a configured URL (development, tests). */
export const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/** `https:`, or `http:` on a loopback host (answered as insecure so start-up can warn). */
export function checkAbsoluteUrl(value: unknown, label: string, problems: string[]): { url: URL; insecure: boolean } | undefined {
  if (typeof value !== 'string') return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    problems.push(`"${label}" must be an absolute URL`);
    return undefined;
  }
  if (url.protocol === 'https:') return { url, insecure: false };
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return { url, insecure: true };
  problems.push(`"${label}" must be an https: URL (http: only for localhost, 127.0.0.1 or [::1])`);
  return undefined;
}

/**
 * `redirectBase`: an absolute URL as `checkAbsoluteUrl` wants, onto which `/auth/.../callback` is
 * appended, so a query, fragment or userinfo would give the provider a callback the router never
 * answers (or credentials in a URL); refused at construction rather than at the first sign-in.
 */
export function checkRedirectBase(value: unknown, label: string, problems: string[]): void {
  const checked = checkAbsoluteUrl(value, label, problems);
  if (!checked || typeof value !== 'string') return;
  if (checked.url.search || checked.url.hash || value.includes('?') || value.includes('#')) problems.push(`"${label}" must not carry a query or fragment`);
  if (checked.url.username || checked.url.password) problems.push(`"${label}" must not carry userinfo`);
}

/**
 * The `return_to` rule (docs/social-login.md), also used for `errorUrl`: same scheme, host and port as
 * an allowed entry, and a path equal to the entry's or below it on a segment boundary; no
 * userinfo, no fragment, no backslash, no dot segment, and none of `%2f`, `%5c`, `%2e` or `;`
 * in the path as sent.
 */
export function matchesReturnUrl(candidate: string, allowed: readonly string[]): boolean {
  // Backslashes are read as slashes by browsers ("/\evil.com"); refuse them before parsing.
  if (candidate.includes('\\') || /[\u0000-\u001f\u007f\s]/.test(candidate)) return false;
  let url: URL;
  try {
    url = new URL(candidate);
  } catch {
    return false;
  }
  if (url.username || url.password || url.hash || candidate.includes('#') || candidate.includes('@')) return false;
  // The URL parser resolves dot segments and keeps encoded ones, so the path is judged as sent:
  // a server behind the return URL may decode "..%2f" or "%2e%2e/" again, or read "..;/" as
  // "../" (Tomcat's path parameters), and climb out of the allowed prefix.
  const rawPath = candidate.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '').split('?')[0] ?? '';
  if (/%2f|%5c|%2e|;/i.test(rawPath) || rawPath.split('/').some((segment) => segment === '.' || segment === '..')) return false;
  return allowed.some((entry) => {
    const base = new URL(entry);
    if (url.protocol !== base.protocol || url.host !== base.host) return false;
    const basePath = base.pathname.endsWith('/') ? base.pathname : `${base.pathname}/`;
    return url.pathname === base.pathname || url.pathname.startsWith(basePath);
  });
}

/** Checks joi cannot express; each problem is listed, as for the rest of the config. */
export function socialConfigProblems(input: unknown): string[] {
  if (!input || typeof input !== 'object') return [];
  const social = input as Partial<SocialConfig>;
  const problems: string[] = [];
  checkRedirectBase(social.redirectBase, 'social.redirectBase', problems);
  const returnUrls = Array.isArray(social.returnUrls) ? social.returnUrls : [];
  returnUrls.forEach((entry, index) => {
    const checked = checkAbsoluteUrl(entry, `social.returnUrls[${index}]`, problems);
    if (checked && (checked.url.search || checked.url.hash || entry.includes('?') || entry.includes('#'))) {
      problems.push(`"social.returnUrls[${index}]" must not carry a query or fragment`);
    }
    if (checked && (checked.url.username || checked.url.password)) problems.push(`"social.returnUrls[${index}]" must not carry userinfo`);
  });
  if (typeof social.errorUrl === 'string' && returnUrls.every((entry) => typeof entry === 'string')) {
    const validEntries = returnUrls.filter((entry) => URL.canParse(entry));
    if (!matchesReturnUrl(social.errorUrl, validEntries)) problems.push('"social.errorUrl" must be covered by "social.returnUrls"');
  }
  const providers = social.providers && typeof social.providers === 'object' ? social.providers : {};
  const seenNames = new Map<string, string>();
  for (const [id, provider] of Object.entries(providers)) {
    if (!provider || typeof provider !== 'object') continue;
    checkAbsoluteUrl(provider.issuer, `social.providers.${id}.issuer`, problems);
    if (Array.isArray(provider.scopes)) {
      if (!provider.scopes.includes('openid')) problems.push(`"social.providers.${id}.scopes" must include "openid"`);
      if (!provider.scopes.includes('email')) problems.push(`"social.providers.${id}.scopes" must include "email"`);
    }
    for (const key of Object.keys(provider.authorizationParams ?? {})) {
      if (RESERVED_AUTHORIZATION_PARAMS.includes(key)) problems.push(`"social.providers.${id}.authorizationParams.${key}" is set by the router and cannot be overridden`);
    }
    // Ids are object keys, so they are unique by construction; the same id in another case is refused by the pattern.
    const lower = id.toLowerCase();
    if (seenNames.has(lower)) problems.push(`"social.providers.${id}" duplicates "${seenNames.get(lower)}"`);
    seenNames.set(lower, id);
  }
  return problems;
}

export function resolveSocialConfig(input: SocialConfig | undefined): ResolvedSocialConfig | undefined {
  if (!input) return undefined;
  const insecureUrls: string[] = [];
  const noteInsecure = (value: string) => {
    if (new URL(value).protocol === 'http:') insecureUrls.push(value);
  };
  noteInsecure(input.redirectBase);
  input.returnUrls.forEach(noteInsecure);
  const providers = new Map<string, ResolvedSocialProvider>();
  for (const [id, provider] of Object.entries(input.providers)) {
    noteInsecure(provider.issuer);
    providers.set(id, {
      id,
      issuer: provider.issuer,
      clientId: provider.clientId,
      clientSecret: provider.clientSecret,
      name: provider.name ?? id,
      scopes: provider.scopes ?? [...SOCIAL_DEFAULTS.scopes],
      tokenEndpointAuthMethod: provider.tokenEndpointAuthMethod ?? 'client_secret_basic',
      authorizationParams: provider.authorizationParams ?? {},
      allowSignup: provider.allowSignup ?? true,
      insecureLoopback: new URL(provider.issuer).protocol === 'http:',
    });
  }
  return {
    redirectBase: input.redirectBase.replace(/\/+$/, ''),
    returnUrls: input.returnUrls,
    errorUrl: input.errorUrl,
    autoLinkByEmail: input.autoLinkByEmail ?? true,
    stateTtl: input.stateTtl ?? SOCIAL_DEFAULTS.stateTtl,
    exchangeTtl: input.exchangeTtl ?? SOCIAL_DEFAULTS.exchangeTtl,
    providers,
    insecureUrls,
  };
}

/** The `redirect_uri` a provider calls back (docs/social-login.md): hosts register exactly this URL. */
export function socialCallbackUrl(social: Pick<ResolvedSocialConfig, 'redirectBase'>, providerId: string): string {
  return `${social.redirectBase}/auth/social/${providerId}/callback`;
}
