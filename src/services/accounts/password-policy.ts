import { isCommonPassword } from './common-passwords.js';
import { canonicalPassword } from '../../crypto/password-hasher.js';
import { errors } from '../../errors.js';
import { normaliseEmail } from '../shared/identity-rules.js';

/**
 * docs/configuration.md: length bounds, no composition rules, a blocklist, and not the e-mail itself.
 * Judged in the form the password is hashed in (NFC): its length in characters of that form, and
 * the blocklist and the e-mail compared without surrounding spaces or case.
 */
export function assertPasswordAcceptable(password: string, email: string, policy: { minLength: number; maxLength: number }, field = 'password'): void {
  const problems: string[] = [];
  const canonical = canonicalPassword(password);
  const length = [...canonical].length;
  if (length < policy.minLength) problems.push(`"${field}" must be at least ${policy.minLength} characters long`);
  if (length > policy.maxLength) problems.push(`"${field}" must be at most ${policy.maxLength} characters long`);
  const guessable = canonical.trim().toLowerCase();
  // A lone surrogate reaches the hash as U+FFFD, so any other in its place would sign in too.
  if (!password.isWellFormed()) problems.push(`"${field}" must be well-formed text (it holds half of a character)`);
  if (problems.length === 0 && isCommonPassword(guessable)) problems.push(`"${field}" is too common; choose a less guessable password`);
  const normalisedEmail = normaliseEmail(email);
  if (normalisedEmail && (guessable === normalisedEmail || guessable === normalisedEmail.split('@')[0])) {
    problems.push(`"${field}" must not be your e-mail address`);
  }
  if (problems.length > 0) throw errors.validation(problems);
}
