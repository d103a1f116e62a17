import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, STRONG_PASSWORD, decodeJwt, decodeJwtHeader, uniqueEmail } from '../helpers/harness.js';
import { assertError, assertValidationErrors, registerOnly } from '../helpers/account.js';
import { signUpWithTotp } from '../helpers/mfa.js';

// docs/security.md POST /auth/login, docs/security.md user status (lockout), docs/events.md user.logged_in / login_failed / locked.

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 5, window: 600, duration: 900 } } } });
});
after(async () => {
  await h.close();
});

test('login answers tokens, the user, and an RS256 at+jwt access token with the spec claims', async () => {
  const user = await h.signUp();
  const response = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(response.status, 200, response.text);
  const data = response.body.data;
  assert.deepEqual(Object.keys(data).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type', 'user']);
  assert.equal(data.token_type, 'Bearer');
  assert.equal(data.expires_in, 900);
  assert.equal(typeof data.refresh_token, 'string');
  assert.ok(data.refresh_token.length >= 32);
  assert.deepEqual(data.user, { id: user.userId, email: user.email, email_verified: true });

  const header = decodeJwtHeader(data.access_token);
  assert.equal(header.alg, 'RS256');
  assert.equal(header.typ, 'at+jwt');
  const jwks = await h.get('/auth/.well-known/jwks.json');
  assert.ok(jwks.body.keys.some((key: { kid: string }) => key.kid === header.kid), 'kid is published');

  const claims = decodeJwt(data.access_token);
  const now = Math.floor(h.clock.now() / 1000);
  assert.equal(claims.sub, user.userId);
  assert.equal(typeof claims.jti, 'string');
  assert.equal(typeof claims.sid, 'string');
  assert.equal(claims.org, null);
  assert.deepEqual(claims.roles, []);
  assert.deepEqual(claims.scope, []);
  assert.equal(claims.email_verified, true);
  assert.equal(claims.mfa, false);
  assert.deepEqual(claims.amr, ['pwd']);
  assert.equal(claims.auth_time, now);
  assert.equal(claims.iss, 'https://id.example.test');
  assert.equal(claims.iat, now);
  assert.equal(claims.exp, claims.iat + 900);
  assert.notEqual(decodeJwt(user.accessToken).jti, claims.jti, 'each token has its own jti');
  assert.notEqual(decodeJwt(user.accessToken).sid, claims.sid, 'each login opens its own session');

  const loggedIn = h.eventsOfType('user.logged_in').filter((event) => event.user_id === user.userId);
  assert.equal(loggedIn.length, 2);
  const me = await h.get('/auth/me', { token: data.access_token });
  assert.equal(me.status, 200);
});

test('the e-mail is compared case-insensitively and trimmed', async () => {
  const user = await h.signUp(uniqueEmail('Mixed'));
  const response = await h.post('/auth/login', { email: `  ${user.email.toUpperCase()}  `, password: user.password });
  assert.equal(response.status, 200, response.text);
  assert.equal(response.body.data.user.id, user.userId);
});

// Threat: account enumeration through login answers.
test('wrong password and unknown account answer the identical 401 invalid_credentials', async () => {
  const user = await h.signUp();
  const failedBefore = h.eventsOfType('user.login_failed').length;
  const wrong = await h.post('/auth/login', { email: user.email, password: 'not the password at all' });
  const unknown = await h.post('/auth/login', { email: uniqueEmail('ghost'), password: 'not the password at all' });
  assertError(wrong, 401, 'invalid_credentials');
  assert.equal(unknown.status, 401);
  assert.equal(unknown.text, wrong.text);
  assert.equal(unknown.headers.get('www-authenticate'), wrong.headers.get('www-authenticate'));
  const failed = h.eventsOfType('user.login_failed').slice(failedBefore);
  assert.equal(failed.length, 2);
  assert.equal(failed[0]!.user_id, user.userId);
  assert.equal(failed[1]!.user_id, null);
});

test('login validation: 422 for missing or wrongly typed fields', async () => {
  assertValidationErrors(await h.post('/auth/login', { password: STRONG_PASSWORD }), /"email" is required/);
  assertValidationErrors(await h.post('/auth/login', { email: uniqueEmail() }), /"password" is required/);
  assertValidationErrors(await h.post('/auth/login', {}));
  assertValidationErrors(await h.post('/auth/login', { email: ['a@b.io'], password: STRONG_PASSWORD }), /"email"/);
  assertValidationErrors(await h.post('/auth/login', { email: uniqueEmail(), password: { $gt: '' } }), /"password"/);
});

test('a disabled account answers 403 account_disabled (and 401 with a wrong password)', async () => {
  const user = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ status: 'disabled' });
  assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 403, 'account_disabled');
  assertError(await h.post('/auth/login', { email: user.email, password: 'wrong wrong wrong' }), 401, 'invalid_credentials');
});

