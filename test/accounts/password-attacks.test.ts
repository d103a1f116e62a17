import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createHmac } from 'node:crypto';
import bcrypt from 'bcryptjs';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { PasswordHasher } from '../../src/crypto/password-hasher.js';
import { assertError, assertValidationErrors } from '../helpers/account.js';

// Attacks on passwords, reset, change and e-mail verification (docs/security.md "Passwords", "Lockout").

const SECRET = 'test-secret-that-is-at-least-32-characters-long';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

// "Crème brûlée à minuit" as one keyboard sends it (precomposed, NFC) and as another does (decomposed, NFD).
const COMPOSED = 'Cr\u00e8me br\u00fbl\u00e9e \u00e0 minuit';
const DECOMPOSED = COMPOSED.normalize('NFD');

// Threat: an owner locked out of their own account by a keyboard. The same password typed on a
// system that sends it decomposed (NFD) was another byte string to the pre-hash, so it answered
// invalid_credentials and counted toward the lockout (NIST SP 800-63B 5.1.1.2: normalise first).
test('a password signs in whether its accented letters come precomposed (NFC) or decomposed (NFD)', async () => {
  assert.notEqual(COMPOSED, DECOMPOSED);
  for (const [registered, typed] of [[COMPOSED, DECOMPOSED], [DECOMPOSED, COMPOSED]] as const) {
    const user = await h.signUp(uniqueEmail('nfc'), registered);
    const other = await h.post('/auth/login', { email: user.email, password: typed });
    assert.equal(other.status, 200, other.text);
    // Reset and change take the new password in either form too.
    await h.post('/auth/password/forgot', { email: user.email });
    const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: `${registered}!` });
    assert.equal(reset.status, 200, reset.text);
    assert.equal((await h.post('/auth/login', { email: user.email, password: `${typed}!` })).status, 200);
  }
  // Two different passwords still differ.
  const user = await h.signUp(uniqueEmail('nfc'), COMPOSED);
  assertError(await h.post('/auth/login', { email: user.email, password: COMPOSED.replace('\u00e8', 'e') }), 401, 'invalid_credentials');
});

// Threat: the policy measured a password in the form it arrived in, so a decomposed password
// passed the minimum length with half its characters (and is compared as its NFC form).
test('the minimum length counts the characters of the NFC form, not decomposed code points', async () => {
  // Four characters, eight code points when decomposed.
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail('short'), password: '\u00e9\u00e8\u00ea\u00eb'.normalize('NFD') }), /at least 8 characters/);
});

// Threat: the blocklist compared the password as sent, so a space before or after a listed
// password (a variant guessing lists try first) passed it, on register, reset and change.
test('a common password with spaces around it is still too common', async () => {
  for (const common of ['password123 ', ' Password123', 'qwerty123  ']) {
    assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail('common'), password: common }), /too common/, JSON.stringify(common));
  }
  const user = await h.signUp(uniqueEmail('common'));
  await h.post('/auth/password/forgot', { email: user.email });
  assertValidationErrors(await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: 'iloveyou1 ' }), /too common/);
  const change = await h.post('/auth/password/change', { current_password: user.password, new_password: ' letmein123' }, { token: user.accessToken });
  assertValidationErrors(change, /too common/);
});

// Threat: a password equal to the account's own address, written with a decomposed letter (it
// signs in as the composed one, so it is the address).
test('a password equal to the e-mail is refused in another case and with a decomposed letter', async () => {
  const other = await h.post('/auth/register', { email: uniqueEmail('self'), password: 'ADA.LOVELACE@EXAMPLE.COM' });
  assert.equal(other.status, 202, 'another address is no reason to refuse');
  const self = uniqueEmail('self');
  assertValidationErrors(await h.post('/auth/register', { email: self, password: self.toUpperCase() }), /e-mail address/);
  const accented = `ren\u00e9.${randomSuffix()}@example.com`;
  assertValidationErrors(await h.post('/auth/register', { email: accented, password: accented.normalize('NFD') }), /e-mail address/);
});

