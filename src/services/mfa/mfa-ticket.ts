import type { PasswordlessMethod } from '../sessions/sign-in-result.js';

/** The first factor an MFA ticket follows: a password, a provider (`fed`) or a passwordless proof of the address (`email`). */
export type TicketFirstFactor = 'pwd' | 'fed' | 'email';

/** A verified MFA ticket (spec 2.2) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
  /** `fed` when the ticket follows a social sign-in (CONTRACT 9.6), `email` a passwordless one (CONTRACT 11). */
  firstFactor?: TicketFirstFactor;
  /** Set when the first factor was single sign-on through this connection (CONTRACT 12.6). */
  ssoConnectionId?: string | null;
  /** After a passwordless first factor: its code or its link, which the sign-in's events carry. */
  signInMethod?: PasswordlessMethod | undefined;
  /** `otp.maxAttempts` codes failed: every further code answers 422 invalid_code (CONTRACT 5). */
  exhausted: boolean;
}
