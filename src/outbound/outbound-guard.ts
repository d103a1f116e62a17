import { lookup as systemLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { isIPv4, isIPv6, type LookupFunction } from 'node:net';
import type { DnsResolver, ResolvedAddress } from '../adapters/types.js';
import { classifyAddress } from './address-ranges.js';

/**
 * The one gate for every request the router sends to an address a tenant chose: webhooks
 * (docs/webhooks.md) and organization IdPs (12.2). It resolves the name once, refuses private
 * addresses unless the deployment allows them, always refuses link-local (cloud metadata),
 * connects to exactly the address it checked (no second resolution, so DNS rebinding reaches
 * nothing), and follows no redirect.
 */
export interface OutboundPolicy {
  /** Accept `http:` for every origin (the guard still checks the address). */
  allowHttp: boolean;
  /** `true`: every origin may use private addresses; a list: exactly these origins. Link-local stays refused. */
  allowPrivateNetworks: boolean | readonly string[];
  /**
   * Whether an origin `allowPrivateNetworks` exempts may also use `http:` (default true: an
   * organization's IdP, 12.2). Webhooks say false: there `http:` is `allowHttp`'s alone (13.3).
   */
  exemptOriginsMayUseHttp?: boolean;
}

export type OutboundRefusalReason = 'invalid' | 'scheme' | 'credentials' | 'unresolvable' | 'private_address';

/** The URL may not be requested; nothing was sent. */
export class OutboundRefusal extends Error {
  override readonly name = 'OutboundRefusal';
  constructor(readonly reason: OutboundRefusalReason, message: string) {
    super(message);
  }
}

export type OutboundFailureKind = 'timeout' | 'connection' | 'too_large';

/** The request was allowed but did not complete. */
export class OutboundFailure extends Error {
  override readonly name = 'OutboundFailure';
  constructor(readonly kind: OutboundFailureKind, message: string) {
    super(message);
  }
}

/** A URL that passed the guard, with the address the connection is pinned to. */
export interface CheckedTarget {
  url: URL;
  address: ResolvedAddress;
}

export interface OutboundResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Empty when the request asked to discard it. */
  body: Buffer;
}

export interface OutboundRequest {
  method: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** The whole request: resolution, connection and answer. */
  timeoutMs: number;
  /** Answer as soon as the status arrives, reading none of the body (a webhook's answer is never stored). */
  discardBody?: boolean;
  /** Default 1 MB. */
  maxBodyBytes?: number;
}

export const OUTBOUND_URL_MAX_LENGTH = 2048;
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

const defaultLookup = async (hostname: string): Promise<ResolvedAddress[]> =>
  (await systemLookup(hostname, { all: true, verbatim: true })).map((entry) => ({ address: entry.address, family: entry.family === 6 ? 6 : 4 }));

export class OutboundGuard {
  private readonly lookup: (hostname: string) => Promise<ResolvedAddress[]>;

  constructor(
    private readonly policy: OutboundPolicy,
    dns: DnsResolver | undefined,
  ) {
    this.lookup = dns?.lookup ? (hostname) => dns.lookup!(hostname) : defaultLookup;
  }

