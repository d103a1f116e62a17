import type { Request, RequestHandler, Response } from 'express';
import type { Logger } from '../adapters/types.js';
import { errors } from '../errors.js';
import type { AccessRequirement, AdmissionCredential, Caller, HostAdmission } from '../services/access/access-policy.js';
import { type Answer, decide, read, type Steps } from '../services/access/decision-steps.js';
import type { IdentityServices } from '../services/build-services.js';
import { presentedCredential } from './credentials.js';
import { errorHandler } from './error-handler.js';
import type { Readiness } from './readiness.js';
import { countAgainst } from './rate-limits.js';
import { setApiKeyPrincipal } from './request-state.js';

/*
 * The caller of a host route, under a symbol only this module holds: nothing is added to
 * Express's global types in the host's program, and `identity.caller(req)` is typed. (A
 * WeakMap keyed by the request cost the host route more: one entry per request for the
 * garbage collector to trace.)
 */
const CALLER = Symbol('identity-router caller');
type RequestWithCaller = Request & { [CALLER]?: Caller };

/** The caller set by `authenticate()` or `requirePermission()`, or undefined on a request they did not pass. */
export function callerOf(req: Request): Caller | undefined {
  return (req as RequestWithCaller)[CALLER];
}

/** Host middlewares made in this process, to tell their remembered admissions apart. */
let hostMiddlewares = 0;

/** What the host middleware needs from the router. */
export interface HostMiddlewareParts {
  services: IdentityServices;
  readiness: Readiness;
  logger: Logger;
  /** The router's own `authenticated` limiter, so a key has one budget wherever it is used. */
  authenticatedLimiter: RequestHandler;
}

export interface HostMiddlewareOptions {
  /** Also accept API keys (docs/api-keys.md), from `Authorization: Bearer irk_…` or `X-API-Key`. Default false. */
  apiKeys?: boolean;
}

/**
 * Host middleware (docs/getting-started.md). `identity.authenticate` with no permission,
 * `identity.requirePermission(key)` with one: both evaluate the same access policy as the
 * router's own routes (grace enrollment, the active organization's `require_mfa`, a live
 * session of a user who may authenticate, the active-organization rule) and answer in the
 * router's error shapes. With `{apiKeys: true}` an API key is one more kind of caller for
 * the same policy (docs/api-keys.md): its own organization, its share of its owner's authority.
 */
export function hostMiddleware({ services, readiness, logger, authenticatedLimiter }: HostMiddlewareParts, permission?: string, options: HostMiddlewareOptions = {}): RequestHandler {
  if (permission !== undefined && !services.catalog.has(permission)) {
    throw new TypeError(`requirePermission: "${permission}" is not in the permission catalog; add it to config.permissions`);
  }
  const requirement: AccessRequirement = {
    auth: 'bearer',
    ...(permission === undefined ? { actsInActiveOrganization: true } : { permission }),
    ...(options.apiKeys ? { acceptsApiKeys: true } : {}),
    refusesLockedAccount: true,
  };
  const answerError = errorHandler(logger);
  // Each middleware has its own requirement, so its own remembered admissions.
  hostMiddlewares += 1;
  const middlewareKey = `admission:${hostMiddlewares}:`;
  // One handler rather than a Router of steps: this runs before every host route. Its decision
  // runs within the request's own event while every read is in memory, and the host's handler
  // is called there; the first read that has to wait turns the rest into a promise
  // (services/access/decision-steps.ts).
  function admit(req: Request, res: Response): Answer<HostAdmission> {
    const credential = presentedCredential(req);
    if (credential.kind === 'none') throw errors.unauthorized();
    // An API key is decided every time, its rate-limit budget with it. An access token admitted
    // here before is answered as it was while nothing it was decided from has changed
    // (AccessPolicy.admitRemembered).
    if (credential.kind === 'api_key') return decide(admission(req, res, credential));
    return services.policy.admitRemembered(middlewareKey, credential.token, () => decide(admission(req, res, credential)));
  }
  function* admission(req: Request, res: Response, credential: AdmissionCredential): Steps<HostAdmission> {
    // Each key has its own budget in the `authenticated` group (docs/api-keys.md), counted before
    // the permission check so a key probing for permissions spends it too.
    const grant = yield* services.policy.admission(credential, requirement, { organizationFromCaller: true }, (actor) => {
      if (actor.kind === 'session') return;
      setApiKeyPrincipal(res, actor);
      return countAgainst(authenticatedLimiter, req, res);
    });
    const { actor } = grant;
    const authority = grant.authority ?? (actor.kind === 'session' ? yield* read(services.policy.authorityOf(actor)) : undefined);
    return { actor, caller: services.policy.caller(actor, authority) };
  }
  const admitWhenReady = (req: Request, res: Response): Promise<HostAdmission> =>
    readiness.ensure().then(
      () => admit(req, res),
      (error: unknown) => {
        throw errors.unavailable(error);
      },
    );
  return (req, res, next) => {
    let admitted: Answer<HostAdmission>;
    try {
      admitted = readiness.ready ? admit(req, res) : admitWhenReady(req, res);
    } catch (error) {
      answerError(error, req, res, next);
      return;
    }
    if (admitted instanceof Promise) {
      admitted.then(
        ({ caller }) => {
          (req as RequestWithCaller)[CALLER] = caller;
          next();
        },
        (error: unknown) => answerError(error, req, res, next),
      );
    } else {
      (req as RequestWithCaller)[CALLER] = admitted.caller;
      next();
    }
  };
}
