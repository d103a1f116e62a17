import { consoleLogger } from './console-logger.js';
import { markDevelopmentAdapter } from './production-guard.js';
import { renderMail } from './templates.js';
import type { Logger, Mailer } from './types.js';

export interface DevMailerOptions {
  /** Where rendered mail is written; default {@link consoleLogger}. */
  logger?: Logger;
  /** Under `NODE_ENV=production` the router refuses to start with this mailer unless this is `true`. */
  allowInProduction?: boolean;
}

/**
 * A Mailer for development: instead of sending, it logs each rendered message at info level,
 * tokens and codes included so a developer can complete flows from the terminal. Never use it in production.
 */
export function createDevMailer(options: DevMailerOptions = {}): Mailer {
  const logger = options.logger ?? consoleLogger;
  return markDevelopmentAdapter({
    send(message) {
      // Rendering errors become a rejected promise, like a real transport's failure, for the router to log.
      try {
        const { subject, text } = renderMail(message.template, message.context);
        logger.info(`[dev mailer] to=${message.to} template=${message.template}\nSubject: ${subject}\n\n${text}`);
        return Promise.resolve();
      } catch (error) {
        return Promise.reject(error);
      }
    },
  }, options.allowInProduction === true);
}
