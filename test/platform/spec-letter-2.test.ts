import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { IdentityEvent } from '../../src/index.js';
import { decodeJwt, type Harness, harnessesClosedAfterFile, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { enrollTotp, lastSmsCode, loginForTicket, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin } from '../helpers/orgs.js';

// Spec sections 5 to 9 to the letter (events, errors, limits), for the requirements the other
// conformance files leave unpinned: events on refused or empty operations, the envelope of
// organization-scoped session events, and the headers of every 429 of the error table.

const start = harnessesClosedAfterFile();

async function emitted<T>(h: Harness, operation: () => Promise<T>): Promise<{ result: T; events: IdentityEvent[] }> {
  const before = h.events.length;
  const result = await operation();
  return { result, events: h.events.slice(before) };
}

const types = (events: IdentityEvent[]): string[] => events.map((event) => event.type);

describe('spec 6: an event only for a change that happened', () => {
  let h: Harness;
  before(async () => {
    h = await start();
  });

  test('PATCH /orgs/{id} with an empty settings object changes nothing and emits no org.updated', async () => {
    const org = await createOrg(h);
    const patched = await emitted(h, () => h.patch(`/orgs/${org.id}`, { settings: {} }, { token: org.owner.token }));
    assert.ok(patched.result.status === 200 || patched.result.status === 422, patched.result.text);
    assert.deepEqual(types(patched.events), [], `no event for no change: ${JSON.stringify(patched.events.map((event) => event.data))}`);
  });

  test('PATCH /orgs/{id} with the values already there emits no org.updated; a real change names only the changed value', async () => {
    const org = await createOrg(h, { name: 'Same Name' });
    const same = await emitted(h, () => h.patch(`/orgs/${org.id}`, { name: 'Same Name', settings: { require_mfa: false } }, { token: org.owner.token }));
    assert.equal(same.result.status, 200, same.result.text);
    assert.equal(same.result.body.data.name, 'Same Name');
    assert.deepEqual(types(same.events), [], `no event for no change: ${JSON.stringify(same.events.map((event) => event.data))}`);
    const renamed = await emitted(h, () => h.patch(`/orgs/${org.id}`, { name: 'Other Name', settings: { require_mfa: false } }, { token: org.owner.token }));
    assert.equal(renamed.result.status, 200, renamed.result.text);
    assert.deepEqual(types(renamed.events), ['org.updated']);
    assert.deepEqual(renamed.events[0]!.data, { changes: { name: 'Other Name' } });
    assert.equal((await h.get(`/orgs/${org.id}`, { token: org.owner.token })).body.data.name, 'Other Name');
  });

  test('PATCH a role with the values it already has emits no role.updated; a real change names only the changed field', async () => {
    const org = await createOrg(h);
    const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Readers', slug: 'readers', description: 'Read only', permission_keys: ['members.read', 'org.read'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const path = `/orgs/${org.id}/roles/${created.body.data.id}`;
    // The same values, the keys in another order: nothing changes.
    const same = await emitted(h, () => h.patch(path, { name: 'Readers', description: 'Read only', permission_keys: ['org.read', 'members.read'] }, { token: org.owner.token }));
    assert.equal(same.result.status, 200, same.result.text);
    assert.equal(same.result.body.data.name, 'Readers');
    assert.deepEqual(types(same.events), [], `no event for no change: ${JSON.stringify(same.events.map((event) => event.data))}`);
    const renamed = await emitted(h, () => h.patch(path, { name: 'Viewers', description: 'Read only', permission_keys: ['members.read', 'org.read'] }, { token: org.owner.token }));
    assert.equal(renamed.result.status, 200, renamed.result.text);
    assert.deepEqual(types(renamed.events), ['role.updated']);
    assert.deepEqual((renamed.events[0]!.data as { changes: string[] }).changes, ['name']);
    const listed = (await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token })).body.data as Array<{ id: string; name: string }>;
    assert.equal(listed.find((role) => role.id === created.body.data.id)?.name, 'Viewers');
  });

  test('PATCH members/{userId}/roles with the roles the member already holds emits no member.roles_changed', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const same = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'member'] }, { token: org.owner.token }));
    assert.equal(same.result.status, 200, same.result.text);
    assert.deepEqual(same.result.body.data.roles, ['member']);
    assert.deepEqual(types(same.events), [], `no event for no change: ${JSON.stringify(same.events.map((event) => event.data))}`);
    // The owner re-granting their own owner role alone: no change either.
    const owner = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['owner'] }, { token: org.owner.token }));
    assert.equal(owner.result.status, 200, owner.result.text);
    assert.deepEqual(types(owner.events), []);
    const changed = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member', 'admin'] }, { token: org.owner.token }));
    assert.equal(changed.result.status, 200, changed.result.text);
    assert.deepEqual(types(changed.events), ['member.roles_changed']);
    assert.deepEqual(changed.events[0]!.data, { from: ['member'], to: ['admin', 'member'] });
  });

  test('the other repeated operations emit nothing either: a status already held, a second disable, an enable of an active account', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const same = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'active' }, { token: org.owner.token }));
    assert.equal(same.result.status, 200, same.result.text);
    assert.deepEqual(types(same.events), []);
    const root = await superadmin(h);
    const target = await h.signUp(uniqueEmail('twice'));
    const enableActive = await emitted(h, () => h.post(`/users/${target.userId}/enable`, undefined, { token: root.accessToken }));
    assert.equal(enableActive.result.status, 200, enableActive.result.text);
    assert.deepEqual(types(enableActive.events), []);
    assert.deepEqual(types((await emitted(h, () => h.post(`/users/${target.userId}/disable`, undefined, { token: root.accessToken }))).events), ['user.disabled']);
    const again = await emitted(h, () => h.post(`/users/${target.userId}/disable`, undefined, { token: root.accessToken }));
    assert.equal(again.result.status, 200, again.result.text);
    assert.deepEqual(types(again.events), []);
  });

  test('refused operations emit nothing: escalation guard, last owner, self-disable, tombstone enable, invite e-mail mismatch', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const escalate = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: member.token }));
    assert.equal(escalate.result.status, 403, escalate.result.text);
    assert.deepEqual(types(escalate.events), []);
    const lastOwner = await emitted(h, () => h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }));
    assertError(lastOwner.result, 409, 'conflict');
    assert.deepEqual(types(lastOwner.events), []);
    const removeLast = await emitted(h, () => h.delete(`/orgs/${org.id}/members/${org.owner.userId}`, { token: org.owner.token }));
    assertError(removeLast.result, 409, 'conflict');
    assert.deepEqual(types(removeLast.events), []);

    const root = await superadmin(h);
    const self = await emitted(h, () => h.post(`/users/${root.userId}/disable`, undefined, { token: root.accessToken }));
    assertError(self.result, 409, 'conflict');
    assert.deepEqual(types(self.events), []);
    const gone = await h.signUp(uniqueEmail('gone'));
    assert.equal((await h.delete(`/users/${gone.userId}`, { token: root.accessToken })).status, 200);
    const tombstone = await emitted(h, () => h.post(`/users/${gone.userId}/enable`, undefined, { token: root.accessToken }));
    assertError(tombstone.result, 409, 'conflict');
    assert.deepEqual(types(tombstone.events), []);

    const intended = uniqueEmail('intended');
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: intended, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
    const intruder = await h.signUp(uniqueEmail('intruder'));
    const mismatch = await emitted(h, () => h.post('/auth/invites/accept', { token: h.tokenFromMail(intended, 'invite') }, { token: intruder.accessToken }));
    assertError(mismatch.result, 403, 'forbidden');
    assert.deepEqual(types(mismatch.events), []);
  });

  test('a refused factor removal (last_factor_protected) and a refused default (invalid_state) emit nothing', async () => {
    const enforced = await start({ config: { mfa: { enforce: true } } });
    const user = await enforced.signUp(uniqueEmail('enf'));
    const totp = await enrollTotp(enforced, user.accessToken);
    const { ticket } = await loginForTicket(enforced, user);
    const verified = await enforced.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(enforced, totp.secret) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    const access = verified.body.data.access_token;
    const removal = await emitted(enforced, () => enforced.delete(`/auth/mfa/factors/${totp.factorId}`, { token: access }));
    assertError(removal.result, 409, 'last_factor_protected');
    assert.deepEqual(types(removal.events), []);
  });
});

