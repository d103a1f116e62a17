import { AssertionError } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import express from 'express';
import knexFactory, { type Knex } from 'knex';
import { openApiValidationEnabled, recordResponse } from './openapi.js';
import { createIdentityRouter, type IdentityAdapters, type IdentityConfig, type IdentityEvent, type IdentityRouter, type Logger, type MailMessage, type SmsMessage } from '../../src/index.js';

export const TEST_DB = (process.env.IDENTITY_TEST_DB ?? 'sqlite') as 'sqlite' | 'pg';
export const PG_URL = process.env.IDENTITY_TEST_PG_URL;
export const MOUNT = '/identity';
export const STRONG_PASSWORD = 'correct horse battery staple';

/** A clock the tests move instead of sleeping. */
export class TestClock {
  private current: number;
  constructor(start = Date.UTC(2030, 0, 1, 12, 0, 0)) {
    this.current = start;
  }
  now(): number {
    return this.current;
  }
  advance(seconds: number): void {
    this.current += seconds * 1000;
  }
  set(ms: number): void {
    this.current = ms;
  }
}

export interface TestResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
  text: string;
}

export interface RequestOptions {
  body?: unknown;
  /** Raw body text, sent as is (with content-type application/json unless headers say otherwise). */
  rawBody?: string;
  token?: string;
  headers?: Record<string, string>;
}

export interface HarnessOptions {
  config?: Partial<IdentityConfig> & Record<string, unknown>;
  /** Keep rate limits as configured (they are off by default in tests). */
  rateLimits?: boolean;
  /** Share the database of another harness (several instances on one database). */
  shareDatabaseWith?: Harness;
  /**
   * With `shareDatabaseWith` on PostgreSQL: open a connection pool of its own, as another
   * process would, instead of sharing the other harness's Knex instance.
   */
  ownConnection?: boolean;
  onEvent?: (event: IdentityEvent) => void | Promise<void>;
  /** Start without an `onEvent` listener at all (the outbox then writes no listener rows). */
  noListener?: boolean;
  /** Passed as `adapters.dns` (webhooks' outbound guard). */
  dns?: IdentityAdapters['dns'];
  mailerFails?: boolean;
  /** Epoch ms the harness clock starts at (default 2030-01-01); ignored with `shareDatabaseWith`. */
  clockStart?: number;
}

/** A captured log line, so tests can assert that no secret reaches the log. */
export interface LogLine {
  level: string;
  msg: string;
  meta?: object;
}

/**
 * A real Express app with the router mounted under /identity, on a real SQLite file or a
 * real PostgreSQL database (isolated by a random table prefix), with capture adapters
 * and a controllable clock.
 */
export class Harness {
  readonly clock: TestClock;
  readonly mail: MailMessage[] = [];
  readonly sms: SmsMessage[] = [];
  readonly events: IdentityEvent[] = [];
  readonly logs: LogLine[] = [];
  identity!: IdentityRouter;
  knex!: Knex;
  tablePrefix!: string;
  baseUrl!: string;
  private server!: ReturnType<express.Express['listen']>;
  private tempDir: string | undefined;
  private ownsDatabase = false;
  private ownsConnection = false;

  constructor(private readonly options: HarnessOptions = {}) {
    this.clock = options.shareDatabaseWith?.clock ?? new TestClock(options.clockStart);
  }

  static async start(options: HarnessOptions = {}): Promise<Harness> {
    const harness = new Harness(options);
    await harness.boot();
    return harness;
  }

