import type { Clock, Logger, Mailer, SmsSender } from '../../adapters/types.js';
import type { ResolvedConfig } from '../../config/types.js';
import type { DerivedKeys } from '../../crypto/derived-keys.js';
import type { JwtCodec } from '../../crypto/jwt.js';
import type { KeyRing } from './key-ring.js';
import type { PasswordHasher } from '../../crypto/password-hasher.js';
import type { IdentityEventListener } from '../../events.js';
import type { Store } from '../../store/store.js';
import type { AccessCache, ReadStart } from './access-cache.js';
import type { MemberRow, OrganizationRecord } from '../../store/organization-repository.js';
import type { EventOutbox } from './outbox.js';
import type { OutboundGuard } from '../../outbound/outbound-guard.js';

/** Everything a service needs, built once per router. No Express in here. */
export interface ServiceContext {
  config: ResolvedConfig;
  store: Store;
  /** Sessions and authority kept in process, with their invalidation (docs/multiple-instances.md). */
  accessCache: AccessCache;
  /** Reads of the request path through `accessCache`; the access policy holds the rest of them. */
  access: CachedReads;
  keys: DerivedKeys;
  keyRing: KeyRing;
  jwt: JwtCodec;
  hasher: PasswordHasher;
  clock: Clock;
  logger: Logger;
  mailer: Mailer;
  sms: SmsSender;
  onEvent: IdentityEventListener | undefined;
  /** The outbox writer and worker (docs/events.md). */
  delivery: EventOutbox;
  /** The outbound guard of webhooks (docs/webhooks.md). */
  webhookGuard: OutboundGuard;
}

/**
 * What services outside the access policy read through the access cache. The whole set of
 * cached reads (`AccessReads`) belongs to the policy; this interface keeps the context below it.
 */
export interface CachedReads {
  activeMemberships(userId: string): Promise<Array<{ organization: OrganizationRecord; roleSlugs: string[] }>>;
  isSuperadmin(userId: string): Promise<boolean>;
  startRead(): ReadStart;
  keepSuperadmin(userId: string, superadmin: boolean, start: ReadStart): void;
  recoveryCodesRemaining(userId: string): Promise<number>;
  firstMemberPage(organizationId: string, limit: number): Promise<MemberRow[]>;
}

/** Who asked, as far as the audit trail cares. */
export interface RequestMeta {
  ip: string | null;
  userAgent: string | null;
}
