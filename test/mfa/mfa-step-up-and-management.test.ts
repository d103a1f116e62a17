import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decodeJwt, Harness, STRONG_PASSWORD } from '../helpers/harness.js';
import { enrollSms, enrollTotp, lastSmsCode, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 50 } } } });
});
after(async () => {
  await h.close();
});

/** A fresh access token on the same session after the clock moved past the step-up window. */
async function staleToken(user: { refreshToken: string }): Promise<{ accessToken: string; refreshToken: string }> {
  h.clock.advance(301);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
  assert.equal(refreshed.status, 200, refreshed.text);
  return { accessToken: refreshed.body.data.access_token, refreshToken: refreshed.body.data.refresh_token };
}

function assertStepUpRequired(response: { status: number; body: any; headers: Headers }): void {
  assert.equal(response.status, 401);
  assert.equal(response.body.error, 'step_up_required');
  assert.equal(response.body.step_up, '/auth/mfa/step-up');
  assert.equal(response.headers.get('www-authenticate'), 'Bearer error="step_up_required"');
}

describe('the step-up guard', () => {
  test('password change, factor removal and recovery regeneration need a recent strong authentication', async () => {
    // Threat: a stolen but valid access token changing the account's credentials.
    const user = await signUpWithTotp(h);
    const stale = await staleToken(user);
    assertStepUpRequired(await h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'another horse battery staple' }, { token: stale.accessToken }));
    assertStepUpRequired(await h.delete(`/auth/mfa/factors/${user.factorId}`, { token: stale.accessToken }));
    assertStepUpRequired(await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: stale.accessToken }));
    // Within the window the same operations pass.
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: stale.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: stepped.body.data.access_token });
    assert.equal(regenerated.status, 200, regenerated.text);
    const changed = await h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'another horse battery staple' }, { token: stepped.body.data.access_token });
    assert.equal(changed.status, 200, changed.text);
  });

  test('users without a confirmed factor pass', async () => {
    const user = await h.signUp();
    await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }); // pending only
    const stale = await staleToken(user);
    const changed = await h.post('/auth/password/change', { current_password: STRONG_PASSWORD, new_password: 'another horse battery staple' }, { token: stale.accessToken });
    assert.equal(changed.status, 200, changed.text);
  });
});

