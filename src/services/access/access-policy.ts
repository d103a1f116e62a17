import { apiKeyDigest, isApiKeyShaped } from '../../crypto/api-key.js';
import { errors, type IdentityError } from '../../errors.js';
import { ISSUED_AHEAD_TOLERANCE_MS } from '../../clock.js';
import type { AccessTokenClaims } from '../../crypto/jwt.js';
import { isLiveSession, type SessionRecord } from '../../store/session-repository.js';
import type { Repositories } from '../../store/store.js';
import type { UserRecord } from '../../store/user-repository.js';
import { type AccessReads, type GateReads, uncachedReads } from './access-reads.js';
import { type Answer, decide, decideLater, read, type Steps } from './decision-steps.js';
import { assertHoldsEveryKey, type ResolvedAuthority } from './authority.js';
import type { ServiceContext } from '../shared/service-context.js';
import { isWellFormedId } from '../shared/ids.js';
import { OWNER_ROLE_SLUG, type PermissionCatalog } from './permission-catalog.js';
import type { Principal } from './principal.js';
import type { SignInRules } from './sign-in-rules.js';

/**
 * The one access policy. Every operation declares what it needs in an
 * `AccessRequirement`; this module alone evaluates it, for the router's routes and for the
 * host middleware (`identity.authenticate`, `identity.requirePermission(key)`) alike.
 * Services evaluate the data-dependent predicates (step-up for an owner-equivalent role,
 * a second factor) through the same functions, inside the transaction whose write they
 * guard. Patterns: better-auth `has-permission.ts` + `orgMiddleware`, node-oidc-provider
 * `grant_common.js`.
 *
 * The rules are written as steps that yield their reads (decision-steps.ts): the same steps
 * decide from the access cache within the request's event, or from the database and the
 * transaction's repositories after waiting.
 */
export interface AccessRequirement {
  /** docs/security.md: public, bearer (access token of a live session), ticket (MFA ticket). */
  auth: 'public' | 'bearer' | 'ticket';
  /**
   * Organization scope: the permission the caller needs in the organization (the path's
   * `orgId` on router routes, the token's active organization in host middleware). The
   * organization must be the caller's active one (superadmins exempt), exist, and its
   * `require_mfa` must be met by the session.
   */
  permission?: string;
  /**
   * Organization scope without a particular permission: the caller must be an active member
   * of the path's organization, which must be its active one (superadmins are not exempt:
   * what such a route makes belongs to a member), exist, and have its `require_mfa` met.
   * The API-key routes (docs/api-keys.md); data-dependent rules (whose keys) are the service's.
   */
  member?: boolean;
  /** Always needs a recent strong authentication (docs/security.md). Conditional step-up is evaluated by the service with `assertStepUp`. */
  stepUp?: boolean;
  /**
   * Adds a credential to the account: the one gate of the credential lifecycle
   * (docs/security.md, "One credential lifecycle"). A verified e-mail always (403
   * `email_unverified`); for a `sign_in_method` (passkey, provider link, API key), a fresh
   * authentication from a session single sign-on allows; for a `sign_in_connection` (a verified
   * domain, an SSO connection), a fresh authentication; for a `second_factor` (TOTP, SMS,
   * e-mail), step-up once a factor exists.
   * It is evaluated again inside the write's transaction: by `grant.recheck`, which reads the
   * user's row there, or by `assertMayAddCredential` under the user's row lock.
   */
  addsCredential?: CredentialKind;
  /** Answers while MFA enrollment is pending under enforcement (docs/security.md). */
  allowedDuringEnrollment?: boolean;
  /**
   * Host middleware: the request acts in the token's active organization, so that
   * organization's `require_mfa` applies even without a permission (docs/getting-started.md).
   */
  actsInActiveOrganization?: boolean;
  /**
   * Host middleware opted in with `{apiKeys: true}` (docs/api-keys.md). The router's own routes
   * never set it: they refuse every key.
   */
  acceptsApiKeys?: boolean;
  /**
   * A user named in the path (`/users/:userId`): the caller themself, or a caller holding
   * `permission` globally (docs/users.md). `self: false` admits no one on their own account's
   * behalf; `exceptFields` lists body fields that only the permission may send, even to oneself.
   */
  user?: { permission: 'users.read' | 'users.manage'; self: boolean; exceptFields?: readonly string[] };
  /**
   * The organization named in the body's `organization_id` (switch-org): the caller must be
   * an active member of it (a superadmin may enter any), it must exist, and its `require_mfa`
   * is met as on every route scoped to it, grace enrollment included.
   */
  entersOrganization?: boolean;
  /** The account must not be locked (host middleware: a lockout refuses every credential, docs/getting-started.md). */
  refusesLockedAccount?: boolean;
}

/** What a caller presented: a session's access token, or an API key. */
export type AdmissionCredential = { kind: 'access_token'; token: string } | { kind: 'api_key'; key: string };

/** What a request names that a requirement is evaluated against. */
export interface AccessTarget {
  /** The path's `:orgId` (router routes), or the token's active organization (host middleware). */
  organizationId?: string | undefined;
  /** The path's `:userId`. */
  userId?: string | undefined;
  /**
   * The request body, validated by the route's schema when a requirement first reads it (a
   * malformed body answers 422 at that point, as it would before the service).
   */
  body?: () => unknown;
  /** Host middleware: the organization is the caller's own, from its token or its API key. */
  organizationFromCaller?: boolean;
}

