import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, STRONG_PASSWORD, decodeJwt, uniqueEmail } from '../helpers/harness.js';
import { assertError, assertUnauthorized, assertValidationErrors, countRows, registerOnly } from '../helpers/account.js';
import { loginForTicket, signUpWithTotp } from '../helpers/mfa.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { RETIRE_GRACE_SECONDS } from '../../src/services/shared/key-ring.js';

// Conformance, to the letter, of SPEC.md 1 (response conventions), 2.1-2.5 (access token, MFA
// ticket, JWKS, user, session), 3 (user status; session and refresh token) and 4.1 (account and
// session endpoints), with the limits (8) those routes obey. Each test names the sentence it proves.

let h: Harness;
const started: Harness[] = [];
before(async () => {
  h = await Harness.start();
});
after(async () => {
  for (const harness of started.reverse()) await harness.close();
  await h.close();
});

async function start(options: Parameters<typeof Harness.start>[0]): Promise<Harness> {
  const harness = await Harness.start(options);
  started.push(harness);
  return harness;
}

/** One character (U+1F600), two UTF-16 code units. */
const ASTRAL = '\u{1F600}';

test('2.4 / 4.1 / 8: register takes a display_name of up to 120 characters, counted as characters (not UTF-16 code units)', async () => {
  const email = uniqueEmail('astral');
  const name = ASTRAL.repeat(120);
  assert.equal([...name].length, 120);
  const accepted = await h.post('/auth/register', { email, password: STRONG_PASSWORD, display_name: name });
  assert.equal(accepted.status, 202, accepted.text);
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ email });
  assert.equal(row?.display_name, name);
  // One more character is over the limit, on register as on PATCH /users/{id}.
  const tooLong = uniqueEmail('astral');
  assertValidationErrors(await h.post('/auth/register', { email: tooLong, password: STRONG_PASSWORD, display_name: ASTRAL.repeat(121) }), /"display_name"/);
  assert.equal(await countRows(h, 'users', { email: tooLong }), 0);
  // The profile route counts the same way: the name register stored can be written back.
  const user = await h.signUp();
  const patched = await h.patch(`/users/${user.userId}`, { display_name: name }, { token: user.accessToken });
  assert.equal(patched.status, 200, patched.text);
});

test('2.1 / 4.1: switch-org answers a fresh access token with the new org, roles and scope, and keeps mfa, amr and auth_time', async () => {
  const user = await signUpWithTotp(h);
  const before = decodeJwt(user.accessToken);
  assert.equal(before.mfa, true);
  assert.deepEqual(before.amr, ['pwd', 'otp']);
  const created = await h.post('/orgs', { name: 'Switch Conformance' }, { token: user.accessToken });
  assert.equal(created.status, 201, created.text);
  const organizationId = created.body.data.id;

  h.clock.advance(120);
  const switched = await h.post('/auth/switch-org', { organization_id: organizationId }, { token: user.accessToken });
  assert.equal(switched.status, 200, switched.text);
  assert.deepEqual(Object.keys(switched.body.data).sort(), ['access_token', 'expires_in', 'token_type']);
  assert.equal(switched.body.data.token_type, 'Bearer');
  assert.equal(switched.body.data.expires_in, 900);
  const claims = decodeJwt(switched.body.data.access_token);
  assert.equal(claims.sid, before.sid, 'the same session, re-scoped');
  assert.notEqual(claims.jti, before.jti);
  assert.equal(claims.org, organizationId);
  assert.deepEqual(claims.roles, ['owner']);
  assert.ok(claims.scope.includes('org.delete') && claims.scope.includes('members.invite'), JSON.stringify(claims.scope));
  assert.equal(claims.mfa, true, 'mfa survives switch-org');
  assert.deepEqual(claims.amr, ['pwd', 'otp'], 'amr survives switch-org');
  assert.equal(claims.auth_time, before.auth_time, 'auth_time survives switch-org');
  assert.equal(claims.iat, before.iat + 120);

  // Refreshes stay scoped and keep them too.
  h.clock.advance(60);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  const again = decodeJwt(refreshed.body.data.access_token);
  assert.equal(again.org, organizationId);
  assert.deepEqual(again.roles, ['owner']);
  assert.equal(again.mfa, true);
  assert.deepEqual(again.amr, ['pwd', 'otp']);
  assert.equal(again.auth_time, before.auth_time);
});

