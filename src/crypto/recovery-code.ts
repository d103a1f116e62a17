import { randomBytes } from 'node:crypto';
import { keyedHash } from './keyed-hash.js';
import { base32Encode } from './totp.js';

export const RECOVERY_CODES_PER_BATCH = 10;
const CODE_CHARACTERS = 10;

/** `xxxxx-xxxxx`: ten base32 characters (50 bits), lower case for legibility. */
export function generateRecoveryCode(): string {
  const characters = base32Encode(randomBytes(7)).slice(0, CODE_CHARACTERS).toLowerCase();
  return `${characters.slice(0, 5)}-${characters.slice(5)}`;
}

/** Case-insensitive, dash and spaces optional (docs/security.md); undefined when it cannot be a recovery code. */
export function normaliseRecoveryCode(input: string): string | undefined {
  const compact = input.replace(/[\s-]/g, '').toLowerCase();
  return /^[a-z2-7]{10}$/.test(compact) ? compact : undefined;
}

/** Bound to the user so the same code string means nothing for another account. */
export function hashRecoveryCode(key: Buffer, userId: string, normalisedCode: string): string {
  return keyedHash(key, `recovery:${userId}:${normalisedCode}`);
}
