import { randomUUID } from 'node:crypto';
import type { InstanceNotifications } from '../../store/instance-notifications.js';
import { type AccessScope, type InvalidationCarrier, keyOfScope } from './access-cache.js';

const TOPIC = 'access';
/** PostgreSQL refuses NOTIFY payloads of 8000 bytes and more; past this, "everything" is sent instead. */
const PAYLOAD_LIMIT = 7000;

function encode(scopes: AccessScope[]): string {
  const parts = scopes.map((scope) => (scope === 'all' ? '*' : keyOfScope(scope)));
  const text = parts.includes('*') ? '*' : parts.join(' ');
  return text.length > PAYLOAD_LIMIT ? '*' : text;
}

function decode(text: string): AccessScope[] {
  const scopes: AccessScope[] = [];
  for (const part of text.split(' ')) {
    if (part === '*') return ['all'];
    const id = part.slice(2);
    if (part.startsWith('s:')) scopes.push({ session: id });
    else if (part.startsWith('u:')) scopes.push({ user: id });
    else if (part.startsWith('o:')) scopes.push({ organization: id });
  }
  return scopes;
}

/**
 * Carries access-cache invalidations between instances on one PostgreSQL database over the
 * instance notifications (LISTEN/NOTIFY, topic `access`). While the listening connection is
 * down the carrier is not `listening` (the cache then serves nothing), and a resync after a
 * drop makes the cache forget everything, since notifications sent meanwhile are lost.
 */
export class NotificationInvalidationCarrier implements InvalidationCarrier {
  private readonly instanceId = randomUUID();
  private readonly unsubscribe: Array<() => void>;

  constructor(
    private readonly notifications: InstanceNotifications,
    onHeard: (scopes: AccessScope[]) => void,
    private readonly onFailure: (error: unknown) => void,
  ) {
    this.unsubscribe = [
      notifications.subscribe(TOPIC, (payload) => {
        const separator = payload.indexOf(' ');
        // Our own invalidations were applied here before they were sent.
        if (separator < 0 || payload.slice(0, separator) === this.instanceId) return;
        onHeard(decode(payload.slice(separator + 1)));
      }),
      notifications.onResync(() => onHeard(['all'])),
    ];
  }

  get listening(): boolean {
    return this.notifications.live;
  }

  publish(scopes: AccessScope[]): void {
    this.notifications.publish(TOPIC, `${this.instanceId} ${encode(scopes)}`).catch(this.onFailure);
  }

  async close(): Promise<void> {
    for (const stop of this.unsubscribe) stop();
  }
}
