import type { Request, RequestHandler, Router } from 'express';
import { consoleLogger } from './adapters/console-logger.js';
import { createDevMailer } from './adapters/dev-mailer.js';
import { createDevSmsSender } from './adapters/dev-sms.js';
import { assertAdapterShapes } from './adapters/adapter-shapes.js';
import { assertProductionAdapters, assertProductionSecret, riskyConfigWarnings } from './adapters/production-guard.js';
import type { Clock, DnsResolver, Logger, Mailer, SmsSender } from './adapters/types.js';
import { systemClock } from './clock.js';
import { resolveConfig } from './config/schema.js';
import type { IdentityConfig } from './config/types.js';
import { deriveKeys } from './crypto/derived-keys.js';
import { JwtCodec } from './crypto/jwt.js';
import { KeyRing } from './services/shared/key-ring.js';
import { PasswordHasher } from './crypto/password-hasher.js';
import type { IdentityEventListener } from './events.js';
import { buildRouter } from './http/build-router.js';
import { callerOf, hostMiddleware, type HostMiddlewareOptions } from './http/host-middleware.js';
import { buildRateLimiters } from './http/rate-limits.js';
import { Readiness } from './http/readiness.js';
import { allRoutes } from './http/routes/index.js';
import { AccessCache } from './services/shared/access-cache.js';
import type { Caller } from './services/access/access-policy.js';
import { AccessReads } from './services/access/access-reads.js';
import type { ServiceContext } from './services/shared/service-context.js';
import { type IdentityService, IdentityServices, publicServiceOf } from './services/build-services.js';
import { openDatabase } from './store/database.js';
import { NotificationInvalidationCarrier } from './services/shared/invalidation-carrier.js';
import { openInstanceNotifications } from './store/instance-notifications.js';
import { migrationConfig } from './store/migration-source.js';
import { withStartupLock } from './store/startup-lock.js';
import { Store } from './store/store.js';
import { tableNames } from './store/table-names.js';
import { describeError } from './services/shared/unit-of-work.js';
import { EventDelivery } from './services/webhooks/event-delivery.js';
import { OutboundGuard } from './outbound/outbound-guard.js';

/** Adapters a host may supply; every one has a default (docs/adapters.md). */
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
  /** Name resolution of outbound requests (webhooks, docs/webhooks.md). Default: `node:dns/promises`. */
  dns?: DnsResolver;
}

/** An Express router with the identity service mounted on it. */
export interface IdentityRouter extends Router {
  /** Resolves when migrations are applied and a signing key exists; rejects if start-up failed. */
  ready: Promise<void>;
  /** The core service layer, usable without HTTP: the documented operations only. */
  service: IdentityService;
  /**
   * Middleware for the host's own routes: an access token of a live session, under every
   * gate the router's own routes apply (docs/getting-started.md). Read the caller with `caller(req)`.
   * With `{apiKeys: true}` a working API key is accepted too (docs/api-keys.md).
   */
  authenticate(options?: HostMiddlewareOptions): RequestHandler;
  /**
   * `authenticate()` plus `permission` in the token's active organization, resolved from live
   * authority. With `{apiKeys: true}` an API key is accepted too, with the key's share of its
   * owner's live authority in the key's organization.
   */
  requirePermission(permission: string, options?: HostMiddlewareOptions): RequestHandler;
  /**
   * The caller set by `authenticate()` or `requirePermission()` on this request:
   * `{kind: 'session', user_id, session_id, organization_id, mfa, amr, auth_time,
   * email_verified, superadmin, permissions}` for an access token,
   * `{kind: 'api_key', user_id, organization_id, api_key_id, permissions}` for an API key;
   * undefined before them. Switch on `kind`.
   */
  caller(req: Request): Caller | undefined;
  /** Stops the event-delivery worker (waiting at most 5 s for attempts in flight) and the password workers; destroys the Knex pool only if the router created it. */
  close(): Promise<void>;
}

