/*
 * One destination spelled many ways, against every budget and uniqueness rule keyed by a phone
 * number or an address (docs/security.md "Rate limits and budgets"; CONTRACT `otp.sendBudget`,
 * passwordless throttling and its MFA gate). Each spelling is either refused, or read as the
 * plain one wherever a rule counts one mailbox or one line. Earlier audits: Unicode spaces in a
 * local part (platform/output-injection-attacks), IDNA and full-width domains for the budgets
 * (limits/limits-audit), SSO domains (sso/sso-audit).
 *
 *   node scripts/run-tests.mjs test/limits/destination-spelling-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { assertError, countRows } from '../helpers/account.js';
import { enrollEmail, uniquePhone } from '../helpers/mfa.js';
import { createOrg } from '../helpers/orgs.js';

const start = harnessesClosedAfterFile();

/**
 * The mailbox the bundled nodemailer adapter hands an address to (its SMTP envelope): the premise
 * of every "one mailbox" below is checked, not assumed. nodemailer maps the domain as IDNA does
 * (full-width letters, ideographic full stops, invisible ignorables), and sends the local part as typed.
 */
async function deliveredTo(address: string): Promise<string> {
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true });
  const info = (await transport.sendMail({ from: 'router@example.test', to: { name: '', address }, subject: 's', text: 't' })) as { envelope: { to: string[] } };
  return info.envelope.to[0]!;
}

/** Full-width Latin letters (U+FF41...): IDNA maps them back to ASCII. */
const fullWidth = (text: string) => text.replace(/[a-z]/g, (letter) => String.fromCodePoint(letter.codePointAt(0)! - 0x61 + 0xff41));

/** Spellings of `local@example.com` whose domain reaches example.com, each one a different string. */
function domainSpellings(address: string): string[] {
  const [local] = address.split('@') as [string];
  return [
    `${local}@${fullWidth('example')}.com`,
    `${local}@example\u3002com`, // ideographic full stop
    `${local}@example\uff0ecom`, // full-width full stop
    `${local}@exa\u00admple.com`, // soft hyphen
    `${local}@example.com\u200b`, // zero-width space
    `${local}@example.com\u2060`, // word joiner
    `${local}@exam\u034fple.com`, // combining grapheme joiner
  ];
}

test('premise: the bundled mailer delivers every domain spelling to the plain mailbox, and keeps an invisible local part', async () => {
  const plain = uniqueEmail('premise');
  for (const spelling of domainSpellings(plain)) assert.equal(await deliveredTo(spelling), plain, JSON.stringify(spelling));
  // A zero-width character in the local part is sent as typed: another mailbox to the SMTP server.
  assert.notEqual(await deliveredTo(`\u200b${plain}`), plain);
});

/*
 * Answered: a phone number is taken in E.164 alone (a plus, digits); any other spelling of the
 * same line (spaces, dashes, parentheses, the 00 international prefix, Unicode digits, an
 * extension, an invisible character) is 422 and nothing is sent, so no spelling opens a
 * per-destination budget of its own.
 */
test('a phone number in any spelling but E.164 is refused at SMS enrollment, and no text is sent', async () => {
  const h = await start();
  const user = await h.signUp();
  const arabicIndic = (digits: string) => digits.replace(/[0-9]/g, (digit) => String.fromCodePoint(0x660 + Number(digit)));
  const fullWidthDigits = (digits: string) => digits.replace(/[0-9]/g, (digit) => String.fromCodePoint(0xff10 + Number(digit)));
  const spellings = [
    '+1 555 123 4567',
    '+1-555-123-4567',
    '+1 (555) 123-4567',
    '+1.555.123.4567',
    '0015551234567',
    '15551234567',
    `+${arabicIndic('15551234567')}`,
    `+${fullWidthDigits('15551234567')}`,
    '\uff0b15551234567',
    '+15551234567;ext=123',
    '+15551234567x123',
    '+15551234567 ext. 123',
    '\u200b+15551234567',
    '+15551234567\u200b',
    '\u2060+15551234567',
    '+15551234567\u2060',
    '\ufeff+15551234567',
    '+15551234567\ufeff',
    ' +15551234567',
    '+15551234567\n',
    '+1555\u200d1234567',
    'tel:+15551234567',
  ];
  for (const phone of spellings) {
    const answer = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(answer.status, 422, `${JSON.stringify(phone)}: ${answer.text}`);
  }
  assert.equal(h.sms.length, 0);
  assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId, type: 'sms' }), 0);
  // The plain spelling still works, and opens one bucket.
  const plain = uniquePhone();
  assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: plain }, { token: user.accessToken })).status, 200);
});

/*
 * Answered: address forms RFC 5321 allows but no router rule can key safely (a quoted local part,
 * a comment, an IP-literal domain, a trailing dot, a joiner inside the domain) are 422 on every
 * route that mails an address, and nothing is mailed.
 */
