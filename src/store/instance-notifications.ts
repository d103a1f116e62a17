import type { Knex } from 'knex';
import type { Logger } from '../adapters/types.js';
import type { Dialect } from './database.js';
import type { Db } from './transaction.js';

/**
 * Messages between instances that share one database, for caches that must drop an entry
 * when another instance changes what it holds (docs/multiple-instances.md, STYLE 18).
 *
 * - `publish(topic, payload, trx?)` reaches every instance, this one included. On PostgreSQL
 *   it is a `NOTIFY`: sent inside a transaction (pass it), it is delivered at commit and
 *   dropped on rollback, so no instance hears of a change that did not happen.
 * - `subscribe(topic, handler)` calls `handler(payload)` for each message on `topic`.
 * - `onResync(handler)` is called whenever messages may have been missed: the listening
 *   connection was (re)established after a drop. A cache then forgets everything.
 * - `live` says whether messages from other instances currently arrive. While it is false a
 *   cache must fall back on its own short expiry.
 *
 * Delivery is at most once and best effort (a dropped connection loses messages, then
 * resyncs), so a cache keeps an expiry as the backstop. Payloads are short strings (an id):
 * PostgreSQL caps a notification at 8000 bytes, and they must never carry secrets.
 */
export interface InstanceNotifications {
  readonly live: boolean;
  publish(topic: string, payload?: string, db?: Db): Promise<void>;
  subscribe(topic: string, handler: (payload: string) => void): () => void;
  onResync(handler: () => void): () => void;
  close(): Promise<void>;
}

type Handler = (payload: string) => void;

/** Subscriber bookkeeping shared by both implementations. */
abstract class Dispatcher {
  private readonly topics = new Map<string, Set<Handler>>();
  private readonly resyncHandlers = new Set<() => void>();

  constructor(protected readonly logger: Logger) {}

  subscribe(topic: string, handler: Handler): () => void {
    let handlers = this.topics.get(topic);
    if (!handlers) {
      handlers = new Set();
      this.topics.set(topic, handlers);
    }
    handlers.add(handler);
    return () => handlers.delete(handler);
  }

  onResync(handler: () => void): () => void {
    this.resyncHandlers.add(handler);
    return () => this.resyncHandlers.delete(handler);
  }

  protected deliver(topic: string, payload: string): void {
    for (const handler of this.topics.get(topic) ?? []) this.safely(() => handler(payload));
  }

  protected resync(): void {
    for (const handler of this.resyncHandlers) this.safely(handler);
  }

  private safely(run: () => void): void {
    try {
      run();
    } catch (error) {
      this.logger.error('identity-router: an instance-notification handler failed', { error: (error as Error)?.name });
    }
  }
}

/** SQLite (one process per file is the supported setup): messages stay in this process. */
class LocalNotifications extends Dispatcher implements InstanceNotifications {
  readonly live = false;

  publish(topic: string, payload = ''): Promise<void> {
    setImmediate(() => this.deliver(topic, payload));
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

interface PgNotification {
  channel: string;
  payload?: string;
}

interface PgListenClient {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: unknown) => void): unknown;
}

interface RawConnectionClient {
  acquireRawConnection(): Promise<PgListenClient>;
  destroyRawConnection(connection: PgListenClient): Promise<void>;
}

const RECONNECT_MIN_MS = 500;
const RECONNECT_MAX_MS = 15_000;

/**
 * PostgreSQL `LISTEN`/`NOTIFY` on one channel per table prefix. The listening connection is
 * opened outside the Knex pool (it is held for the life of the router) and reopened with
 * backoff when it drops; each reopening triggers a resync.
 */
class PgNotifications extends Dispatcher implements InstanceNotifications {
  private connection: PgListenClient | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryDelay = RECONNECT_MIN_MS;
  private closed = false;
  private everConnected = false;

  constructor(
    private readonly knex: Knex,
    private readonly channel: string,
    logger: Logger,
  ) {
    super(logger);
    this.connect();
  }

  get live(): boolean {
    return this.connection !== undefined;
  }

  async publish(topic: string, payload = '', db: Db = this.knex): Promise<void> {
    await db.raw('SELECT pg_notify(?, ?)', [this.channel, JSON.stringify([topic, payload])]);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    // A connection still being opened closes itself when it arrives (connect() checks `closed`).
    const connection = this.connection;
    this.connection = undefined;
    if (connection) await this.raw().destroyRawConnection(connection).catch(() => undefined);
  }

  private raw(): RawConnectionClient {
    return this.knex.client as unknown as RawConnectionClient;
  }

  private connect(): void {
    void (async () => {
      let connection: PgListenClient | undefined;
      try {
        connection = await this.raw().acquireRawConnection();
        connection.on('notification', (message) => this.receive(message));
        connection.on('error', () => this.dropped(connection!));
        connection.on('end', () => this.dropped(connection!));
        await connection.query(`LISTEN "${this.channel}"`);
        if (this.closed) {
          await this.raw().destroyRawConnection(connection).catch(() => undefined);
          return;
        }
        this.connection = connection;
        this.retryDelay = RECONNECT_MIN_MS;
        // Anything published while no connection listened is lost: caches start over.
        if (this.everConnected) this.resync();
        this.everConnected = true;
      } catch (error) {
        if (connection) await this.raw().destroyRawConnection(connection).catch(() => undefined);
        this.logger.warn('identity-router: cannot listen for other instances\' changes yet; retrying', { code: (error as { code?: string })?.code });
        this.scheduleReconnect();
      }
    })();
  }

  private dropped(connection: PgListenClient): void {
    if (this.connection !== connection) return;
    this.connection = undefined;
    this.raw().destroyRawConnection(connection).catch(() => undefined);
    this.logger.warn('identity-router: lost the connection that listens for other instances\' changes; reconnecting');
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retryTimer) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(this.retryDelay * 2, RECONNECT_MAX_MS);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (!this.closed) this.connect();
    }, delay);
    this.retryTimer.unref();
  }

  private receive(message: PgNotification): void {
    if (message.channel !== this.channel || !message.payload) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(message.payload);
    } catch {
      return;
    }
    if (Array.isArray(parsed) && typeof parsed[0] === 'string' && typeof parsed[1] === 'string') this.deliver(parsed[0], parsed[1]);
  }
}

/** One channel per table prefix, so routers with different prefixes on one database do not hear each other. */
export function openInstanceNotifications(knex: Knex, dialect: Dialect, tablePrefix: string, logger: Logger): InstanceNotifications {
  return dialect === 'pg' ? new PgNotifications(knex, `${tablePrefix}instance_changes`.slice(0, 63), logger) : new LocalNotifications(logger);
}
