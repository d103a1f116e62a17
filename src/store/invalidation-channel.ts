import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from '../adapters/types.js';
import type { AccessScope, InvalidationCarrier } from '../services/access-cache.js';

/** PostgreSQL refuses NOTIFY payloads of 8000 bytes and more; past this, "everything" is sent instead. */
const PAYLOAD_LIMIT = 7000;
const RECONNECT_DELAY_MS = 1000;

interface ListeningConnection {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', listener: (error?: Error) => void): void;
  removeAllListeners(): void;
}

function encode(scopes: AccessScope[]): string {
  const parts = scopes.map((scope) => (scope === 'all' ? '*' : 'session' in scope ? `s:${scope.session}` : 'user' in scope ? `u:${scope.user}` : `o:${scope.organization}`));
  return parts.includes('*') ? '*' : parts.join(' ');
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
 * Carries access-cache invalidations between instances on one PostgreSQL database with
 * LISTEN/NOTIFY, on a channel named after the table prefix. One dedicated connection
 * listens; while it is down `listening` is false (the cache then serves nothing), and when it
 * comes back everything cached is dropped, since notifications sent meanwhile are lost.
 */
export class PgInvalidationChannel implements InvalidationCarrier {
  private connection: ListeningConnection | undefined;
  private closed = false;
  private connected = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly instanceId = randomUUID();
  private readonly channel: string;

  constructor(
    private readonly knex: Knex,
    tablePrefix: string,
    private readonly onHeard: (scopes: AccessScope[]) => void,
    private readonly logger: Logger,
  ) {
    this.channel = `${tablePrefix}access_changed`;
  }

  get listening(): boolean {
    return this.connected;
  }

  async start(): Promise<void> {
    if (this.closed || this.connection) return;
    try {
      const connection = (await this.knex.client.acquireRawConnection()) as ListeningConnection;
      this.connection = connection;
      connection.on('notification', (message) => {
        if (message.channel !== this.channel || !message.payload) return;
        const separator = message.payload.indexOf(' ');
        if (separator < 0 || message.payload.slice(0, separator) === this.instanceId) return;
        this.onHeard(decode(message.payload.slice(separator + 1)));
      });
      connection.on('error', () => this.lost());
      connection.on('end', () => this.lost());
      await connection.query(`LISTEN "${this.channel}"`);
      if (this.closed) return this.dropConnection();
      // Whatever was cached before may have missed notifications while nobody listened.
      this.onHeard(['all']);
      this.connected = true;
    } catch (error) {
      this.logger.warn('identity-router: cannot listen for access changes of other instances; the access cache is off until it can', {
        error: error instanceof Error ? error.name : 'Error',
      });
      this.lost();
    }
  }

  publish(scopes: AccessScope[]): void {
    let payload = encode(scopes);
    if (payload.length > PAYLOAD_LIMIT) payload = '*';
    this.knex.raw('select pg_notify(?, ?)', [this.channel, `${this.instanceId} ${payload}`]).catch((error: unknown) => {
      this.logger.error('identity-router: could not notify other instances of an access change; they drop it within the cache expiry', {
        error: error instanceof Error ? error.name : 'Error',
      });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.dropConnection();
  }

  private lost(): void {
    this.connected = false;
    void this.dropConnection();
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.start();
    }, RECONNECT_DELAY_MS);
    this.reconnectTimer.unref();
  }

  private async dropConnection(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    this.connected = false;
    if (!connection) return;
    connection.removeAllListeners();
    // An error after removal must not become an unhandled 'error' event.
    connection.on('error', () => undefined);
    await this.knex.client.destroyRawConnection(connection).catch(() => undefined);
  }
}
