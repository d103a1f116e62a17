import { revokeKeysOfUser } from '../api-keys/api-key-service.js';
import { evictLinksNotVouchingForProvenEmail } from './social-links.js';
import type { UnitOfWork } from '../shared/unit-of-work.js';

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
 *   address: the verification link, a password reset, a provider vouching at the exchange, a
 *   passwordless code or link (docs/passwordless.md).
 *
 * Together they close the pre-hijack: whoever registered an address they do not own can bind
 * nothing to it, and whatever was bound before the owner's proof (data from before the gate,
 * a provider sign-up without a verified e-mail) does not survive that proof.
 */

/** How an account's address was proven for the first time. */
export type EmailProof =
  | { method: 'link' }
  | { method: 'password_reset' }
  | { method: 'social'; provider: string }
  /** A passwordless sign-in (docs/passwordless.md): a password set before it goes too. */
  | { method: 'email_code' | 'email_link'; passwordless: true };

/** What the first proof removed, by kind; all zero when the address was already verified. */
export interface CredentialsRemoved {
  factors: number;
  apiKeys: number;
  socialLinks: number;
  /** 1 when a passwordless proof removed a password set before it. */
  password: number;
}

/**
 * The one place where an account's e-mail becomes verified (docs/security.md, "Credentials bind
 * only to a proven address"). It removes every factor (passkeys among them), recovery code,
 * pending challenge and API key of the account, and every provider link that did not vouch
 * for the address (docs/social-login.md rule 5), emits a removal event for each, and, when it
 * removed anything, ends every session of the account: before the proof, whoever held the
 * account may have been a squatter. A password set before the proof stays until the owner
 * resets it, except after a passwordless proof (docs/passwordless.md), which signs in without it: then the
 * password goes too, since whoever registered the unverified address may have chosen it.
 * Answers undefined when the address was already verified: then nothing runs.
 */
export async function recordFirstEmailProof(uow: UnitOfWork, user: { id: string; email: string }, proof: EmailProof): Promise<CredentialsRemoved | undefined> {
  if (!(await uow.repos.users.markEmailVerified(user.id, uow.now))) return undefined;
  const removed: CredentialsRemoved = { factors: 0, apiKeys: 0, socialLinks: 0, password: 0 };

  const factors = await uow.repos.mfaFactors.listForUser(user.id);
  await uow.repos.users.deleteSecondFactorData(user.id);
  for (const factor of factors) {
    await uow.emit({ type: 'mfa.factor_removed', userId: user.id, data: { factor_id: factor.id, type: factor.type, confirmed: factor.confirmedAt !== null, reason: 'email_proven' } });
  }
  removed.factors = factors.length;

  removed.apiKeys = await revokeKeysOfUser(uow, user.id, null, 'email_proven');

  removed.socialLinks = await evictLinksNotVouchingForProvenEmail(uow, user);

  if ('passwordless' in proof && (await uow.repos.users.removePassword(user.id, uow.now))) removed.password = 1;

  const total = removed.factors + removed.apiKeys + removed.socialLinks + removed.password;
  const data: Record<string, unknown> = { method: proof.method, credentials_removed: total };
  if (proof.method === 'social') data.provider = proof.provider;
  await uow.emit({ type: 'user.email_verified', actorId: user.id, userId: user.id, data });

  // A passwordless proof ends the account's other sessions even when it removed nothing (docs/passwordless.md):
  // the session it is about to open is the first one the address's owner has vouched for.
  if (total > 0 || 'passwordless' in proof) {
    const count = await uow.repos.sessions.revokeAllForUser(user.id, uow.now, 'email_proven');
    if (total > 0 || count > 0) await uow.emit({ type: 'auth.sessions_revoked', userId: user.id, data: { count, reason: 'email_proven' } });
  }
  return removed;
}
