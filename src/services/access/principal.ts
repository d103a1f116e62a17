import type { UserRecord } from '../../store/user-repository.js';

/**
 * The plain actor every service method receives: who acts, in which session and
 * organization, and how strongly they authenticated. Built by the access policy from a
 * verified access token and its live session; nothing of HTTP or of the token is in it.
 */
export interface Principal {
  kind: 'session';
  userId: string;
  sessionId: string;
  /** The active organization, from the token's `org` claim (docs/organizations.md). */
  organizationId: string | null;
  /** The session passed a second factor. */
  mfa: boolean;
  amr: string[];
  /** Epoch ms of the session's last strong authentication (step-up). */
  authTime: number;
  /** The account, as loaded with the session for this request. */
  user: UserRecord;
}
