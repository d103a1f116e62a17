import { toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

/** A passwordless sign-in challenge (docs/passwordless.md). `codeHash` null: a challenge no code or link opens. */
export interface PasswordlessChallengeRecord {
  id: string;
  userId: string | null;
  addressHash: string;
  addressSealed: string | null;
  codeHash: string | null;
  linkHash: string | null;
  attempts: number;
  createdAt: number;
  expiresAt: number;
  consumedAt: number | null;
}

function mapChallenge(row: Record<string, unknown>): PasswordlessChallengeRecord {
  return {
    id: String(row.id),
    userId: (row.user_id as string | null) ?? null,
    addressHash: String(row.address_hash),
    addressSealed: (row.address_sealed as string | null) ?? null,
    codeHash: (row.code_hash as string | null) ?? null,
    linkHash: (row.link_hash as string | null) ?? null,
    attempts: toNumber(row.attempts),
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
    consumedAt: toNullableNumber(row.consumed_at),
  };
}

export class PasswordlessChallengeRepository extends Repository {
  async insert(challenge: Omit<PasswordlessChallengeRecord, 'attempts' | 'consumedAt' | 'createdAt'> & { now: number }): Promise<void> {
    await this.db(this.table.passwordlessChallenges).insert({
      id: challenge.id,
      user_id: challenge.userId,
      address_hash: challenge.addressHash,
      address_sealed: challenge.addressSealed,
      code_hash: challenge.codeHash,
      link_hash: challenge.linkHash,
      attempts: 0,
      created_at: challenge.now,
      expires_at: challenge.expiresAt,
      consumed_at: null,
    });
  }

  async findById(id: string): Promise<PasswordlessChallengeRecord | undefined> {
    const row = await this.db(this.table.passwordlessChallenges).where({ id }).first();
    return row ? mapChallenge(row) : undefined;
  }

  async findByLinkHash(linkHash: string): Promise<PasswordlessChallengeRecord | undefined> {
    const row = await this.db(this.table.passwordlessChallenges).where({ link_hash: linkHash }).first();
    return row ? mapChallenge(row) : undefined;
  }

  /** When the address last started a sign-in (the resend cooldown, keyed by the address). */
  async lastStartedAt(addressHash: string): Promise<number | undefined> {
    const row = await this.db(this.table.passwordlessChallenges).where({ address_hash: addressHash }).max({ latest: 'created_at' }).first();
    return row?.latest === null || row?.latest === undefined ? undefined : toNumber(row.latest);
  }

  /** A start that mails supersedes the address's open challenges: their codes and links stop working. */
  async expireOutstanding(addressHash: string, now: number): Promise<void> {
    await this.db(this.table.passwordlessChallenges).where({ address_hash: addressHash }).whereNull('consumed_at').andWhere('expires_at', '>', now).update({ expires_at: now });
  }

  /**
   * A new password (a reset or a change) ends the account's open challenges: their codes and
   * links went to the mailbox before the password changed, perhaps to whoever the owner took it back from.
   */
  async expireOutstandingForUser(userId: string, now: number): Promise<void> {
    await this.db(this.table.passwordlessChallenges).where({ user_id: userId }).whereNull('consumed_at').andWhere('expires_at', '>', now).update({ expires_at: now });
  }

  /** Drops the address's challenges that ended before `before` (pruned on the address's own starts, so no scheduler is needed). */
  async pruneEnded(addressHash: string, before: number): Promise<void> {
    await this.db(this.table.passwordlessChallenges).where({ address_hash: addressHash }).andWhere('expires_at', '<=', before).delete();
  }

  /**
   * Drops every challenge that ended before `before`, whatever its address: most addresses a
   * stranger types into start never start again, so their rows would never go with their own.
   */
  async pruneAllEnded(before: number): Promise<void> {
    await this.deleteInBatches(this.table.passwordlessChallenges, 'id', (query) => query.where('expires_at', '<=', before));
  }

  /**
   * Takes one attempt before the code is compared: of any number of concurrent guesses at
   * most `maxAttempts` get one, and only a caller that got one may compare. A challenge no
   * code opens, or one that has ended, gives none.
   */
  async claimAttempt(id: string, maxAttempts: number, now: number): Promise<boolean> {
    const changed = await this.db(this.table.passwordlessChallenges)
      .where({ id })
      .whereNotNull('code_hash')
      .whereNull('consumed_at')
      .andWhere('expires_at', '>', now)
      .andWhere('attempts', '<', maxAttempts)
      .increment('attempts', 1);
    return changed === 1;
  }

  /**
   * Consumes the challenge, its code and its link together: one conditional update, so of
   * concurrent attempts exactly one succeeds. An exhausted challenge (its attempts spent by
   * failures) is not consumed by a link either.
   */
  async consume(id: string, now: number, maxAttempts: number): Promise<boolean> {
    const changed = await this.db(this.table.passwordlessChallenges)
      .where({ id })
      .whereNotNull('code_hash')
      .whereNull('consumed_at')
      .andWhere('expires_at', '>', now)
      .andWhere('attempts', '<=', maxAttempts)
      .update({ consumed_at: now });
    return changed === 1;
  }

  /** A failed attempt of a link (or one that compared no code) still spends one of the challenge's attempts. */
  async recordFailure(id: string): Promise<void> {
    await this.db(this.table.passwordlessChallenges).where({ id }).whereNull('consumed_at').increment('attempts', 1);
  }

  /**
   * An account's deletion: its challenges go with its other pending tokens. Each kept the
   * tombstone's id beside a keyed hash of the address, which the tombstone itself never holds.
   */
  async deleteAllForUser(userId: string): Promise<void> {
    await this.db(this.table.passwordlessChallenges).where({ user_id: userId }).delete();
  }
}