/**
 * What the policy admitted, carried with the call: the caller, the organization, the
 * authority resolved for this request and the declared requirement. A service that writes
 * calls `recheck` inside its transaction, after taking its row locks, and the same declared
 * rule is evaluated again against the database, with the caller's session still live (its row
 * locked last: `assertSessionLive`); no service holds a copy of a permission key.
 */
export interface AccessGrant {
  readonly actor: Actor;
  readonly requirement: AccessRequirement;
  /** The organization the requirement was evaluated in, if it names one. */
  readonly organizationId: string | undefined;
  /** The caller's authority in that organization, resolved once for this request. */
  readonly authority: ResolvedAuthority | undefined;
  /** The session caller; router routes admit only sessions. */
  readonly principal: Principal;
  /** The declared rule again, against `repos` (the caller's transaction): answers the fresh authority, or throws as admission would. */
  recheck(repos: Repositories): Promise<ResolvedAuthority>;
}

/** Sorted once per authority (the access cache shares one between requests); each caller gets its own copy. */
const sortedPermissionLists = new WeakMap<ResolvedAuthority, readonly string[]>();

function sortedPermissions(authority: ResolvedAuthority): string[] {
  let sorted = sortedPermissionLists.get(authority);
  if (!sorted) {
    sorted = [...authority.permissions].sort();
    sortedPermissionLists.set(authority, sorted);
  }
  return [...sorted];
}

/** A class rather than an object literal with a getter: one is made on every admitted request. */
class AdmittedGrant implements AccessGrant {
  constructor(
    readonly actor: Actor,
    readonly requirement: AccessRequirement,
    readonly organizationId: string | undefined,
    readonly authority: ResolvedAuthority | undefined,
    readonly recheck: (repos: Repositories) => Promise<ResolvedAuthority>,
  ) {}

  get principal(): Principal {
    if (this.actor.kind !== 'session') throw new Error('an API key reached a route that admits sessions only');
    return this.actor;
  }
}

/**
 * What a new credential does for whoever holds it. A `sign_in_method` opens or acts as the
 * account on its own, so a stale, stolen access token must never mint one (docs/mfa.md and docs/social-login.md,
 * 10): it needs a fresh authentication, from a session single sign-on still allows (docs/sso.md:
 * one from before enforcement ends at its next refresh, and what it added would not). A
 * `sign_in_connection` (an organization's verified domain or IdP) signs other people in: a fresh
 * authentication too, but an administrator's session from before enforcement may still mend it.
 * A `second_factor` only completes a sign-in; docs/mfa.md lets a bearer enroll the first one, and
 * step-up guards every later one (docs/security.md).
 */
export type CredentialKind = 'sign_in_method' | 'sign_in_connection' | 'second_factor';

/**
 * The actor behind an API key (docs/api-keys.md): one member of one organization, with no
 * session. Its authority is never stored: `authorize` intersects `keyPermissions` with the
 * owner's live authority on every request.
 */
export interface ApiKeyPrincipal {
  kind: 'api_key';
  userId: string;
  organizationId: string;
  apiKeyId: string;
  keyPermissions: readonly string[];
  lastUsedAt: number | null;
  /** What the enrollment gate needs, read in the same query as the key. */
  owner: { mfaEnforced: boolean; hasConfirmedFactor: boolean; inMfaRequiringOrganization: boolean };
}

/** Whoever a request acts as: a session (access token) or an API key. */
export type Actor = Principal | ApiKeyPrincipal;

/**
 * The caller the host middleware sets (docs/getting-started.md and docs/api-keys.md), read with `identity.caller(req)`.
 * A union on `kind`.
 */
export type Caller = SessionCaller | ApiKeyCaller;

/** A request made with an API key (docs/api-keys.md). */
export interface ApiKeyCaller {
  kind: 'api_key';
  /** The key's owner. */
  user_id: string;
  /** The key's organization. */
  organization_id: string;
  api_key_id: string;
  /** The key's permission keys that its owner holds there, resolved from the database for this request. */
  permissions: string[];
}

export interface SessionCaller {
  kind: 'session';
  user_id: string;
  session_id: string;
  /** The token's active organization, or null. */
  organization_id: string | null;
  /** The session passed a second factor. */
  mfa: boolean;
  amr: string[];
  /** Seconds since the epoch of the last strong authentication. */
  auth_time: number;
  email_verified: boolean;
  superadmin: boolean;
  /** Permission keys in `organization_id`, resolved from the database for this request. */
  permissions: string[];
}

/**
 * Owner-equivalence (docs/security.md): the `owner` system role, or any role holding `org.delete`
 * or `roles.manage`, whose holder can take the organization over. Creating, editing,
 * inviting with or granting such a role needs step-up.
 */
export function isOwnerEquivalent(role: { slug: string; isSystem: boolean; permissionKeys: readonly string[] }): boolean {
  // sso.manage too (docs/sso.md): whoever controls the IdP can sign in as anyone at the domain, owners included.
  return (role.isSystem && role.slug === OWNER_ROLE_SLUG) || role.permissionKeys.includes('org.delete') || role.permissionKeys.includes('roles.manage') || role.permissionKeys.includes('sso.manage');
}

