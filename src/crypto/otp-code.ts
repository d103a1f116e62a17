import { randomInt } from 'node:crypto';
import { digestsEqual, keyedHash } from './keyed-hash.js';

/** A code of `length` digits from the OS random source, leading zeros kept. */
export function generateOtpCode(length: number): string {
  return String(randomInt(0, 10 ** length)).padStart(length, '0');
}

/** The stored form: a keyed hash bound to the challenge, so a hash copied to another challenge is useless. */
export function hashOtpCode(key: Buffer, challengeId: string, code: string): string {
  return keyedHash(key, `otp:${challengeId}:${code}`);
}

/** Constant-time check of a submitted code; anything but exactly `length` ASCII digits fails first. */
export function otpCodeMatches(key: Buffer, challengeId: string, code: string, length: number, storedHash: string): boolean {
  if (!new RegExp(`^[0-9]{${length}}$`).test(code)) return false;
  return digestsEqual(hashOtpCode(key, challengeId, code), storedHash);
}

/** docs/security.md: `+*******4567`, keeping only the last four digits. */
export function maskPhone(phone: string): string {
  const digits = phone.replace(/^\+/, '');
  const kept = digits.slice(-4);
  return `+${'*'.repeat(Math.max(0, digits.length - kept.length))}${kept}`;
}

/**
 * docs/security.md: `a***@example.com`, keeping the first character (a whole code point: half of
 * a surrogate pair is no text, and strict JSON readers refuse it) and the domain.
 */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  if (at <= 0) return '***';
  return `${String.fromCodePoint(email.codePointAt(0)!)}***${email.slice(at)}`;
}
