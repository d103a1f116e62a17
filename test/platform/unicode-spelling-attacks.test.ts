/*
 * Text that looks like one thing and is another (docs/security.md "Hostile input, responses and
 * logs"): bidirectional controls in names shown to other people, one mailbox under two spellings
 * of its domain, full-width digits in codes, decomposed and look-alike spellings of names and
 * slugs. Each block names the threat.
 *
 *   node scripts/run-tests.mjs test/platform/unicode-spelling-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assertError, assertValidationErrors, countRows } from '../helpers/account.js';
import { harnessesClosedAfterFile, type Harness, uniqueEmail } from '../helpers/harness.js';
import { lastMailCode } from '../helpers/mfa.js';
import { newSubject, socialLogin, type TestOpenIdProvider, withSocialHarness } from '../helpers/oidc.js';
import { addMember, createOrg, memberOf } from '../helpers/orgs.js';

const start = harnessesClosedAfterFile();

/** Every bidirectional control: embeddings and overrides, isolates, the marks, the Arabic letter mark. */
const BIDI_CONTROLS = ['\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069', '\u200e', '\u200f', '\u061c'];

/** `local@bücher.example` and the same mailbox with its domain as the IDNA A-label. */
function twoSpellings(prefix: string): { unicode: string; aLabel: string } {
  const [local] = uniqueEmail(prefix).split('@') as [string];
  return { unicode: `${local}@bücher.example`, aLabel: `${local}@xn--bcher-kva.example` };
}

/*
 * Fault: bidirectional controls passed the input rule, which refused C0, DEL and C1 only. An
 * organization named `Acme\u202enimda` is shown as "Acmeadmin" (the override reverses what
 * follows) in invitation mails, member lists, the admin UI and every event a webhook receives;
 * a display name or role name can fake another member's or role's. Every string field now
 * refuses them with the control characters (422 `{errors}`), whatever route takes it.
 */
test('a bidirectional control in any name shown to others is refused with 422, like a control character', async () => {
  const h = await start();
  const org = await createOrg(h);
  const user = await h.signUp();
  const pending = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
  assert.equal(pending.status, 200, pending.text);
  for (const [index, bidi] of BIDI_CONTROLS.entries()) {
    const name = `Acme${bidi}nimda`;
    const context = `U+${bidi.codePointAt(0)!.toString(16).padStart(4, '0')}`;
    const answers = {
      register: await h.post('/auth/register', { email: uniqueEmail('bidi'), password: 'Correct-Horse-Battery-9', display_name: name }),
      profile: await h.patch(`/users/${user.userId}`, { display_name: name }, { token: user.accessToken }),
      createOrg: await h.post('/orgs', { name }, { token: user.accessToken }),
      renameOrg: await h.patch(`/orgs/${org.id}`, { name }, { token: org.owner.token }),
      roleName: await h.post(`/orgs/${org.id}/roles`, { name, slug: `bidi-${index}`, permission_keys: ['org.read'] }, { token: org.owner.token }),
      roleDescription: await h.post(`/orgs/${org.id}/roles`, { name: 'Reader', slug: `bidi-d-${index}`, description: name, permission_keys: ['org.read'] }, { token: org.owner.token }),
      apiKeyName: await h.post(`/orgs/${org.id}/api-keys`, { name, permission_keys: ['org.read'] }, { token: org.owner.token }),
      factorLabel: await h.patch(`/auth/mfa/factors/${pending.body.data.factor_id}`, { label: name }, { token: user.accessToken }),
      inviteAddress: await h.post(`/orgs/${org.id}/invites`, { email: `ad${bidi}min@example.com`, role_slugs: ['member'] }, { token: org.owner.token }),
    };
    for (const [route, answer] of Object.entries(answers)) assertValidationErrors(answer, /must not contain control characters/, `${context} ${route}`);
  }
  const me = await h.get('/auth/me', { token: user.accessToken });
  assert.equal(me.body.data.display_name, null, 'nothing stored');
  assert.equal(h.eventsOfType('org.updated').length, 0);
  assert.equal(h.eventsOfType('role.created').length, 0);
});

/*
 * The line and paragraph separators (U+2028, U+2029) are line breaks wherever text is shown,
 * refused like the newline already was: a display name cannot fake a second line in a list.
 */
test('a line or paragraph separator in a name is refused like a newline', async () => {
  const h = await start();
  const user = await h.signUp();
  for (const separator of ['\u2028', '\u2029']) {
    assertValidationErrors(await h.patch(`/users/${user.userId}`, { display_name: `Ada${separator}Role: owner` }, { token: user.accessToken }), /control characters/);
  }
});

/*
 * Decision: right-to-left text itself, and the joiners scripts and emoji need (ZWJ, ZWNJ), are
 * names like any other; only the controls that reorder what is shown are refused.
 */