// Threat: online password guessing; docs/security.md lockout, docs/security.md status reads locked while it lasts.
test('lockout: five failures lock the account; the right password is refused until the duration passes', async () => {
  const user = await h.signUp();
  const lockedBefore = h.eventsOfType('user.locked').length;
  for (let attempt = 1; attempt <= 5; attempt += 1) {
    assertError(await h.post('/auth/login', { email: user.email, password: `wrong password ${attempt}` }), 401, 'invalid_credentials');
    assert.equal(h.eventsOfType('user.locked').length, lockedBefore + (attempt === 5 ? 1 : 0), `after attempt ${attempt}`);
  }
  const locked = h.eventsOfType('user.locked').at(-1)!;
  assert.equal(locked.user_id, user.userId);

  const whileLocked = await h.post('/auth/login', { email: user.email, password: user.password });
  assertError(whileLocked, 401, 'invalid_credentials');
  const wrong = await h.post('/auth/login', { email: user.email, password: 'still wrong pw' });
  assert.equal(whileLocked.text, wrong.text, 'a live lockout is indistinguishable from a wrong password');
  const me = await h.get('/auth/me', { token: user.accessToken });
  assert.equal(me.body.data.status, 'locked');

  h.clock.advance(899);
  assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
  h.clock.advance(2);
  const afterLock = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(afterLock.status, 200, afterLock.text);
  assert.equal((await h.get('/auth/me', { token: afterLock.body.data.access_token })).body.data.status, 'active');
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId });
  assert.equal(Number(row.failed_login_count), 0);
  assert.equal(row.locked_until, null);
});