describe('spec 6 / docs/events.md: session events name the session\'s organization', () => {
  test('auth.org_switched carries from_organization_id; auth.token_refreshed and auth.refresh_reuse_detected then carry the new organization', async () => {
    const h = await start();
    const first = await createOrg(h);
    const second = await createOrg(h, { owner: first.owner });
    const login = await h.post('/auth/login', { email: first.owner.email, password: first.owner.password });
    const intoFirst = await h.post('/auth/switch-org', { organization_id: first.id }, { token: login.body.data.access_token });
    assert.equal(intoFirst.status, 200, intoFirst.text);
    const switched = await emitted(h, () => h.post('/auth/switch-org', { organization_id: second.id }, { token: intoFirst.body.data.access_token }));
    assert.equal(switched.result.status, 200, switched.result.text);
    assert.deepEqual(types(switched.events), ['auth.org_switched']);
    assert.equal(switched.events[0]!.organization_id, second.id);
    assert.deepEqual(switched.events[0]!.data, { session_id: decodeJwt(login.body.data.access_token).sid, from_organization_id: first.id });
    const refreshToken = switched.result.body.data.refresh_token ?? login.body.data.refresh_token;
    const refreshed = await emitted(h, () => h.post('/auth/token/refresh', { refresh_token: refreshToken }));
    assert.equal(refreshed.result.status, 200, refreshed.result.text);
    assert.deepEqual(types(refreshed.events), ['auth.token_refreshed']);
    assert.equal(refreshed.events[0]!.organization_id, second.id);
    const replay = await emitted(h, () => h.post('/auth/token/refresh', { refresh_token: refreshToken }));
    assertError(replay.result, 401, 'invalid_grant');
    assert.deepEqual(types(replay.events), ['auth.refresh_reuse_detected']);
    assert.equal(replay.events[0]!.organization_id, second.id);
    // The session is revoked: a second replay is refused, and the revocation is not announced twice.
    const again = await emitted(h, () => h.post('/auth/token/refresh', { refresh_token: refreshToken }));
    assertError(again.result, 401, 'invalid_grant');
    assert.ok(!types(again.events).includes('auth.token_refreshed'));
  });

  test('auth.sessions_revoked counts only the sessions logout-all ended (not those already ended)', async () => {
    const h = await start();
    const user = await h.signUp(uniqueEmail('count'));
    const second = await h.post('/auth/login', { email: user.email, password: user.password });
    const third = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal((await h.post('/auth/logout', undefined, { token: third.body.data.access_token })).status, 200);
    const all = await emitted(h, () => h.post('/auth/logout-all', undefined, { token: second.body.data.access_token }));
    assert.equal(all.result.status, 200, all.result.text);
    assert.deepEqual(types(all.events), ['auth.sessions_revoked']);
    assert.equal(all.events[0]!.data.count, 2);
  });

  test('user.password_reset_requested only for a known active account: not for a disabled one', async () => {
    const h = await start();
    const root = await superadmin(h);
    const user = await h.signUp(uniqueEmail('off'));
    assert.equal((await h.post(`/users/${user.userId}/disable`, undefined, { token: root.accessToken })).status, 200);
    const forgot = await emitted(h, () => h.post('/auth/password/forgot', { email: user.email }));
    assert.equal(forgot.result.status, 202);
    assert.deepEqual(types(forgot.events), []);
  });
});

