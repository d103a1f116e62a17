/** A verified MFA ticket (spec 2.2) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
  /** `fed` when the ticket follows a social sign-in (CONTRACT 9.6). */
  firstFactor?: 'pwd' | 'fed';
  /** `otp.maxAttempts` codes failed: every further code answers 422 invalid_code (CONTRACT 5). */
  exhausted: boolean;
}
