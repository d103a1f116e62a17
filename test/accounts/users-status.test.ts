import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness, STRONG_PASSWORD } from '../helpers/harness.js';
import { insertConfirmedTotpFactor, signUpSuperadmin, tableOf } from '../helpers/users.js';

// docs/security.md (user status) and 4.4: disable, enable, lockout, and the step-up guard.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

async function liveSessionCount(userId: string): Promise<number> {
  const row = await h.knex(tableOf(h, 'sessions')).where({ user_id: userId }).whereNull('revoked_at').count({ count: '*' }).first();
  return Number(row?.count ?? 0);
}

async function failLogins(email: string, times: number): Promise<void> {
  for (let attempt = 0; attempt < times; attempt += 1) {
    const response = await h.post('/auth/login', { email, password: 'definitely not the password' });
    assert.equal(response.status, 401, response.text);
  }
}

describe('POST /users/{id}/disable', () => {
  test('active → disabled: every session revoked, login 403 account_disabled, user.disabled emitted', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    const secondLogin = await h.post('/auth/login', { email: target.email, password: target.password });
    assert.equal(secondLogin.status, 200);
    assert.equal(await liveSessionCount(target.userId), 2);

    const response = await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { id: target.userId, email: target.email, display_name: null, status: 'disabled' } });

    assert.equal(await liveSessionCount(target.userId), 0);
    const revokedReasons = await h.knex(tableOf(h, 'sessions')).where({ user_id: target.userId }).pluck('revoked_reason');
    assert.deepEqual([...new Set(revokedReasons)], ['user_disabled']);
    const me = await h.get('/auth/me', { token: target.accessToken });
    assert.equal(me.status, 401);
    const refresh = await h.post('/auth/token/refresh', { refresh_token: secondLogin.body.data.refresh_token });
    assert.equal(refresh.status, 401);
    assert.equal(refresh.body.error, 'invalid_grant');
    const login = await h.post('/auth/login', { email: target.email, password: target.password });
    assert.equal(login.status, 403);
    assert.equal(login.body.error, 'account_disabled');

    const events = h.eventsOfType('user.disabled').filter((event) => event.user_id === target.userId);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.actor_id, admin.userId);
    assert.equal(events[0]!.data.sessions_revoked, 2);
    const audited = await h.knex(tableOf(h, 'auditEvents')).where({ type: 'user.disabled', user_id: target.userId });
    assert.equal(audited.length, 1);

    const read = await h.get(`/users/${target.userId}`, { token: admin.accessToken });
    assert.equal(read.body.data.status, 'disabled');
  });

  test('disabling yourself is 409 conflict, and you stay active', async () => {
    const admin = await signUpSuperadmin(h);
    const response = await h.post(`/users/${admin.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 409);
    assert.equal(response.body.error, 'conflict');
    assert.equal((await h.get('/auth/me', { token: admin.accessToken })).status, 200);
  });

  // Threat: a regular user locking others out, or learning which ids exist.
  test('without users.manage: the same 403 for another user, an unknown id and oneself', async () => {
    const caller = await h.signUp();
    const other = await h.signUp();
    const foreign = await h.post(`/users/${other.userId}/disable`, undefined, { token: caller.accessToken });
    const unknown = await h.post(`/users/${UNKNOWN_ID}/disable`, undefined, { token: caller.accessToken });
    const self = await h.post(`/users/${caller.userId}/disable`, undefined, { token: caller.accessToken });
    for (const response of [foreign, unknown, self]) {
      assert.equal(response.status, 403, response.text);
      assert.deepEqual(response.body, foreign.body);
    }
    assert.equal(foreign.body.error, 'forbidden');
    assert.equal((await h.get('/auth/me', { token: other.accessToken })).status, 200);
  });

  test('a superadmin gets 404 not_found for an unknown id', async () => {
    const admin = await signUpSuperadmin(h);
    const response = await h.post(`/users/${UNKNOWN_ID}/disable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 404);
    assert.equal(response.body.error, 'not_found');
  });

  // Threat: a stolen, hours-old admin token disabling accounts. Disable needs a recent
  // strong authentication when the admin has a confirmed factor.
  test('step-up: an admin with a confirmed factor and a stale auth_time gets 401 step_up_required', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    await insertConfirmedTotpFactor(h, admin.userId);

    const fresh = await h.post(`/users/${target.userId}/enable`, undefined, { token: admin.accessToken });
    assert.equal(fresh.status, 200, 'enable needs no step-up');
    h.clock.advance(301);
    const stale = await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(stale.status, 401, stale.text);
    assert.equal(stale.body.error, 'step_up_required');
    assert.equal(stale.body.step_up, '/auth/mfa/step-up');
    assert.equal(stale.headers.get('www-authenticate'), 'Bearer error="step_up_required"');
    const read = await h.get(`/users/${target.userId}`, { token: admin.accessToken });
    assert.equal(read.body.data.status, 'active');
    assert.equal(h.eventsOfType('user.disabled').filter((event) => event.user_id === target.userId).length, 0);
  });

  test('step-up: within max_age an admin with a confirmed factor passes', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    await insertConfirmedTotpFactor(h, admin.userId);
    h.clock.advance(299);
    const response = await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
  });

  test('step-up: an admin without a confirmed factor passes however old the authentication', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    h.clock.advance(600);
    const response = await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
  });
});