describe('spec 5 and 7: 401 answers', () => {
  test('an access token past its 900 s lifetime answers 401 unauthorized with WWW-Authenticate: Bearer; at 900 s it still passes', async () => {
    const h = await start();
    const user = await h.signUp(uniqueEmail('ttl'));
    h.clock.advance(899);
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
    h.clock.advance(2);
    const late = await h.get('/auth/me', { token: user.accessToken });
    assertError(late, 401, 'unauthorized');
    assert.equal(late.headers.get('www-authenticate'), 'Bearer');
  });
});

describe('spec 7 and 8: the account budgets answer 429 rate_limited with Retry-After, and reset', () => {
  test('per-account send budget: the Nth send passes, the N+1th is refused, the next window sends again', async () => {
    const h = await start({ config: { otp: { sendBudget: { perAccount: { limit: 2, windowSec: 3600 } } } } });
    const user = await h.signUp(uniqueEmail('budget'));
    for (let index = 0; index < 2; index += 1) {
      assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken })).status, 200, `send ${index + 1}`);
    }
    const third = await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken });
    assertError(third, 429, 'rate_limited');
    const retry = Number(third.headers.get('retry-after'));
    assert.ok(retry >= 1 && retry <= 3600, `Retry-After ${retry}`);
    assert.equal(third.headers.get('x-ratelimit-limit'), '2', 'X-RateLimit-Limit is the budget');
    assert.equal(third.headers.get('x-ratelimit-remaining'), '0');
    assert.ok(Number(third.headers.get('x-ratelimit-reset')) > h.clock.now() / 1000, 'X-RateLimit-Reset in the future');
    h.clock.advance(3601);
    const relogin = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: relogin.body.data.access_token })).status, 200, 'the window resets');
  });

  test('per-account verify budget: after N failures a right code is refused with 429 rate_limited and Retry-After', async () => {
    const h = await start({ config: { otp: { verifyBudget: { limit: 2, windowSec: 900 } }, auth: { lockout: { threshold: 100, window: 900, duration: 900 } } } });
    const user = await h.signUp(uniqueEmail('verify'));
    const totp = await enrollTotp(h, user.accessToken);
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const { ticket } = await loginForTicket(h, user);
      assertError(await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: '000000' === nextTotpCode(h, totp.secret) ? '111111' : '000000' }, { token: ticket }), 422, 'invalid_code', `failure ${attempt + 1}`);
    }
    const { ticket } = await loginForTicket(h, user);
    const over = await emitted(h, () => h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket }));
    assertError(over.result, 429, 'rate_limited');
    assert.ok(Number(over.result.headers.get('retry-after')) >= 1, 'Retry-After');
    assert.equal(over.result.headers.get('x-ratelimit-limit'), '2', 'X-RateLimit-Limit is the verify budget');
    assert.equal(over.result.headers.get('x-ratelimit-remaining'), '0');
    assert.deepEqual(types(over.events), [], 'a code not even looked at opens no session and records no verification');
    h.clock.advance(901);
    const next = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: next.ticket })).status, 200, 'the window resets');
  });
});

