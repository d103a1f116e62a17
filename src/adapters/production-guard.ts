import { IdentityConfigError, weakSecretReason } from '../config/schema.js';
import type { ResolvedConfig } from '../config/types.js';
import type { Mailer, SmsSender } from './types.js';

/** Marks the development adapters, which write tokens and codes to the log. */
const DEVELOPMENT_ADAPTER = Symbol.for('identity-router.development-adapter');

interface DevelopmentMark {
  [DEVELOPMENT_ADAPTER]?: { allowInProduction: boolean };
}

export function markDevelopmentAdapter<T extends object>(adapter: T, allowInProduction: boolean): T {
  Object.defineProperty(adapter, DEVELOPMENT_ADAPTER, { value: { allowInProduction }, enumerable: false });
  return adapter;
}

function refusedInProduction(adapter: Mailer | SmsSender | undefined): boolean {
  if (adapter === undefined) return true;
  const mark = (adapter as DevelopmentMark)[DEVELOPMENT_ADAPTER];
  return mark !== undefined && !mark.allowInProduction;
}

/**
 * Under `NODE_ENV=production` the development mailer and SMS sender would write reset tokens,
 * invite tokens and one-time codes to production logs. Forgetting an adapter there fails
 * start-up instead; a host that really wants them opts in with `allowInProduction: true`.
 */
export function assertProductionAdapters(adapters: { mailer?: Mailer | undefined; sms?: SmsSender | undefined }, nodeEnv = process.env.NODE_ENV): void {
  if (nodeEnv !== 'production') return;
  const problems: string[] = [];
  if (refusedInProduction(adapters.mailer)) {
    problems.push('NODE_ENV is production but the mailer is the development mailer, which writes reset and invite tokens to the log: pass a real mailer (createNodemailerMailer(...)), noopSender to send no mail, or createDevMailer({ allowInProduction: true }) to opt in');
  }
  if (refusedInProduction(adapters.sms)) {
    problems.push('NODE_ENV is production but the SMS sender is the development sender, which writes one-time codes to the log: pass a real SmsSender, noopSender to disable SMS, or createDevSmsSender({ allowInProduction: true }) to opt in');
  }
  if (problems.length > 0) throw new IdentityConfigError(problems);
}

/**
 * `secret` is the root of every key at rest: under NODE_ENV=production one that is long enough
 * but easy to guess (config/schema.ts's `weakSecretReason`) fails start-up. Elsewhere it is a
 * warning (riskyConfigWarnings), so tests may keep short fixed secrets.
 */
export function assertProductionSecret(secret: string, nodeEnv = process.env.NODE_ENV): void {
  if (nodeEnv !== 'production') return;
  const reason = weakSecretReason(secret);
  if (reason !== undefined) throw new IdentityConfigError([weakSecretMessage(reason, 'NODE_ENV is production but ')]);
}

function weakSecretMessage(reason: string, prefix: string): string {
  return `${prefix}"secret" ${reason}: every key at rest is derived from it, so it must be random. Generate one with \`openssl rand -base64 48\``;
}

/**
 * Settings the schema takes (tests lower them) that leave a production deployment weak or
 * stalled, each logged at start-up: a test bcrypt cost or argon2 parameters under OWASP's
 * weakest pair (stolen hashes crack cheaply), every rate limit off, and a bcrypt cost so high
 * that each login holds a hashing worker for seconds (a handful of requests stall every login).
 */
export function riskyConfigWarnings(config: ResolvedConfig, nodeEnv = process.env.NODE_ENV): string[] {
  const warnings: string[] = [];
  const { algorithm, bcryptCost, argon2 } = config.password;
  if (algorithm === 'bcrypt' && bcryptCost > 15) warnings.push(`password.bcryptCost ${bcryptCost}: each hash takes about ${2 ** (bcryptCost - 12)} times as long as the default 12, so every login holds a hashing worker for seconds; 10 to 14 is the usual range`);
  const weakSecret = weakSecretReason(config.secret);
  if (nodeEnv !== 'production' && weakSecret !== undefined) warnings.push(weakSecretMessage(weakSecret, ''));
  if (nodeEnv !== 'production') return warnings;
  if (algorithm === 'bcrypt' && bcryptCost < 10) warnings.push(`NODE_ENV is production but password.bcryptCost is ${bcryptCost}, a test value: stolen password hashes would crack cheaply. Use 10 or more (default 12)`);
  if (algorithm === 'argon2id' && (argon2.memoryCost < 7168 || argon2.memoryCost * argon2.timeCost < 7168 * 5)) {
    warnings.push(`NODE_ENV is production but password.argon2 (memoryCost ${argon2.memoryCost} KiB, timeCost ${argon2.timeCost}) is below OWASP's weakest recommendation: stolen password hashes would crack cheaply. Use the default {memoryCost: 19456, timeCost: 2}`);
  }
  if (Object.values(config.auth.rateLimits).every((rule) => rule === false)) warnings.push('NODE_ENV is production but auth.rateLimits is false: no route of the router is rate-limited per client');
  return warnings;
}
