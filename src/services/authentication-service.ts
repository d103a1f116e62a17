import { errors, IdentityError } from '../errors.js';
import type { ServiceContext } from './context.js';
import type { MfaService } from './mfa-service.js';
import type { Principal } from './principal.js';

/** Turns a bearer value into a Principal, and answers the per-request guards of spec section 5. */
export class AuthenticationService {
  constructor(
    private readonly context: ServiceContext,
    private readonly mfa: MfaService,
  ) {}

  /** A verified access token whose session is live and whose user is active; otherwise 401 unauthorized. */
  async authenticateBearer(token: string): Promise<Principal> {
    const claims = await this.context.jwt.verifyAccessToken(token);
    if (!claims) throw errors.unauthorized('The access token is invalid or expired.');
    const found = await this.context.access.liveSession(claims.sid);
    if (!found || found.session.userId !== claims.sub) throw errors.unauthorized('The session behind this token has ended.');
    const { session, user } = found;
    if (user.status !== 'active' || user.deletedAt !== null) throw errors.unauthorized('The account is not active.');
    return { userId: user.id, sessionId: session.id, organizationId: claims.org ?? null, claims, session, user };
  }

  /** CONTRACT 6: the host middleware refuses a locked account while the lockout lasts (router routes show it as `status: locked`). */
  assertNotLocked(principal: Principal): void {
    const { lockedUntil } = principal.user;
    if (lockedUntil !== null && lockedUntil > this.context.clock.now()) throw errors.unauthorized('The account is locked.');
  }

  /**
   * Step-up (spec 5): the session's last strong authentication must be recent. Users
   * without a confirmed factor have nothing to step up with and pass.
   */
  async assertRecentStrongAuthentication(principal: Principal): Promise<void> {
    const maxAgeMs = this.context.config.security.stepUp.maxAge * 1000;
    if (this.context.clock.now() - principal.session.authTime <= maxAgeMs) return;
    if (!(await this.context.access.hasConfirmedFactor(principal.userId))) return;
    throw errors.stepUpRequired();
  }

  /**
   * Grace enrollment (CONTRACT 5): while MFA is enforced and no factor is confirmed, only
   * the enrollment routes answer.
   */
  async assertEnrollmentNotPending(principal: Principal): Promise<void> {
    if (principal.session.mfa) return;
    const { user } = principal;
    const enforced = this.context.config.mfa.enforce || user.mfaEnforced || (await this.context.access.belongsToMfaRequiringOrganization(user.id));
    if (!enforced) return;
    if (await this.context.access.hasConfirmedFactor(principal.userId)) return;
    throw new IdentityError(403, 'mfa_enrollment_required', 'Multi-factor authentication is required; enroll and confirm a factor to continue.');
  }
}