/**
 * docs/sso.md: a connection's JIT default role is granted to everyone its IdP vouches for, so it
 * may not be owner-equivalent (the IdP would mint owners): 422, when the connection names it and
 * whenever the role it names is made or edited later.
 */
export function assertFitsSsoDefaultRole(role: { slug: string; isSystem: boolean; permissionKeys: readonly string[] }): void {
  if (isOwnerEquivalent(role)) throw errors.validation([`default_role "${role.slug}" must not hold org.delete, roles.manage or sso.manage`]);
}

/** Whether an actor manages the organization's members, and so their API keys too (docs/api-keys.md). */
export function managesMembers(authority: ResolvedAuthority): boolean {
  return authority.permissions.has('members.update');
}

/** The `owner` system role itself (last-owner invariants are about this role). */
export function isOwnerRole(role: { slug: string; isSystem: boolean }): boolean {
  return role.isSystem && role.slug === OWNER_ROLE_SLUG;
}

/** Whether an actor may change, suspend or remove a member holding the owner role (docs/organizations.md invariant 2). */
export function mayActOnOwner(actor: { superadmin: boolean; member: boolean; roles: readonly string[] }): boolean {
  return actor.superadmin || (actor.member && actor.roles.includes(OWNER_ROLE_SLUG));
}

/** May-authenticate: an account that is active and not deleted. Locks are checked where a secret is compared. */
export function mayAuthenticate(user: { status: string; deletedAt: number | null }): boolean {
  return user.status === 'active' && user.deletedAt === null;
}

/** A host middleware's admission of a request: who acts, and the caller its handler sees. */
export interface HostAdmission {
  actor: Actor;
  caller: Caller;
}

/** An admission kept in the access cache (`AccessPolicy.admitRemembered`), with what no event marks. */
interface KeptAdmission {
  token: string;
  /** The token's remembered claims: the same object while the token still verifies from memory. */
  claims: AccessTokenClaims;
  /** The session as the admission read it, for its end. */
  session: SessionRecord;
  admission: HostAdmission;
}

/** Read-only for the host: a caller may be handed to later requests with the same token. */
const frozen = <T>(values: T[]): T[] => Object.freeze(values) as T[];

/** Kept admissions are found by the last characters of the token's signature, and count only if the whole token is equal. */
const ADMISSION_TOKEN_TAIL = 32;

/** `last_used_at` is written at most this often per key, so a busy key does not write on every request. */
const API_KEY_LAST_USED_RESOLUTION_MS = 60_000;
/** Keys whose last write this instance remembers; past it the memory starts over (a key then writes once more). */
const API_KEY_TOUCHES_REMEMBERED = 10_000;
/** Digests of keys that were found, remembered per presented key (oldest out first). */
const API_KEY_DIGESTS_REMEMBERED = 4_096;

/** The router's own routes, and host routes that did not opt in, never take a key (docs/api-keys.md). */
export function apiKeyNotAccepted(): IdentityError {
  return errors.unauthorized('API keys are accepted only by host routes that opt in with {apiKeys: true}.');
}

/** Every way a key can have stopped working answers the same, so a probe learns nothing. */
function apiKeyStopped(): IdentityError {
  return errors.unauthorized('The API key is invalid, expired or revoked.');
}

export class AccessPolicy {
  /**
   * When this instance last wrote each key's `last_used_at`. The cached key row keeps the
   * value it was read with for up to a second, and without this every request in that
   * second would issue the (then empty) update again.
   */
  private readonly apiKeyTouchedAt = new Map<string, number>();
  /**
   * The HMAC of a key presented before, as the JWT codec remembers verified tokens: the digest
   * is a pure function of the key, so this only saves its computation; whether the key is
   * still live is read every time. Only keys that were found are remembered, so random
   * guesses cannot fill it. It holds presented keys in memory, as the request did, next to
   * `config.secret`, from which every digest can be made anyway.
   */
  private readonly apiKeyDigests = new Map<string, string>();

  constructor(
    private readonly context: ServiceContext,
    private readonly catalog: PermissionCatalog,
    private readonly reads: AccessReads,
    private readonly signInRules: SignInRules,
  ) {}

  /** A verified access token whose session is live and whose user may authenticate; otherwise 401. */
  authenticate(token: string): Promise<Principal> {
    return decideLater(this.authenticating(token));
  }

  private *authenticating(token: string): Steps<Principal> {
    const claims = yield* read(this.context.jwt.verifyAccessToken(token));
    if (!claims) throw errors.unauthorized('The access token is invalid or expired.');
    // Through the access cache (docs/multiple-instances.md): every revocation invalidates it after commit.
    const found = yield* read(this.reads.liveSession(claims.sid));
    if (!found || found.session.userId !== claims.sub) throw errors.unauthorized('The session behind this token has ended.');
    const { session, user } = found;
    if (!mayAuthenticate(user)) throw errors.unauthorized('The account is not active.');
    return { kind: 'session', userId: user.id, sessionId: session.id, organizationId: claims.org ?? null, mfa: session.mfa && claims.mfa, amr: session.amr, authTime: tokenAuthTime(claims.auth_time, session.authTime), user };
  }

