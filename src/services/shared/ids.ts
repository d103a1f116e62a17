import { randomBytes } from 'node:crypto';

/**
 * The shape of every id the router issues (UUIDs) and accepts back. Values of any other
 * shape never reach SQL: PostgreSQL refuses a NUL byte in text with an error.
 */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export const isWellFormedId = (value: unknown): value is string => typeof value === 'string' && ID_PATTERN.test(value);

/**
 * A UUID whose first 48 bits are the time in milliseconds (version 7, RFC 9562 section 5.7),
 * the rest random: rows keyed by it are appended at the end of their index, not scattered
 * across it. For rows whose creation time is no secret (it is stored beside them).
 */
export function timeOrderedUuid(now: number): string {
  const bytes = randomBytes(16);
  bytes.writeUIntBE(Math.floor(now), 0, 6);
  bytes[6] = 0x70 | (bytes[6]! & 0x0f);
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
