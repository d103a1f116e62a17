import type { EventInput } from '../../events.js';
import type { FactorType } from '../../store/mfa-repository.js';
import type { TokenResponse } from './session-service.js';

/** A factor as the login gate shows it (docs/security.md): label and destination only when set, destination masked. */
export interface LoginFactorView {
  id: string;
  type: FactorType;
  default: boolean;
  label?: string;
  destination?: string;
}

/**
 * What every way of signing in answers (docs/mfa.md and docs/social-login.md: exactly the answer of
 * POST /auth/login): a session, or the MFA gate's ticket and factors.
 */
export type LoginResult =
  | { kind: 'session'; tokens: TokenResponse; user: { id: string; email: string; email_verified: boolean } }
  | { kind: 'mfa_required'; mfaToken: string; factors: LoginFactorView[] };

/**
 * How a sign-in's first factor was passed (docs/passwordless.md: a passwordless code or link is one more
 * first factor): the `amr` mark its session carries and the `method` its events carry, and what its
 * proof rests on (`HeldProof`): a password the hash it was compared with, a passwordless code or
 * link the hash (or none) the account held when the code was spent.
 */
export type FirstFactor = { amr: 'pwd'; method: 'password'; comparedPasswordHash: string } | { amr: 'email'; method: PasswordlessMethod; heldPasswordHash: string | null };

/**
 * What a first factor proved that must still hold when its session or MFA ticket is written
 * (`signingInAccount`), for a sign-in whose proof and session are two transactions: a change that
 * commits between them and ends what the proof would open leaves neither behind (docs/security.md).
 * `firstFactor` says how the loser is answered (`SignInRules.refusalSinceRead`): as in series, after
 * the change.
 */
export interface HeldProof {
  firstFactor: 'pwd' | 'email' | 'fed';
  /**
   * The account's password hash when the proof was made (null: none): a reset or a change replaces
   * it, and ends the account's sessions, tickets and passwordless codes. A password's loser answers
   * as a wrong password, a passwordless code's as a code the reset ended (422 invalid_code).
   */
  passwordHash?: string | null;
  /**
   * The account's address was unproven when a provider's link to it was resolved: its first proof
   * (`recordFirstEmailProof`) ends every session and the links that did not vouch for it. The loser
   * answers as the exchange after the proof does: 409 account_link_required.
   */
  unprovenAddress?: boolean;
}

/** The proof a first factor's session and ticket are written against. */
export function heldProofOf(firstFactor: FirstFactor): HeldProof {
  return firstFactor.amr === 'pwd' ? { passwordHash: firstFactor.comparedPasswordHash, firstFactor: 'pwd' } : { passwordHash: firstFactor.heldPasswordHash, firstFactor: 'email' };
}

/** A passwordless sign-in's proof of the address: its code or its link (docs/passwordless.md). */
export type PasswordlessMethod = 'email_code' | 'email_link';

/**
 * What a sign-in's events say of the way it went in (docs/events.md): nothing for a password, the
 * method for every other, with the passkey, provider or connection it went through.
 */
export type SignInWay =
  | Record<string, never>
  | { method: PasswordlessMethod }
  | { method: 'passkey'; factor_id?: string }
  | { method: 'social'; provider: string }
  | { method: 'sso'; connection_id: string };

/** The way in of a password or a passwordless first factor. */
export function firstFactorWay(firstFactor: FirstFactor): SignInWay {
  return firstFactor.method === 'password' ? {} : { method: firstFactor.method };
}

/** `user.login_failed`, in its one shape whichever way in was refused (docs/events.md): the way, then why. */
export function loginFailed(userId: string | null, way: SignInWay, reason: string, organizationId?: string): EventInput {
  return { type: 'user.login_failed', userId, ...(organizationId ? { organizationId } : {}), data: { ...way, reason } };
}
