import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { assertError, assertValidationErrors, countRows, registerOnly } from '../helpers/account.js';

// docs/security.md register, e-mail verify and resend; docs/events.md user.registered / user.email_verified.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('register answers 202 with a generic message, sends mail and emits user.registered', async () => {
  const email = uniqueEmail('reg');
  const response = await h.post('/auth/register', { email, password: STRONG_PASSWORD, display_name: 'Ada' });
  assert.equal(response.status, 202, response.text);
  assert.deepEqual(Object.keys(response.body), ['message']);
  assert.equal(typeof response.body.message, 'string');
  const mail = h.lastMail(email, 'verify_email');
  assert.ok(mail, 'a verification mail went out');
  assert.equal(typeof mail.context.token, 'string');
  const registered = h.eventsOfType('user.registered').filter((event) => event.user_id !== null);
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ email });
  assert.ok(row, 'the user row exists');
  assert.equal(row.display_name, 'Ada');
  assert.ok(registered.some((event) => event.user_id === row.id));
});

// Threat: account enumeration through register (docs/security.md "enumeration-safe").
test('register of an existing address answers exactly like a new one and sends no mail', async () => {
  const email = uniqueEmail('enum');
  const first = await h.post('/auth/register', { email, password: STRONG_PASSWORD });
  const mailsBefore = h.mail.length;
  const eventsBefore = h.eventsOfType('user.registered').length;
  const again = await h.post('/auth/register', { email: email.toUpperCase(), password: 'another strong passphrase' });
  assert.equal(first.status, 202);
  assert.equal(again.status, 202);
  assert.equal(again.text, first.text);
  assert.equal(h.mail.length, mailsBefore, 'no mail for an existing address');
  assert.equal(h.eventsOfType('user.registered').length, eventsBefore);
  assert.equal(await countRows(h, 'users', { email }), 1);
});

test('register validation: 422 {errors} for missing, invalid and wrongly typed fields', async () => {
  assertValidationErrors(await h.post('/auth/register', { password: STRONG_PASSWORD }), /"email" is required/);
  assertValidationErrors(await h.post('/auth/register', { email: 'not-an-email', password: STRONG_PASSWORD }), /"email"/);
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail() }), /"password" is required/);
  assertValidationErrors(await h.post('/auth/register', { email: 12345, password: STRONG_PASSWORD }), /"email" must be a string/);
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: 12345678 }), /"password" must be a string/);
  assertValidationErrors(await h.post('/auth/register', {}));
  // docs/database.md / 8: at most 320 octets.
  const longEmail = `${'a'.repeat(309)}@example.com`; // 321 octets
  assert.equal(Buffer.byteLength(longEmail), 321);
  assertValidationErrors(await h.post('/auth/register', { email: longEmail, password: STRONG_PASSWORD }), /320/);
  // docs/database.md: display_name at most 120 characters.
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'x'.repeat(121) }), /"display_name"/);
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 42 }), /"display_name"/);
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'Ada\u0000Lovelace' }), /control characters/);
  const ok = await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'x'.repeat(120) });
  assert.equal(ok.status, 202, ok.text);
  // The address and the display name are trimmed; the address is lower-cased.
  const padded = uniqueEmail('Padded');
  assert.equal((await h.post('/auth/register', { email: `  ${padded.toUpperCase()} `, password: STRONG_PASSWORD, display_name: '  Ada  ' })).status, 202);
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ email: padded.toLowerCase() });
  assert.equal(row?.display_name, 'Ada');
});

test('password policy failures are 422 with clear messages and create nothing', async () => {
  const email = uniqueEmail('policy');
  assertValidationErrors(await h.post('/auth/register', { email, password: 'short' }), /at least 8 characters/);
  assertValidationErrors(await h.post('/auth/register', { email, password: 'x'.repeat(129) }), /at most 128 characters/);
  assertValidationErrors(await h.post('/auth/register', { email, password: 'password123' }), /too common/);
  assertValidationErrors(await h.post('/auth/register', { email, password: email.toUpperCase() }), /e-mail/);
  assert.equal(await countRows(h, 'users', { email }), 0);
  assert.equal(h.lastMail(email, 'verify_email'), undefined);
  // The bounds are inclusive.
  assert.equal((await h.post('/auth/register', { email, password: 'y'.repeat(128) })).status, 202);
});

