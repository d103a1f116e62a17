import type { Request, RequestHandler, Response } from 'express';
import { ipKeyGenerator, MemoryStore, rateLimit, type Store as RateLimitStore } from 'express-rate-limit';
import type { Logger } from '../adapters/types.js';
import type { RateLimitGroup, ResolvedConfig } from '../config/types.js';
import { errors } from '../errors.js';
import { IdentityConfigError } from '../config/schema.js';
import { RATE_LIMIT_GROUPS } from '../config/defaults.js';
import { findApiKeyPrincipal, principalOf, routeOf } from './request-state.js';
import { DatabaseRateLimitStore, guardStore, type RateLimitCounters } from './rate-limit-stores.js';

const passThrough: RequestHandler = (_req, _res, next) => next();

/** The store of one group: in memory (per instance), in the router's database, or the host's (e.g. Redis). */
function storeFor(group: RateLimitGroup, config: ResolvedConfig, counters: RateLimitCounters, hostStores: Map<RateLimitStore, RateLimitGroup>): RateLimitStore {
  const choice = config.auth.rateLimitStore;
  if (choice === 'memory') return new MemoryStore();
  if (choice === 'database') return guardStore(new DatabaseRateLimitStore(counters, group));
  const store = choice(group);
  // express-rate-limit refuses a store two limiters share (ERR_ERL_STORE_REUSE), but it sees only
  // the guard around each: two groups would count each other's requests in one window, silently.
  const sharedWith = hostStores.get(store);
  if (sharedWith) throw new IdentityConfigError([`"auth.rateLimitStore" returned one store for the groups "${sharedWith}" and "${group}": return a new store, with a prefix of its own, for each group`]);
  hostStores.set(store, group);
  return guardStore(store);
}

/**
 * One express-rate-limit instance per group of docs/configuration.md (fixed windows). Per-IP
 * groups use the library's IP key (IPv6 grouped by subnet); `authenticated` is keyed by
 * user id and runs after token authentication; a request made with an API key is keyed by
 * the key's id instead, so each key has its own budget (docs/api-keys.md).
 */
export function buildRateLimiters(config: ResolvedConfig, counters: RateLimitCounters, logger: Logger): Record<RateLimitGroup, RequestHandler> {
  const hostStores = new Map<RateLimitStore, RateLimitGroup>();
  return Object.fromEntries(
    RATE_LIMIT_GROUPS.map((group) => {
      const rule = config.auth.rateLimits[group];
      if (rule === false) return [group, passThrough];
      const limiter = rateLimit({
        windowMs: rule.windowSec * 1000,
        limit: rule.limit,
        // X-RateLimit-Limit / -Remaining / -Reset, plus Retry-After on a 429 (docs/openapi.yaml).
        legacyHeaders: true,
        standardHeaders: false,
        identifier: group,
        store: storeFor(group, config, counters, hostStores),
        // A store outage: fail open when the host chose it for this group, else 503 unavailable.
        passOnStoreError: rule.passOnStoreError ?? false,
        logger: {
          error: (error: unknown, message?: string) => logger.warn(storeOrCheckMessage(group, error, message)),
          warn: (error, message) => logger.warn(`identity-router: express-rate-limit: ${message ?? (error as Error)?.message ?? 'warning'}`),
        },
        // The authenticated group runs on every authenticated request: its key comes from the
        // credential, not the IP, and it is counted once by construction, so the library's
        // per-request double-count bookkeeping (a map per request) is left out.
        ...(group === 'authenticated' ? { keyGenerator: (_req: Request, res: Response) => authenticatedBudgetKey(res), validate: false } : {}),
        // docs/social-login.md: the social group counts each of its routes separately, per IP. The
        // route's own method, not the request's: HEAD runs the GET route and spends its budget.
        ...(group === 'social' ? { keyGenerator: (req: Request, res: Response) => `${ipKeyGenerator(req.ip ?? '')}|${socialRouteKey(req, res)}` } : {}),
        handler: (req, _res, next) => {
          // The library has set these headers already, except Reset when a host store keeps no reset time.
          const info = (req as Request & { rateLimit?: { limit?: number; resetTime?: Date } }).rateLimit;
          const resetsAt = info?.resetTime?.getTime() ?? Date.now() + rule.windowSec * 1000;
          next(errors.rateLimited((resetsAt - Date.now()) / 1000, 'rate_limited', { limit: info?.limit ?? rule.limit, resetsAt }));
        },
      });
      return [group, limiter];
    }),
  ) as Record<RateLimitGroup, RequestHandler>;
}

/**
 * express-rate-limit reports two things through `logger.error`: a store that failed, and its own
 * configuration checks (a `ValidationError` with an `ERR_ERL_*` code, each reported once). A request
 * triggers some of those checks by its headers alone (`X-Forwarded-For` or `Forwarded` on a host
 * without `trust proxy`, an address that is no IP), so a check is never logged as a store outage.
 * It is logged by its code: the library's message quotes `req.ip`, which a client may have written.
 */
function storeOrCheckMessage(group: RateLimitGroup, error: unknown, message?: string): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && /^ERR_ERL_[A-Z0-9_]+$/.test(code)) {
    return `identity-router: express-rate-limit check ${code} (group ${group}); see https://express-rate-limit.github.io/${code}/`;
  }
  // A store that failed to start lets nothing through by that: guardStore starts it again at the group's next request.
  if (message !== undefined && /initiali[sz]ation/.test(message)) {
    return `identity-router: the rate-limit store of group ${group} failed to start; it is started again at the group's next request`;
  }
  return `identity-router: the rate-limit store of group ${group} is unavailable; the request passes without a limit (passOnStoreError)`;
}

/** The route a social request counts against, as the route table found it (HEAD is the GET route). */
function socialRouteKey(req: Request, res: Response): string {
  const route = routeOf(res);
  return route ? `${route.method.toUpperCase()} ${route.path}` : `${req.method} `;
}

function authenticatedBudgetKey(res: Response): string {
  const apiKey = findApiKeyPrincipal(res);
  return apiKey ? `api_key:${apiKey.apiKeyId}` : `user:${principalOf(res).userId}`;
}

/** Runs a limiter (an Express handler) as one awaited step of a larger one: resolves when it lets the request through, rejects with its refusal. */
export function countAgainst(limiter: RequestHandler, req: Request, res: Response): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    limiter(req, res, (error?: unknown) => (error ? reject(error) : resolve()));
  });
}
