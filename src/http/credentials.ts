import type { Request } from 'express';
import { looksLikeApiKey } from '../crypto/api-key.js';
import { errors } from '../errors.js';
import type { AdmissionCredential } from '../services/access/access-policy.js';

/** The one credential a request presents (docs/getting-started.md and docs/api-keys.md). */
export type PresentedCredential = { kind: 'none' } | AdmissionCredential;

/** The `Authorization` and `X-API-Key` lines as sent, in one pass: Node keeps only the first `Authorization` in `req.headers`. */
function credentialLines(req: Request): { authorization: string[]; apiKeys: string[] } {
  const authorization: string[] = [];
  const apiKeys: string[] = [];
  const raw = req.rawHeaders;
  for (let index = 0; index + 1 < raw.length; index += 2) {
    const name = raw[index]!;
    // Only names of the right length are lower-cased: most headers are neither.
    if (name.length === 13 && name.toLowerCase() === 'authorization') authorization.push(raw[index + 1]!);
    else if (name.length === 9 && name.toLowerCase() === 'x-api-key') apiKeys.push(raw[index + 1]!);
  }
  return { authorization, apiKeys };
}

const BEARER = /^Bearer[ ]+([A-Za-z0-9\-._~+/]+=*)\s*$/i;

/**
 * The bearer value of `Authorization: Bearer <value>`, or undefined. Two `Authorization`
 * lines are ambiguous (Node keeps the first and drops the rest), so they answer undefined
 * and the request is refused (docs/getting-started.md).
 */
export function bearerValue(req: Request): string | undefined {
  const { authorization } = credentialLines(req);
  return authorization.length === 1 ? bearerOf(authorization[0]!) : undefined;
}

const bearerOf = (line: string): string | undefined => BEARER.exec(line)?.[1];

/**
 * Which credential the request carries. Two `Authorization` lines, two keys, or an access
 * token beside a key are ambiguous and answer 401: picking one would let whichever layer
 * reads the other (a proxy, a log, the host) act on a different caller.
 */
export function presentedCredential(req: Request): PresentedCredential {
  const { authorization, apiKeys } = credentialLines(req);
  if (authorization.length > 1 || apiKeys.length > 1 || (authorization.length > 0 && apiKeys.length > 0)) {
    throw errors.unauthorized('The request carries more than one credential.');
  }
  if (apiKeys.length === 1) return { kind: 'api_key', key: apiKeys[0]!.trim() };
  if (authorization.length === 0) return { kind: 'none' };
  const value = bearerOf(authorization[0]!);
  if (!value) throw errors.unauthorized();
  return looksLikeApiKey(value) ? { kind: 'api_key', key: value } : { kind: 'access_token', token: value };
}