describe('POST /users/{id}/enable', () => {
  test('disabled → active: lockout counters cleared, login works again, user.enabled emitted', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    await failLogins(target.email, 3);
    assert.equal((await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken })).status, 200);

    const response = await h.post(`/users/${target.userId}/enable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { id: target.userId, email: target.email, display_name: null, status: 'active' } });
    const row = await h.knex(tableOf(h, 'users')).where({ id: target.userId }).first();
    assert.equal(Number(row.failed_login_count), 0);
    assert.equal(row.locked_until, null);
    assert.equal(row.failed_login_window_start, null);

    const events = h.eventsOfType('user.enabled').filter((event) => event.user_id === target.userId);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.actor_id, admin.userId);
    assert.equal(events[0]!.data.previous_status, 'disabled');

    const login = await h.post('/auth/login', { email: target.email, password: STRONG_PASSWORD });
    assert.equal(login.status, 200, login.text);
  });

  test('active → locked by repeated failures (user.locked), then enable → active before the lock lapses', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    await failLogins(target.email, 5);
    assert.equal(h.eventsOfType('user.locked').filter((event) => event.user_id === target.userId).length, 1);
    const locked = await h.get(`/users/${target.userId}`, { token: admin.accessToken });
    assert.equal(locked.body.data.status, 'locked');
    const refused = await h.post('/auth/login', { email: target.email, password: target.password });
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error, 'invalid_credentials');

    const response = await h.post(`/users/${target.userId}/enable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.status, 'active');
    const events = h.eventsOfType('user.enabled').filter((event) => event.user_id === target.userId);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.data.previous_status, 'locked');
    const row = await h.knex(tableOf(h, 'users')).where({ id: target.userId }).first();
    assert.equal(row.locked_until, null);
    assert.equal(Number(row.failed_login_count), 0);
    const login = await h.post('/auth/login', { email: target.email, password: target.password });
    assert.equal(login.status, 200, login.text);
  });

  test('a lock lasts auth.lockout.duration, then the status reads active again', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    await failLogins(target.email, 5);
    h.clock.advance(899);
    assert.equal((await h.get(`/users/${target.userId}`, { token: admin.accessToken })).body.data.status, 'locked');
    h.clock.advance(2);
    // The admin's access token has lapsed by now (900 s): a fresh login.
    const adminLogin = await h.post('/auth/login', { email: admin.email, password: admin.password });
    const read = await h.get(`/users/${target.userId}`, { token: adminLogin.body.data.access_token });
    assert.equal(read.status, 200, read.text);
    assert.equal(read.body.data.status, 'active');
  });

  test('enabling an active user answers 200 and emits nothing', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    const response = await h.post(`/users/${target.userId}/enable`, undefined, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.status, 'active');
    assert.equal(h.eventsOfType('user.enabled').filter((event) => event.user_id === target.userId).length, 0);
  });

  test('without users.manage: the same 403 for a disabled user and an unknown id; a superadmin gets 404', async () => {
    const admin = await signUpSuperadmin(h);
    const caller = await h.signUp();
    const target = await h.signUp();
    await h.post(`/users/${target.userId}/disable`, undefined, { token: admin.accessToken });
    const foreign = await h.post(`/users/${target.userId}/enable`, undefined, { token: caller.accessToken });
    const unknown = await h.post(`/users/${UNKNOWN_ID}/enable`, undefined, { token: caller.accessToken });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error, 'forbidden');
    assert.deepEqual(unknown.body, foreign.body);
    assert.equal((await h.get(`/users/${target.userId}`, { token: admin.accessToken })).body.data.status, 'disabled');
    const missing = await h.post(`/users/${UNKNOWN_ID}/enable`, undefined, { token: admin.accessToken });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error, 'not_found');
  });
});