  /**
   * A presented API key → its actor, or 401 once it has stopped working: revoked, expired by
   * the injected clock, owner no longer allowed to authenticate (disabled, deleted), or
   * organization deleted. Membership and permissions are `authorize`'s. One indexed query on
   * the key's hash, through the access cache, which the key's revocation and every change to its
   * owner or organization clear on every instance (CONTRACT 7); the expiry is read from the clock.
   */
  private *authenticateApiKey(presented: string, requirement: AccessRequirement): Steps<ApiKeyPrincipal> {
    if (!requirement.acceptsApiKeys) throw apiKeyNotAccepted();
    let digest = this.apiKeyDigests.get(presented);
    if (digest === undefined) {
      if (!isApiKeyShaped(presented)) throw apiKeyStopped();
      digest = apiKeyDigest(this.context.keys.apiKeyHash, presented);
    }
    const found = yield* read(this.reads.apiKeyForUse(digest));
    if (!found) throw apiKeyStopped();
    if (!this.apiKeyDigests.has(presented)) {
      if (this.apiKeyDigests.size >= API_KEY_DIGESTS_REMEMBERED) this.apiKeyDigests.delete(this.apiKeyDigests.keys().next().value!);
      this.apiKeyDigests.set(presented, digest);
    }
    const { key, owner } = found;
    // A key made "in the future" (by a clock since stepped back) is refused, as an access token
    // whose `iat` is: its expiry would lie past the longest lifetime any key can have.
    const now = this.context.clock.now();
    if (key.revokedAt !== null || key.expiresAt <= now || key.createdAt > now + ISSUED_AHEAD_TOLERANCE_MS) throw apiKeyStopped();
    if (!mayAuthenticate(owner) || !found.organizationActive) throw apiKeyStopped();
    // A locked account is refused by the host middleware, whichever credential it presents (docs/getting-started.md).
    this.assertNotLocked(owner);
    return {
      kind: 'api_key',
      userId: key.userId,
      organizationId: key.organizationId,
      apiKeyId: key.id,
      keyPermissions: key.permissionKeys,
      lastUsedAt: key.lastUsedAt,
      owner: { mfaEnforced: owner.mfaEnforced, hasConfirmedFactor: owner.hasConfirmedFactor, inMfaRequiringOrganization: owner.inMfaRequiringOrganization },
    };
  }

  /**
   * Evaluates a requirement for an authenticated caller, in this order: a locked account
   * (host middleware), grace enrollment, the organization entered (switch-org) or the
   * organization scope (active organization, existence, `require_mfa`, permission or
   * membership), step-up, the credential gate, the user named in the path. Superadmin is
   * resolved once. Answers the caller's authority and the organization it was resolved in.
   */
  private *authorize(actor: Actor, requirement: AccessRequirement, target: AccessTarget): Steps<{ authority: ResolvedAuthority | undefined; organizationId: string | undefined }> {
    const organizationId = target.organizationFromCaller ? (actor.organizationId ?? undefined) : target.organizationId;
    if (actor.kind === 'api_key') return { authority: yield* this.authorizeApiKey(actor, requirement), organizationId: actor.organizationId };
    const principal = actor;
    const repos = this.reads;
    if (requirement.refusesLockedAccount) this.assertNotLocked(principal.user);
    if (!requirement.allowedDuringEnrollment) yield* this.assertEnrollmentNotPending(repos, principal);
    let authority: ResolvedAuthority | undefined;
    if (requirement.entersOrganization) {
      const entered = enteredOrganization(target.body?.());
      if (entered === undefined) throw errors.validation(['"organization_id" is required']);
      authority = yield* this.authorizeEntry(repos, principal, entered);
      return { authority, organizationId: entered };
    }
    if (requirement.permission !== undefined || requirement.member) {
      if (organizationId === undefined) throw errors.noActiveOrganization();
      authority = yield* this.authorizeInOrganization(repos, principal, organizationId, requirement, target.organizationFromCaller === true);
    } else if (requirement.actsInActiveOrganization && principal.organizationId !== null) {
      authority = yield* read(repos.authority(this.catalog, principal.userId, principal.organizationId));
      // docs/getting-started.md: a host that scopes data by the caller's organization never serves one the
      // user has left, though the session lives on until its token expires.
      if (!authority.member && !authority.superadmin) throw leftTokenOrganization();
      // A superadmin needs no membership, but the organization must still exist: a deleted one is
      // 403 here as on requirePermission(), never served to the host (an active membership implies it).
      if (!authority.member && !(yield* read(repos.activeOrganization(principal.organizationId)))) throw leftTokenOrganization();
      // Every request scoped to an organization meets its MFA policy, host middleware included.
      yield* this.assertOrganizationMfa(repos, principal, principal.organizationId);
    }
    if (requirement.stepUp) yield* this.assertStepUpWith(repos, principal);
    if (requirement.addsCredential) yield* this.assertMayAddCredentialWith(repos, principal, principal.user.emailVerified, requirement.addsCredential);
    // After step-up, as the service decided it before: a stale session hears step_up_required first.
    // Uncached, as before: a superadmin grant or revocation counts from the next request.
    if (requirement.user) authority = yield* this.authorizeOnUser(uncachedReads(this.context.store.repos), principal, requirement.user, target);
    return { authority, organizationId: requirement.permission !== undefined || requirement.member ? organizationId : (principal.organizationId ?? undefined) };
  }

