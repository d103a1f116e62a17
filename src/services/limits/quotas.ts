import { errors } from '../../errors.js';

/**
 * How many live rows of one kind an owner may hold (docs/security.md, "Quotas"). Rate limits
 * bound how fast a signed-in caller creates things; these bound how many pile up, so one member
 * cannot fill the database or make an unpaged list (`GET /orgs/{id}/api-keys`,
 * `GET /orgs/{id}/roles`) grow without end. Each is far above what a legitimate host uses
 * (better-auth's organization plugin caps members per organization at 100 by default, and has
 * `invitationLimit`, `organizationLimit` and `maximumRolesPerOrganization`), and only
 * live rows count: a revoked or expired key, a deleted role or organization, a removed factor, an
 * accepted, revoked or expired invitation frees its slot.
 *
 * Every caller counts under the lock of the owning row that its creation takes (the account for
 * keys, organizations and factors, the organization for roles and invitations), in the
 * transaction of the insert, so creations at once on any instance count one after the other and none passes the cap.
 */
export const QUOTAS = {
  /** Active organizations a user owns, checked when they create one (each clones the system roles and lists in `GET /auth/me`). */
  organizationsOwnedPerUser: { max: 100, what: 'active organizations owned per user' },
  /** Second factors of one account, pending ones and passkeys included (a passkey per device, a phone or two, one TOTP app). */
  factorsPerUser: { max: 20, what: 'second factors (passkeys included) per account' },
  /** Live API keys of one member in one organization: one per script, job or partner service. */
  apiKeysPerMember: { max: 100, what: 'live API keys per member of an organization' },
  /** Custom roles of one organization (the system templates are not counted). */
  customRolesPerOrganization: { max: 100, what: 'custom roles per organization' },
  /** Domains of one organization, pending or verified (each a TXT value to keep, listed unpaged by `GET /orgs/{id}/domains`). */
  domainsPerOrganization: { max: 100, what: 'domains per organization' },
  /** Pending, unexpired invitations of one organization (a large onboarding wave; the send budget alone let 8,400 pile up in a week). */
  pendingInvitesPerOrganization: { max: 1000, what: 'pending invitations per organization' },
} as const;

export type Quota = keyof typeof QUOTAS;

/**
 * Refuses one more row when `liveCount` rows already fill the quota: 409 `conflict` (SPEC 7's
 * answer for a limit), naming the limit. The caller holds the owning row's lock.
 */
export function assertUnderQuota(quota: Quota, liveCount: number): void {
  const { max, what } = QUOTAS[quota];
  if (liveCount >= max) throw errors.conflict(`Limit reached: at most ${max} ${what}. Revoke or delete one first.`);
}
