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
 * first factor): the `amr` mark its session carries and the `method` its events carry. A password
 * carries the hash it was compared with: its session is written only while the account still
 * has it (`SessionRepository.insert`).
 */
export type FirstFactor = { amr: 'pwd'; method: 'password'; comparedPasswordHash: string } | { amr: 'email'; method: PasswordlessMethod };

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
