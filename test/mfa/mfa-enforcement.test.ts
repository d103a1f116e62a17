import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { decodeJwt, type Harness, harnessesClosedAfterFile } from '../helpers/harness.js';
import { enrollSms, enrollTotp, loginForTicket, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';

const startHarness = harnessesClosedAfterFile();
const start = (config: Record<string, unknown> = {}): Promise<Harness> => startHarness({ config });

/** docs/mfa.md: in grace mode only these answer until a factor is confirmed. */
async function assertGraceRestrictions(h: Harness, token: string): Promise<void> {
  for (const [method, path] of [['GET', '/auth/sessions'], ['POST', '/auth/logout-all'], ['GET', '/permissions'], ['POST', '/auth/mfa/step-up/challenge'], ['PATCH', '/auth/mfa/factors/x']]) {
    const response = await h.request(method!, path!, { token, ...(method === 'GET' ? {} : { body: {} }) });
    assert.equal(response.status, 403, `${method} ${path}`);
    assert.equal(response.body.error, 'mfa_enrollment_required');
  }
  assert.equal((await h.get('/auth/me', { token })).status, 200);
  assert.equal((await h.get('/auth/mfa/factors', { token })).status, 200);
}

describe('grace enrollment (mfa.enforce, the default grace mode)', () => {
  test('login succeeds with mfa=false; only me, logout, the factor list and enroll/confirm answer until a factor is confirmed', async () => {
    // Threat: an enforced account working indefinitely without a second factor.
    const h = await start({ mfa: { enforce: true } });
    const user = await h.signUp();
    assert.equal(decodeJwt(user.accessToken).mfa, false);
    await assertGraceRestrictions(h, user.accessToken);
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200);
    const smsEnrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken });
    assert.equal(smsEnrolled.status, 200);
    const emailEnrolled = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
    assert.equal(emailEnrolled.status, 200);
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: enrolled.body.data.factor_id, code: totpCodeAt(h, enrolled.body.data.secret) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal((await h.get('/auth/sessions', { token: user.accessToken })).status, 200, 'unrestricted once a factor is confirmed');
    // From now on login goes through the gate.
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { factor_id: enrolled.body.data.factor_id, code: nextTotpCode(h, enrolled.body.data.secret) }, { token: ticket });
    assert.equal(verified.status, 200);
    assert.equal(decodeJwt(verified.body.data.access_token).mfa, true);
    // Logout answers during grace too.
    const other = await h.signUp();
    assert.equal((await h.post('/auth/logout', {}, { token: other.accessToken })).status, 200);
  });

  test('the last confirmed factor is protected while enforced (409 last_factor_protected); others can go', async () => {
    const h = await start({ mfa: { enforce: true } });
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const sms = await enrollSms(h, user.accessToken, uniquePhone());
    const removed = await h.delete(`/auth/mfa/factors/${sms.factorId}`, { token: user.accessToken });
    assert.equal(removed.status, 200, removed.text);
    const last = await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: user.accessToken });
    assert.equal(last.status, 409);
    assert.equal(last.body.error, 'last_factor_protected');
    assert.equal(h.eventsOfType('mfa.factor_removed').length, 1);
  });
});

describe('block mode', () => {
  test('refuses the login itself with 403 mfa_enrollment_required until a factor exists', async () => {
    const h = await start({ mfa: { enforce: true, enforcementMode: 'block' } });
    const registered = await h.post('/auth/register', { email: 'blocked@example.com', password: 'correct horse battery staple' });
    assert.equal(registered.status, 202);
    await h.post('/auth/email/verify', { token: h.tokenFromMail('blocked@example.com', 'verify_email') });
    const login = await h.post('/auth/login', { email: 'blocked@example.com', password: 'correct horse battery staple' });
    assert.equal(login.status, 403);
    assert.equal(login.body.error, 'mfa_enrollment_required');
  });
});

describe('per-user flag and per-organization policy', () => {
  test('service.setMfaEnforced puts one user in grace enrollment', async () => {
    const h = await start();
    const user = await h.signUp();
    const bystander = await h.signUp();
    await h.identity.service.setMfaEnforced(user.userId, true);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200);
    assert.equal(decodeJwt(login.body.data.access_token).mfa, false);
    await assertGraceRestrictions(h, login.body.data.access_token);
    assert.equal((await h.get('/auth/sessions', { token: bystander.accessToken })).status, 200);
    const me = await h.get('/auth/me', { token: login.body.data.access_token });
    assert.equal(me.body.data.mfa_enforced, true);
    const totp = await enrollTotp(h, login.body.data.access_token);
    assert.equal((await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: login.body.data.access_token })).status, 409);
    await h.identity.service.setMfaEnforced(user.userId, false);
    assert.equal((await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: login.body.data.access_token })).status, 200);
  });

  test('membership of an organization with require_mfa enforces MFA', async () => {
    const h = await start();
    const user = await h.signUp();
    const now = h.clock.now();
    const organizationId = randomUUID();
    await h.knex(`${h.tablePrefix}organizations`).insert({ id: organizationId, name: 'Strict', slug: `strict-${organizationId.slice(0, 8)}`, status: 'active', require_mfa: true, created_at: now, updated_at: now });
    await h.knex(`${h.tablePrefix}memberships`).insert({ id: randomUUID(), organization_id: organizationId, user_id: user.userId, status: 'active', created_at: now, updated_at: now });
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200);
    await assertGraceRestrictions(h, login.body.data.access_token);
    // With a confirmed factor the login goes through the gate as usual.
    await enrollTotp(h, login.body.data.access_token);
    await loginForTicket(h, user);
  });
});
