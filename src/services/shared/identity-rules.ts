import { domainToASCII, domainToUnicode } from 'node:url';
import { errors } from '../../errors.js';

/*
 * The small rules about who a user is, each written once: registration,
 * invites, login, password reset, MFA e-mail factors and profile edits all use these.
 */

/** One form of an address everywhere: trimmed, Unicode NFC, lower-cased. */
export function normaliseEmail(email: string): string {
  return email.trim().normalize('NFC').toLowerCase();
}

/**
 * The mailbox an address reaches: the address as everywhere (`normaliseEmail`) with its domain as
 * verified domains are stored (`domainForm`, the IDNA A-label). A mailer maps a domain as IDNA
 * does (nodemailer: Unicode and A-label forms, full-width letters, ideographic full stops, and
 * ignorables such as U+200B, U+2060 and the soft hyphen dropped), so `ada@bücher.example`,
 * `ada@xn--bcher-kva.example` and `ada@example.com\u200b` each reach one mailbox. Every rule that
 * counts or compares mailboxes reads this form: the send budgets, passwordless start's cooldown
 * and supersede, an e-mail factor that proves only the first factor (docs/security.md). The local
 * part is kept as typed: a mailer sends it so, to what is another mailbox for the SMTP server.
 */
export function mailboxForm(email: string): string {
  const normalised = normaliseEmail(email);
  const domain = addressDomain(normalised);
  return domain === undefined ? normalised : `${normalised.slice(0, normalised.lastIndexOf('@'))}@${domain}`;
}

/**
 * The spellings an account or invitation of this address's mailbox is stored under: the address
 * (`normaliseEmail`), then with its domain as the IDNA A-label and as its Unicode form. Addresses
 * are kept as typed, so `ada@bücher.example` and `ada@xn--bcher-kva.example` are two rows for
 * one mailbox; a rule that finds rows of a mailbox (an invitation's account, the invitations a
 * removal or a deletion revokes) reads each of these, as acceptance compares `mailboxForm`.
 */
export function mailboxSpellings(email: string): string[] {
  const normalised = normaliseEmail(email);
  const domain = addressDomain(normalised);
  if (domain === undefined) return [normalised];
  const local = normalised.slice(0, normalised.lastIndexOf('@'));
  return [...new Set([normalised, `${local}@${domain}`, `${local}@${domainToUnicode(domain)}`])];
}

/**
 * One mailbox, one account (docs/security.md): what a path that creates an account passes the
 * store, which takes the mailbox's lock (`form`) and refuses the account while any of its
 * `spellings` has one. The same rule a sign-in by address reads: `spellings`, the typed one first.
 */
export function mailboxOf(email: string): { form: string; spellings: string[] } {
  return { form: mailboxForm(email), spellings: mailboxSpellings(email) };
}

/**
 * The domain of an address in the form verified domains are stored in (CONTRACT 12.4): what
 * follows the last `@`, one trailing dot dropped, as its IDNA A-label. `ada@Bücher.example`,
 * `ada@xn--bcher-kva.example` and the same host in full-width letters are one domain, so
 * identifier-first routing, the callback's domain rule and enforcement (`SignInRules`) all
 * see the one domain an organization verified. Undefined when no host name follows the `@`.
 */
export function addressDomain(email: string): string | undefined {
  const at = email.lastIndexOf('@');
  return at < 1 ? undefined : domainForm(email.slice(at + 1));
}

/** A host name as verified domains are stored: one trailing dot dropped, its IDNA A-label. */
export function domainForm(host: string): string | undefined {
  try {
    return domainToASCII(host.replace(/\.$/, '')) || undefined;
  } catch {
    return undefined;
  }
}

export const DISPLAY_NAME_MAX_LENGTH = 120;
/**
 * C0 and C1 controls and DEL, the bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E,
 * U+2066-U+2069) and the line and paragraph separators (U+2028, U+2029): no place in a name, an
 * address or a provider's subject. A bidi control makes text read as other text wherever it is
 * shown (`Acme\u202enimda` displays as "Acmeadmin" in mails, member lists, events), and RFC 8265's
 * OpaqueString refuses it in passwords too (docs/security.md "Hostile input").
 */
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/;

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

/**
 * The display-name rule for a name a provider asserts (a social or single sign-on sign-up),
 * without its refusal: control characters dropped, trimmed, cut at 120 characters.
 */
export function providerDisplayName(name: string | null): string | null {
  if (!name) return null;
  return [...withoutControlCharacters(name)].slice(0, DISPLAY_NAME_MAX_LENGTH).join('') || null;
}

const CONTROL_CHARACTERS = new RegExp(CONTROL_CHARACTER, 'g');

/** Text someone else wrote, kept to be shown (a provider's name, a sign-in's User-Agent): its control characters dropped, trimmed. */
export function withoutControlCharacters(text: string): string {
  return text.replace(CONTROL_CHARACTERS, '').trim();
}