test('4.1: a refresh re-resolves roles and scope from the database', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['member']);
  const memberClaims = decodeJwt(member.token);
  assert.deepEqual(memberClaims.roles, ['member']);
  assert.ok(!memberClaims.scope.includes('members.invite'));

  const promoted = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['admin'] }, { token: org.owner.token });
  assert.equal(promoted.status, 200, promoted.text);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: member.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  const claims = decodeJwt(refreshed.body.data.access_token);
  assert.equal(claims.org, org.id);
  assert.deepEqual(claims.roles, ['admin']);
  assert.ok(claims.scope.includes('members.invite'), JSON.stringify(claims.scope));
  assert.ok(!claims.scope.includes('org.delete'));
});

test('2.1 / 2.4: email_verified follows the account: GET /auth/me at once, the next access token after a refresh', async () => {
  const email = uniqueEmail('later');
  const token = await registerOnly(h, email, STRONG_PASSWORD);
  const login = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
  assert.equal(login.status, 200, login.text);
  assert.equal(decodeJwt(login.body.data.access_token).email_verified, false);
  assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).body.data.email_verified, false);
  assert.equal((await h.post('/auth/email/verify', { token })).status, 200);
  const me = await h.get('/auth/me', { token: login.body.data.access_token });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.body.data.email_verified, true);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token });
  assert.equal(refreshed.status, 200, refreshed.text);
  assert.equal(decodeJwt(refreshed.body.data.access_token).email_verified, true);
});

test('2.2: the MFA ticket is a login_mfa JWT of about 5 minutes, refused as an access token on normal routes', async () => {
  const user = await signUpWithTotp(h);
  const { ticket } = await loginForTicket(h, user);
  const claims = decodeJwt(ticket);
  assert.equal(claims.purpose, 'login_mfa');
  assert.equal(claims.sub, user.userId);
  assert.equal(claims.exp - claims.iat, 300);
  for (const [method, path] of [
    ['GET', '/auth/me'],
    ['GET', '/auth/sessions'],
    ['POST', '/auth/logout'],
    ['POST', '/auth/logout-all'],
  ] as const) {
    assertUnauthorized(await h.request(method, path, { token: ticket }), `${method} ${path}`);
  }
  assertUnauthorized(await h.post('/auth/switch-org', { organization_id: '00000000-0000-0000-0000-000000000000' }, { token: ticket }), 'switch-org');
  // Past its lifetime the ticket opens nothing either.
  h.clock.advance(301);
  assertUnauthorized(await h.post('/auth/mfa/verify', { code: '000000' }, { token: ticket }), 'an expired ticket');
});

test('2.3: during key rotation the retiring public key stays listed for one access-token lifetime (tokens.accessTtl), then leaves', async () => {
  const short = await start({ config: { tokens: { accessTtl: 120 } } });
  const user = await short.signUp();
  assert.equal((await short.post('/auth/login', { email: user.email, password: user.password })).body.data.expires_in, 120);
  const oldKid = JSON.parse(Buffer.from(user.accessToken.split('.')[0]!, 'base64url').toString('utf8')).kid;
  await short.identity.service.rotateSigningKey();
  const kids = async () => (await short.get('/auth/.well-known/jwks.json')).body.keys.map((key: { kid: string }) => key.kid);
  assert.ok((await kids()).includes(oldKid));
  short.clock.advance(120 + RETIRE_GRACE_SECONDS - 1);
  assert.ok((await kids()).includes(oldKid), 'still listed within the lifetime (plus the documented grace)');
  short.clock.advance(2);
  assert.ok(!(await kids()).includes(oldKid), 'gone after it');
});

test('2.5 / 4.1: GET /auth/sessions lists only active sessions; last_used_at moves with a refresh, created_at stays', async () => {
  const user = await h.signUp();
  const createdAt = new Date(h.clock.now()).toISOString();
  h.clock.advance(100);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  const listed = await h.get('/auth/sessions', { token: refreshed.body.data.access_token });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(Object.keys(listed.body), ['data']);
  assert.deepEqual(Object.keys(listed.body.data), ['sessions']);
  const [session] = listed.body.data.sessions;
  assert.equal(listed.body.data.sessions.length, 1);
  assert.equal(session.id, decodeJwt(user.accessToken).sid);
  assert.equal(session.current, true);
  assert.equal(session.created_at, createdAt);
  assert.equal(session.last_used_at, new Date(h.clock.now()).toISOString());

  // A session past its refresh lifetime is not active: it leaves the list.
  h.clock.advance(30 * 24 * 3600 + 1);
  const later = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(later.status, 200, later.text);
  const now = await h.get('/auth/sessions', { token: later.body.data.access_token });
  assert.deepEqual(now.body.data.sessions.map((entry: { id: string }) => entry.id), [decodeJwt(later.body.data.access_token).sid]);
});