export function createIdentityRouter(config: IdentityConfig, adapters: IdentityAdapters = {}): IdentityRouter {
  const resolved = resolveConfig(config);
  assertAdapterShapes(adapters);
  assertProductionAdapters(adapters);
  assertProductionSecret(resolved.secret);
  const logger = adapters.logger ?? consoleLogger;
  const clock = adapters.clock ?? systemClock;
  if (!adapters.mailer) logger.warn('No mailer configured: using the development mailer, which writes e-mails (tokens included) to the log. Do not use it in production.');
  if (!adapters.sms) logger.warn('No SMS sender configured: using the development SMS sender, which writes codes to the log. Do not use it in production.');
  for (const warning of riskyConfigWarnings(resolved)) logger.warn(warning);

  if (resolved.social && resolved.social.insecureUrls.length > 0) {
    logger.warn(`social: plain http: accepted for loopback URLs (${resolved.social.insecureUrls.join(', ')}); use https: in production.`);
  }

  if (resolved.sso?.allowPrivateNetworks === true) logger.warn('sso: allowPrivateNetworks is on, so identity providers may use plain http: and private and loopback addresses (never link-local). Use it only in tests and private deployments.');
  else if (Array.isArray(resolved.sso?.allowPrivateNetworks) && resolved.sso.allowPrivateNetworks.length > 0) {
    logger.warn(`sso: allowPrivateNetworks exempts ${resolved.sso.allowPrivateNetworks.join(', ')}, so identity providers there may use plain http: and private addresses (never link-local). Use it only in tests and private deployments.`);
  }
  if (resolved.webhooks.enabled && resolved.webhooks.allowHttp) logger.warn('webhooks: allowHttp is on, so webhook URLs may use plain http:. Use it only in tests and private deployments.');
  if (resolved.webhooks.enabled && resolved.webhooks.allowPrivateNetworks) logger.warn('webhooks: allowPrivateNetworks is on, so webhooks may reach private and loopback addresses (never link-local). Use it only in tests and private deployments.');

  const database = openDatabase(resolved.database, logger);
  const table = tableNames(resolved.tablePrefix);
  const store = new Store(database.knex, table, database.dialect);
  // Before anything else starts: a rate-limit store the host returned for two groups is a
  // configuration error, and the database handle opened above is closed with it.
  let limiters: ReturnType<typeof buildRateLimiters>;
  try {
    limiters = buildRateLimiters(resolved, store.repos.rateLimitCounters, logger);
  } catch (error) {
    void database.knex.destroy();
    throw error;
  }
  const keys = deriveKeys(resolved.secret);
  const hasher = new PasswordHasher({
    algorithm: resolved.password.algorithm,
    cost: resolved.password.bcryptCost,
    argon2: resolved.password.argon2,
    pepper: keys.passwordPepper,
    ...(resolved.password.workers ? { threads: resolved.password.workers } : {}),
  });
  // Other instances' changes (key rotations, access revocations) reach this one through the database.
  const notifications = openInstanceNotifications(database.knex, database.dialect, resolved.tablePrefix, logger);
  const keyRing = new KeyRing(store, keys.signingKeyEncryption, clock, resolved.tokens.accessTtl, notifications);
  const jwt = new JwtCodec(keyRing, clock, {
    mfaTicketKey: keys.mfaTicketSigning,
    issuer: resolved.issuer,
    audience: resolved.audience,
    accessTtl: resolved.tokens.accessTtl,
    mfaTicketTtl: resolved.tokens.mfaTicketTtl,
  });
  const accessCache = new AccessCache();
  // Routers in one process on one database handle hear each other's invalidations at once.
  accessCache.joinPeers(accessCachePeers(database.knex, resolved.tablePrefix));
  // Other instances on PostgreSQL hear of revocations through the notifications; SQLite has one process.
  const invalidationCarrier = database.dialect === 'pg'
    ? new NotificationInvalidationCarrier(notifications, (scopes) => accessCache.apply(scopes), (error) =>
        logger.error('identity-router: could not notify other instances of an access change; they drop it within the cache expiry', { error: describeError(error) }))
    : undefined;
  if (invalidationCarrier) accessCache.attachCarrier(invalidationCarrier);
  const accessReads = new AccessReads(store.repos, accessCache, clock);
  const context: ServiceContext = {
    config: resolved,
    store,
    accessCache,
    access: accessReads,
    keys,
    keyRing,
    jwt,
    hasher,
    clock,
    logger,
    mailer: adapters.mailer ?? createDevMailer({ logger }),
    sms: adapters.sms ?? createDevSmsSender({ logger }),
    onEvent: adapters.onEvent,
    webhookGuard: new OutboundGuard({ allowHttp: resolved.webhooks.allowHttp, allowPrivateNetworks: resolved.webhooks.allowPrivateNetworks, exemptOriginsMayUseHttp: false }, adapters.dns),
  } as Omit<ServiceContext, 'delivery'> as ServiceContext;
  // The worker needs the context it is part of (its 410 handling runs a unit of work).
  const delivery = new EventDelivery(context);
  context.delivery = delivery;
  const services = new IdentityServices(context, { accessReads, dns: adapters.dns });

  const readiness = new Readiness(async () => {
    try {
      // Instances started together take turns: migrations and the first keys are made once (docs/multiple-instances.md).
      await withStartupLock(database.knex, database.dialect, resolved.tablePrefix, async () => {
        if (resolved.migrate) await database.knex.migrate.latest(migrationConfig(table, resolved.tablePrefix));
        await keyRing.initialise();
        await services.initialise();
      });
      // Here rather than after the first attempt: a start-up that succeeds on a retry starts it too.
      delivery.start();
    } catch (error) {
      logger.error('identity-router failed to start; requests answer 503 until a retry succeeds', { error: describeError(error) });
      throw error;
    }
  });
  const ready = readiness.firstAttempt;
  // The dummy hash that equalises login timing is made in the background, off the request path.
  ready.then(() => hasher.warmUp()).catch(() => undefined);
  // Housekeeping that must not hold readiness back (a large table takes its time); `close` waits for it.
  const housekeeping = ready.then(
    () => services.deleteUnusableStoredRefreshTokens().catch((error) => logger.warn('identity-router: start-up housekeeping failed; it runs again at the next start', { error: describeError(error) })),
    () => undefined,
  );

  const router = buildRouter({ services, routes: allRoutes(services), limiters, readiness, logger }) as IdentityRouter;
  const host = { services, readiness, logger, authenticatedLimiter: limiters.authenticated };
  router.ready = ready;
  internals.set(router, services);
  router.authenticate = (options, ...misuse: unknown[]) => {
    assertNotCalledAsMiddleware('authenticate()', misuse);
    return hostMiddleware(host, undefined, options);
  };
  router.requirePermission = (permission, options, ...misuse: unknown[]) => {
    assertNotCalledAsMiddleware("requirePermission('…')", misuse);
    return hostMiddleware(host, permission, options);
  };
  // `caller` is a restricted property of functions (Function.prototype.caller throws on
  // assignment), so the accessor is defined as an own property instead.
  Object.defineProperty(router, 'caller', { value: callerOf, enumerable: true, configurable: true, writable: false });
  router.close = async () => {
    await ready.catch(() => undefined);
    await housekeeping;
    await delivery.close();
    await hasher.close();
    accessCache.leavePeers();
    await invalidationCarrier?.close();
    keyRing.close();
    await notifications.close();
    if (database.owned) await database.knex.destroy();
  };
  router.service = publicServiceOf(services, router.close);
  return router;
}

