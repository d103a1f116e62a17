import { randomBytes } from 'node:crypto';
import { keyedHash } from './keyed-hash.js';

/** Every key starts with this, so scanners (and people) can tell what leaked (docs/api-keys.md). */
export const API_KEY_PREFIX = 'irk_';

/** `irk_` and 32 random bytes in base64url (43 characters, no padding). */
const API_KEY_PATTERN = /^irk_[A-Za-z0-9_-]{43}$/;

/** How many characters after the prefix are kept in clear, to tell keys apart in a list. */
const START_LENGTH = 8;

export function newApiKey(): { key: string; start: string } {
  const secret = randomBytes(32).toString('base64url');
  return { key: `${API_KEY_PREFIX}${secret}`, start: secret.slice(0, START_LENGTH) };
}

/** Whether a presented value has the shape of a key we issue; anything else is refused before hashing. */
export function isApiKeyShaped(value: string): boolean {
  return API_KEY_PATTERN.test(value);
}

/** Whether a bearer value claims to be an API key (so it is never verified as a JWT). */
export function looksLikeApiKey(value: string): boolean {
  return value.startsWith(API_KEY_PREFIX);
}

/** The stored form of a key: HMAC-SHA-256 under the API-key sub-key of the secret (docs/api-keys.md). */
export function apiKeyDigest(hashKey: Buffer, key: string): string {
  return keyedHash(hashKey, key);
}
