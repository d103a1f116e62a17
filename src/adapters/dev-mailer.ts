import { consoleLogger } from './console-logger.js';
import { renderMail } from './templates.js';
import type { Logger, Mailer } from './types.js';

export interface DevMailerOptions {
  /** Where rendered mail is written; default {@link consoleLogger}. */
  logger?: Logger;
}

/**
 * A Mailer for development: instead of sending, it logs each rendered message at info level,
 * tokens and codes included so a developer can complete flows from the terminal. Never use it in production.
 */
export function createDevMailer(options: DevMailerOptions = {}): Mailer {
  const logger = options.logger ?? consoleLogger;
  return {
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
  };
}