  /** Parses and checks the URL's form only (no resolution): scheme, credentials, length. */
  parse(raw: string): URL {
    if (typeof raw !== 'string' || raw.length > OUTBOUND_URL_MAX_LENGTH) throw new OutboundRefusal('invalid', `The URL must be an absolute URL of at most ${OUTBOUND_URL_MAX_LENGTH} characters.`);
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new OutboundRefusal('invalid', 'The URL is not an absolute URL.');
    }
    const httpAllowed = this.policy.allowHttp || (this.policy.exemptOriginsMayUseHttp !== false && this.exempt(url));
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && httpAllowed)) {
      throw new OutboundRefusal('scheme', httpAllowed ? 'The URL must use http: or https:.' : 'The URL must use https:.');
    }
    if (url.username || url.password) throw new OutboundRefusal('credentials', 'The URL must not carry a user name or password.');
    if (!url.hostname) throw new OutboundRefusal('invalid', 'The URL has no host.');
    return url;
  }

  /**
   * Resolves the URL's host and checks every address it resolves to; one refused address
   * refuses the URL. `deadline` (epoch ms, wall time) bounds the resolution.
   */
  async check(raw: string, deadline?: number): Promise<CheckedTarget> {
    const url = this.parse(raw);
    const host = literalAddress(url.hostname);
    let addresses: ResolvedAddress[];
    if (host) {
      addresses = [host];
    } else {
      try {
        addresses = await withDeadline(this.lookup(url.hostname), deadline);
      } catch (error) {
        if (error instanceof OutboundFailure) throw error;
        throw new OutboundRefusal('unresolvable', 'The URL\'s host does not resolve.');
      }
      if (!Array.isArray(addresses) || addresses.length === 0) throw new OutboundRefusal('unresolvable', 'The URL\'s host does not resolve.');
    }
    const exempt = this.exempt(url);
    for (const entry of addresses) {
      const kind = classifyAddress(entry.address);
      if (kind === 'link_local' || (kind === 'private' && !exempt)) {
        throw new OutboundRefusal('private_address', 'The URL resolves to a private, loopback or link-local address.');
      }
    }
    const first = addresses[0]!;
    return { url, address: { address: first.address, family: first.family === 6 || isIPv6(first.address) ? 6 : 4 } };
  }

  /** Checks the URL and sends one request to the checked address. Redirects are answers, never followed. */
  async request(raw: string, request: OutboundRequest): Promise<OutboundResponse> {
    const deadline = Date.now() + request.timeoutMs;
    const target = await this.check(raw, deadline);
    return send(target, request, deadline);
  }

  private exempt(url: URL): boolean {
    const allowed = this.policy.allowPrivateNetworks;
    return allowed === true || (Array.isArray(allowed) && allowed.includes(url.origin));
  }
}

/** An IP literal as WHATWG serialises it (it has already turned decimal, hex, octal and short IPv4 into dotted quads). */
function literalAddress(hostname: string): ResolvedAddress | undefined {
  if (hostname.startsWith('[') && hostname.endsWith(']')) return { address: hostname.slice(1, -1), family: 6 };
  if (isIPv4(hostname)) return { address: hostname, family: 4 };
  return undefined;
}

function withDeadline<T>(promise: Promise<T>, deadline: number | undefined): Promise<T> {
  if (deadline === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new OutboundFailure('timeout', 'The request timed out.')), Math.max(0, deadline - Date.now()));
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

function send(target: CheckedTarget, request: OutboundRequest, deadline: number): Promise<OutboundResponse> {
  const { url, address } = target;
  const transport = url.protocol === 'https:' ? https : http;
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  // The socket goes to the checked address whatever the name resolves to now.
  const pinnedLookup: LookupFunction = (_hostname, options, callback) => {
    if (options.all) (callback as unknown as (error: null, addresses: ResolvedAddress[]) => void)(null, [address]);
    else callback(null, address.address, address.family);
  };
  const maxBodyBytes = request.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  return new Promise<OutboundResponse>((resolve, reject) => {
    let settled = false;
    const finish = (error: Error | undefined, response?: OutboundResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error) reject(error);
      else resolve(response!);
    };
    const outgoing = transport.request({
      method: request.method,
      protocol: url.protocol,
      hostname,
      port: url.port || undefined,
      path: `${url.pathname}${url.search}`,
      headers: { ...request.headers, host: url.host },
      // A fresh socket per request: a pooled one could have been opened to another address.
      agent: false,
      lookup: pinnedLookup,
      ...(url.protocol === 'https:' && !isIPv4(hostname) && !isIPv6(hostname) ? { servername: hostname } : {}),
    });
    const timer = setTimeout(() => {
      finish(new OutboundFailure('timeout', 'The request timed out.'));
      outgoing.destroy();
    }, Math.max(0, deadline - Date.now()));
    outgoing.on('error', () => finish(new OutboundFailure('connection', 'The connection failed.')));
    outgoing.on('response', (incoming) => {
      const status = incoming.statusCode ?? 0;
      if (request.discardBody) {
        finish(undefined, { status, headers: incoming.headers, body: Buffer.alloc(0) });
        incoming.destroy();
        outgoing.destroy();
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      incoming.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxBodyBytes) {
          finish(new OutboundFailure('too_large', 'The answer is too large.'));
          incoming.destroy();
          outgoing.destroy();
          return;
        }
        chunks.push(chunk);
      });
      incoming.on('end', () => finish(undefined, { status, headers: incoming.headers, body: Buffer.concat(chunks) }));
      incoming.on('error', () => finish(new OutboundFailure('connection', 'The connection failed.')));
    });
    outgoing.end(request.body);
  });
}