  /**
   * The one sequence of checks, for the router's routes and the host middleware alike:
   * authenticate the presented credential (a session's access token, or an API key where the
   * requirement accepts one), run `afterAuthentication` (the per-caller rate limit, so a probe
   * spends its budget before it learns anything), then evaluate the requirement. Answers the
   * grant the route hands to its service: at once when every read was in memory, else a
   * promise; a refusal before any wait is thrown at once (decision-steps.ts).
   */
  admit(
    credential: AdmissionCredential,
    requirement: AccessRequirement,
    target: AccessTarget,
    afterAuthentication?: (actor: Actor) => Answer<void>,
  ): Answer<AccessGrant> {
    return decide(this.admission(credential, requirement, target, afterAuthentication));
  }

  /** The steps of `admit`, for the host middleware, which runs them among its own. */
  *admission(
    credential: AdmissionCredential,
    requirement: AccessRequirement,
    target: AccessTarget,
    afterAuthentication: ((actor: Actor) => Answer<void>) | undefined,
  ): Steps<AccessGrant> {
    const actor: Actor = credential.kind === 'api_key' ? yield* this.authenticateApiKey(credential.key, requirement) : yield* this.authenticating(credential.token);
    if (afterAuthentication) yield* read(afterAuthentication(actor));
    const { authority, organizationId } = yield* this.authorize(actor, requirement, target);
    return this.grant(actor, requirement, organizationId, authority, target);
  }

  private grant(actor: Actor, requirement: AccessRequirement, organizationId: string | undefined, authority: ResolvedAuthority | undefined, target: AccessTarget): AccessGrant {
    return new AdmittedGrant(actor, requirement, organizationId, authority, (repos) => decideLater(this.recheck(actor, requirement, organizationId, target, repos)));
  }

  /**
   * The declared rule of an admitted request, evaluated again inside the caller's
   * transaction: authority is read from `repos`, so a role or membership changed since
   * admission (and committed before the caller's row locks) is seen.
   */
  private *recheck(actor: Actor, requirement: AccessRequirement, organizationId: string | undefined, target: AccessTarget, repos: Repositories): Steps<ResolvedAuthority> {
    const reads = uncachedReads(repos);
    // In admission's order (`authorize`): entering an organization decides alone; otherwise the
    // organization's rule, then the credential gate, then the user named in the path.
    if (requirement.entersOrganization) {
      const authority = yield* read(reads.authority(this.catalog, actor.userId, organizationId ?? null));
      if (!authority.member && !authority.superadmin) throw notMemberOf();
      if (organizationId !== undefined) yield* this.assertOrganizationMfa(reads, actor as Principal, organizationId);
      return authority;
    }
    let authority: ResolvedAuthority | undefined;
    if (!requirement.user) {
      authority = yield* read(reads.authority(this.catalog, actor.userId, organizationId ?? null));
      if (requirement.member && !authority.member) throw errors.forbidden('Only an active member of the organization can do this.');
      if (requirement.permission !== undefined && !authority.permissions.has(requirement.permission)) throw errors.forbidden();
    }
    if (actor.kind === 'session') {
      // A sign-in gone stale, or an address no longer proven, while the request waited.
      if (requirement.addsCredential) yield* this.credentialGate(repos, actor, requirement.addsCredential);
      // A session its owner ended while the request waited writes nothing (the gate asks it too).
      else yield* this.sessionStillLive(repos, actor);
    }
    if (requirement.user) authority = yield* this.authorizeOnUser(reads, actor as Principal, requirement.user, target);
    return authority!;
  }

  /**
   * The credential gate again, inside the transaction that adds the credential (the user's
   * row locked by the caller): the address is read from that row, so a proof or a change
   * between the request's admission and its write cannot slip through.
   */
  assertMayAddCredential(repos: Repositories, principal: Principal, kind: CredentialKind): Promise<void> {
    return decideLater(this.credentialGate(repos, principal, kind));
  }

  private *credentialGate(repos: Repositories, principal: Principal, kind: CredentialKind): Steps<void> {
    yield* this.sessionStillLive(repos, principal);
    const user = yield* read(repos.users.findById(principal.userId));
    yield* this.assertMayAddCredentialWith(uncachedReads(repos), principal, user?.emailVerified === true, kind, repos);
  }

  /**
   * The caller's session is still live, its row locked until the caller's transaction ends
   * (docs/security.md, "Refresh tokens and sessions"): a logout, logout-all or revocation that
   * committed after the request was admitted refuses its write, and one that comes later waits
   * for the write and then ends the session with the rest. Callers that lock the organization's
   * or the user's row take it first, as every revocation of sessions does, so the session's lock
   * never waits while holding one a revocation needs.
   */
  assertSessionLive(repos: Repositories, principal: Principal): Promise<void> {
    return decideLater(this.sessionStillLive(repos, principal));
  }

  private *sessionStillLive(repos: Repositories, principal: Principal): Steps<void> {
    if ((yield* read(repos.sessions.lockLive(principal.sessionId, this.context.clock.now()))) === undefined) throw errors.unauthorized('The session behind this token has ended.');
  }