describe('POST /auth/mfa/step-up', () => {
  test('TOTP: a new access token for the same session with a new auth_time; the refresh token is not rotated', async () => {
    const user = await signUpWithTotp(h);
    const stale = await staleToken(user);
    const before = decodeJwt(stale.accessToken);
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: stale.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    assert.deepEqual(Object.keys(stepped.body.data).sort(), ['access_token', 'token_type']);
    assert.equal(stepped.body.data.token_type, 'Bearer');
    const claims = decodeJwt(stepped.body.data.access_token);
    assert.equal(claims.sid, before.sid);
    assert.equal(claims.auth_time, Math.floor(h.clock.now() / 1000));
    assert.ok(claims.auth_time > before.auth_time);
    assert.equal(claims.mfa, true);
    assert.deepEqual(claims.amr, ['pwd', 'otp']);
    const completed = h.eventsOfType('mfa.step_up_completed').filter((event) => event.user_id === user.userId);
    assert.equal(completed.length, 1);
    assert.equal(completed[0]!.data.session_id, before.sid);
    // The refresh token from before the step-up still works, and refreshes keep the new auth_time.
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: stale.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    assert.equal(decodeJwt(refreshed.body.data.access_token).auth_time, claims.auth_time);
  });

  test('wrong code: 422 invalid_code and mfa.verify_failed; a replayed code is refused', async () => {
    const user = await signUpWithTotp(h);
    const code = totpCodeAt(h, user.secret); // used by the login verify
    const replay = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code }, { token: user.accessToken });
    assert.equal(replay.status, 422);
    assert.equal(replay.body.error, 'invalid_code');
    const failures = h.eventsOfType('mfa.verify_failed').filter((event) => event.user_id === user.userId);
    assert.equal(failures.length, 1);
    assert.equal(failures[0]!.data.context, 'step_up');
    assert.equal((await h.post('/auth/mfa/step-up', { factor_id: 'nope', code: '123456' }, { token: user.accessToken })).status, 404);
    assert.equal((await h.post('/auth/mfa/step-up', {}, { token: user.accessToken })).status, 422);
  });

  test('SMS: step-up/challenge sends a code for this session; cooldown 429 too_many_requests; TOTP is unsupported', async () => {
    const user = await signUpWithTotp(h);
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const unsupported = await h.post('/auth/mfa/step-up/challenge', { factor_id: user.factorId }, { token: user.accessToken });
    assert.equal(unsupported.status, 422);
    assert.equal(unsupported.body.error, 'unsupported_factor');
    const challenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: sms.factorId }, { token: user.accessToken });
    assert.equal(challenge.status, 200, challenge.text);
    assert.deepEqual(challenge.body.data, { channel: 'sms', destination: `+${'*'.repeat(phone.length - 5)}${phone.slice(-4)}` });
    const cooldown = await h.post('/auth/mfa/step-up/challenge', { factor_id: sms.factorId }, { token: user.accessToken });
    assert.equal(cooldown.status, 429);
    assert.equal(cooldown.body.error, 'too_many_requests');
    assert.ok(cooldown.headers.get('retry-after'));
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: sms.factorId, code: lastSmsCode(h, phone) }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    // The ticket routes stay closed to access tokens and the step-up routes to tickets.
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: sms.factorId }, { token: ticket })).status, 401);
  });

  test('a recovery code (no factor_id) steps up once and emits mfa.recovery_used', async () => {
    const user = await signUpWithTotp(h);
    const [code] = user.recoveryCodes;
    const stepped = await h.post('/auth/mfa/step-up', { code: code!.toUpperCase() }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    assert.equal(h.eventsOfType('mfa.recovery_used').filter((event) => event.user_id === user.userId).length, 1);
    const again = await h.post('/auth/mfa/step-up', { code }, { token: user.accessToken });
    assert.equal(again.status, 422);
  });
});