test('lockout counters are cleared by a successful login and lapse with the window', async () => {
  const user = await h.signUp();
  const lockedBefore = h.eventsOfType('user.locked').length;
  for (let attempt = 0; attempt < 4; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password!' });
  assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  for (let attempt = 0; attempt < 4; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password!' });
  assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200, 'four failures after a success do not lock');
  // Failures spread over more than the window do not add up.
  for (let attempt = 0; attempt < 4; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password!' });
  h.clock.advance(601);
  await h.post('/auth/login', { email: user.email, password: 'wrong password!' });
  assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  assert.equal(h.eventsOfType('user.locked').length, lockedBefore);
});

// The failed-attempt slot a correct password took goes back on every way out of a login:
// a leaked slot would count as a failure and lock the account of a user who typed it right.
test('a correct password never counts as a failure: disabled, MFA-gated and completed sign-ins give their slot back', async () => {
  const failuresOf = async (userId: string) => Number((await h.knex(`${h.tablePrefix}users`).where({ id: userId }).first()).failed_login_count);
  const disabled = await h.signUp();
  await h.knex(`${h.tablePrefix}users`).where({ id: disabled.userId }).update({ status: 'disabled' });
  const gated = await signUpWithTotp(h);
  const plain = await h.signUp();
  for (let attempt = 1; attempt <= 7; attempt += 1) {
    assertError(await h.post('/auth/login', { email: disabled.email, password: disabled.password }), 403, 'account_disabled');
    const ticket = await h.post('/auth/login', { email: gated.email, password: gated.password });
    assert.equal(ticket.body.data?.mfa_required, true, `attempt ${attempt}: ${ticket.text}`);
    assert.equal((await h.post('/auth/login', { email: plain.email, password: plain.password })).status, 200, `attempt ${attempt}`);
  }
  assert.deepEqual([await failuresOf(disabled.userId), await failuresOf(gated.userId), await failuresOf(plain.userId)], [0, 0, 0]);
  const inFlightOf = async (userId: string) => Number((await h.knex(`${h.tablePrefix}users`).where({ id: userId }).first()).attempts_in_flight);
  assert.deepEqual([await inFlightOf(disabled.userId), await inFlightOf(gated.userId), await inFlightOf(plain.userId)], [0, 0, 0], 'every slot went back');
  // Earlier failures still count after a correct password that did not complete a sign-in.
  await h.post('/auth/login', { email: gated.email, password: 'wrong password!' });
  await h.post('/auth/login', { email: gated.email, password: gated.password });
  assert.equal(await failuresOf(gated.userId), 1);
});

// On PostgreSQL the account is read and its slot taken in one statement (docs/performance.md):
// an account whose password is never compared must come out of it untouched, or the slot it
// took would never be given back and would count as a failure.
test('a deleted, a password-less and a locked account take no slot and keep their failures', async () => {
  const users = `${h.tablePrefix}users`;
  const deleted = await h.signUp();
  await h.knex(users).where({ id: deleted.userId }).update({ deleted_at: h.clock.now() });
  const passwordless = await h.signUp();
  await h.knex(users).where({ id: passwordless.userId }).update({ password_hash: null });
  const locked = await h.signUp();
  for (let attempt = 1; attempt <= 5; attempt += 1) await h.post('/auth/login', { email: locked.email, password: `wrong password ${attempt}` });
  assert.notEqual((await h.knex(users).where({ id: locked.userId }).first()).locked_until, null);
  const ids = [deleted.userId, passwordless.userId, locked.userId];
  const lastReservations = async () => Object.fromEntries((await h.knex(users).whereIn('id', ids).select('id', 'attempts_in_flight_at')).map((row) => [row.id, Number(row.attempts_in_flight_at)]));
  const reservedBefore = await lastReservations();
  // A reservation from here on would write a later time.
  h.clock.advance(1);

  for (const account of [deleted, passwordless, locked]) {
    for (let attempt = 1; attempt <= 3; attempt += 1) assertError(await h.post('/auth/login', { email: account.email, password: account.password }), 401, 'invalid_credentials');
  }
  const slotsOf = async (userId: string) => {
    const row = await h.knex(users).where({ id: userId }).first();
    return { inFlight: Number(row.attempts_in_flight), failures: Number(row.failed_login_count) };
  };
  assert.deepEqual(await slotsOf(deleted.userId), { inFlight: 0, failures: 0 }, 'deleted');
  assert.deepEqual(await slotsOf(passwordless.userId), { inFlight: 0, failures: 0 }, 'without a password');
  assert.deepEqual(await slotsOf(locked.userId), { inFlight: 0, failures: 5 }, 'locked');
  assert.deepEqual(await lastReservations(), reservedBefore, 'no slot was taken, even for a moment');
});

// Threat: bcrypt reads only 72 bytes; without a pre-hash a long password's tail is ignored.
test('an 80-byte password whose first 72 bytes match is refused', async () => {
  const prefix = 'p'.repeat(72);
  const password = `${prefix}AAAAAAAA`;
  const user = await h.signUp(uniqueEmail('long'), password);
  assertError(await h.post('/auth/login', { email: user.email, password: `${prefix}BBBBBBBB` }), 401, 'invalid_credentials');
  assert.equal((await h.post('/auth/login', { email: user.email, password })).status, 200);
});

test('403 email_unverified with a resend pointer when auth.requireVerifiedEmail is on', async () => {
  const strict = await Harness.start({ config: { auth: { requireVerifiedEmail: true } } });
  try {
    const email = uniqueEmail('unverified');
    const token = await registerOnly(strict, email, STRONG_PASSWORD);
    const refused = await strict.post('/auth/login', { email, password: STRONG_PASSWORD });
    assertError(refused, 403, 'email_unverified');
    assert.equal(refused.body.resend, '/auth/email/verify/resend');
    // Spec 6: a failed login emits user.login_failed, its reason the error answered.
    const failed = strict.events.filter((event) => event.type === 'user.login_failed' && event.user_id !== null).at(-1);
    assert.deepEqual(failed?.data, { reason: 'email_unverified' });
    assertError(await strict.post('/auth/login', { email, password: 'wrong password here' }), 401, 'invalid_credentials');
    assert.equal((await strict.post('/auth/email/verify', { token })).status, 200);
    assert.equal((await strict.post('/auth/login', { email, password: STRONG_PASSWORD })).status, 200);
  } finally {
    await strict.close();
  }
  // Off by default: the unverified account logs in.
  const email = uniqueEmail('lenient');
  await registerOnly(h, email, STRONG_PASSWORD);
  const lenient = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
  assert.equal(lenient.status, 200);
  assert.equal(lenient.body.data.user.email_verified, false);
});

// Threat: timing reveals which accounts exist. An unknown account's login spending a comparison
// like a wrong password's is proved without a clock in accounts/enumeration-attacks.test.ts: the
// hasher is asked for exactly one comparison, at the configured cost, for every kind of account.

// Threat: bcrypt on the event loop lets a handful of logins stall every request.
test('the event loop keeps serving while a cost-12 login hashes', async () => {
  const slow = await Harness.start({ config: { password: { bcryptCost: 12 } } });
  try {
    const user = await slow.signUp();
    let loginFinishedAt = 0;
    const login = slow.post('/auth/login', { email: user.email, password: user.password }).then((response) => {
      loginFinishedAt = performance.now();
      return response;
    });
    const jwksFinishedAt: number[] = [];
    await new Promise((resolve) => setTimeout(resolve, 20));
    for (let call = 0; call < 5; call += 1) {
      const response = await slow.get('/auth/.well-known/jwks.json');
      assert.equal(response.status, 200);
      jwksFinishedAt.push(performance.now());
    }
    const response = await login;
    assert.equal(response.status, 200, response.text);
    for (const finishedAt of jwksFinishedAt) assert.ok(finishedAt < loginFinishedAt, 'JWKS answered while the login was hashing');
  } finally {
    await slow.close();
  }
});
