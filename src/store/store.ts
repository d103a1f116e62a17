import type { Knex } from 'knex';
import { isDeadlock } from '../database-errors.js';
import { HotStatements } from './hot-statements.js';
import { runTransaction, type Db } from './transaction.js';
import { GroupCommit } from './group-commit.js';
import { ApiKeyRepository } from './api-key-repository.js';
import { AuditRepository, RateEventRepository } from './audit-repository.js';
import { recordsInOneStatement } from './recorded-write.js';
import type { Dialect } from './database.js';
import { HostPermissionRepository } from './host-permission-repository.js';
import { MfaFactorRepository, MfaTicketRepository, OtpChallengeRepository, RecoveryCodeRepository } from './mfa-repository.js';
import { InviteRepository, MembershipRepository, OrganizationRepository, RoleRepository } from './organization-repository.js';
import type { RepositoryContext } from './repository.js';
import { PasskeyRepository } from './passkey-repository.js';
import { PasswordlessChallengeRepository } from './passwordless-repository.js';
import { OneTimeTokenRepository, RefreshTokenRepository, SessionRepository } from './session-repository.js';
import { RateLimitCounterRepository } from './rate-limit-counter-repository.js';
import { SigningKeyRepository } from './signing-key-repository.js';
import { SocialFlowRepository, SocialIdentityRepository } from './social-repository.js';
import type { TableNames } from './table-names.js';
import { UserRepository } from './user-repository.js';
import { EventDeliveryRepository } from './event-delivery-repository.js';
import { WebhookRepository } from './webhook-repository.js';
import { OrgDomainRepository, SsoConnectionRepository, SsoIdentityRepository } from './sso-repository.js';

/** How often a transaction runs when PostgreSQL keeps choosing it to break a deadlock. */
const DEADLOCK_ATTEMPTS = 3;

/** Every repository, bound to one connection: the pool, or one transaction. */
export interface Repositories {
  users: UserRepository;
  sessions: SessionRepository;
  refreshTokens: RefreshTokenRepository;
  oneTimeTokens: OneTimeTokenRepository;
  signingKeys: SigningKeyRepository;
  audit: AuditRepository;
  rateEvents: RateEventRepository;
  mfaFactors: MfaFactorRepository;
  otpChallenges: OtpChallengeRepository;
  mfaTickets: MfaTicketRepository;
  recoveryCodes: RecoveryCodeRepository;
  organizations: OrganizationRepository;
  roles: RoleRepository;
  memberships: MembershipRepository;
  invites: InviteRepository;
  socialIdentities: SocialIdentityRepository;
  socialFlows: SocialFlowRepository;
  rateLimitCounters: RateLimitCounterRepository;
  passkeys: PasskeyRepository;
  apiKeys: ApiKeyRepository;
  webhooks: WebhookRepository;
  eventDeliveries: EventDeliveryRepository;
  orgDomains: OrgDomainRepository;
  ssoConnections: SsoConnectionRepository;
  ssoIdentities: SsoIdentityRepository;
  passwordlessChallenges: PasswordlessChallengeRepository;
  hostPermissions: HostPermissionRepository;
}

const REPOSITORY_CLASSES: { [K in keyof Repositories]: new (context: RepositoryContext) => Repositories[K] } = {
  users: UserRepository,
  sessions: SessionRepository,
  refreshTokens: RefreshTokenRepository,
  oneTimeTokens: OneTimeTokenRepository,
  signingKeys: SigningKeyRepository,
  audit: AuditRepository,
  rateEvents: RateEventRepository,
  mfaFactors: MfaFactorRepository,
  otpChallenges: OtpChallengeRepository,
  mfaTickets: MfaTicketRepository,
  recoveryCodes: RecoveryCodeRepository,
  organizations: OrganizationRepository,
  roles: RoleRepository,
  memberships: MembershipRepository,
  invites: InviteRepository,
  socialIdentities: SocialIdentityRepository,
  socialFlows: SocialFlowRepository,
  rateLimitCounters: RateLimitCounterRepository,
  passkeys: PasskeyRepository,
  apiKeys: ApiKeyRepository,
  webhooks: WebhookRepository,
  eventDeliveries: EventDeliveryRepository,
  orgDomains: OrgDomainRepository,
  ssoConnections: SsoConnectionRepository,
  ssoIdentities: SsoIdentityRepository,
  passwordlessChallenges: PasswordlessChallengeRepository,
  hostPermissions: HostPermissionRepository,
};

/**
 * The repositories of one connection, each made when it is first used. Every transaction
 * gets its own set, and a refresh or a login uses four or five of the 27: building all of
 * them was a measurable share of a refresh's CPU (docs/performance.md).
 */
class BoundRepositories {
  constructor(readonly context: RepositoryContext) {}
}
for (const [name, RepositoryClass] of Object.entries(REPOSITORY_CLASSES) as Array<[string, new (context: RepositoryContext) => unknown]>) {
  Object.defineProperty(BoundRepositories.prototype, name, {
    get(this: BoundRepositories) {
      const repository = new RepositoryClass(this.context);
      Object.defineProperty(this, name, { value: repository, enumerable: true });
      return repository;
    },
  });
}

function bindRepositories(context: RepositoryContext): Repositories {
  return new BoundRepositories(context) as unknown as Repositories;
}

export class Store {
  /** Repositories on the pool, for reads and single-statement writes. */
  readonly repos: Repositories;

  private readonly hot: HotStatements;
  private readonly groupCommit: GroupCommit | undefined;

  constructor(
    readonly knex: Knex,
    readonly table: TableNames,
    readonly dialect: Dialect,
  ) {
    this.hot = new HotStatements(dialect);
    this.repos = bindRepositories({ db: knex, table, dialect, hot: this.hot });
    this.groupCommit = dialect === 'sqlite' ? new GroupCommit(knex) : undefined;
  }

  /** Whether a conditional write and what it records can be one statement, which needs no transaction around it (`writeRecording`). */
  get recordsInOneStatement(): boolean {
    return recordsInOneStatement(this.dialect);
  }

  /**
   * Runs `work` in one transaction with repositories bound to it. One that PostgreSQL rolled back
   * to break a deadlock (two transactions locking the same rows in opposite orders, which the
   * services' one order, organization then account then session, leaves to paths not yet in it)
   * wrote nothing and runs again, so the two end one after the other instead of in a 500.
   */
  async transaction<T>(work: (repos: Repositories, db: Db) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runTransaction(this.knex, this.dialect, (db) => work(this.bound(db), db));
      } catch (error) {
        if (!isDeadlock(error) || attempt >= DEADLOCK_ATTEMPTS) throw error;
      }
    }
  }

  /**
   * Runs `work`, a few statements and nothing else, atomically: on SQLite in a transaction it
   * shares with the other such writes started in this turn of the event loop (`GroupCommit`),
   * on PostgreSQL in one of its own. Settles after the commit.
   */
  committedInGroup<T>(work: (repos: Repositories) => Promise<T>): Promise<T> {
    if (!this.groupCommit) return this.transaction(work);
    return this.groupCommit.run((db) => work(this.bound(db)));
  }

  private bound(db: Db): Repositories {
    return bindRepositories({ db, table: this.table, dialect: this.dialect, hot: this.hot });
  }
}
