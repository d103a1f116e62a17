import { isCommonPassword } from './common-passwords.js';
import { errors } from '../../errors.js';
import { normaliseEmail } from '../shared/identity-rules.js';

/** docs/configuration.md: length bounds, no composition rules, a blocklist, and not the e-mail itself. */
export function assertPasswordAcceptable(password: string, email: string, policy: { minLength: number; maxLength: number }, field = 'password'): void {
  const problems: string[] = [];
  const length = [...password].length;
  if (length < policy.minLength) problems.push(`"${field}" must be at least ${policy.minLength} characters long`);
  if (length > policy.maxLength) problems.push(`"${field}" must be at most ${policy.maxLength} characters long`);
  if (problems.length === 0 && isCommonPassword(password)) problems.push(`"${field}" is too common; choose a less guessable password`);
  const normalisedEmail = normaliseEmail(email);
  if (normalisedEmail && (password.trim().toLowerCase() === normalisedEmail || password.trim().toLowerCase() === normalisedEmail.split('@')[0])) {
    problems.push(`"${field}" must not be your e-mail address`);
  }
  if (problems.length > 0) throw errors.validation(problems);
}