  private *assertMayAddCredentialWith(reads: GateReads, principal: Principal, emailVerified: boolean, kind: CredentialKind, repos?: Repositories): Steps<void> {
    // First, because signing in again would not help: only the owner's proof of the address does.
    if (!emailVerified) throw errors.emailUnverified('Verify your e-mail address before adding a way to sign in or a second factor.');
    if (kind === 'second_factor') {
      yield* this.assertStepUpWith(reads, principal);
      return;
    }
    if (kind === 'sign_in_method') yield* read(this.signInRules.assertSessionAllowed(principal.user, principal.sessionId, 403, repos));
    yield* this.assertFreshAuthenticationWith(reads, principal);
  }

  /** docs/getting-started.md: the host middleware refuses a locked account while the lockout lasts (router routes show it as `status: locked`). */
  private assertNotLocked(account: { lockedUntil: number | null }): void {
    const { lockedUntil } = account;
    if (lockedUntil !== null && lockedUntil > this.context.clock.now()) throw errors.unauthorized('The account is locked.');
  }

  /**
   * Step-up (docs/security.md): the session's last strong authentication must be recent. A user
   * without a confirmed factor has nothing to step up with and passes. Pass the unit of
   * work's repositories when the decision guards a write in that transaction.
   */
  assertStepUp(repos: Repositories, principal: Principal): Promise<void> {
    return decideLater(this.assertStepUpWith(uncachedReads(repos), principal));
  }

  /**
   * Putting roles in a member's hands: a role change's added roles, an invitation's, and a
   * suspended member's owner-equivalent ones at reactivation. No escalation (SPEC 3 rule 1:
   * only permissions the actor holds, 403), and step-up for an owner-equivalent role
   * (docs/organizations.md: ownership transfer). Called inside the write's transaction, after
   * `grant.recheck`.
   */
  async assertMayGrantRoles(repos: Repositories, principal: Principal, actor: ResolvedAuthority, roles: readonly { slug: string; isSystem: boolean; permissionKeys: readonly string[] }[]): Promise<void> {
    for (const role of roles) assertHoldsEveryKey(actor, role.permissionKeys);
    if (roles.some(isOwnerEquivalent)) await this.assertStepUp(repos, principal);
  }

  private *assertStepUpWith(reads: GateReads, principal: Principal): Steps<void> {
    if (this.stepUpFresh(principal)) return;
    if (!(yield* read(reads.hasConfirmedFactor(principal.userId)))) return;
    throw errors.stepUpRequired();
  }

  /**
   * Fresh authentication (docs/social-login.md): like step-up, but a user without a factor is not
   * waved through: a sign-in older than `security.stepUp.maxAge` must be repeated.
   */
  private *assertFreshAuthenticationWith(reads: GateReads, principal: Principal): Steps<void> {
    if (this.stepUpFresh(principal)) return;
    if (yield* read(reads.hasConfirmedFactor(principal.userId))) throw errors.stepUpRequired();
    throw errors.reauthenticationRequired();
  }

  /** The step-up need, in one place: a strong authentication within `security.stepUp.maxAge`. */
  stepUpFresh(principal: Pick<Principal, 'authTime'>): boolean {
    return this.context.clock.now() - principal.authTime <= this.context.config.security.stepUp.maxAge * 1000;
  }

  /** docs/security.md: global enforcement, the per-user flag, or an organization that requires MFA. */
  isMfaEnforcedFor(repos: Repositories, user: { id: string; mfaEnforced: boolean }): Promise<boolean> {
    return decideLater(this.isMfaEnforcedWith(uncachedReads(repos), user));
  }

  private *isMfaEnforcedWith(reads: GateReads, user: { id: string; mfaEnforced: boolean }): Steps<boolean> {
    return yield* this.mfaEnforced(user, () => reads.belongsToMfaRequiringOrganization(user.id));
  }

  /**
   * "MFA is enforced for a user", written once (docs/mfa.md): `mfa.enforce`, the user's own
   * flag, or an active membership of an organization that requires MFA. The membership is
   * asked last, and only when the cheaper answers did not settle it.
   */
  private *mfaEnforced(user: { mfaEnforced: boolean }, inMfaRequiringOrganization: () => Answer<boolean>): Steps<boolean> {
    if (this.context.config.mfa.enforce || user.mfaEnforced) return true;
    return yield* read(inMfaRequiringOrganization());
  }

  /**
   * A host middleware's admission of an access token, remembered (docs/performance.md). The
   * first request with a token is decided by `decideAdmission`, the policy's steps. When every
   * read of that decision was answered by a fresh access-cache entry, its outcome is kept in the
   * cache under the union of those entries' scopes, until the first of them expires: any change
   * that would have made one of them stale makes it stale too (CONTRACT section 7). Later
   * requests with the same token through the same middleware get that outcome while it is
   * fresh, the token still verifies from memory (its time, its key still published) and its
   * session has not reached its end, which are what no event marks. Refusals are never kept.
   */
  admitRemembered(middlewareKey: string, token: string, decideAdmission: () => Answer<HostAdmission>): Answer<HostAdmission> {
    const cache = this.context.accessCache;
    const key = `${middlewareKey}${token.slice(-ADMISSION_TOKEN_TAIL)}`;
    const kept = cache.peek<KeptAdmission>(key);
    if (kept && kept.token === token && this.stillAdmits(kept)) return kept.admission;
    const derivation = cache.beginDerivation();
    let admission: Answer<HostAdmission>;
    try {
      admission = decideAdmission();
    } finally {
      cache.endDerivation(derivation);
    }
    if (!(admission instanceof Promise) && admission.actor.kind === 'session') {
      const claims = this.context.jwt.rememberedClaims(token);
      const found = this.reads.keptSession(admission.actor.sessionId);
      if (claims && found) cache.keepDerived(key, { token, claims, session: found.session, admission } satisfies KeptAdmission, derivation);
    }
    return admission;
  }

