import type { Request, RequestHandler, Response } from 'express';
import { ipKeyGenerator, rateLimit } from 'express-rate-limit';
import type { RateLimitGroup, ResolvedConfig } from '../config/types.js';
import { errors } from '../errors.js';
import { RATE_LIMIT_GROUPS } from '../config/defaults.js';
import { principalOf } from './request-state.js';

const passThrough: RequestHandler = (_req, _res, next) => next();

/**
 * One express-rate-limit instance per group of spec section 8 (fixed windows). Per-IP
 * groups use the library's IP key (IPv6 grouped by subnet); `authenticated` is keyed by
 * user id and runs after token authentication.
 */
export function buildRateLimiters(config: ResolvedConfig): Record<RateLimitGroup, RequestHandler> {
  return Object.fromEntries(
    RATE_LIMIT_GROUPS.map((group) => {
      const rule = config.auth.rateLimits[group];
      if (rule === false) return [group, passThrough];
      const limiter = rateLimit({
        windowMs: rule.windowSec * 1000,
        limit: rule.limit,
        // X-RateLimit-Limit / -Remaining / -Reset, plus Retry-After on a 429 (spec 7).
        legacyHeaders: true,
        standardHeaders: false,
        identifier: group,
        ...(config.auth.rateLimitStore ? { store: config.auth.rateLimitStore(group) } : {}),
        ...(group === 'authenticated' ? { keyGenerator: (_req: Request, res: Response) => `user:${principalOf(res).userId}` } : {}),
        // CONTRACT 9.9: the social group counts each of its routes separately, per IP.
        ...(group === 'social' ? { keyGenerator: (req: Request) => `${ipKeyGenerator(req.ip ?? '')}|${req.method} ${String(req.route?.path ?? '')}` } : {}),
        handler: (req, _res, next) => {
          const resetTime = (req as Request & { rateLimit?: { resetTime?: Date } }).rateLimit?.resetTime;
          next(errors.rateLimited(resetTime ? (resetTime.getTime() - Date.now()) / 1000 : rule.windowSec));
        },
      });
      return [group, limiter];
    }),
  ) as Record<RateLimitGroup, RequestHandler>;
}
