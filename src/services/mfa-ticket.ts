/** A verified MFA ticket (spec 2.2) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
  /** `fed` when the ticket follows a social sign-in (CONTRACT 9.6). */
  firstFactor?: 'pwd' | 'fed';
  /** Set when the first factor was single sign-on through this connection (CONTRACT 12.6). */
  ssoConnectionId?: string | null;
  /** `otp.maxAttempts` codes failed: every further code answers 422 invalid_code (CONTRACT 5). */
  exhausted: boolean;
}
