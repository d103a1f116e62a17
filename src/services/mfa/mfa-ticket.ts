import type { PasswordlessMethod } from '../sessions/sign-in-result.js';

/** The first factor an MFA ticket follows: a password, a provider (`fed`) or a passwordless proof of the address (`email`). */
export type TicketFirstFactor = 'pwd' | 'fed' | 'email';

/** A verified MFA ticket (docs/database.md) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
  /** `fed` when the ticket follows a social sign-in (docs/social-login.md), `email` a passwordless one (docs/passwordless.md). */
  firstFactor?: TicketFirstFactor;
  /** After a social first factor: the provider that passed it, which `user.logged_in` carries (docs/social-login.md). */
  socialProvider?: string | null;
  /** Set when the first factor was single sign-on through this connection (docs/sso.md). */
  ssoConnectionId?: string | null;
  /** After a passwordless first factor: its code or its link, which the sign-in's events carry. */
  signInMethod?: PasswordlessMethod | undefined;
  /** `otp.maxAttempts` codes failed: every further code answers 422 invalid_code (docs/mfa.md). */
  exhausted: boolean;
}