describe('spec 7 and 8: the 30 s resend cooldown', () => {
  test('enrolling the same number again inside 30 s answers 429 rate_limited (Retry-After 30); at 30 s it sends again', async () => {
    const h = await start();
    const user = await h.signUp(uniqueEmail('cool'));
    const phone = uniquePhone();
    assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken })).status, 200);
    const again = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assertError(again, 429, 'rate_limited');
    assert.equal(again.headers.get('retry-after'), '30');
    assert.equal(again.headers.get('x-ratelimit-limit'), '1');
    h.clock.advance(29);
    assertError(await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken }), 429, 'rate_limited', 'at 29 s');
    h.clock.advance(1);
    assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken })).status, 200, 'at 30 s');
  });

  test('a step-up challenge inside the cooldown answers 429 too_many_requests with Retry-After and X-RateLimit-*', async () => {
    const h = await start();
    const user = await h.signUp(uniqueEmail('stepcool'));
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const factorId = enrolled.body.data.factor_id;
    const code = lastSmsCode(h, phone);
    assert.equal((await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code }, { token: user.accessToken })).status, 200);
    h.clock.advance(31);
    const first = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken });
    assert.equal(first.status, 200, first.text);
    const second = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: user.accessToken });
    assertError(second, 429, 'too_many_requests');
    assert.equal(second.headers.get('retry-after'), '30');
    assert.equal(second.headers.get('x-ratelimit-limit'), '1');
    assert.equal(second.body.retry_after, 30);
  });
});

