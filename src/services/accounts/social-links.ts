import type { UnitOfWork } from '../shared/unit-of-work.js';

/*
 * Rules on social links that other services apply inside their own unit of work. Kept apart
 * from the social service so that e-mail verification, password reset and account deletion
 * never load the OpenID client.
 */

/**
 * docs/social-login.md rule 5, the reverse pre-hijack: when an account's e-mail is proven for the
 * first time, every link whose provider did not assert `email_verified` for that address is
 * removed. Only the first-proof function (`credential-lifecycle.ts`) calls it, which also
 * ends the account's sessions when anything was removed. Answers how many links went.
 */
export async function evictLinksNotVouchingForProvenEmail(uow: UnitOfWork, user: { id: string; email: string }): Promise<number> {
  const unproven = await uow.repos.socialIdentities.listNotVouchingFor(user.id, user.email);
  for (const identity of unproven) {
    await uow.repos.socialIdentities.deleteOwned(identity.id, user.id);
    await uow.emit({ type: 'user.social_unlinked', userId: user.id, data: { identity_id: identity.id, provider: identity.provider, reason: 'email_proven' } });
  }
  return unproven.length;
}

/**
 * docs/social-login.md: deleting a user (tombstone) deletes their links, single sign-on identities
 * included (docs/sso.md reuses the rule): a (connection, subject) left on the tombstone would keep
 * the IdP's address and resolve every later sign-in of that subject to the deleted account.
 */
export async function deleteLinksOfDeletedUser(uow: UnitOfWork, userId: string, actorId: string): Promise<void> {
  const removed = await uow.repos.socialIdentities.deleteAllForUser(userId);
  for (const identity of removed) {
    await uow.emit({ type: 'user.social_unlinked', actorId, userId, data: { identity_id: identity.id, provider: identity.provider, reason: 'user_deleted' } });
  }
  await uow.repos.ssoIdentities.deleteAllForUser(userId);
}
