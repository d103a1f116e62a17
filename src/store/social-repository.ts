import { toBoolean, toNullableNumber, toNumber } from './database.js';
import { Repository } from './repository.js';

export interface SocialIdentityRecord {
  id: string;
  userId: string;
  provider: string;
  issuer: string;
  subject: string;
  email: string | null;
  emailVerified: boolean;
  createdAt: number;
  lastLoginAt: number | null;
}

export type SocialFlowPurpose = 'login' | 'link';

export interface SocialFlowRecord {
  id: string;
  provider: string;
  purpose: SocialFlowPurpose;
  userId: string | null;
  sessionId: string | null;
  secretsEnc: string;
  returnTo: string;
  handoffChallenge: string;
  createdAt: number;
  expiresAt: number;
  consumedAt: number | null;
  exchangeExpiresAt: number | null;
  exchangeConsumedAt: number | null;
  /** The provider's validated claims, sealed, stored by the callback for the exchange (docs/social-login.md). */
  claimsEnc: string | null;
  /** The organization's connection a single sign-on flow was issued for (docs/sso.md); null for social login. */
  connectionId: string | null;
}

function mapIdentity(row: Record<string, unknown>): SocialIdentityRecord {
  return {
    id: String(row.id),
    userId: String(row.user_id),
    provider: String(row.provider),
    issuer: String(row.issuer),
    subject: String(row.subject),
    email: (row.email as string | null) ?? null,
    emailVerified: toBoolean(row.email_verified),
    createdAt: toNumber(row.created_at),
    lastLoginAt: toNullableNumber(row.last_login_at),
  };
}

function mapFlow(row: Record<string, unknown>): SocialFlowRecord {
  return {
    id: String(row.id),
    provider: String(row.provider),
    purpose: row.purpose as SocialFlowPurpose,
    userId: (row.user_id as string | null) ?? null,
    sessionId: (row.session_id as string | null) ?? null,
    secretsEnc: String(row.secrets_enc),
    returnTo: String(row.return_to),
    handoffChallenge: String(row.handoff_challenge),
    createdAt: toNumber(row.created_at),
    expiresAt: toNumber(row.expires_at),
    consumedAt: toNullableNumber(row.consumed_at),
    exchangeExpiresAt: toNullableNumber(row.exchange_expires_at),
    exchangeConsumedAt: toNullableNumber(row.exchange_consumed_at),
    claimsEnc: (row.claims_enc as string | null) ?? null,
    connectionId: (row.connection_id as string | null) ?? null,
  };
}

/** Links between local users and provider subjects (docs/social-login.md `social_identities`). */
export class SocialIdentityRepository extends Repository {
  async findByProviderSubject(provider: string, subject: string): Promise<SocialIdentityRecord | undefined> {
    const row = await this.db(this.table.socialIdentities).where({ provider, subject }).first();
    return row ? mapIdentity(row) : undefined;
  }

  async findForUserAndProvider(userId: string, provider: string): Promise<SocialIdentityRecord | undefined> {
    const row = await this.db(this.table.socialIdentities).where({ user_id: userId, provider }).first();
    return row ? mapIdentity(row) : undefined;
  }

  async findOwned(id: string, userId: string): Promise<SocialIdentityRecord | undefined> {
    const row = await this.db(this.table.socialIdentities).where({ id, user_id: userId }).first();
    return row ? mapIdentity(row) : undefined;
  }

  async listForUser(userId: string): Promise<SocialIdentityRecord[]> {
    const rows = await this.db(this.table.socialIdentities).where({ user_id: userId }).orderBy([{ column: 'created_at' }, { column: 'id' }]);
    return rows.map(mapIdentity);
  }

  /** Answers false when the subject or the user's slot for this provider is already taken (both unique). */
  async insertIfFree(identity: Omit<SocialIdentityRecord, 'lastLoginAt'> & { lastLoginAt: number | null }): Promise<boolean> {
    const inserted = await this.db(this.table.socialIdentities)
      .insert({
        id: identity.id,
        user_id: identity.userId,
        provider: identity.provider,
        issuer: identity.issuer,
        subject: identity.subject,
        email: identity.email,
        email_verified: identity.emailVerified,
        created_at: identity.createdAt,
        last_login_at: identity.lastLoginAt,
      })
      .onConflict()
      .ignore()
      .returning('id');
    return inserted.length === 1;
  }