describe('spec 5: the MFA ticket is accepted only by /auth/mfa/challenge and /auth/mfa/verify', () => {
  test('every other bearer route refuses it with 401 unauthorized and WWW-Authenticate; an access token is refused by the ticket routes', async () => {
    const h = await start();
    const user = await h.signUp(uniqueEmail('ticketonly'));
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const calls: Array<[string, string, unknown?]> = [
      ['POST', '/auth/mfa/step-up/challenge', { factor_id: totp.factorId }],
      ['POST', '/auth/mfa/step-up', { factor_id: totp.factorId, code: '123456' }],
      ['POST', '/auth/mfa/totp/enroll'],
      ['POST', '/auth/mfa/recovery-codes/regenerate'],
      ['GET', '/auth/mfa/factors'],
      ['POST', '/auth/logout'],
      ['POST', '/auth/logout-all'],
      ['GET', '/auth/sessions'],
      ['POST', '/auth/switch-org', { organization_id: '00000000-0000-4000-8000-000000000000' }],
      ['POST', '/auth/password/change', { current_password: user.password, new_password: 'another fine passphrase' }],
      ['POST', '/orgs', { name: 'Ticket Org' }],
      ['GET', '/permissions'],
      ['POST', '/auth/invites/accept', { token: 'x'.repeat(20) }],
    ];
    for (const [method, path, body] of calls) {
      const response = method === 'GET' ? await h.get(path, { token: ticket }) : await h.post(path, body, { token: ticket });
      assertError(response, 401, 'unauthorized', `${method} ${path} with a ticket`);
      assert.equal(response.headers.get('www-authenticate'), 'Bearer', `${method} ${path}`);
    }
    for (const path of ['/auth/mfa/challenge', '/auth/mfa/verify']) {
      const response = await h.post(path, { factor_id: totp.factorId, code: '123456' }, { token: user.accessToken });
      assertError(response, 401, 'unauthorized', `${path} with an access token`);
      assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/);
    }
    // The ticket still works where it belongs: the refusals above did not spend it.
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
  });
});

describe('spec 6: user.locked, once, for every failure the lockout counts (CONTRACT 5)', () => {
  test('failed second-factor codes reach the threshold: user.locked {until, reason: second_factor} once; the right password then answers invalid_credentials', async () => {
    const h = await start({ config: { auth: { lockout: { threshold: 3, window: 900, duration: 600 } } } });
    const user = await h.signUp(uniqueEmail('lock2fa'));
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const near = new Set([-1, 0, 1, 2].map((offset) => totpCodeAt(h, totp.secret, offset)));
    const wrong = ['000000', '111111', '222222', '333333', '444444', '555555'].filter((code) => !near.has(code));
    const seen: IdentityEvent[] = [];
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const failed = await emitted(h, () => h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrong[attempt] }, { token: ticket }));
      assertError(failed.result, 422, 'invalid_code', `attempt ${attempt + 1}`);
      seen.push(...failed.events);
    }
    const locks = seen.filter((event) => event.type === 'user.locked');
    assert.equal(locks.length, 1, `user.locked once: ${JSON.stringify(types(seen))}`);
    assert.deepEqual(locks[0]!.data, { until: new Date(h.clock.now() + 600_000).toISOString(), reason: 'second_factor' });
    assert.equal(locks[0]!.actor_id, null);
    assert.equal(locks[0]!.user_id, user.userId);
    const refused = await emitted(h, () => h.post('/auth/login', { email: user.email, password: user.password }));
    assertError(refused.result, 401, 'invalid_credentials');
    assert.deepEqual(types(refused.events), ['user.login_failed']);
    assert.deepEqual(refused.events[0]!.data, { reason: 'locked' });
    h.clock.advance(600);
    const again = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(again.status, 200, `the lockout ends after its duration: ${again.text}`);
  });

  test('wrong current_password on change counts toward the lockout: 403 invalid_credentials, then user.locked {reason: password} once', async () => {
    const h = await start({ config: { auth: { lockout: { threshold: 3, window: 900, duration: 900 } } } });
    const user = await h.signUp(uniqueEmail('lockchange'));
    const seen: IdentityEvent[] = [];
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const failed = await emitted(h, () => h.post('/auth/password/change', { current_password: `wrong password ${attempt}`, new_password: 'a different good passphrase' }, { token: user.accessToken }));
      assertError(failed.result, 403, 'invalid_credentials', `attempt ${attempt + 1}`);
      assert.ok(!types(failed.events).includes('user.password_changed'));
      seen.push(...failed.events);
    }
    const locks = seen.filter((event) => event.type === 'user.locked');
    assert.equal(locks.length, 1, `user.locked once: ${JSON.stringify(types(seen))}`);
    assert.deepEqual(locks[0]!.data, { until: new Date(h.clock.now() + 900_000).toISOString(), reason: 'password' });
    assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials', 'locked');
  });
});

