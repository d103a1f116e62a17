import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * A refresh token names its session and the session's refresh generation, under an HMAC keyed
 * from `config.secret`: `rt1.<session id>.<generation>.<mac>` (docs/security.md). Nothing of it is
 * stored: the session row keeps only its current generation, and a rotation is one conditional
 * update of that row. A token of an older generation is a replay.
 */
const PREFIX = 'rt1';
const SHAPE = /^rt1\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(0|[1-9][0-9]{0,14})\.([A-Za-z0-9_-]{43})$/;

function mac(key: Buffer, signed: string): string {
  return createHmac('sha256', key).update(signed, 'utf8').digest('base64url');
}

export function issueRefreshToken(key: Buffer, sessionId: string, generation: number): string {
  const signed = `${PREFIX}.${sessionId}.${generation}`;
  return `${signed}.${mac(key, signed)}`;
}

/** The session and generation a token names, or undefined when its shape or MAC is wrong. */
export function readRefreshToken(key: Buffer, token: string): { sessionId: string; generation: number } | undefined {
  const match = SHAPE.exec(token);
  if (!match) return undefined;
  const [, sessionId, generation, presented] = match as unknown as [string, string, string, string];
  const expected = Buffer.from(mac(key, `${PREFIX}.${sessionId}.${generation}`));
  const given = Buffer.from(presented);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  return { sessionId, generation: Number(generation) };
}

/** Tokens issued before refresh tokens carried a MAC: 256 random bits, stored as keyed hashes. */
export function isStoredRefreshToken(token: string): boolean {
  return !token.startsWith(`${PREFIX}.`);
}
