import type { OutboundGuard } from './outbound-guard.js';

/** Statuses whose Response may not carry a body. */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/**
 * The outbound guard as a Fetch function, for openid-client's `customFetch` (docs/sso.md):
 * every request to an organization's IdP (discovery, token, JWKS, UserInfo) is resolved,
 * checked and pinned by the one guard, and a redirect comes back as an answer, never followed.
 */
export function guardedFetch(guard: OutboundGuard, timeoutMs: number) {
  return async (url: string, options: { method: string; headers: Record<string, string>; body?: unknown }): Promise<Response> => {
    const method = options.method === 'POST' ? 'POST' : 'GET';
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(options.headers ?? {})) headers[name.toLowerCase()] = String(value);
    const body = options.body === undefined || options.body === null ? undefined : String(options.body);
    const answer = await guard.request(url, { method, headers, ...(body !== undefined ? { body } : {}), timeoutMs });
    const responseHeaders = new Headers();
    for (const [name, value] of Object.entries(answer.headers)) {
      if (value === undefined) continue;
      for (const entry of Array.isArray(value) ? value : [value]) responseHeaders.append(name, entry);
    }
    return new Response(NULL_BODY_STATUSES.has(answer.status) ? null : new Uint8Array(answer.body), { status: answer.status, headers: responseHeaders });
  };
}
