/** A verified MFA ticket (spec 2.2) whose database row is still open. */
export interface MfaTicket {
  id: string;
  userId: string;
}