describe('spec 6: user.deleted and its member.removed events, exactly', () => {
  test('an administrator deletes a member of two organizations who had sent and received invitations: one member.removed per organization, and user.deleted counts each', async () => {
    const h = await start();
    const root = await superadmin(h);
    const first = await createOrg(h);
    const second = await createOrg(h);
    const target = await h.signUp(uniqueEmail('erased'));
    const inFirst = await addMember(h, first, first.owner.token, ['admin'], target);
    // A pending invitation the target sent (as admin of the first), and one to the target's address.
    assert.equal((await h.post(`/orgs/${first.id}/invites`, { email: uniqueEmail('sent'), role_slugs: ['member'] }, { token: inFirst.token })).status, 201);
    await addMember(h, second, second.owner.token, ['member'], target);
    // Suspended in the second organization, so previous_status says so.
    assert.equal((await h.patch(`/orgs/${second.id}/members/${target.userId}`, { status: 'suspended' }, { token: second.owner.token })).status, 200);
    const third = await createOrg(h);
    assert.equal((await h.post(`/orgs/${third.id}/invites`, { email: target.email, role_slugs: ['member'] }, { token: third.owner.token })).status, 201);

    const deleted = await emitted(h, () => h.delete(`/users/${target.userId}`, { token: root.accessToken }));
    assert.equal(deleted.result.status, 200, deleted.result.text);
    // One member.removed per organization the account had a member entry in: the third's is the
    // `invited` entry of its pending invitation (CONTRACT 5: the member list shows it).
    assert.deepEqual(types(deleted.events).sort(), ['member.removed', 'member.removed', 'member.removed', 'user.deleted']);
    const removed = deleted.events.filter((event) => event.type === 'member.removed');
    assert.deepEqual(removed.map((event) => event.organization_id).sort(), [first.id, second.id, third.id].sort());
    const previous = { [first.id]: 'active', [second.id]: 'suspended', [third.id]: 'invited' };
    for (const event of removed) {
      assert.equal(event.actor_id, root.userId);
      assert.equal(event.user_id, target.userId);
      assert.deepEqual(event.data, { reason: 'user_deleted', previous_status: previous[event.organization_id!] });
    }
    const userDeleted = deleted.events.find((event) => event.type === 'user.deleted')!;
    assert.equal(userDeleted.actor_id, root.userId);
    assert.equal(userDeleted.user_id, target.userId);
    assert.equal(userDeleted.organization_id, null);
    assert.deepEqual(userDeleted.data, { self: false, sessions_revoked: 0, memberships_ended: 3, invites_revoked: 1, sent_invites_revoked: 1 });
    assert.ok(!JSON.stringify(deleted.events).includes(target.email), 'no address in any payload');
    // Deleting the tombstone again changes nothing (test/accounts/users-delete.test.ts): no second event.
    const again = await emitted(h, () => h.delete(`/users/${target.userId}`, { token: root.accessToken }));
    assert.equal(again.result.status, 200, again.result.text);
    assert.deepEqual(types(again.events), []);
  });
});

describe('response conventions and spec 7: a validation failure raised by a service is {errors} and nothing else', () => {
  test('unknown role slugs, unknown permission keys, a weak new password: 422 with only the errors array, and no event', async () => {
    const h = await start();
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const cases = [
      await emitted(h, () => h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['no-such-role'] }, { token: org.owner.token })),
      await emitted(h, () => h.post(`/orgs/${org.id}/roles`, { name: 'Bad', slug: 'bad', permission_keys: ['no.such.key'] }, { token: org.owner.token })),
      await emitted(h, () => h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('inv'), role_slugs: ['no-such-role'] }, { token: org.owner.token })),
      await emitted(h, () => h.post('/auth/password/change', { current_password: org.owner.password, new_password: org.owner.email }, { token: org.owner.token })),
    ];
    for (const [index, { result, events }] of cases.entries()) {
      assert.equal(result.status, 422, `case ${index}: ${result.text}`);
      assert.deepEqual(Object.keys(result.body), ['errors'], `case ${index}: ${result.text}`);
      assert.ok(result.body.errors.length > 0 && result.body.errors.every((message: unknown) => typeof message === 'string'), `case ${index}`);
      assert.deepEqual(types(events), [], `case ${index}: no event`);
    }
  });
});

void STRONG_PASSWORD;