test('8: the account and session routes obey the default per-IP and per-user limits', async () => {
  const limited = await start({ rateLimits: true });
  const user = await limited.signUp();

  // authenticated: 600 per 60 s, keyed by user id, counted after token authentication.
  const me = await limited.get('/auth/me', { token: user.accessToken });
  assert.equal(me.headers.get('x-ratelimit-limit'), '600');
  const sessions = await limited.get('/auth/sessions', { token: user.accessToken });
  assert.equal(Number(sessions.headers.get('x-ratelimit-remaining')), Number(me.headers.get('x-ratelimit-remaining')) - 1);

  // login: 10 per 300 s (signUp spent one).
  let login = await limited.post('/auth/login', { email: uniqueEmail('ghost'), password: 'not the password' });
  assert.equal(login.headers.get('x-ratelimit-limit'), '10');
  assert.equal(login.headers.get('x-ratelimit-remaining'), '8');
  for (let attempt = 0; attempt < 8; attempt += 1) login = await limited.post('/auth/login', { email: uniqueEmail('ghost'), password: 'not the password' });
  assert.equal(login.status, 401);
  const loginRefused = await limited.post('/auth/login', { email: user.email, password: user.password });
  assertError(loginRefused, 429, 'rate_limited');
  const loginRetry = Number(loginRefused.headers.get('retry-after'));
  assert.ok(loginRetry > 240 && loginRetry <= 300, `Retry-After ${loginRetry}`);

  // token_refresh: 60 per 60 s.
  let refresh = await limited.post('/auth/token/refresh', { refresh_token: 'not-a-token' });
  assert.equal(refresh.headers.get('x-ratelimit-limit'), '60');
  for (let attempt = 1; attempt < 60; attempt += 1) refresh = await limited.post('/auth/token/refresh', { refresh_token: 'not-a-token' });
  assertError(refresh, 401, 'invalid_grant');
  const refreshRefused = await limited.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assertError(refreshRefused, 429, 'rate_limited');
  assert.ok(Number(refreshRefused.headers.get('retry-after')) <= 60);

  // password_forgot: 5 per 3600 s.
  for (let attempt = 0; attempt < 5; attempt += 1) {
    const forgot = await limited.post('/auth/password/forgot', { email: uniqueEmail('forgot') });
    assert.equal(forgot.status, 202, forgot.text);
    assert.equal(forgot.headers.get('x-ratelimit-limit'), '5');
  }
  const forgotRefused = await limited.post('/auth/password/forgot', { email: user.email });
  assertError(forgotRefused, 429, 'rate_limited');
  assert.ok(Number(forgotRefused.headers.get('retry-after')) > 3000);

  // token_consume: 10 per 300 s, one budget for /auth/email/verify*, and /auth/password/reset (signUp's verify spent one).
  const consumers = [
    () => limited.post('/auth/email/verify', { token: 'x'.repeat(43) }),
    () => limited.post('/auth/email/verify/resend', { email: uniqueEmail('resend') }),
    () => limited.post('/auth/password/reset', { token: 'x'.repeat(43), new_password: 'a fine new passphrase' }),
  ];
  for (let attempt = 0; attempt < 9; attempt += 1) {
    const response = await consumers[attempt % 3]!();
    assert.notEqual(response.status, 429, `attempt ${attempt}`);
    assert.equal(response.headers.get('x-ratelimit-limit'), '10');
  }
  for (const consume of consumers) assertError(await consume(), 429, 'rate_limited');
  // register: 5 per 3600 s (signUp spent one), its own budget.
  const register = await limited.post('/auth/register', { email: uniqueEmail('reg'), password: STRONG_PASSWORD });
  assert.equal(register.status, 202);
  assert.equal(register.headers.get('x-ratelimit-limit'), '5');
  assert.equal(register.headers.get('x-ratelimit-remaining'), '3');
});
