import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { assertError, assertUnauthorized } from '../helpers/account.js';
import { loginForTicket, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';

// Issue 10: what an ended session or a new password ends.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('switch-org with a token of a revoked session answers 401 session_ended (spec 7); a forged or missing token stays unauthorized', async () => {
  const user = await h.signUp();
  const org = await h.post('/orgs', { name: 'Ended Org' }, { token: user.accessToken });
  assert.equal(org.status, 201, org.text);
  assert.equal((await h.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
  const ended = await h.post('/auth/switch-org', { organization_id: org.body.data.id }, { token: user.accessToken });
  assertError(ended, 401, 'session_ended');
  assert.match(ended.headers.get('www-authenticate') ?? '', /^Bearer/);
  assertUnauthorized(await h.post('/auth/switch-org', { organization_id: randomUUID() }, { token: `${user.accessToken}x` }));
  // Other routes keep docs/security.md's answer for the same token.
  assertUnauthorized(await h.get('/auth/me', { token: user.accessToken }));
});

test('a password change ends pending MFA tickets and outstanding reset links', async () => {
  const user = await signUpWithTotp(h);
  const { ticket } = await loginForTicket(h, user);
  assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
  const resetToken = h.tokenFromMail(user.email, 'password_reset');
  const changed = await h.post('/auth/password/change', { current_password: user.password, new_password: 'a brand new passphrase' }, { token: user.accessToken });
  assert.equal(changed.status, 200, changed.text);
  assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket }), 'ticket won with the old password');
  assertError(await h.post('/auth/password/reset', { token: resetToken, new_password: 'yet another passphrase' }), 401, 'invalid_token');
  // A ticket won with the new password works.
  const fresh = await loginForTicket(h, { email: user.email, password: 'a brand new passphrase' });
  assert.equal((await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: fresh.ticket })).status, 200);
});

test('a password reset ends pending MFA tickets', async () => {
  const user = await signUpWithTotp(h);
  const { ticket } = await loginForTicket(h, user);
  await h.post('/auth/password/forgot', { email: user.email });
  const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: 'a reset passphrase here' });
  assert.equal(reset.status, 200, reset.text);
  assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket }));
  assertUnauthorized(await h.post('/auth/mfa/challenge', { factor_id: user.factorId }, { token: ticket }));
});
