import { randomBytes } from 'node:crypto';
import speakeasy from 'speakeasy';

/** docs/security.md / 8: 6 digits, 30 s, SHA-1, window plus or minus one step. */
export const TOTP_DIGITS = 6;
export const TOTP_PERIOD_SECONDS = 30;
export const TOTP_WINDOW_STEPS = 1;
const SECRET_BYTES = 20; // 160 bits (docs/mfa.md)

const BASE32_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** RFC 4648 base32 without padding. */
export function base32Encode(bytes: Buffer): string {
  let bits = 0;
  let value = 0;
  let output = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      output += BASE32_ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) output += BASE32_ALPHABET[(value << (5 - bits)) & 31];
  return output;
}

/** A fresh 160-bit secret from the OS random source, base32 (what authenticator apps read). */
export function generateTotpSecret(): string {
  return base32Encode(randomBytes(SECRET_BYTES));
}

/** `otpauth://totp/{issuer}:{account}?secret=...&issuer=...&digits=6&period=30`, both parts URI-encoded. */
export function totpProvisioningUri(issuer: string, account: string, secretBase32: string): string {
  const encodedIssuer = encodeURIComponent(issuer);
  return `otpauth://totp/${encodedIssuer}:${encodeURIComponent(account)}?secret=${secretBase32}&issuer=${encodedIssuer}&digits=${TOTP_DIGITS}&period=${TOTP_PERIOD_SECONDS}`;
}

export interface TotpCheck {
  secret: string;
  /** How `secret` is written: base32 for stored factors, ascii for the RFC 6238 vectors. */
  encoding?: 'base32' | 'ascii';
  code: string;
  /** Epoch seconds from the injected clock. */
  timeSeconds: number;
  digits?: number;
}

/**
 * The time-step a code matches within the window, or undefined. The shape is checked
 * first: speakeasy parses with parseInt, so "5924ab" or " 05924" would otherwise match.
 */
export function matchTotpStep(check: TotpCheck): number | undefined {
  const digits = check.digits ?? TOTP_DIGITS;
  if (!new RegExp(`^[0-9]{${digits}}$`).test(check.code)) return undefined;
  const currentStep = Math.floor(check.timeSeconds / TOTP_PERIOD_SECONDS);
  const match = speakeasy.totp.verifyDelta({
    secret: check.secret,
    encoding: check.encoding ?? 'base32',
    token: check.code,
    time: check.timeSeconds,
    step: TOTP_PERIOD_SECONDS,
    window: TOTP_WINDOW_STEPS,
    digits,
    algorithm: 'sha1',
  });
  return match === undefined ? undefined : currentStep + match.delta;
}