  private stillAdmits(kept: KeptAdmission): boolean {
    return this.context.jwt.rememberedClaims(kept.token) === kept.claims && isLiveSession(kept.session, this.context.clock.now());
  }

  /** The caller as the host middleware exposes it. */
  caller(actor: Actor, authority: ResolvedAuthority | undefined): Caller {
    if (actor.kind === 'api_key') {
      return Object.freeze({ kind: 'api_key', user_id: actor.userId, organization_id: actor.organizationId, api_key_id: actor.apiKeyId, permissions: frozen(authority ? sortedPermissions(authority) : []) });
    }
    const principal = actor;
    return Object.freeze({
      kind: 'session',
      user_id: principal.userId,
      session_id: principal.sessionId,
      organization_id: principal.organizationId,
      mfa: principal.mfa,
      amr: frozen([...principal.amr]),
      auth_time: Math.floor(principal.authTime / 1000),
      email_verified: principal.user.emailVerified,
      superadmin: authority?.superadmin ?? false,
      permissions: frozen(authority ? sortedPermissions(authority) : []),
    });
  }

  /**
   * A live session and its user, as the request gates read them: through the access cache,
   * which every revocation invalidates (docs/multiple-instances.md).
   */
  liveSession(sessionId: string): Answer<{ session: SessionRecord; user: UserRecord } | undefined> {
    return this.reads.liveSession(sessionId);
  }

  /** A user's live authority in an organization, through the access cache (every change to it invalidates the cache). */
  authorityIn(userId: string, organizationId: string | null): Answer<ResolvedAuthority> {
    return this.reads.authority(this.catalog, userId, organizationId);
  }

  /** Resolves the caller's authority (for `caller()`) when the requirement did not. */
  authorityOf(principal: Principal): Answer<ResolvedAuthority> {
    return this.reads.authority(this.catalog, principal.userId, principal.organizationId);
  }

  /**
   * Self, or the permission held globally (no organization: only a superadmin's authority has
   * it). Decided before the target is looked up, so a caller without the permission learns
   * nothing about which ids exist.
   */
  private *authorizeOnUser(reads: GateReads, principal: Principal, rule: NonNullable<AccessRequirement['user']>, target: AccessTarget): Steps<ResolvedAuthority> {
    const body = rule.exceptFields ? target.body?.() : undefined;
    const sendsRestrictedField = rule.exceptFields?.some((field) => bodyHas(body, field)) ?? false;
    const authority = yield* read(reads.authority(this.catalog, principal.userId, null));
    if (rule.self && !sendsRestrictedField && target.userId === principal.userId) return authority;
    if (!authority.permissions.has(rule.permission)) throw errors.forbidden();
    return authority;
  }

  /** Entering an organization (switch-org): it exists, the caller belongs to it, and its MFA policy is met. */
  private *authorizeEntry(reads: GateReads, principal: Principal, organizationId: string): Steps<ResolvedAuthority> {
    const organization = yield* read(reads.activeOrganization(organizationId));
    if (!organization) throw errors.notFound('Organization');
    const authority = yield* read(reads.authority(this.catalog, principal.userId, organizationId));
    if (!authority.member && !authority.superadmin) throw notMemberOf();
    if (organization.requireMfa) yield* this.assertSessionMeetsOrganizationMfa(reads, principal);
    return authority;
  }

  /**
   * A key's authority in its organization: the owner must still be an active member (else
   * the key has stopped: 401), grace enrollment binds the owner's keys as it binds the
   * owner's sessions, a key never passes step-up, and the permissions are the key's
   * intersected with the owner's live ones (403 for one it lacks).
   */
  private *authorizeApiKey(actor: ApiKeyPrincipal, requirement: AccessRequirement): Steps<ResolvedAuthority> {
    const owner = yield* read(this.reads.authority(this.catalog, actor.userId, actor.organizationId));
    if (!owner.member) throw apiKeyStopped();
    const mfaEnforced = yield* this.mfaEnforced(actor.owner, () => actor.owner.inMfaRequiringOrganization);
    if (!requirement.allowedDuringEnrollment && mfaEnforced && !actor.owner.hasConfirmedFactor) throw mfaEnrollmentRequired();
    const now = this.context.clock.now();
    const lastUsedAt = Math.max(actor.lastUsedAt ?? Number.NEGATIVE_INFINITY, this.apiKeyTouchedAt.get(actor.apiKeyId) ?? Number.NEGATIVE_INFINITY);
    if (now - lastUsedAt >= API_KEY_LAST_USED_RESOLUTION_MS) {
      if (this.apiKeyTouchedAt.size >= API_KEY_TOUCHES_REMEMBERED) this.apiKeyTouchedAt.clear();
      this.apiKeyTouchedAt.set(actor.apiKeyId, now);
      yield* read(this.context.store.repos.apiKeys.touchLastUsed(actor.apiKeyId, now, API_KEY_LAST_USED_RESOLUTION_MS));
    }
    if (requirement.stepUp) throw errors.stepUpRequired();
    const permissions = new Set(actor.keyPermissions.filter((permission) => owner.permissions.has(permission)));
    if (requirement.permission !== undefined && !permissions.has(requirement.permission)) throw errors.forbidden();
    // Object.assign: a spread followed by more properties is slow on Node 20 (docs/performance.md).
    return Object.assign({}, owner, { permissions });
  }