// A hash made before passwords were normalised holds the decomposed bytes: its owner still signs in.
test('a password hashed as typed before normalisation still signs in with that form', async () => {
  const user = await h.signUp(uniqueEmail('legacy'), 'placeholder passphrase 1');
  const pepper = deriveKeys(SECRET).passwordPepper;
  const legacy = bcrypt.hashSync(createHmac('sha256', pepper).update(DECOMPOSED, 'utf8').digest('base64'), 4);
  await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ password_hash: legacy });
  const login = await h.post('/auth/login', { email: user.email, password: DECOMPOSED });
  assert.equal(login.status, 200, login.text);
});

// Threat: two passwords that both work. A lone UTF-16 surrogate (a client that cut an emoji in
// half) reached the pre-hash as U+FFFD, so every other lone surrogate in its place, and U+FFFD
// itself, signed in too: a password no keyboard can type again, and one with less in it than it shows.
test('a new password with a lone surrogate is refused, so no two passwords share one hash', async () => {
  const half = '\ud83d';
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail('surrogate'), password: `${half}passphrase 9` }), /"password"/);
  const user = await h.signUp(uniqueEmail('surrogate'));
  await h.post('/auth/password/forgot', { email: user.email });
  assertValidationErrors(await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: `passphrase 9${half}` }), /"new_password"/);
  assertValidationErrors(await h.post('/auth/password/change', { current_password: user.password, new_password: `pass${half}phrase 9` }, { token: user.accessToken }), /"new_password"/);
  // A whole emoji is a character like any other.
  assert.equal((await h.post('/auth/password/change', { current_password: user.password, new_password: 'passphrase 9 \u{1F600}' }, { token: user.accessToken })).status, 200);
  assertError(await h.post('/auth/login', { email: user.email, password: 'passphrase 9 \ud83d' }), 401, 'invalid_credentials');
  assertError(await h.post('/auth/login', { email: user.email, password: 'passphrase 9 \ufffd' }), 401, 'invalid_credentials');
});

// Answered: length is counted in characters (code points), not bytes or UTF-16 units; the
// pre-hash makes every byte count past bcrypt's 72.
test('128 emoji are a valid password and 129 are not; passwords sharing their first 72 bytes differ', async () => {
  const emoji = '\u{1F511}';
  const user = await h.signUp(uniqueEmail('emoji'), emoji.repeat(128));
  assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail('emoji'), password: emoji.repeat(129) }), /at most 128 characters/);
  // 18 emoji are 72 bytes of UTF-8: one more different emoji must not sign in.
  assertError(await h.post('/auth/login', { email: user.email, password: `${emoji.repeat(127)}\u{1F512}` }), 401, 'invalid_credentials');
  assert.equal((await h.post('/auth/login', { email: user.email, password: emoji.repeat(128) })).status, 200);
  const long = await h.signUp(uniqueEmail('emoji'), `${emoji.repeat(18)}tail-one`);
  assertError(await h.post('/auth/login', { email: long.email, password: `${emoji.repeat(18)}tail-two` }), 401, 'invalid_credentials');
});

/** The window helper watches PostgreSQL's lock table. */
const PG_ONLY = { skip: TEST_DB !== 'pg' && 'the interleaving helper reads pg_locks', timeout: 60_000 };

// Answered: a reset proves the address (the owner gets in under auth.requireVerifiedEmail) and
// clears the lockout, so an owner locked out by a stranger's guesses recovers through the mailbox.
test('under auth.requireVerifiedEmail a reset proves the address; a reset lifts a lockout', async () => {
  const strict = await Harness.start({ config: { auth: { requireVerifiedEmail: true } } });
  try {
    const email = uniqueEmail('strict');
    assert.equal((await strict.post('/auth/register', { email, password: COMPOSED })).status, 202);
    // The right password in the other form is right: 403, not a failure counted as 401.
    assertError(await strict.post('/auth/login', { email, password: DECOMPOSED }), 403, 'email_unverified');
    for (let guess = 0; guess < 5; guess += 1) assertError(await strict.post('/auth/login', { email, password: `stranger guess ${guess}` }), 401, 'invalid_credentials');
    assertError(await strict.post('/auth/login', { email, password: COMPOSED }), 401, 'invalid_credentials', 'locked');
    assert.equal((await strict.post('/auth/password/forgot', { email })).status, 202);
    const reset = await strict.post('/auth/password/reset', { token: strict.tokenFromMail(email, 'password_reset'), new_password: 'the owner is back 1' });
    assert.equal(reset.status, 200, reset.text);
    const login = await strict.post('/auth/login', { email, password: 'the owner is back 1' });
    assert.equal(login.status, 200, login.text);
    assert.equal(login.body.data.user.email_verified, true);
  } finally {
    await strict.close();
  }
});

