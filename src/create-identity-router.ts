import type { RequestHandler, Router } from 'express';
import { consoleLogger } from './adapters/console-logger.js';
import { createDevMailer } from './adapters/dev-mailer.js';
import { createDevSmsSender } from './adapters/dev-sms.js';
import type { Clock, Logger, Mailer, SmsSender } from './adapters/types.js';
import { systemClock } from './clock.js';
import { resolveConfig } from './config/schema.js';
import type { IdentityConfig } from './config/types.js';
import { deriveKeys } from './crypto/derived-keys.js';
import { JwtCodec } from './crypto/jwt.js';
import { KeyRing } from './crypto/key-ring.js';
import { PasswordHasher } from './crypto/password-hasher.js';
import type { IdentityEventListener } from './events.js';
import { buildRouter } from './http/build-router.js';
import { requirePermissionMiddleware } from './http/host-middleware.js';
import { buildRateLimiters } from './http/rate-limits.js';
import { Readiness } from './http/readiness.js';
import { allRoutes } from './http/routes/index.js';
import type { ServiceContext } from './services/context.js';
import { IdentityServices } from './services/identity-services.js';
import { openDatabase } from './store/database.js';
import { migrationConfig } from './store/migration-source.js';
import { Store } from './store/store.js';
import { tableNames } from './store/table-names.js';
import { describeError } from './services/unit-of-work.js';

/** Adapters a host may supply; every one has a default (CONTRACT 3). */
export interface IdentityAdapters {
  /** Default: the development mailer, which logs messages (codes and tokens included). */
  mailer?: Mailer;
  /** Default: the development SMS sender, which logs messages. */
  sms?: SmsSender;
  /** Called with each event after the change that caused it has committed. */
  onEvent?: IdentityEventListener;
  /** Drives every expiry the router checks or issues. Default: the system clock. */
  clock?: Clock;
  /** Default: console. */
  logger?: Logger;
}

/** An Express router with the identity service mounted on it. */
export interface IdentityRouter extends Router {
  /** Resolves when migrations are applied and a signing key exists; rejects if start-up failed. */
  ready: Promise<void>;
  /** The core service layer, usable without HTTP. */
  service: IdentityServices;
  /** Middleware for the host's own routes: a valid bearer token whose holder has `permission` in the token's active organization. */
  requirePermission(permission: string): RequestHandler;
  /** Stops the password workers; destroys the Knex pool only if the router created it. */
  close(): Promise<void>;
}

export function createIdentityRouter(config: IdentityConfig, adapters: IdentityAdapters = {}): IdentityRouter {
  const resolved = resolveConfig(config);
  const logger = adapters.logger ?? consoleLogger;
  const clock = adapters.clock ?? systemClock;
  if (!adapters.mailer) logger.warn('No mailer configured: using the development mailer, which writes e-mails (tokens included) to the log. Do not use it in production.');
  if (!adapters.sms) logger.warn('No SMS sender configured: using the development SMS sender, which writes codes to the log. Do not use it in production.');

  if (resolved.social && resolved.social.insecureUrls.length > 0) {
    logger.warn(`social: plain http: accepted for loopback URLs (${resolved.social.insecureUrls.join(', ')}); use https: in production.`);
  }

  const database = openDatabase(resolved.database, logger);
  const table = tableNames(resolved.tablePrefix);
  const store = new Store(database.knex, table, database.dialect);
  const keys = deriveKeys(resolved.secret);
  const hasher = new PasswordHasher({ cost: resolved.password.bcryptCost, pepper: keys.passwordPepper });
  const keyRing = new KeyRing(store, keys.signingKeyEncryption, clock, resolved.tokens.accessTtl);
  const jwt = new JwtCodec(keyRing, clock, {
    issuer: resolved.issuer,
    audience: resolved.audience,
    accessTtl: resolved.tokens.accessTtl,
    mfaTicketTtl: resolved.tokens.mfaTicketTtl,
  });
  const context: ServiceContext = {
    config: resolved,
    store,
    keys,
    keyRing,
    jwt,
    hasher,
    clock,
    logger,
    mailer: adapters.mailer ?? createDevMailer({ logger }),
    sms: adapters.sms ?? createDevSmsSender({ logger }),
    onEvent: adapters.onEvent,
  };
  const services = new IdentityServices(context);

  const readiness = new Readiness(async () => {
    try {
      if (resolved.migrate) await database.knex.migrate.latest(migrationConfig(table, resolved.tablePrefix));
      await keyRing.initialise();
      await services.initialise();
    } catch (error) {
      logger.error('identity-router failed to start; requests answer 503 until a retry succeeds', { error: describeError(error) });
      throw error;
    }
  });
  const ready = readiness.firstAttempt;
  // The dummy hash that equalises login timing is made in the background, off the request path.
  ready.then(() => hasher.warmUp()).catch(() => undefined);

  const router = buildRouter({ services, routes: allRoutes(services), limiters: buildRateLimiters(resolved), readiness, logger }) as IdentityRouter;
  router.ready = ready;
  router.service = services;
  router.requirePermission = (permission) => requirePermissionMiddleware(services, readiness, logger, permission);
  router.close = async () => {
    await ready.catch(() => undefined);
    await hasher.close();
    if (database.owned) await database.knex.destroy();
  };
  return router;
}