  /** Grace enrollment (docs/security.md): while MFA is enforced and no factor is confirmed, only the enrollment routes answer. */
  private *assertEnrollmentNotPending(reads: GateReads, principal: Principal): Steps<void> {
    if (principal.mfa) return;
    if (!(yield* this.isMfaEnforcedWith(reads, principal.user))) return;
    if (yield* read(reads.hasConfirmedFactor(principal.userId))) return;
    throw mfaEnrollmentRequired();
  }

  private *authorizeInOrganization(reads: GateReads, principal: Principal, organizationId: string, requirement: AccessRequirement, fromToken = false): Steps<ResolvedAuthority> {
    // The token's own organization needs neither the superadmin flag nor a shape check here:
    // the authority read below carries the flag, and the id is one the router issued.
    let superadmin: boolean | undefined;
    if (organizationId !== principal.organizationId) {
      superadmin = yield* read(reads.isSuperadmin(principal.userId));
      if (requirement.member || !superadmin) throw errors.forbidden('The organization in the path is not your active organization.');
      // Only a superadmin reaches here with a path value that did not come from our own token.
      if (!isWellFormedId(organizationId)) throw errors.notFound('Organization');
    }
    // One after the other: on the hot path both are cache hits, to which Promise.all only adds promises.
    const organization = yield* read(reads.activeOrganization(organizationId));
    const authority = yield* read(reads.authority(this.catalog, principal.userId, organizationId, superadmin));
    // Host middleware (CONTRACT 6): the token's organization deleted since is one the user has left, 403 as `authenticate()` answers it.
    if (!organization) throw fromToken ? leftTokenOrganization() : errors.notFound('Organization');
    // And one the user was removed from or suspended in answers alike, before its MFA policy, as on
    // `authenticate()`: the answer tells an ex-member nothing about what became of the organization.
    if (fromToken && !authority.member && !authority.superadmin) throw leftTokenOrganization();
    if (organization.requireMfa) yield* this.assertSessionMeetsOrganizationMfa(reads, principal);
    if (requirement.member && !authority.member) throw errors.forbidden('Only an active member of the organization can do this.');
    if (requirement.permission !== undefined && !authority.permissions.has(requirement.permission)) throw errors.forbidden();
    return authority;
  }

  private *assertOrganizationMfa(reads: GateReads, principal: Principal, organizationId: string): Steps<void> {
    if (principal.mfa) return;
    const organization = yield* read(reads.activeOrganization(organizationId));
    if (organization?.requireMfa) yield* this.assertSessionMeetsOrganizationMfa(reads, principal);
  }

  /** docs/security.md: a session without a second factor cannot act in a `require_mfa` organization. */
  private *assertSessionMeetsOrganizationMfa(reads: GateReads, principal: Principal): Steps<void> {
    if (principal.mfa) return;
    if (yield* read(reads.hasConfirmedFactor(principal.userId))) {
      throw errors.mfaRequired();
    }
    throw mfaEnrollmentRequired();
  }
}

/** The organization a grant was admitted in; only requirements scoped to one reach the services that ask. */
export function organizationOf(grant: AccessGrant): string {
  if (grant.organizationId === undefined) throw new Error('the grant names no organization');
  return grant.organizationId;
}

const notMemberOf = () => errors.forbidden('You are not an active member of this organization.');

/** docs/getting-started.md: a host never serves an organization the token's user has left (or that is gone). */
const leftTokenOrganization = () => errors.forbidden('You are no longer a member of the organization this token was issued for.');

function bodyHas(body: unknown, field: string): boolean {
  return typeof body === 'object' && body !== null && (body as Record<string, unknown>)[field] !== undefined;
}

/** The validated body's `organization_id`. */
function enteredOrganization(body: unknown): string | undefined {
  const value = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).organization_id : undefined;
  return typeof value === 'string' && isWellFormedId(value) ? value : undefined;
}

export function mfaEnrollmentRequired(): IdentityError {
  return errors.mfaEnrollmentRequired();
}

/**
 * The strong authentication an access token stands for (spec 2.1, 5): its own `auth_time`, in
 * the session's milliseconds while the session has not been re-stamped since. A step-up on the
 * session answers a new token; a copy of an older one (a stolen one) stays as stale as it was.
 */
function tokenAuthTime(claimSeconds: number, sessionAuthTime: number): number {
  return claimSeconds === Math.floor(sessionAuthTime / 1000) ? sessionAuthTime : Math.min(sessionAuthTime, claimSeconds * 1000);
}
