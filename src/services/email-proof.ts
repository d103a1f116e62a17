import { evictLinksNotVouchingForProvenEmail } from './social-links.js';
import type { UnitOfWork } from './unit-of-work.js';

/** How an account's address was proven for the first time. */
export type EmailProof =
  | { method: 'link' }
  | { method: 'password_reset' }
  | { method: 'social'; provider: string };

/**
 * The one place where an account's e-mail becomes verified. Whatever the proof, links whose
 * provider did not vouch for the address go (CONTRACT 9.4 rule 5). A password reset also removes
 * the second factors enrolled before the proof (issue 9: a squatter's TOTP must not survive the
 * owner's reset). Returns false when the address was already verified: then nothing else runs.
 */
export async function recordFirstEmailProof(uow: UnitOfWork, user: { id: string; email: string }, proof: EmailProof): Promise<boolean> {
  if (!(await uow.repos.users.markEmailVerified(user.id, uow.now))) return false;
  if (proof.method === 'password_reset') {
    const removed = (await uow.repos.mfaFactors.listForUser(user.id)).length;
    await uow.repos.users.deleteSecondFactorData(user.id);
    await uow.emit({ type: 'user.email_verified', actorId: user.id, userId: user.id, data: { method: 'password_reset', factors_removed: removed } });
  } else if (proof.method === 'social') {
    await uow.emit({ type: 'user.email_verified', actorId: user.id, userId: user.id, data: { method: 'social', provider: proof.provider } });
  } else {
    await uow.emit({ type: 'user.email_verified', actorId: user.id, userId: user.id });
  }
  await evictLinksNotVouchingForProvenEmail(uow, user);
  return true;
}