  private async boot(): Promise<void> {
    const shared = this.options.shareDatabaseWith;
    if (shared && this.options.ownConnection && TEST_DB === 'pg') {
      this.knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 10 } });
      this.tablePrefix = shared.tablePrefix;
      this.ownsConnection = true;
    } else if (shared) {
      this.knex = shared.knex;
      this.tablePrefix = shared.tablePrefix;
    } else {
      this.tablePrefix = `t${randomBytes(4).toString('hex')}_`;
      this.ownsDatabase = true;
      if (TEST_DB === 'pg') {
        if (!PG_URL) throw new Error('IDENTITY_TEST_PG_URL is required when IDENTITY_TEST_DB=pg');
        this.knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 30 } });
      } else {
        this.tempDir = mkdtempSync(join(tmpdir(), 'identity-sqlite-'));
        this.knex = knexFactory({ client: 'better-sqlite3', connection: { filename: join(this.tempDir, 'identity.sqlite') }, useNullAsDefault: true });
        await this.knex.raw('PRAGMA foreign_keys = ON');
      }
    }
    const logger: Logger = {
      debug: (msg, meta) => this.logs.push({ level: 'debug', msg, ...(meta ? { meta } : {}) }),
      info: (msg, meta) => this.logs.push({ level: 'info', msg, ...(meta ? { meta } : {}) }),
      warn: (msg, meta) => this.logs.push({ level: 'warn', msg, ...(meta ? { meta } : {}) }),
      error: (msg, meta) => this.logs.push({ level: 'error', msg, ...(meta ? { meta } : {}) }),
    };
    const { config: overrides = {} } = this.options;
    const config: IdentityConfig = {
      database: this.knex,
      tablePrefix: this.tablePrefix,
      secret: 'test-secret-that-is-at-least-32-characters-long',
      issuer: 'https://id.example.test',
      password: { bcryptCost: 4 },
      ...(this.options.rateLimits ? {} : { auth: { rateLimits: false } }),
      ...overrides,
    } as IdentityConfig;
    if (overrides.auth && !this.options.rateLimits) config.auth = { rateLimits: false, ...(overrides.auth as object) };
    this.identity = createIdentityRouter(config, {
      clock: this.clock,
      logger,
      mailer: {
        send: async (message) => {
          if (this.options.mailerFails) throw new Error('SMTP down');
          this.mail.push(message);
        },
      },
      sms: { send: async (message) => void this.sms.push(message) },
      ...(this.options.noListener
        ? {}
        : {
            onEvent: async (event: IdentityEvent) => {
              this.events.push(event);
              await this.options.onEvent?.(event);
            },
          }),
      ...(this.options.dns ? { dns: this.options.dns } : {}),
    });
    await this.identity.ready;
    const app = express();
    app.set('trust proxy', false);
    app.use(MOUNT, this.identity);
    await new Promise<void>((resolve) => {
      this.server = app.listen(0, '127.0.0.1', () => resolve());
    });
    this.baseUrl = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${MOUNT}`;
  }

  async request<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<TestResponse<T>> {
    const headers: Record<string, string> = { ...options.headers };
    let body: string | undefined;
    if (options.rawBody !== undefined) {
      body = options.rawBody;
      headers['content-type'] ??= 'application/json';
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    // Redirects (the social callback) are answers to inspect, not to follow.
    const response = await fetch(this.baseUrl + path, { method: method.toUpperCase(), headers, body, redirect: 'manual' });
    const text = await response.text();
    let parsed: unknown ;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    // Every response is checked against docs/openapi.yaml (IDENTITY_OPENAPI_VALIDATION=off to skip).
    const violations = recordResponse(method, path, response.status, parsed, response.headers);
    if (violations.length > 0 && openApiValidationEnabled()) throw new AssertionError({ message: `response does not match docs/openapi.yaml:\n  ${violations.join('\n  ')}` });
    return { status: response.status, body: parsed as T, headers: response.headers, text };
  }

  get = <T = any>(path: string, options?: RequestOptions) => this.request<T>('GET', path, options);
  post = <T = any>(path: string, body?: unknown, options: RequestOptions = {}) => this.request<T>('POST', path, { ...options, body });
  patch = <T = any>(path: string, body?: unknown, options: RequestOptions = {}) => this.request<T>('PATCH', path, { ...options, body });
  delete = <T = any>(path: string, options?: RequestOptions) => this.request<T>('DELETE', path, options);

  /** The newest mail of a template sent to an address. */
  lastMail(to: string, template: MailMessage['template']): MailMessage | undefined {
    return [...this.mail].reverse().find((message) => message.to === to.toLowerCase() && message.template === template);
  }

  tokenFromMail(to: string, template: MailMessage['template']): string {
    const message = this.lastMail(to, template);
    if (!message) throw new Error(`no ${template} mail to ${to}`);
    return String(message.context.token);
  }

  eventsOfType(type: IdentityEvent['type']): IdentityEvent[] {
    return this.events.filter((event) => event.type === type);
  }

  /** Registers (and by default verifies) a user and logs in; answers tokens and the user id. */
  async signUp(email = uniqueEmail(), password = STRONG_PASSWORD, options: { verify?: boolean } = {}): Promise<SignedUpUser> {
    const registered = await this.post('/auth/register', { email, password });
    if (registered.status !== 202) throw new Error(`register failed: ${registered.status} ${registered.text}`);
    if (options.verify !== false) {
      const verified = await this.post('/auth/email/verify', { token: this.tokenFromMail(email, 'verify_email') });
      if (verified.status !== 200) throw new Error(`verify failed: ${verified.status} ${verified.text}`);
    }
    const login = await this.post('/auth/login', { email, password });
    if (login.status !== 200 || !login.body.data.access_token) throw new Error(`login failed: ${login.status} ${login.text}`);
    return {
      email: email.toLowerCase(),
      password,
      userId: login.body.data.user.id,
      accessToken: login.body.data.access_token,
      refreshToken: login.body.data.refresh_token,
    };
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.identity.close();
    if (this.ownsDatabase) {
      if (TEST_DB === 'pg') await dropPrefixedTables(this.knex, this.tablePrefix);
      await this.knex.destroy();
      if (this.tempDir) rmSync(this.tempDir, { recursive: true, force: true });
    } else if (this.ownsConnection) {
      await this.knex.destroy();
    }
  }
}

/**
 * For a file whose tests each start their own harness: a start function whose harnesses all
 * close after the file's tests, the newest first (a second instance before the one it shares a
 * database with).
 */
export function harnessesClosedAfterFile(): (options?: HarnessOptions) => Promise<Harness> {
  const started: Harness[] = [];
  after(async () => {
    for (const harness of started.reverse()) await harness.close();
  });
  return async (options) => {
    const harness = await Harness.start(options);
    started.push(harness);
    return harness;
  };
}

export interface SignedUpUser {
  email: string;
  password: string;
  userId: string;
  accessToken: string;
  refreshToken: string;
}

let emailCounter = 0;
export function uniqueEmail(prefix = 'user'): string {
  emailCounter += 1;
  return `${prefix}${emailCounter}-${randomBytes(3).toString('hex')}@example.com`;
}

/** The claims of a JWT, unverified (tests inspect what the router issued). */
export function decodeJwt(token: string): Record<string, any> {
  const [, payload] = token.split('.');
  return JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8'));
}

export function decodeJwtHeader(token: string): Record<string, any> {
  const [header] = token.split('.');
  return JSON.parse(Buffer.from(header!, 'base64url').toString('utf8'));
}

async function dropPrefixedTables(knex: Knex, prefix: string): Promise<void> {
  const { rows } = await knex.raw<{ rows: Array<{ tablename: string }> }>(`select tablename from pg_tables where schemaname = current_schema() and tablename like ?`, [`${prefix}%`]);
  if (rows.length > 0) await knex.raw(`drop table if exists ${rows.map((row) => `"${row.tablename}"`).join(', ')} cascade`);
}