// Threat: account recovery that leaves a way in. Whoever read the owner's mailbox before the
// owner took it back (a forwarding rule, a shared computer) started a passwordless sign-in and
// kept its code; the reset ends sessions, tickets, API keys and older reset links, but the code
// still signed in for the rest of its ten minutes. A change, likewise ("a new password ends what
// the old one, or the mailbox before it, had opened").
test('a password reset or change ends the passwordless codes sent before it', async () => {
  const x = await Harness.start({ config: { passwordless: {} } });
  try {
    for (const way of ['reset', 'change'] as const) {
      const user = await x.signUp(uniqueEmail(`pwless-${way}`));
      const started = await x.post('/auth/passwordless/start', { email: user.email });
      assert.equal(started.status, 202, started.text);
      const code = String(x.lastMail(user.email, 'login_code')?.context.code);
      if (way === 'reset') {
        assert.equal((await x.post('/auth/password/forgot', { email: user.email })).status, 202);
        const reset = await x.post('/auth/password/reset', { token: x.tokenFromMail(user.email, 'password_reset'), new_password: 'taken back by the owner' });
        assert.equal(reset.status, 200, reset.text);
      } else {
        const change = await x.post('/auth/password/change', { current_password: user.password, new_password: 'taken back by the owner' }, { token: user.accessToken });
        assert.equal(change.status, 200, change.text);
      }
      const verify = await x.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code });
      assertError(verify, 422, 'invalid_code', way);
      // A code started after the new password works as ever.
      x.clock.advance(31);
      const again = await x.post('/auth/passwordless/start', { email: user.email });
      const fresh = await x.post('/auth/passwordless/verify', { challenge_id: again.body.data.challenge_id, code: String(x.lastMail(user.email, 'login_code')?.context.code) });
      assert.equal(fresh.status, 200, fresh.text);
    }
  } finally {
    await x.close();
  }
});

async function resetLink(email: string): Promise<string> {
  assert.equal((await h.post('/auth/password/forgot', { email })).status, 202);
  return h.tokenFromMail(email, 'password_reset');
}

const passwordChanges = (userId: string) => h.eventsOfType('user.password_changed').filter((event) => event.user_id === userId);