  async recordLogin(id: string, claims: { email: string | null; emailVerified: boolean }, now: number): Promise<void> {
    await this.db(this.table.socialIdentities).where({ id }).update({ email: claims.email, email_verified: claims.emailVerified, last_login_at: now });
  }

  async deleteOwned(id: string, userId: string): Promise<boolean> {
    return (await this.db(this.table.socialIdentities).where({ id, user_id: userId }).delete()) === 1;
  }

  async deleteAllForUser(userId: string): Promise<SocialIdentityRecord[]> {
    const rows = await this.listForUser(userId);
    await this.db(this.table.socialIdentities).where({ user_id: userId }).delete();
    return rows;
  }

  /**
   * Links whose provider did not assert `email_verified` for `email` (docs/social-login.md rule 5):
   * before the address was proven, whoever made them may have been a squatter.
   */
  async listNotVouchingFor(userId: string, email: string): Promise<SocialIdentityRecord[]> {
    const rows = await this.listForUser(userId);
    return rows.filter((identity) => !(identity.emailVerified && identity.email !== null && identity.email.toLowerCase() === email));
  }

  /** Confirmed passkeys count as a way to sign in (docs/mfa.md). */
  async countPasskeys(userId: string): Promise<number> {
    const row = await this.db(this.table.mfaFactors).where({ user_id: userId, type: 'webauthn' }).whereNotNull('confirmed_at').count({ count: '*' }).first();
    return toNumber(row?.count ?? 0);
  }
}

/** Authorization round trips (docs/social-login.md `social_flows`): single-use by conditional updates. */
export class SocialFlowRepository extends Repository {
  async insert(
    flow: Pick<SocialFlowRecord, 'id' | 'provider' | 'purpose' | 'userId' | 'sessionId' | 'secretsEnc' | 'returnTo' | 'handoffChallenge' | 'expiresAt' | 'connectionId'> & { stateHash: string; now: number },
  ): Promise<void> {
    await this.db(this.table.socialFlows).insert({
      id: flow.id,
      state_hash: flow.stateHash,
      provider: flow.provider,
      connection_id: flow.connectionId,
      purpose: flow.purpose,
      user_id: flow.userId,
      session_id: flow.sessionId,
      secrets_enc: flow.secretsEnc,
      return_to: flow.returnTo,
      handoff_challenge: flow.handoffChallenge,
      created_at: flow.now,
      expires_at: flow.expiresAt,
    });
  }

  /**
   * Takes the flow of a `state` with one conditional update, so a state works at most once
   * even when twenty copies of the callback arrive together; answers the flow only to the winner.
   */
  async consumeByState(stateHash: string, now: number): Promise<SocialFlowRecord | undefined> {
    const changed = await this.db(this.table.socialFlows)
      .where({ state_hash: stateHash })
      .whereNull('consumed_at')
      .andWhere('expires_at', '>', now)
      .update({ consumed_at: now });
    if (changed !== 1) return undefined;
    const row = await this.db(this.table.socialFlows).where({ state_hash: stateHash }).first();
    return row ? mapFlow(row) : undefined;
  }

  async setExchange(id: string, exchange: { hash: string; expiresAt: number; claimsEnc: string }): Promise<void> {
    await this.db(this.table.socialFlows).where({ id }).update({
      exchange_hash: exchange.hash,
      exchange_expires_at: exchange.expiresAt,
      claims_enc: exchange.claimsEnc,
    });
  }

  /** Burns an exchange code with one conditional update; answers the flow only to the one caller that burned it. */
  async consumeExchange(exchangeHash: string, now: number): Promise<SocialFlowRecord | undefined> {
    const changed = await this.db(this.table.socialFlows).where({ exchange_hash: exchangeHash }).whereNull('exchange_consumed_at').update({ exchange_consumed_at: now });
    if (changed !== 1) return undefined;
    const row = await this.db(this.table.socialFlows).where({ exchange_hash: exchangeHash }).first();
    return row ? mapFlow(row) : undefined;
  }

  /** Flows older than `before` (one day, docs/social-login.md) are dropped. */
  async pruneCreatedBefore(before: number): Promise<number> {
    return this.db(this.table.socialFlows).where('created_at', '<', before).delete();
  }
}