test('right-to-left names and joiners are accepted; only the reordering controls are refused', async () => {
  const h = await start();
  const user = await h.signUp();
  for (const name of ['שלום עולם', 'مرحبا', 'Ada 👩\u200d💻', 'می\u200cخواهم']) {
    const answer = await h.patch(`/users/${user.userId}`, { display_name: name }, { token: user.accessToken });
    assert.equal(answer.status, 200, `${JSON.stringify(name)} ${answer.text}`);
    assert.equal(answer.body.data.display_name, name);
  }
  const org = await h.post('/orgs', { name: 'שלום בע"מ' }, { token: user.accessToken });
  assert.equal(org.status, 201, org.text);
});

/*
 * A provider's name is not refused (the sign-in is the user's, the name the IdP's): like control
 * characters, bidirectional controls are dropped from a new account's display name
 * (`providerDisplayName`, shared by social login and single sign-on JIT).
 */
describe('what a provider asserts', () => {
  let op: TestOpenIdProvider;
  let h: Harness;
  withSocialHarness((started) => ({ op, h } = started));

  test("bidirectional controls in a provider's name are dropped from a new account's display name", async () => {
    const signedIn = await socialLogin(h, op, { sub: newSubject(), email: uniqueEmail('social-bidi'), email_verified: true, name: 'Ada \u202eecalevoL\u202c\u2066x\u2069' });
    assert.equal(signedIn.status, 200, signedIn.text);
    const me = await h.get('/auth/me', { token: signedIn.body.data.access_token });
    assert.equal(me.body.data.display_name, 'Ada ecalevoLx');
  });
});

/*
 * Fault: an invitation sent to one spelling of a mailbox's domain could not be accepted by the
 * account registered under the other (`ada@bücher.example` invited, `ada@xn--bcher-kva.example`
 * registered, or the reverse): 403, though both reach one inbox and the account proved it owns
 * it. The comparison now reads the one mailbox form (`mailboxForm`); another mailbox stays 403.
 */
test('an invitation to the Unicode spelling of a domain is accepted by the account under the A-label, and the reverse', async () => {
  const h = await start();
  const org = await createOrg(h);
  for (const [invited, registered] of [
    ['unicode', 'aLabel'],
    ['aLabel', 'unicode'],
  ] as const) {
    const spellings = twoSpellings(`idn-${invited}`);
    const account = await h.signUp(spellings[registered]);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: spellings[invited], role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(spellings[invited], 'invite') }, { token: account.accessToken });
    assert.equal(accepted.status, 200, `${invited} invited, ${registered} registered: ${accepted.text}`);
    assert.equal(accepted.body.data.organization_id, org.id);
  }
  // Another local part at the same domain is another mailbox.
  const other = twoSpellings('idn-other');
  const stranger = await h.signUp(twoSpellings('idn-stranger').aLabel);
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: other.unicode, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const refused = await h.post('/auth/invites/accept', { token: h.tokenFromMail(other.unicode, 'invite') }, { token: stranger.accessToken });
  assert.equal(refused.status, 403, refused.text);
});

/*
 * Fault, with the acceptance above: the rules that find the rows of an invitation's mailbox read
 * one spelling. An active member registered under the A-label was invited again under the
 * Unicode spelling (201 and a mail, where the same spelling is 409), and accepting that invitation
 * replaced the member's roles (an owner demoted by an invitation an admin sent); removing a member
 * left a pending invitation to the other spelling, which let the removed member join again; and
 * deleting an account left its address in invitations to the other spelling. Each now reads the
 * mailbox's spellings (`mailboxSpellings`: as typed, A-label, Unicode).
 */
test('an active member under one spelling is not invited under another; removal and deletion end the invitations of every spelling', async () => {
  const h = await start();
  const org = await createOrg(h);
  for (const [registered, invited] of [
    ['aLabel', 'unicode'],
    ['unicode', 'aLabel'],
  ] as const) {
    const spellings = twoSpellings(`idn-member-${registered}`);
    const member = await addMember(h, org, org.owner.token, ['admin'], await h.signUp(spellings[registered]));
    const again = await h.post(`/orgs/${org.id}/invites`, { email: spellings[invited], role_slugs: ['member'] }, { token: org.owner.token });
    assertError(again, 409, 'conflict', `${registered} member, ${invited} invited`);
    assert.deepEqual((await memberOf(h, org.id, org.owner.token, member.userId)).roles, ['admin']);
  }

  // Invited under the Unicode spelling, joined under the A-label one, then removed.
  const spellings = twoSpellings('idn-removed');
  const removed = await h.signUp(spellings.aLabel);
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: spellings.unicode, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const leftOver = h.tokenFromMail(spellings.unicode, 'invite');
  await addMember(h, org, org.owner.token, ['member'], removed);
  assert.equal((await h.delete(`/orgs/${org.id}/members/${removed.userId}`, { token: org.owner.token })).status, 200);
  const signedIn = await h.post('/auth/login', { email: removed.email, password: removed.password });
  assert.equal(signedIn.status, 200, signedIn.text);
  const rejoin = await h.post('/auth/invites/accept', { token: leftOver }, { token: signedIn.body.data.access_token });
  assert.equal(rejoin.status, 400, `the removed member joins again: ${rejoin.text}`);

  // Deleted: no invitation keeps the address in any spelling.
  const deleted = twoSpellings('idn-deleted');
  const account = await h.signUp(deleted.aLabel);
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: deleted.unicode, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  assert.equal((await h.delete(`/users/${account.userId}`, { token: account.accessToken })).status, 200);
  assert.equal(await countRows(h, 'invites', { email: deleted.unicode }), 0, 'the address stays in an invitation');
  assert.equal((await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token })).body.data.some((invite: { email: string }) => invite.email === deleted.unicode), false);
});