describe(`reset links, verification links and password changes raced (${TEST_DB})`, () => {
  // Answered: the link is consumed by one conditional update.
  test('one reset link sent twice at once sets one password', async () => {
    const user = await h.signUp(uniqueEmail('twice'));
    const token = await resetLink(user.email);
    const answers = await Promise.all(['first new passphrase', 'second new passphrase'].map((new_password) => h.post('/auth/password/reset', { token, new_password })));
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 401], answers.map((answer) => answer.text).join(' | '));
    const winner = answers[0]!.status === 200 ? 'first new passphrase' : 'second new passphrase';
    const loser = winner === 'first new passphrase' ? 'second new passphrase' : 'first new passphrase';
    assert.equal((await h.post('/auth/login', { email: user.email, password: winner })).status, 200);
    assertError(await h.post('/auth/login', { email: user.email, password: loser }), 401, 'invalid_credentials');
    assert.equal(passwordChanges(user.userId).length, 1);
  });

  // Answered: the change retires outstanding links in its transaction and the reset consumes
  // its link conditionally, after hashing.
  test('a reset link checked before the owner changes the password does not overwrite the change', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('changed'));
    const token = await resetLink(user.email);
    const { outer: reset, inner: change } = await withRequestInTheWindow(
      h,
      { prototype: PasswordHasher.prototype, method: 'hash' },
      () => h.post('/auth/password/change', { current_password: user.password, new_password: 'the owner changed it' }, { token: user.accessToken }),
      () => h.post('/auth/password/reset', { token, new_password: 'the thief reset it' }),
    );
    assert.equal(change?.status, 200, change?.text);
    assertError(reset, 401, 'invalid_token');
    assert.equal((await h.post('/auth/login', { email: user.email, password: 'the owner changed it' })).status, 200);
  });

  test('a reset link checked before a newer link was sent is spent by nothing', PG_ONLY, async () => {
    const user = await h.signUp(uniqueEmail('newer'));
    const older = await resetLink(user.email);
    const { outer: reset } = await withRequestInTheWindow(
      h,
      { prototype: PasswordHasher.prototype, method: 'hash' },
      () => h.post('/auth/password/forgot', { email: user.email }),
      () => h.post('/auth/password/reset', { token: older, new_password: 'from the older link' }),
    );
    assertError(reset, 401, 'invalid_token');
    const newer = h.tokenFromMail(user.email, 'password_reset');
    assert.notEqual(newer, older);
    assert.equal((await h.post('/auth/password/reset', { token: newer, new_password: 'from the newer link' })).status, 200);
  });

  // Answered: the expiry is one instant for the read and for the consume.
  test('a reset link works until its last millisecond and not at its expiry', async () => {
    const user = await h.signUp(uniqueEmail('expiry'));
    const token = await resetLink(user.email);
    h.clock.advance(3600);
    assertError(await h.post('/auth/password/reset', { token, new_password: 'one hour too late' }), 401, 'invalid_token');
    const second = await resetLink(user.email);
    h.clock.advance(3600 - 0.001);
    assert.equal((await h.post('/auth/password/reset', { token: second, new_password: 'just in time passphrase' })).status, 200);
  });

  // Answered: the verification is idempotent and marks the address once, under the account's lock.
  test('one verification link sent twice at once verifies once', async () => {
    const email = uniqueEmail('verify-twice');
    assert.equal((await h.post('/auth/register', { email, password: 'verify twice passphrase' })).status, 202);
    const token = h.tokenFromMail(email, 'verify_email');
    const answers = await Promise.all([0, 1, 2].map(() => h.post('/auth/email/verify', { token })));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200]);
    const login = await h.post('/auth/login', { email, password: 'verify twice passphrase' });
    assert.equal(h.eventsOfType('user.email_verified').filter((event) => event.user_id === login.body.data.user.id).length, 1);
    // Resend for a verified account sends nothing.
    const mails = h.mail.length;
    assert.equal((await h.post('/auth/email/verify/resend', { email })).status, 202);
    assert.equal(h.mail.length, mails);
  });

  // Answered (attack 5 at once): every wrong current password takes a failed-attempt slot first.
  test('twenty wrong current passwords at once compare five and lock the account', async () => {
    const user = await h.signUp(uniqueEmail('oracle'));
    let compared = 0;
    const original = PasswordHasher.prototype.verify;
    PasswordHasher.prototype.verify = function (this: PasswordHasher, ...args: Parameters<PasswordHasher['verify']>) {
      compared += 1;
      return original.apply(this, args);
    };
    let answers: Awaited<ReturnType<Harness['post']>>[];
    try {
      answers = await Promise.all(
        Array.from({ length: 20 }, (_, index) => h.post('/auth/password/change', { current_password: `wrong guess ${index} horse`, new_password: 'another horse battery staple' }, { token: user.accessToken })),
      );
    } finally {
      PasswordHasher.prototype.verify = original;
    }
    for (const answer of answers) assertError(answer, 403, 'invalid_credentials');
    assert.equal(compared, 5);
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === user.userId).length, 1);
  });
});

function randomSuffix(): string {
  return Math.random().toString(36).slice(2, 8);
}
