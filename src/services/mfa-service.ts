import { errors, IdentityError } from '../errors.js';
import type { MfaTicket } from './mfa-ticket.js';
import type { UserRecord } from '../store/user-repository.js';
import type { RequestMeta, ServiceContext } from './context.js';

/** A factor as the login gate shows it (spec 4.1): label and destination only when set, destination masked. */
export interface LoginFactorView {
  id: string;
  type: 'totp' | 'sms' | 'email';
  default: boolean;
  label?: string;
  destination?: string;
}

/** Multi-factor authentication (spec 4.2). */
export class MfaService {
  constructor(private readonly context: ServiceContext) {}

  /**
   * Decides whether a password login needs a second factor. Answers a ticket and the
   * factors when it does, nothing when a session may open, and refuses the login in
   * 'block' mode when MFA is enforced and no factor is confirmed.
   */
  async loginGate(user: UserRecord, _meta: RequestMeta): Promise<{ mfaToken: string; factors: LoginFactorView[] } | undefined> {
    const confirmed = await this.context.store.repos.mfaFactors.listConfirmed(user.id);
    if (confirmed.length === 0) {
      if (this.context.config.mfa.enforcementMode === 'block' && (await this.isEnforcedFor(user))) {
        throw new IdentityError(403, 'mfa_enrollment_required', 'Multi-factor authentication is required for this account; enroll a factor first.');
      }
      return undefined;
    }
    throw new Error('MFA login gate is not implemented yet');
  }

  /** An MFA ticket presented as a bearer value (spec 2.2); anything else is 401 unauthorized. */
  async authenticateTicket(_token: string): Promise<MfaTicket> {
    throw errors.unauthorized('The MFA ticket is invalid or expired.');
  }

  async hasConfirmedFactor(userId: string): Promise<boolean> {
    return this.context.store.repos.mfaFactors.hasConfirmed(userId);
  }

  /** CONTRACT 5: global enforcement, the per-user flag, or an organization that requires MFA. */
  async isEnforcedFor(user: Pick<UserRecord, 'id' | 'mfaEnforced'>): Promise<boolean> {
    if (this.context.config.mfa.enforce || user.mfaEnforced) return true;
    return this.context.store.repos.organizations.userBelongsToMfaRequiringOrganization(user.id);
  }

  async recoveryCodesRemaining(userId: string): Promise<number> {
    return this.context.store.repos.recoveryCodes.countUnused(userId);
  }
}