test('quoted, commented, IP-literal, trailing-dot and joiner-in-domain addresses are refused wherever an address is typed', async () => {
  const h = await start({ config: { passwordless: { allowSignup: true } } });
  const user = await h.signUp();
  const org = await createOrg(h);
  const [local] = uniqueEmail('refused').split('@') as [string];
  const spellings = [
    `${local}@example.com.`,
    `"${local}"@example.com`,
    `${local}(x)@example.com`,
    `(x)${local}@example.com`,
    `${local}@[127.0.0.1]`,
    `${local}@[IPv6:::1]`,
    `${local}@exam\u200dple.com`,
    `${local}@exam\u200cple.com`,
    `${local}@example.com\u3002`,
    `${local}@example.com\uff0e`,
    `${local}@example..com`,
    `${local}@example.com\u180e`,
  ];
  const mailsBefore = h.mail.length;
  for (const email of spellings) {
    const answers = {
      register: await h.post('/auth/register', { email, password: 'Correct-Horse-Battery-9' }),
      passwordless: await h.post('/auth/passwordless/start', { email }),
      forgot: await h.post('/auth/password/forgot', { email }),
      resend: await h.post('/auth/email/verify/resend', { email }),
      invite: await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token }),
      emailFactor: await h.post('/auth/mfa/email/enroll', { email }, { token: user.accessToken }),
    };
    for (const [route, answer] of Object.entries(answers)) assert.equal(answer.status, 422, `${route} ${JSON.stringify(email)}: ${answer.text}`);
  }
  assert.equal(h.mail.length, mailsBefore, 'nothing mailed');
});

/*
 * Answered but untested beyond full-width letters: an ideographic or full-width full stop, a soft
 * hyphen, a zero-width space, a word joiner or a combining grapheme joiner in the domain reach the
 * plain mailbox (premise above), and spend its one per-destination budget.
 */
test('invisible and full-width domain spellings of one mailbox spend one per-destination budget across enrolling accounts', async () => {
  const h = await start({ config: { otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } } });
  const plain = uniqueEmail('spelled');
  const statuses: number[] = [];
  for (const email of [plain, ...domainSpellings(plain)]) {
    const account = await h.signUp();
    statuses.push((await h.post('/auth/mfa/email/enroll', { email }, { token: account.accessToken })).status);
  }
  assert.deepEqual(statuses, [200, 200, 429, 429, 429, 429, 429, 429]);
  const [local] = plain.split('@') as [string];
  assert.equal(h.mail.filter((message) => message.template === 'otp_code' && message.to.startsWith(`${local}@`)).length, 2);
});

/*
 * Fault: passwordless start's resend cooldown ("keyed by the normalised address", CONTRACT)
 * was keyed by the address as typed (trimmed, NFC, lower-cased), so each domain spelling of one
 * mailbox had a cooldown of its own: the whole per-destination budget arrived in one burst, and a
 * start under one spelling did not supersede the codes mailed under another.
 */
test('passwordless start: a domain spelling of one mailbox is under the same resend cooldown', async () => {
  const h = await start({
    config: { passwordless: { allowSignup: true }, otp: { resendCooldown: 60, sendBudget: { perDestination: { limit: 10, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } },
  });
  const plain = uniqueEmail('cooldown');
  const first = await h.post('/auth/passwordless/start', { email: plain });
  assert.equal(first.status, 202, first.text);
  const answers = [];
  for (const email of domainSpellings(plain)) {
    h.clock.advance(1);
    answers.push(await h.post('/auth/passwordless/start', { email }));
  }
  assert.deepEqual(
    answers.map((answer) => answer.status),
    domainSpellings(plain).map(() => 429),
    answers.map((answer) => answer.text).join('\n'),
  );
  assertError(answers[0]!, 429, 'rate_limited');
  const [local] = plain.split('@') as [string];
  assert.equal(h.mail.filter((message) => message.template === 'login_code' && message.to.startsWith(`${local}@`)).length, 1, 'one code in the mailbox');
  // Past the cooldown a spelling starts again, and supersedes the plain spelling's open code.
  h.clock.advance(60);
  const later = await h.post('/auth/passwordless/start', { email: domainSpellings(plain)[0] });
  assert.equal(later.status, 202, later.text);
  const stale = await h.post('/auth/passwordless/verify', { challenge_id: first.body.data.challenge_id, code: String(h.lastMail(plain, 'login_code')!.context.code) });
  assertError(stale, 422, 'invalid_code');
});

/*
 * Fault: at the MFA gate after a passwordless sign-in, an e-mail factor whose destination is the
 * address just proven is no second factor (CONTRACT). The comparison read the address as typed,
 * so an e-mail factor enrolled under a domain spelling of the account's own mailbox (the code
 * arrives in that mailbox) passed as a second factor: one mailbox was both factors, and MFA an
 * organization enforces was met by whoever reads the inbox.
 */
test('passwordless MFA gate: an e-mail factor to a domain spelling of the proven mailbox is no second factor', async () => {
  const h = await start({ config: { passwordless: { allowSignup: false } } });
  const user = await h.signUp();
  const spelled = domainSpellings(user.email)[0]!;
  assert.equal(await deliveredTo(spelled), user.email, 'the factor reaches the account mailbox');
  const factor = await enrollEmail(h, user, spelled);
  h.clock.advance(31);
  const started = await h.post('/auth/passwordless/start', { email: user.email });
  assert.equal(started.status, 202, started.text);
  const answer = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: String(h.lastMail(user.email, 'login_code')!.context.code) });
  assert.equal(answer.status, 200, answer.text);
  assert.equal(answer.body.data.mfa_required, true, answer.text);
  assert.deepEqual(answer.body.data.factors.map((listed: { id: string }) => listed.id), [], 'the e-mail factor is left out');
  const ticket = answer.body.data.mfa_token;
  assertError(await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket }), 422, 'unsupported_factor');
  assertError(await h.post('/auth/mfa/verify', { factor_id: factor.factorId, code: '123456' }, { token: ticket }), 422, 'unsupported_factor');
  const recovered = await h.post('/auth/mfa/verify', { type: 'recovery', code: factor.recoveryCodes[0] }, { token: ticket });
  assert.equal(recovered.status, 200, recovered.text);
});
