import { revokeKeysOfUser } from './api-key-service.js';
import { evictLinksNotVouchingForProvenEmail } from './social-links.js';
import type { UnitOfWork } from './unit-of-work.js';

/*
 * One credential lifecycle (docs/security.md, "One credential lifecycle"). Every way to sign
 * in or act as an account (a second factor, a passkey, a provider link, an API key, and
 * whatever comes next) is added through one gate and cleared by one first-proof function:
 *
 * - the gate is the `addsCredential` requirement of the access policy, declared by every
 *   route that adds a credential and repeated by its service under the user's row lock with
 *   `AccessPolicy.assertMayAddCredential`: a verified e-mail, a fresh authentication, and
 *   step-up where a factor exists;
 * - the first proof is `recordFirstEmailProof` below, called by every path that proves an
 *   address: the verification link, a password reset, a provider vouching at the exchange.
 *
 * Together they close the pre-hijack: whoever registered an address they do not own can bind
 * nothing to it, and whatever was bound before the owner's proof (data from before the gate,
 * a provider sign-up without a verified e-mail) does not survive that proof.
 */

/** How an account's address was proven for the first time. */
export type EmailProof =
  | { method: 'link' }
  | { method: 'password_reset' }
  | { method: 'social'; provider: string };

/** What the first proof removed, by kind; all zero when the address was already verified. */
export interface CredentialsRemoved {
  factors: number;
  apiKeys: number;
  socialLinks: number;
}

/**
 * The one place where an account's e-mail becomes verified (CONTRACT 5, "Credentials bind
 * only to a proven address"). It removes every factor (passkeys among them), recovery code,
 * pending challenge and API key of the account, and every provider link that did not vouch
 * for the address (CONTRACT 9.4 rule 5), emits a removal event for each, and, when it
 * removed anything, ends every session of the account: before the proof, whoever held the
 * account may have been a squatter. A password set before the proof stays until the owner
 * resets it. Answers undefined when the address was already verified: then nothing runs.
 */
export async function recordFirstEmailProof(uow: UnitOfWork, user: { id: string; email: string }, proof: EmailProof): Promise<CredentialsRemoved | undefined> {
  if (!(await uow.repos.users.markEmailVerified(user.id, uow.now))) return undefined;
  const removed: CredentialsRemoved = { factors: 0, apiKeys: 0, socialLinks: 0 };

  const factors = await uow.repos.mfaFactors.listForUser(user.id);
  await uow.repos.users.deleteSecondFactorData(user.id);
  for (const factor of factors) {
    await uow.emit({ type: 'mfa.factor_removed', userId: user.id, data: { factor_id: factor.id, type: factor.type, confirmed: factor.confirmedAt !== null, reason: 'email_proven' } });
  }
  removed.factors = factors.length;

  removed.apiKeys = await revokeKeysOfUser(uow, user.id, null, 'email_proven');

  removed.socialLinks = await evictLinksNotVouchingForProvenEmail(uow, user);

  const data: Record<string, unknown> = { method: proof.method, credentials_removed: removed.factors + removed.apiKeys + removed.socialLinks };
  if (proof.method === 'social') data.provider = proof.provider;
  await uow.emit({ type: 'user.email_verified', actorId: user.id, userId: user.id, data });

  if (removed.factors + removed.apiKeys + removed.socialLinks > 0) {
    const count = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'email_proven');
    await uow.emit({ type: 'auth.sessions_revoked', userId: user.id, data: { count, reason: 'email_proven' } });
  }
  return removed;
}
