import type * as OpenIdClient from 'openid-client';
import type { Clock, Logger } from '../../adapters/types.js';
import type { ResolvedSocialProvider } from '../../config/social.js';
import { errors, type IdentityError } from '../../errors.js';
import { describeError } from '../shared/unit-of-work.js';

type OpenIdModule = typeof OpenIdClient;
export type ProviderConfiguration = OpenIdClient.Configuration;

/** docs/social-login.md: discovery is lazy, cached for one hour; an unreachable provider times out after 10 s. */
const DISCOVERY_CACHE_MS = 60 * 60 * 1000;
const HTTP_TIMEOUT_SECONDS = 10;
/** docs/social-login.md: ID-token time claims are checked against the process clock, with this tolerance. */
const CLOCK_TOLERANCE_SECONDS = 30;

let openIdModule: Promise<OpenIdModule> | undefined;

/**
 * openid-client is ESM-only. It is loaded on first use, with a dynamic import, so the
 * CommonJS build and hosts that configure no `social` never load it (docs/social-login.md).
 */
export function loadOpenIdClient(): Promise<OpenIdModule> {
  openIdModule ??= import('openid-client').catch((error: unknown) => {
    openIdModule = undefined;
    throw error;
  });
  return openIdModule;
}

export function providerUnavailable(cause?: unknown): IdentityError {
  return errors.providerUnavailable(cause);
}

/** Network failures and time-outs, as opposed to answers the provider gave. */
export function isUnreachable(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; current && depth < 6; depth += 1) {
    const candidate = current as { name?: string; code?: string; message?: string; cause?: unknown };
    if (candidate.name === 'TimeoutError' || candidate.name === 'AbortError') return true;
    if (candidate.code && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|UND_ERR_.*)$/.test(candidate.code)) return true;
    if (candidate.name === 'TypeError' && candidate.message === 'fetch failed') return true;
    current = candidate.cause;
  }
  return false;
}

/** One openid-client Configuration per provider, discovered on first use and cached. */
export class SocialProviderClients {
  private readonly cache = new Map<string, { configuration: ProviderConfiguration; expiresAt: number }>();
  private readonly pending = new Map<string, Promise<ProviderConfiguration>>();

  constructor(
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {}

  async configuration(provider: ResolvedSocialProvider): Promise<{ client: OpenIdModule; configuration: ProviderConfiguration }> {
    const client = await loadOpenIdClient();
    const cached = this.cache.get(provider.id);
    if (cached && cached.expiresAt > this.clock.now()) return { client, configuration: cached.configuration };
    let discovering = this.pending.get(provider.id);
    if (!discovering) {
      discovering = this.discover(client, provider).finally(() => this.pending.delete(provider.id));
      this.pending.set(provider.id, discovering);
    }
    return { client, configuration: await discovering };
  }

  private async discover(client: OpenIdModule, provider: ResolvedSocialProvider): Promise<ProviderConfiguration> {
    const authentication = provider.tokenEndpointAuthMethod === 'client_secret_post' ? client.ClientSecretPost(provider.clientSecret) : client.ClientSecretBasic(provider.clientSecret);
    try {
      const configuration = await client.discovery(new URL(provider.issuer), provider.clientId, { [client.clockTolerance]: CLOCK_TOLERANCE_SECONDS }, authentication, {
        timeout: HTTP_TIMEOUT_SECONDS,
        ...(provider.insecureLoopback ? { execute: [client.allowInsecureRequests] } : {}),
      });
      configuration.timeout = HTTP_TIMEOUT_SECONDS;
      this.cache.set(provider.id, { configuration, expiresAt: this.clock.now() + DISCOVERY_CACHE_MS });
      return configuration;
    } catch (error) {
      // Other providers keep working; this one answers 502 until discovery succeeds.
      this.logger.warn('social provider discovery failed', { provider: provider.id, error: describeError(error) });
      throw providerUnavailable(error);
    }
  }
}
