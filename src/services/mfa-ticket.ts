/** A verified MFA ticket (spec 2.2) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
  /** `otp.maxAttempts` codes failed: every further code answers 422 invalid_code (CONTRACT 5). */
  exhausted: boolean;
}
