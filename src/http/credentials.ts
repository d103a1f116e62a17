import type { Request } from 'express';
import { looksLikeApiKey } from '../crypto/api-key.js';
import { errors } from '../errors.js';

/** The one credential a request presents (docs/getting-started.md and docs/api-keys.md). */
export type PresentedCredential = { kind: 'none' } | { kind: 'access_token'; token: string } | { kind: 'api_key'; key: string };

/** Lines of a header as sent: Node keeps only the first `Authorization` in `req.headers`. */
function headerLines(req: Request, name: string): string[] {
  const lines: string[] = [];
  for (let index = 0; index + 1 < req.rawHeaders.length; index += 2) {
    if (req.rawHeaders[index]!.toLowerCase() === name) lines.push(req.rawHeaders[index + 1]!);
  }
  return lines;
}

/**
 * The bearer value of `Authorization: Bearer <value>`, or undefined. Two `Authorization`
 * lines are ambiguous (Node keeps the first and drops the rest), so they answer undefined
 * and the request is refused (docs/getting-started.md).
 */
export function bearerValue(req: Request): string | undefined {
  const lines = headerLines(req, 'authorization');
  if (lines.length !== 1) return undefined;
  const header = lines[0]!;
  const match = /^Bearer[ ]+([A-Za-z0-9\-._~+/]+=*)\s*$/i.exec(header);
  return match?.[1];
}

/**
 * Which credential the request carries. Two `Authorization` lines, two keys, or an access
 * token beside a key are ambiguous and answer 401: picking one would let whichever layer
 * reads the other (a proxy, a log, the host) act on a different caller.
 */
export function presentedCredential(req: Request): PresentedCredential {
  const authorization = headerLines(req, 'authorization');
  const apiKeys = headerLines(req, 'x-api-key');
  if (authorization.length > 1 || apiKeys.length > 1 || (authorization.length > 0 && apiKeys.length > 0)) {
    throw errors.unauthorized('The request carries more than one credential.');
  }
  if (apiKeys.length === 1) return { kind: 'api_key', key: apiKeys[0]!.trim() };
  if (authorization.length === 0) return { kind: 'none' };
  const value = bearerValue(req);
  if (!value) throw errors.unauthorized();
  return looksLikeApiKey(value) ? { kind: 'api_key', key: value } : { kind: 'access_token', token: value };
}
