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
 * first factor): the `amr` mark its session carries and the `method` its events carry. A password
 * carries the hash it was compared with: its session is written only while the account still
 * has it (`SessionRepository.insert`).
 */
export type FirstFactor = { amr: 'pwd'; method: 'password'; comparedPasswordHash: string } | { amr: 'email'; method: PasswordlessMethod };

/** A passwordless sign-in's proof of the address: its code or its link (docs/passwordless.md). */
export type PasswordlessMethod = 'email_code' | 'email_link';

/** What a failed sign-in's `user.login_failed` says of its first factor: nothing for a password (docs/events.md), the method for a passwordless one (docs/passwordless.md). */
export function loginFailedMethod(firstFactor: FirstFactor): { method?: PasswordlessMethod } {
  return firstFactor.method === 'password' ? {} : { method: firstFactor.method };
}
