import type { AccessTokenClaims } from '../crypto/jwt.js';
import type { SessionRecord } from '../store/session-repository.js';
import type { UserRecord } from '../store/user-repository.js';

/** The caller of a bearer route: a verified access token whose session is live. */
export interface Principal {
  userId: string;
  sessionId: string;
  /** The active organization, from the token's `org` claim (spec 4.3). */
  organizationId: string | null;
  claims: AccessTokenClaims;
  session: SessionRecord;
  user: UserRecord;
}
