import { consoleLogger } from './console-logger.js';
import { markDevelopmentAdapter } from './production-guard.js';
import type { Logger, MailMessage, Mailer, SmsMessage, SmsSender } from './types.js';

export interface DevSmsSenderOptions {
  /** Where messages are written; default {@link consoleLogger}. */
  logger?: Logger;
  /** Under `NODE_ENV=production` the router refuses to start with this sender unless this is `true`. */
  allowInProduction?: boolean;
}

/**
 * An SmsSender for development: instead of sending, it logs each message (with its code) at info level
 * so a developer can complete flows from the terminal. Never use it in production.
 */
export function createDevSmsSender(options: DevSmsSenderOptions = {}): SmsSender {
  const logger = options.logger ?? consoleLogger;
  return markDevelopmentAdapter({
    send(message) {
      logger.info(`[dev sms] to=${message.to} ${message.message}`);
      return Promise.resolve();
    },
  }, options.allowInProduction === true);
}

/** Accepts and drops every message; usable as either the Mailer or the SmsSender, e.g. in tests. */
export const noopSender: Mailer & SmsSender = {
  send(_message: MailMessage | SmsMessage): Promise<void> {
    return Promise.resolve();
  },
};
