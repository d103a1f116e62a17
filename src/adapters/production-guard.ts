import { IdentityConfigError } from '../config/schema.js';
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
