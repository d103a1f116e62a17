import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { assertError, assertUnauthorized, assertValidationErrors, registerOnly } from '../helpers/account.js';

// docs/security.md password forgot / reset / change; docs/events.md user.password_reset_requested / user.password_changed.

const NEW_PASSWORD = 'a brand new passphrase 42';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

// Threat: account enumeration through the forgot-password form.
test('forgot: always 202 generic; event and mail only for a known active account', async () => {
  const user = await h.signUp();
  const disabled = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: disabled.userId }).update({ status: 'disabled' });
  const requestedBefore = h.eventsOfType('user.password_reset_requested').length;
  const mailsBefore = h.mail.length;
  const answers = [];
  for (const email of [uniqueEmail('nobody'), disabled.email, user.email]) {
    const response = await h.post('/auth/password/forgot', { email });
    assert.equal(response.status, 202, response.text);
    assert.deepEqual(Object.keys(response.body), ['message']);
    answers.push(response.text);
  }
  assert.equal(new Set(answers).size, 1);
  const requested = h.eventsOfType('user.password_reset_requested').slice(requestedBefore);
  assert.deepEqual(requested.map((event) => event.user_id), [user.userId]);
  assert.deepEqual(h.mail.slice(mailsBefore).map((message) => [message.to, message.template]), [[user.email, 'password_reset']]);
  assertValidationErrors(await h.post('/auth/password/forgot', {}), /"email" is required/);
  assertValidationErrors(await h.post('/auth/password/forgot', { email: 'nope' }), /"email"/);
});

test('reset: 200, every session revoked, user.password_changed (method reset), new password works', async () => {
  const user = await h.signUp();
  const second = await h.post('/auth/login', { email: user.email, password: user.password });
  await h.post('/auth/password/forgot', { email: user.email });
  const token = h.tokenFromMail(user.email, 'password_reset');
  const response = await h.post('/auth/password/reset', { token, new_password: NEW_PASSWORD });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body, { data: { status: 'password_reset' } });
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
  assertUnauthorized(await h.get('/auth/me', { token: second.body.data.access_token }));
  assertError(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant');
  const [event] = h.eventsOfType('user.password_changed').filter((candidate) => candidate.user_id === user.userId);
  assert.equal(event?.data.method, 'reset');
  assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
  assert.equal((await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD })).status, 200);
  // Threat: replaying a used reset link.
  assertError(await h.post('/auth/password/reset', { token, new_password: 'yet another passphrase' }), 401, 'invalid_token');
});

test('reset: 401 invalid_token for a bad or expired token, and a newer link retires older ones', async () => {
  assertError(await h.post('/auth/password/reset', { token: 'x'.repeat(43), new_password: NEW_PASSWORD }), 401, 'invalid_token');
  const user = await h.signUp();
  await h.post('/auth/password/forgot', { email: user.email });
  const older = h.tokenFromMail(user.email, 'password_reset');
  await h.post('/auth/password/forgot', { email: user.email });
  const newer = h.tokenFromMail(user.email, 'password_reset');
  assert.notEqual(older, newer);
  assertError(await h.post('/auth/password/reset', { token: older, new_password: NEW_PASSWORD }), 401, 'invalid_token');
  h.clock.advance(3600 + 1); // tokens.passwordResetTtl default 1 h
  assertError(await h.post('/auth/password/reset', { token: newer, new_password: NEW_PASSWORD }), 401, 'invalid_token');
  assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  // A verification token is not a reset token.
  const email = uniqueEmail('purpose');
  const verifyToken = await registerOnly(h, email, STRONG_PASSWORD);
  assertError(await h.post('/auth/password/reset', { token: verifyToken, new_password: NEW_PASSWORD }), 401, 'invalid_token');
});

test('reset: 422 for policy failures and missing fields; the token still works afterwards', async () => {
  const user = await h.signUp();
  await h.post('/auth/password/forgot', { email: user.email });
  const token = h.tokenFromMail(user.email, 'password_reset');
  assertValidationErrors(await h.post('/auth/password/reset', { token, new_password: 'short' }), /"new_password" must be at least 8/);
  assertValidationErrors(await h.post('/auth/password/reset', { token, new_password: 'password123' }), /"new_password" is too common/);
  assertValidationErrors(await h.post('/auth/password/reset', { token, new_password: user.email }), /e-mail/);
  assertValidationErrors(await h.post('/auth/password/reset', { token }), /"new_password" is required/);
  assertValidationErrors(await h.post('/auth/password/reset', { new_password: NEW_PASSWORD }), /"token" is required/);
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'nothing was revoked');
  const response = await h.post('/auth/password/reset', { token, new_password: NEW_PASSWORD });
  assert.equal(response.status, 200, response.text);
});

test('reset clears a live lockout', async () => {
  const user = await h.signUp();
  for (let attempt = 0; attempt < 5; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password!' });
  assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
  await h.post('/auth/password/forgot', { email: user.email });
  await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: NEW_PASSWORD });
  assert.equal((await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD })).status, 200);
});

test('change: 200, other sessions revoked, the caller keeps theirs, event method change', async () => {
  const user = await h.signUp();
  const other = await h.post('/auth/login', { email: user.email, password: user.password });
  const response = await h.post('/auth/password/change', { current_password: user.password, new_password: NEW_PASSWORD }, { token: user.accessToken });
  assert.equal(response.status, 200, response.text);
  assert.deepEqual(response.body, { data: { status: 'password_changed' } });
  assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200, 'the caller stays signed in');
  assert.equal((await h.post('/auth/token/refresh', { refresh_token: user.refreshToken })).status, 200);
  assertUnauthorized(await h.get('/auth/me', { token: other.body.data.access_token }));
  assertError(await h.post('/auth/token/refresh', { refresh_token: other.body.data.refresh_token }), 401, 'invalid_grant');
  const [event] = h.eventsOfType('user.password_changed').filter((candidate) => candidate.user_id === user.userId);
  assert.equal(event?.data.method, 'change');
  assert.equal((await h.post('/auth/login', { email: user.email, password: NEW_PASSWORD })).status, 200);
  assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
});

test('change: 403 invalid_credentials for a wrong current password, 422 for policy failures, 401 without a token', async () => {
  const user = await h.signUp();
  const wrong = await h.post('/auth/password/change', { current_password: 'not my password', new_password: NEW_PASSWORD }, { token: user.accessToken });
  assertError(wrong, 403, 'invalid_credentials');
  assertValidationErrors(await h.post('/auth/password/change', { current_password: user.password, new_password: 'short' }, { token: user.accessToken }), /"new_password"/);
  assertValidationErrors(await h.post('/auth/password/change', { current_password: user.password, new_password: 'password123' }, { token: user.accessToken }), /too common/);
  assertValidationErrors(await h.post('/auth/password/change', { new_password: NEW_PASSWORD }, { token: user.accessToken }), /"current_password" is required/);
  assertUnauthorized(await h.post('/auth/password/change', { current_password: user.password, new_password: NEW_PASSWORD }));
  assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200, 'the password is unchanged');
});