/*
 * Fault: a user could enroll and confirm two e-mail factors for one mailbox, under its Unicode
 * and its A-label domain: the uniqueness check compared the address as typed. The list showed
 * two "different" factors that are one inbox. Enrollment now finds a user's e-mail factors by
 * mailbox (`mailboxForm`): a confirmed one is 409, as for the same spelling.
 */
test('an e-mail factor for a mailbox already confirmed under another spelling of its domain is 409', async () => {
  const h = await start();
  const user = await h.signUp();
  const spellings = twoSpellings('factor');
  const enrolled = await h.post('/auth/mfa/email/enroll', { email: spellings.unicode }, { token: user.accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: enrolled.body.data.factor_id, code: lastMailCode(h, spellings.unicode) }, { token: user.accessToken });
  assert.equal(confirmed.status, 200, confirmed.text);
  h.clock.advance(31);
  for (const email of [spellings.aLabel, spellings.unicode.replace('bücher', 'BÜCHER')]) {
    const again = await h.post('/auth/mfa/email/enroll', { email }, { token: user.accessToken });
    assertError(again, 409, 'conflict', email);
  }
  const factors = await h.get('/auth/mfa/factors', { token: user.accessToken });
  assert.equal((factors.body.data.factors as Array<{ type: string }>).filter((factor) => factor.type === 'email').length, 1, factors.text);
});

/*
 * Answered, untested: a code in full-width (U+FF10...) or Arabic-Indic digits reads as the same
 * number to a person but is not the code: the comparison takes ASCII digits only, so it is 422
 * `invalid_code` (a counted failure), never accepted.
 */
test('a one-time code in full-width or Arabic-Indic digits is not the code', async () => {
  const h = await start();
  const user = await h.signUp();
  const enrolled = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const code = lastMailCode(h, user.email);
  const fullWidth = code.replace(/[0-9]/g, (digit) => String.fromCodePoint(0xff10 + Number(digit)));
  const arabicIndic = code.replace(/[0-9]/g, (digit) => String.fromCodePoint(0x660 + Number(digit)));
  for (const spelled of [fullWidth, arabicIndic]) {
    assertError(await h.post('/auth/mfa/email/confirm', { factor_id: enrolled.body.data.factor_id, code: spelled }, { token: user.accessToken }), 422, 'invalid_code', spelled);
  }
  const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: enrolled.body.data.factor_id, code }, { token: user.accessToken });
  assert.equal(confirmed.status, 200, confirmed.text);
});

/*
 * Answered, untested: a slug is ASCII `[a-z0-9-]` (spec 2.9), so an invisible character, a
 * bidi control, a Cyrillic look-alike letter or full-width letters in a chosen slug are 422; and
 * a name in its decomposed (NFD) spelling derives the slug of its precomposed one (NFKD first),
 * so two organizations named alike cannot hold look-alike slugs. Names themselves are not unique
 * (spec 2.9), and look-alikes inside ASCII (`rn` for `m`) are documented, not refused.
 */
test('slugs are ASCII: invisible, look-alike and full-width slugs are refused; a decomposed name derives the same slug', async () => {
  const h = await start();
  const user = await h.signUp();
  for (const slug of ['ac\u200bme', 'acme\ufeff', 'ac\u200dme', '\u202eemca', '\u0430cme', 'ａｃｍｅ']) {
    assertValidationErrors(await h.post('/orgs', { name: 'Acme', slug }, { token: user.accessToken }), undefined, JSON.stringify(slug));
  }
  const precomposed = await h.post('/orgs', { name: 'Caf\u00e9 Noir' }, { token: user.accessToken });
  const decomposed = await h.post('/orgs', { name: 'Cafe\u0301 Noir' }, { token: user.accessToken });
  assert.equal(precomposed.status, 201, precomposed.text);
  assert.equal(decomposed.status, 201, decomposed.text);
  assert.equal(precomposed.body.data.slug, 'cafe-noir');
  assert.equal(decomposed.body.data.slug, 'cafe-noir-2');
});
