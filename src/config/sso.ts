import Joi from 'joi';
import { secondsAtMost } from './durations.js';
import { checkAbsoluteUrl, checkRedirectBase, matchesReturnUrl } from './social.js';

/** `sso` (docs/sso.md); without it every single sign-on route answers 404. */
export interface SsoConfig {
  /** Public URL where the router is mounted; callbacks are `{redirectBase}/auth/sso/{connection_id}/callback`. */
  redirectBase: string;
  /** Where the browser may be sent back (9.1's rules). */
  returnUrls: string[];
  /** Must be covered by `returnUrls`; default `returnUrls[0]`. */
  errorUrl?: string;
  /** seconds, default 600. */
  stateTtl?: number;
  /** seconds, default 60. */
  exchangeTtl?: number;
  /** TXT record name prefix, default `_identity-router`. */
  txtPrefix?: string;
  /** Extra consumer-mail domains refused as organization domains. */
  blockedDomains?: string[];
  /** `true`, or a list of exempt origins: `http:` and private addresses allowed for IdPs (never link-local). Default false. */
  allowPrivateNetworks?: boolean | string[];
}

export interface ResolvedSsoConfig {
  redirectBase: string;
  returnUrls: string[];
  errorUrl: string | undefined;
  stateTtl: number;
  exchangeTtl: number;
  txtPrefix: string;
  blockedDomains: string[];
  allowPrivateNetworks: boolean | string[];
}

export const ssoConfigSchema = Joi.object({
  redirectBase: Joi.string().required(),
  returnUrls: Joi.array().items(Joi.string()).min(1).required(),
  errorUrl: Joi.string(),
  stateTtl: secondsAtMost(86_400),
  exchangeTtl: secondsAtMost(3600),
  txtPrefix: Joi.string().pattern(/^_?[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$/i, 'a DNS label'),
  blockedDomains: Joi.array().items(Joi.string().min(1).max(253)),
  allowPrivateNetworks: Joi.alternatives(Joi.boolean(), Joi.array().items(Joi.string())),
});

/** Checks joi cannot express (9.1's rules for URLs); every problem is listed. */
export function ssoConfigProblems(input: unknown): string[] {
  if (!input || typeof input !== 'object') return [];
  const sso = input as Partial<SsoConfig>;
  const problems: string[] = [];
  checkRedirectBase(sso.redirectBase, 'sso.redirectBase', problems);
  const returnUrls = Array.isArray(sso.returnUrls) ? sso.returnUrls : [];
  returnUrls.forEach((entry, index) => {
    const checked = checkAbsoluteUrl(entry, `sso.returnUrls[${index}]`, problems);
    if (checked && (checked.url.search || checked.url.hash || entry.includes('?') || entry.includes('#'))) problems.push(`"sso.returnUrls[${index}]" must not carry a query or fragment`);
    if (checked && (checked.url.username || checked.url.password)) problems.push(`"sso.returnUrls[${index}]" must not carry userinfo`);
  });
  if (typeof sso.errorUrl === 'string' && returnUrls.every((entry) => typeof entry === 'string')) {
    if (!matchesReturnUrl(sso.errorUrl, returnUrls.filter((entry) => URL.canParse(entry)))) problems.push('"sso.errorUrl" must be covered by "sso.returnUrls"');
  }
  if (Array.isArray(sso.allowPrivateNetworks)) {
    sso.allowPrivateNetworks.forEach((origin, index) => {
      if (typeof origin !== 'string' || !URL.canParse(origin) || new URL(origin).origin !== origin) problems.push(`"sso.allowPrivateNetworks[${index}]" must be an absolute origin (scheme, host and port only)`);
    });
  }
  return problems;
}

export function resolveSsoConfig(input: SsoConfig | undefined): ResolvedSsoConfig | undefined {
  if (!input) return undefined;
  return {
    // As social login's: a trailing slash would put `//` in every callback URL, which no route answers.
    redirectBase: input.redirectBase.replace(/\/+$/, ''),
    returnUrls: [...input.returnUrls],
    errorUrl: input.errorUrl,
    stateTtl: input.stateTtl ?? 600,
    exchangeTtl: input.exchangeTtl ?? 60,
    txtPrefix: input.txtPrefix ?? '_identity-router',
    blockedDomains: (input.blockedDomains ?? []).map((domain) => domain.trim().toLowerCase()),
    allowPrivateNetworks: Array.isArray(input.allowPrivateNetworks) ? [...input.allowPrivateNetworks] : (input.allowPrivateNetworks ?? false),
  };
}

/** The callback an organization's identity provider is given (docs/sso.md): administrators register exactly this URL. */
export function ssoCallbackUrl(sso: Pick<ResolvedSsoConfig, 'redirectBase'>, connectionId: string): string {
  return `${sso.redirectBase}/auth/sso/${connectionId}/callback`;
}
