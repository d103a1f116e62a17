import type { RateLimitGroup, RateLimitRule } from './types.js';

const MINUTE = 60;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** docs/configuration.md, fixed windows. */
export const DEFAULT_RATE_LIMITS: Record<RateLimitGroup, RateLimitRule> = {
  login: { limit: 10, windowSec: 300 },
  register: { limit: 5, windowSec: 3600 },
  password_forgot: { limit: 5, windowSec: 3600 },
  token_refresh: { limit: 60, windowSec: 60 },
  token_consume: { limit: 10, windowSec: 300 },
  mfa_send: { limit: 5, windowSec: 600 },
  mfa_confirm: { limit: 10, windowSec: 300 },
  mfa_enroll: { limit: 5, windowSec: 3600 },
  // docs/social-login.md: authorize (both), callback and exchange, per IP.
  social: { limit: 20, windowSec: 300 },
  authenticated: { limit: 600, windowSec: 60 },
};

export const RATE_LIMIT_GROUPS = Object.keys(DEFAULT_RATE_LIMITS) as RateLimitGroup[];

export const DEFAULTS = {
  tablePrefix: 'identity_',
  tokens: {
    accessTtl: 15 * MINUTE,
    refreshTtl: 30 * DAY,
    refreshRotation: true,
    mfaTicketTtl: 5 * MINUTE,
    emailVerifyTtl: DAY,
    passwordResetTtl: HOUR,
    inviteTtl: 7 * DAY,
    sessionMaxAge: 90 * DAY,
  },
  password: { minLength: 8, maxLength: 128, bcryptCost: 12, algorithm: 'bcrypt' as 'bcrypt' | 'argon2id' },
  argon2: { memoryCost: 19_456, timeCost: 2, parallelism: 1 },
  lockout: { threshold: 5, window: 15 * MINUTE, duration: 15 * MINUTE },
  otp: {
    length: 6,
    ttl: 5 * MINUTE,
    maxAttempts: 5,
    resendCooldown: 30,
    sendBudget: {
      perDestination: { limit: 5, windowSec: HOUR },
      perAccount: { limit: 10, windowSec: HOUR },
    },
    verifyBudget: { limit: 20, windowSec: 15 * MINUTE },
  },
  invites: {
    sendBudget: {
      perOrganization: { limit: 50, windowSec: HOUR },
      perAddress: { limit: 5, windowSec: DAY },
    },
  },
  stepUpMaxAge: 5 * MINUTE,
  // docs/events.md: Svix's retry schedule, in seconds.
  eventDelivery: {
    worker: true,
    pollMs: 1000,
    leaseSec: 60,
    schedule: [0, 5, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 5 * HOUR, 10 * HOUR, 10 * HOUR] as readonly number[],
    maxAttempts: 8,
    jitter: 0.2,
    retentionDays: 30,
  },
  webhooks: { enabled: false, maxPerOrg: 10, timeoutMs: 10_000, rotationOverlapSec: DAY, allowHttp: false, allowPrivateNetworks: false },
  /** docs/passwordless.md: one lifetime for a passwordless code and its link. */
  passwordlessTtl: 10 * MINUTE,
} as const;
