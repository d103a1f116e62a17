import { errors } from '../../errors.js';

/*
 * The small rules about who a user is, each written once: registration,
 * invites, login, password reset, MFA e-mail factors and profile edits all use these.
 */

/** One form of an address everywhere: trimmed, Unicode NFC, lower-cased. */
export function normaliseEmail(email: string): string {
  return email.trim().normalize('NFC').toLowerCase();
}

export const DISPLAY_NAME_MAX_LENGTH = 120;
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * The display-name rule (docs/database.md): trimmed, at most 120 characters, no control
 * characters; empty or null clears it. Refusals are 422 validation_failed.
 */
export function normaliseDisplayName(value: string | null | undefined): string | null {
  const trimmed = value?.trim() ?? '';
  if (trimmed === '') return null;
  const problems: string[] = [];
  if ([...trimmed].length > DISPLAY_NAME_MAX_LENGTH) problems.push(`"display_name" must be at most ${DISPLAY_NAME_MAX_LENGTH} characters long`);
  if (CONTROL_CHARACTER.test(trimmed)) problems.push('"display_name" must not contain control characters');
  if (problems.length > 0) throw errors.validation(problems);
  return trimmed;
}
