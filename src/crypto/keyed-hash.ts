import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** HMAC-SHA-256, hex. Used for every secret stored only as a hash (tokens, codes). */
export function keyedHash(key: Buffer, value: string): string {
  return createHmac('sha256', key).update(value, 'utf8').digest('hex');
}

/** Constant-time comparison of two hex digests of equal length. */
export function digestsEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'hex');
  const right = Buffer.from(b, 'hex');
  return left.length === right.length && timingSafeEqual(left, right);
}

/** A 256-bit opaque token, base64url. */
export function randomToken(): string {
  return randomBytes(32).toString('base64url');
}