// Threat: a race of differently-cased sign-ups creating duplicate accounts for one address.
test('twenty concurrent registrations of case variants leave one account', async () => {
  const local = `race${Date.now()}`;
  const variants = Array.from({ length: 20 }, (_, index) => (index % 2 === 0 ? `${local.toUpperCase()}@X.io` : `${local}@x.io`));
  const responses = await Promise.all(variants.map((email) => h.post('/auth/register', { email: ` ${email} `.trim(), password: STRONG_PASSWORD })));
  for (const response of responses) assert.equal(response.status, 202, response.text);
  assert.equal(await countRows(h, 'users', { email: `${local}@x.io` }), 1);
  const rows = await h.knex(`${h.tablePrefix}users`).whereRaw('lower(email) = ?', [`${local}@x.io`]);
  assert.equal(rows.length, 1);
  assert.equal(h.mail.filter((message) => message.to === `${local}@x.io`).length, 1, 'one verification mail');
});

test('email verify: 200 {message}, idempotent, user.email_verified once', async () => {
  const email = uniqueEmail('verify');
  const token = await registerOnly(h, email, STRONG_PASSWORD);
  const first = await h.post('/auth/email/verify', { token });
  assert.equal(first.status, 200, first.text);
  assert.equal(typeof first.body.message, 'string');
  const second = await h.post('/auth/email/verify', { token });
  assert.equal(second.status, 200, second.text);
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ email });
  assert.ok([true, 1].includes(row.email_verified));
  assert.equal(h.eventsOfType('user.email_verified').filter((event) => event.user_id === row.id).length, 1);
  const login = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
  assert.equal(login.body.data.user.email_verified, true);
});

test('email verify: 400 invalid_token for unknown and expired tokens, 422 when missing', async () => {
  assertError(await h.post('/auth/email/verify', { token: 'x'.repeat(43) }), 400, 'invalid_token');
  assertValidationErrors(await h.post('/auth/email/verify', {}), /"token" is required/);
  assertValidationErrors(await h.post('/auth/email/verify', { token: 7 }), /"token"/);
  const email = uniqueEmail('expired');
  const token = await registerOnly(h, email, STRONG_PASSWORD);
  h.clock.advance(24 * 3600 + 1); // tokens.emailVerifyTtl default 24 h
  assertError(await h.post('/auth/email/verify', { token }), 400, 'invalid_token');
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ email });
  assert.ok([false, 0].includes(row.email_verified));
});

// Threat: account enumeration through resend.
test('resend: 202 generic for unknown, verified and unverified; mail only for the unverified known one', async () => {
  const unverified = uniqueEmail('unv');
  await registerOnly(h, unverified, STRONG_PASSWORD);
  const verified = await h.signUp();
  const unknown = uniqueEmail('nobody');
  const mailsBefore = h.mail.length;
  const answers = [];
  for (const email of [unknown, verified.email, unverified]) {
    const response = await h.post('/auth/email/verify/resend', { email });
    assert.equal(response.status, 202, response.text);
    answers.push(response.text);
  }
  assert.equal(new Set(answers).size, 1, 'one generic answer');
  const sent = h.mail.slice(mailsBefore);
  assert.deepEqual(sent.map((message) => [message.to, message.template]), [[unverified, 'verify_email']]);
  // The resent token verifies.
  const verify = await h.post('/auth/email/verify', { token: h.tokenFromMail(unverified, 'verify_email') });
  assert.equal(verify.status, 200);
  assertValidationErrors(await h.post('/auth/email/verify/resend', {}), /"email" is required/);
});