const internals = new WeakMap<IdentityRouter, IdentityServices>();

/** The whole service layer behind a router, for this package's own tests and benchmarks; not exported from the package. */
export function servicesOf(router: IdentityRouter): IdentityServices {
  const services = internals.get(router);
  if (!services) throw new TypeError('not a router made by createIdentityRouter');
  return services;
}

const peersByDatabase = new WeakMap<object, Map<string, Set<AccessCache>>>();

function accessCachePeers(knex: object, tablePrefix: string): Set<AccessCache> {
  let byPrefix = peersByDatabase.get(knex);
  if (!byPrefix) {
    byPrefix = new Map();
    peersByDatabase.set(knex, byPrefix);
  }
  let peers = byPrefix.get(tablePrefix);
  if (!peers) {
    peers = new Set();
    byPrefix.set(tablePrefix, peers);
  }
  return peers;
}

/**
 * `app.get('/x', identity.authenticate, handler)` (without the call) makes Express call the
 * factory with `(req, res, next)`: it would answer with a new middleware and never call `next`,
 * so every such request hangs. Plain JavaScript allows the slip; it is refused with the fix.
 */
function assertNotCalledAsMiddleware(factory: string, misuse: unknown[]): void {
  if (typeof misuse.at(-1) === 'function') throw new TypeError(`identity.${factory.replace(/\(.*$/, '')} is a factory: mount identity.${factory}, not the function itself`);
}