describe('factor management', () => {
  test('GET lists confirmed and pending factors with masked destinations', async () => {
    const user = await signUpWithTotp(h);
    const pending = await h.post('/auth/mfa/sms/enroll', { phone_e164: '+447700900123' }, { token: user.accessToken });
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.data, {
      factors: [
        { id: user.factorId, type: 'totp', default: true, confirmed: true },
        { id: pending.body.data.factor_id, type: 'sms', default: false, destination: '+********0123', confirmed: false },
      ],
    });
    assert.ok(!list.text.includes('447700900123'));
  });

  test('PATCH: label and default; default needs a confirmed factor; one default at a time; 404 for foreign', async () => {
    const user = await signUpWithTotp(h);
    const sms = await enrollSms(h, user.accessToken, uniquePhone());
    const pending = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
    const labelled = await h.patch(`/auth/mfa/factors/${user.factorId}`, { label: 'Phone app' }, { token: user.accessToken });
    assert.equal(labelled.status, 200, labelled.text);
    assert.deepEqual(labelled.body.data, { id: user.factorId, type: 'totp', default: true, label: 'Phone app', confirmed: true });
    const invalid = await h.patch(`/auth/mfa/factors/${pending.body.data.factor_id}`, { default: true }, { token: user.accessToken });
    assert.equal(invalid.status, 422);
    assert.equal(invalid.body.error, 'invalid_state');
    const moved = await h.patch(`/auth/mfa/factors/${sms.factorId}`, { default: true }, { token: user.accessToken });
    assert.equal(moved.status, 200);
    assert.equal(moved.body.data.default, true);
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors.filter((factor: any) => factor.default).map((factor: any) => factor.id), [sms.factorId]);
    const { factors } = await loginForTicket(h, user);
    assert.equal(factors.find((factor: any) => factor.default).id, sms.factorId);
    const stranger = await h.signUp();
    assert.equal((await h.patch(`/auth/mfa/factors/${sms.factorId}`, { label: 'mine' }, { token: stranger.accessToken })).status, 404);
    assert.equal((await h.patch(`/auth/mfa/factors/${sms.factorId}`, {}, { token: user.accessToken })).status, 422);
  });

  test('DELETE removes a factor (mfa.factor_removed); the default moves on; 404 for unknown and foreign', async () => {
    const user = await signUpWithTotp(h);
    const sms = await enrollSms(h, user.accessToken, uniquePhone());
    const stranger = await h.signUp();
    assert.equal((await h.delete(`/auth/mfa/factors/${user.factorId}`, { token: stranger.accessToken })).status, 404);
    assert.equal((await h.delete('/auth/mfa/factors/00000000-0000-0000-0000-000000000000', { token: user.accessToken })).status, 404);
    const removed = await h.delete(`/auth/mfa/factors/${user.factorId}`, { token: user.accessToken });
    assert.equal(removed.status, 200, removed.text);
    assert.deepEqual(removed.body.data, { status: 'removed' });
    const events = h.eventsOfType('mfa.factor_removed').filter((event) => event.user_id === user.userId);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.data.factor_id, user.factorId);
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors.map((factor: any) => [factor.id, factor.default]), [[sms.factorId, true]]);
    // Removing the last factor (MFA not enforced) turns the login gate off and retires the recovery codes.
    assert.equal((await h.delete(`/auth/mfa/factors/${sms.factorId}`, { token: user.accessToken })).status, 200);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.ok(login.body.data.access_token, login.text);
    const me = await h.get('/auth/me', { token: login.body.data.access_token });
    assert.equal(me.body.data.recovery_codes_remaining, 0);
  });
});

describe('POST /auth/mfa/recovery-codes/regenerate', () => {
  test('retires the old batch and answers ten new codes once (mfa.recovery_regenerated)', async () => {
    const user = await signUpWithTotp(h);
    const [oldCode] = user.recoveryCodes;
    const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken });
    assert.equal(regenerated.status, 200, regenerated.text);
    const codes: string[] = regenerated.body.data.recovery_codes;
    assert.equal(codes.length, 10);
    for (const code of codes) assert.match(code, /^[a-z2-7]{5}-[a-z2-7]{5}$/);
    assert.equal(h.eventsOfType('mfa.recovery_regenerated').filter((event) => event.user_id === user.userId).length, 1);
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.recovery_codes_remaining, 10, 'only the current batch counts');
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/verify', { code: oldCode }, { token: ticket })).status, 422, 'the old batch is retired');
    assert.equal((await h.post('/auth/mfa/verify', { code: codes[0] }, { token: ticket })).status, 200);
    const after = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(after.body.data.recovery_codes_remaining, 9);
  });

  test('needs a confirmed factor', async () => {
    const user = await h.signUp();
    const refused = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken });
    assert.equal(refused.status, 422);
    assert.equal(refused.body.error, 'invalid_state');
  });
});

test('enrolled factors survive: a user with TOTP and SMS can log in with either', async () => {
  const user = await h.signUp();
  const totp = await enrollTotp(h, user.accessToken);
  const phone = uniquePhone();
  const sms = await enrollSms(h, user.accessToken, phone);
  h.clock.advance(31);
  const first = await loginForTicket(h, user);
  await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: first.ticket });
  assert.equal((await h.post('/auth/mfa/verify', { factor_id: sms.factorId, code: lastSmsCode(h, phone) }, { token: first.ticket })).status, 200);
  const second = await loginForTicket(h, user);
  assert.equal((await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: second.ticket })).status, 200);
});
