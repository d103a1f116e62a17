import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import express from 'express';
import type { AddressInfo } from 'node:net';
import { EVENT_TYPES, type IdentityEvent } from '../../src/index.js';
import { decodeJwt, decodeJwtHeader, type Harness, harnessesClosedAfterFile, STRONG_PASSWORD, type TestResponse, uniqueEmail } from '../helpers/harness.js';
import { assertError, assertValidationErrors } from '../helpers/account.js';
import { enrollEmail, enrollTotp, lastMailCode, loginForTicket, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin } from '../helpers/orgs.js';

// Cross-cutting conformance to spec sections 6 (events), 7 (errors), 8 (limits), 9 (versioning)
// and CONTRACT section 4 (the event envelope), checked route by route against the tables, with
// each event's data as docs/events.md fixes it ("Event payload fields: not shown" in the spec).

const start = harnessesClosedAfterFile();

const ENVELOPE_KEYS = ['actor_id', 'data', 'id', 'ip', 'occurred_at', 'organization_id', 'type', 'user_id'];

/** The events an operation emitted: those delivered to onEvent while it ran. */
async function emitted<T>(h: Harness, operation: () => Promise<T>): Promise<{ result: T; events: IdentityEvent[] }> {
  const before = h.events.length;
  const result = await operation();
  return { result, events: h.events.slice(before) };
}

interface Expected {
  type: IdentityEvent['type'];
  actor: string | null;
  user: string | null;
  org: string | null;
  /** The exact set of data keys. */
  keys: string[];
  data?: Record<string, unknown>;
}

/** CONTRACT 4: the envelope, exactly; docs/events.md: actor / user / org and the data keys of the type. */
function assertEvent(h: Harness, event: IdentityEvent | undefined, expected: Expected): IdentityEvent {
  assert.ok(event, `no ${expected.type} event`);
  assert.equal(event.type, expected.type);
  assert.deepEqual(Object.keys(event).sort(), ENVELOPE_KEYS, expected.type);
  assert.ok(EVENT_TYPES.includes(event.type), expected.type);
  assert.match(event.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, `${expected.type} id`);
  assert.equal(event.occurred_at, new Date(h.clock.now()).toISOString(), `${expected.type} occurred_at is ISO 8601 from the router's clock`);
  assert.equal(event.actor_id, expected.actor, `${expected.type} actor_id`);
  assert.equal(event.user_id, expected.user, `${expected.type} user_id`);
  assert.equal(event.organization_id, expected.org, `${expected.type} organization_id`);
  assert.match(String(event.ip), /127\.0\.0\.1$/, `${expected.type} ip is the request's`);
  assert.deepEqual(Object.keys(event.data).sort(), [...expected.keys].sort(), `${expected.type} data keys: ${JSON.stringify(event.data)}`);
  for (const [key, value] of Object.entries(expected.data ?? {})) assert.deepEqual(event.data[key], value, `${expected.type} data.${key}`);
  return event;
}

/** A six-digit code no TOTP window around the clock accepts. */
function wrongTotp(h: Harness, secret: string): string {
  const near = new Set([-1, 0, 1, 2].map((offset) => totpCodeAt(h, secret, offset)));
  for (let candidate = 0; ; candidate += 1) {
    const code = String(candidate).padStart(6, '0');
    if (!near.has(code)) return code;
  }
}

function types(events: IdentityEvent[]): string[] {
  return events.map((event) => event.type);
}

/** Spec 6, the whole table. */
const SPEC_EVENTS = [
  'user.registered', 'user.email_verified', 'user.logged_in', 'user.login_failed', 'user.locked',
  'auth.token_refreshed', 'auth.refresh_reuse_detected', 'auth.sessions_revoked', 'auth.org_switched',
  'user.password_reset_requested', 'user.password_changed',
  'mfa.enrolled', 'mfa.verified', 'mfa.recovery_used', 'mfa.verify_failed', 'mfa.step_up_completed', 'mfa.factor_removed', 'mfa.recovery_regenerated',
  'org.created', 'org.updated', 'org.deleted',
  'member.invited', 'member.joined', 'member.roles_changed', 'member.status_changed', 'member.removed',
  'role.created', 'role.updated', 'role.deleted',
  'user.disabled', 'user.enabled', 'user.deleted',
] as const;

describe('spec 6 and CONTRACT 4: every event, when it fires, and its payload', () => {
  let h: Harness;
  before(async () => {
    h = await start();
  });

  test('accounts and sessions: registered, email_verified, logged_in, login_failed, token_refreshed, refresh_reuse_detected, sessions_revoked, password_reset_requested, password_changed', async () => {
    const email = uniqueEmail('ev');
    const registered = await emitted(h, () => h.post('/auth/register', { email, password: STRONG_PASSWORD }));
    assert.equal(registered.result.status, 202);
    assert.deepEqual(types(registered.events), ['user.registered']);
    const userId = registered.events[0]!.user_id!;
    assertEvent(h, registered.events[0], { type: 'user.registered', actor: userId, user: userId, org: null, keys: [] });
    // Registering a taken address again emits nothing (spec 4.1: enumeration-safe, "new accounts").
    const again = await emitted(h, () => h.post('/auth/register', { email, password: STRONG_PASSWORD }));
    assert.equal(again.result.status, 202);
    assert.deepEqual(types(again.events), []);

    const token = h.tokenFromMail(email, 'verify_email');
    const verified = await emitted(h, () => h.post('/auth/email/verify', { token }));
    assert.deepEqual(types(verified.events), ['user.email_verified']);
    assertEvent(h, verified.events[0], { type: 'user.email_verified', actor: userId, user: userId, org: null, keys: ['method', 'credentials_removed'], data: { method: 'link', credentials_removed: 0 } });
    // First verification only.
    const reverified = await emitted(h, () => h.post('/auth/email/verify', { token }));
    assert.equal(reverified.result.status, 200);
    assert.deepEqual(types(reverified.events), []);

    const wrong = await emitted(h, () => h.post('/auth/login', { email, password: 'not the right one' }));
    assert.equal(wrong.result.status, 401);
    assert.deepEqual(types(wrong.events), ['user.login_failed']);
    assertEvent(h, wrong.events[0], { type: 'user.login_failed', actor: null, user: userId, org: null, keys: ['reason'], data: { reason: 'wrong_password' } });
    const unknown = await emitted(h, () => h.post('/auth/login', { email: uniqueEmail('nobody'), password: STRONG_PASSWORD }));
    assert.deepEqual(types(unknown.events), ['user.login_failed']);
    assertEvent(h, unknown.events[0], { type: 'user.login_failed', actor: null, user: null, org: null, keys: ['reason'], data: { reason: 'unknown_account' } });

    const login = await emitted(h, () => h.post('/auth/login', { email, password: STRONG_PASSWORD }));
    assert.deepEqual(types(login.events), ['user.logged_in']);
    assertEvent(h, login.events[0], { type: 'user.logged_in', actor: userId, user: userId, org: null, keys: ['mfa', 'amr', 'method'], data: { mfa: false, amr: ['pwd'], method: 'password' } });
    const sessionId = decodeJwt(login.result.body.data.access_token).sid;

    const refreshToken = login.result.body.data.refresh_token;
    const refreshed = await emitted(h, () => h.post('/auth/token/refresh', { refresh_token: refreshToken }));
    assert.equal(refreshed.result.status, 200);
    assert.deepEqual(types(refreshed.events), ['auth.token_refreshed']);
    assertEvent(h, refreshed.events[0], { type: 'auth.token_refreshed', actor: null, user: userId, org: null, keys: ['session_id'], data: { session_id: sessionId } });
    const replay = await emitted(h, () => h.post('/auth/token/refresh', { refresh_token: refreshToken }));
    assertError(replay.result, 401, 'invalid_grant');
    assert.deepEqual(types(replay.events), ['auth.refresh_reuse_detected']);
    assertEvent(h, replay.events[0], { type: 'auth.refresh_reuse_detected', actor: null, user: userId, org: null, keys: ['session_id'], data: { session_id: sessionId } });

    // Three live sessions, then logout-all: count 3.
    const sessions: string[] = [];
    for (let index = 0; index < 3; index += 1) sessions.push((await h.post('/auth/login', { email, password: STRONG_PASSWORD })).body.data.access_token as string);
    const all = await emitted(h, () => h.post('/auth/logout-all', undefined, { token: sessions[0] }));
    assert.equal(all.result.status, 200);
    assert.deepEqual(types(all.events), ['auth.sessions_revoked']);
    assertEvent(h, all.events[0], { type: 'auth.sessions_revoked', actor: userId, user: userId, org: null, keys: ['count', 'reason'], data: { count: 3, reason: 'logout_all' } });

    const forgot = await emitted(h, () => h.post('/auth/password/forgot', { email }));
    assert.equal(forgot.result.status, 202);
    assert.deepEqual(types(forgot.events), ['user.password_reset_requested']);
    assertEvent(h, forgot.events[0], { type: 'user.password_reset_requested', actor: null, user: userId, org: null, keys: [] });
    // Unknown account: no event.
    assert.deepEqual(types((await emitted(h, () => h.post('/auth/password/forgot', { email: uniqueEmail('ghost') }))).events), []);

    await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    const newPassword = 'a brand new passphrase';
    const reset = await emitted(h, () => h.post('/auth/password/reset', { token: h.tokenFromMail(email, 'password_reset'), new_password: newPassword }));
    assert.equal(reset.result.status, 200);
    assert.deepEqual(types(reset.events), ['user.password_changed']);
    assertEvent(h, reset.events[0], { type: 'user.password_changed', actor: userId, user: userId, org: null, keys: ['method', 'sessions_revoked'], data: { method: 'reset', sessions_revoked: 1 } });

    const current = (await h.post('/auth/login', { email, password: newPassword })).body.data.access_token;
    await h.post('/auth/login', { email, password: newPassword });
    const change = await emitted(h, () => h.post('/auth/password/change', { current_password: newPassword, new_password: STRONG_PASSWORD }, { token: current }));
    assert.equal(change.result.status, 200);
    assert.deepEqual(types(change.events), ['user.password_changed']);
    assertEvent(h, change.events[0], { type: 'user.password_changed', actor: userId, user: userId, org: null, keys: ['method', 'sessions_revoked'], data: { method: 'change', sessions_revoked: 1 } });
  });

  test('user.locked fires when the lockout threshold is reached, with until = now + duration', async () => {
    const user = await h.signUp(uniqueEmail('lock'));
    const events: IdentityEvent[] = [];
    for (let attempt = 1; attempt <= 5; attempt += 1) {
      const failed = await emitted(h, () => h.post('/auth/login', { email: user.email, password: 'wrong password here' }));
      assertError(failed.result, 401, 'invalid_credentials');
      events.push(...failed.events);
      if (attempt < 5) assert.deepEqual(types(failed.events), ['user.login_failed'], `attempt ${attempt}`);
    }
    assert.deepEqual(types(events).slice(-2), ['user.login_failed', 'user.locked']);
    assertEvent(h, events.at(-1), { type: 'user.locked', actor: null, user: user.userId, org: null, keys: ['until', 'reason'], data: { until: new Date(h.clock.now() + 900_000).toISOString(), reason: 'password' } });
    // A live lockout answers like a wrong password and is recorded as locked.
    const locked = await emitted(h, () => h.post('/auth/login', { email: user.email, password: user.password }));
    assertError(locked.result, 401, 'invalid_credentials');
    assert.deepEqual(types(locked.events), ['user.login_failed']);
    assertEvent(h, locked.events[0], { type: 'user.login_failed', actor: null, user: user.userId, org: null, keys: ['reason'], data: { reason: 'locked' } });
  });

  test('MFA: enrolled, verify_failed, verified with logged_in, recovery_used, step_up_completed, recovery_regenerated, factor_removed; all audited', async () => {
    const user = await h.signUp(uniqueEmail('mfa'));
    const enroll = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const factorId = enroll.body.data.factor_id;
    const secret = enroll.body.data.secret;
    const confirmed = await emitted(h, () => h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: user.accessToken }));
    assert.equal(confirmed.result.status, 200, confirmed.result.text);
    assert.deepEqual(types(confirmed.events), ['mfa.enrolled']);
    assertEvent(h, confirmed.events[0], { type: 'mfa.enrolled', actor: user.userId, user: user.userId, org: null, keys: ['factor_id', 'type'], data: { factor_id: factorId, type: 'totp' } });
    const recoveryCodes: string[] = confirmed.result.body.data.recovery_codes;

    // Login with a confirmed factor: the gate opens no session and emits nothing yet.
    const gate = await emitted(h, () => h.post('/auth/login', { email: user.email, password: user.password }));
    assert.equal(gate.result.body.data.mfa_required, true);
    assert.deepEqual(types(gate.events), []);
    const ticket = gate.result.body.data.mfa_token;
    const failed = await emitted(h, () => h.post('/auth/mfa/verify', { factor_id: factorId, code: wrongTotp(h, secret) }, { token: ticket }));
    assertError(failed.result, 422, 'invalid_code');
    assert.deepEqual(types(failed.events), ['mfa.verify_failed']);
    assertEvent(h, failed.events[0], { type: 'mfa.verify_failed', actor: user.userId, user: user.userId, org: null, keys: ['context', 'method', 'factor_id'], data: { context: 'login', method: 'totp', factor_id: factorId } });
    const verified = await emitted(h, () => h.post('/auth/mfa/verify', { factor_id: factorId, code: nextTotpCode(h, secret) }, { token: ticket }));
    assert.equal(verified.result.status, 200, verified.result.text);
    assert.deepEqual(types(verified.events), ['mfa.verified', 'user.logged_in']);
    assertEvent(h, verified.events[0], { type: 'mfa.verified', actor: user.userId, user: user.userId, org: null, keys: ['method', 'factor_id'], data: { method: 'totp', factor_id: factorId } });
    assertEvent(h, verified.events[1], { type: 'user.logged_in', actor: user.userId, user: user.userId, org: null, keys: ['mfa', 'amr', 'method'], data: { mfa: true, amr: ['pwd', 'otp'], method: 'totp' } });

    // The recovery-code path.
    const second = await loginForTicket(h, user);
    const recovered = await emitted(h, () => h.post('/auth/mfa/verify', { code: recoveryCodes[0] }, { token: second.ticket }));
    assert.equal(recovered.result.status, 200, recovered.result.text);
    assert.deepEqual(types(recovered.events).sort(), ['mfa.recovery_used', 'mfa.verified', 'user.logged_in']);
    assertEvent(h, recovered.events.find((event) => event.type === 'mfa.recovery_used'), { type: 'mfa.recovery_used', actor: user.userId, user: user.userId, org: null, keys: ['remaining'], data: { remaining: 9 } });
    assertEvent(h, recovered.events.find((event) => event.type === 'mfa.verified'), { type: 'mfa.verified', actor: user.userId, user: user.userId, org: null, keys: ['method', 'factor_id'], data: { method: 'recovery', factor_id: null } });
    assertEvent(h, recovered.events.find((event) => event.type === 'user.logged_in'), { type: 'user.logged_in', actor: user.userId, user: user.userId, org: null, keys: ['mfa', 'amr', 'method'], data: { mfa: true, amr: ['pwd', 'otp'], method: 'recovery' } });
    const token = recovered.result.body.data.access_token;
    const sessionId = decodeJwt(token).sid;

    // Step-up: a failure, then success.
    h.clock.advance(301);
    const stepFailed = await emitted(h, () => h.post('/auth/mfa/step-up', { factor_id: factorId, code: wrongTotp(h, secret) }, { token }));
    assertError(stepFailed.result, 422, 'invalid_code');
    assert.deepEqual(types(stepFailed.events), ['mfa.verify_failed']);
    assertEvent(h, stepFailed.events[0], { type: 'mfa.verify_failed', actor: user.userId, user: user.userId, org: null, keys: ['context', 'method', 'factor_id'], data: { context: 'step_up', method: 'totp', factor_id: factorId } });
    const stepUp = await emitted(h, () => h.post('/auth/mfa/step-up', { factor_id: factorId, code: nextTotpCode(h, secret) }, { token }));
    assert.equal(stepUp.result.status, 200, stepUp.result.text);
    assert.deepEqual(types(stepUp.events), ['mfa.step_up_completed']);
    assertEvent(h, stepUp.events[0], { type: 'mfa.step_up_completed', actor: user.userId, user: user.userId, org: null, keys: ['method', 'factor_id', 'session_id'], data: { method: 'totp', factor_id: factorId, session_id: sessionId } });
    const fresh = stepUp.result.body.data.access_token;

    const regenerated = await emitted(h, () => h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: fresh }));
    assert.equal(regenerated.result.status, 200, regenerated.result.text);
    assert.deepEqual(types(regenerated.events), ['mfa.recovery_regenerated']);
    assertEvent(h, regenerated.events[0], { type: 'mfa.recovery_regenerated', actor: user.userId, user: user.userId, org: null, keys: ['count'], data: { count: 10 } });

    const removed = await emitted(h, () => h.delete(`/auth/mfa/factors/${factorId}`, { token: fresh }));
    assert.equal(removed.result.status, 200, removed.result.text);
    assert.deepEqual(types(removed.events), ['mfa.factor_removed']);
    assertEvent(h, removed.events[0], { type: 'mfa.factor_removed', actor: user.userId, user: user.userId, org: null, keys: ['factor_id', 'type', 'confirmed'], data: { factor_id: factorId, type: 'totp', confirmed: true } });

    // Spec 6: all MFA activity is also audited (same ids in the audit table).
    const mfaEvents = h.events.filter((event) => event.user_id === user.userId && event.type.startsWith('mfa.'));
    assert.ok(mfaEvents.length >= 8);
    const rows = await h.knex(`${h.tablePrefix}audit_events`).whereIn('id', mfaEvents.map((event) => event.id)).select('id', 'type');
    assert.equal(rows.length, mfaEvents.length);
    // Nothing secret in any payload.
    const published = JSON.stringify(mfaEvents);
    for (const secretValue of [secret, ...recoveryCodes, ticket, token, fresh]) assert.ok(!published.includes(secretValue));
  });

  test('organizations, members, roles: org.created/updated/deleted, member.invited/joined/roles_changed/status_changed/removed, role.created/updated/deleted, auth.org_switched', async () => {
    const owner = await h.signUp(uniqueEmail('owner'));
    const created = await emitted(h, () => h.post('/orgs', { name: 'Events Inc' }, { token: owner.accessToken }));
    assert.equal(created.result.status, 201, created.result.text);
    const orgId = created.result.body.data.id;
    assert.deepEqual(types(created.events), ['org.created']);
    assertEvent(h, created.events[0], { type: 'org.created', actor: owner.userId, user: owner.userId, org: orgId, keys: ['name', 'slug'], data: { name: 'Events Inc', slug: created.result.body.data.slug } });

    const switched = await emitted(h, () => h.post('/auth/switch-org', { organization_id: orgId }, { token: owner.accessToken }));
    assert.equal(switched.result.status, 200);
    assert.deepEqual(types(switched.events), ['auth.org_switched']);
    assertEvent(h, switched.events[0], { type: 'auth.org_switched', actor: owner.userId, user: owner.userId, org: orgId, keys: ['session_id', 'from_organization_id'], data: { session_id: decodeJwt(owner.accessToken).sid, from_organization_id: null } });
    const token = switched.result.body.data.access_token;

    const renamed = await emitted(h, () => h.patch(`/orgs/${orgId}`, { name: 'Events Ltd' }, { token }));
    assert.equal(renamed.result.status, 200);
    assert.deepEqual(types(renamed.events), ['org.updated']);
    assertEvent(h, renamed.events[0], { type: 'org.updated', actor: owner.userId, user: null, org: orgId, keys: ['changes'], data: { changes: { name: 'Events Ltd' } } });

    const role = await emitted(h, () => h.post(`/orgs/${orgId}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['audit.read'] }, { token }));
    assert.equal(role.result.status, 201, role.result.text);
    const roleId = role.result.body.data.id;
    assert.deepEqual(types(role.events), ['role.created']);
    assertEvent(h, role.events[0], { type: 'role.created', actor: owner.userId, user: null, org: orgId, keys: ['role_id', 'slug', 'permission_keys'], data: { role_id: roleId, slug: 'auditor', permission_keys: ['audit.read'] } });
    const roleUpdated = await emitted(h, () => h.patch(`/orgs/${orgId}/roles/${roleId}`, { description: 'Reads the log' }, { token }));
    assert.equal(roleUpdated.result.status, 200, roleUpdated.result.text);
    assert.deepEqual(types(roleUpdated.events), ['role.updated']);
    assertEvent(h, roleUpdated.events[0], { type: 'role.updated', actor: owner.userId, user: null, org: orgId, keys: ['role_id', 'slug', 'changes'], data: { role_id: roleId, slug: 'auditor', changes: ['description'] } });

    const bob = await h.signUp(uniqueEmail('bob'));
    const invited = await emitted(h, () => h.post(`/orgs/${orgId}/invites`, { email: bob.email, role_slugs: ['member', 'auditor'] }, { token }));
    assert.equal(invited.result.status, 201, invited.result.text);
    const inviteId = invited.result.body.data.id;
    assert.deepEqual(types(invited.events), ['member.invited']);
    assertEvent(h, invited.events[0], { type: 'member.invited', actor: owner.userId, user: bob.userId, org: orgId, keys: ['invite_id', 'role_slugs', 'reinvite'], data: { invite_id: inviteId, reinvite: false } });
    assert.deepEqual([...(invited.events[0]!.data.role_slugs as string[])].sort(), ['auditor', 'member']);
    // "carries the invite token to the mailer": the mail has it, the event does not.
    const inviteToken = h.tokenFromMail(bob.email, 'invite');
    assert.ok(inviteToken.length > 10);
    assert.ok(!JSON.stringify(invited.events).includes(inviteToken));
    assert.ok(!JSON.stringify(invited.events).includes(bob.email));
    // An address with no account: user_id null; a re-invite says so.
    const stranger = uniqueEmail('stranger');
    const toStranger = await emitted(h, () => h.post(`/orgs/${orgId}/invites`, { email: stranger, role_slugs: ['member'] }, { token }));
    assertEvent(h, toStranger.events[0], { type: 'member.invited', actor: owner.userId, user: null, org: orgId, keys: ['invite_id', 'role_slugs', 'reinvite'], data: { reinvite: false, role_slugs: ['member'] } });
    const reinvited = await emitted(h, () => h.post(`/orgs/${orgId}/invites`, { email: stranger, role_slugs: ['member'] }, { token }));
    assertEvent(h, reinvited.events[0], { type: 'member.invited', actor: owner.userId, user: null, org: orgId, keys: ['invite_id', 'role_slugs', 'reinvite'], data: { reinvite: true } });

    const joined = await emitted(h, () => h.post('/auth/invites/accept', { token: inviteToken }, { token: bob.accessToken }));
    assert.equal(joined.result.status, 200, joined.result.text);
    assert.deepEqual(types(joined.events), ['member.joined']);
    assertEvent(h, joined.events[0], { type: 'member.joined', actor: bob.userId, user: bob.userId, org: orgId, keys: ['invite_id', 'role_slugs'], data: { invite_id: inviteId, role_slugs: ['auditor', 'member'] } });

    const rolesChanged = await emitted(h, () => h.patch(`/orgs/${orgId}/members/${bob.userId}/roles`, { role_slugs: ['member'] }, { token }));
    assert.equal(rolesChanged.result.status, 200, rolesChanged.result.text);
    assert.deepEqual(types(rolesChanged.events), ['member.roles_changed']);
    assertEvent(h, rolesChanged.events[0], { type: 'member.roles_changed', actor: owner.userId, user: bob.userId, org: orgId, keys: ['from', 'to'], data: { from: ['auditor', 'member'], to: ['member'] } });

    const suspended = await emitted(h, () => h.patch(`/orgs/${orgId}/members/${bob.userId}`, { status: 'suspended' }, { token }));
    assert.equal(suspended.result.status, 200, suspended.result.text);
    assert.deepEqual(types(suspended.events), ['member.status_changed']);
    assertEvent(h, suspended.events[0], { type: 'member.status_changed', actor: owner.userId, user: bob.userId, org: orgId, keys: ['from', 'to'], data: { from: 'active', to: 'suspended' } });
    const reactivated = await emitted(h, () => h.patch(`/orgs/${orgId}/members/${bob.userId}`, { status: 'active' }, { token }));
    assert.deepEqual(types(reactivated.events), ['member.status_changed']);
    assertEvent(h, reactivated.events[0], { type: 'member.status_changed', actor: owner.userId, user: bob.userId, org: orgId, keys: ['from', 'to'], data: { from: 'suspended', to: 'active' } });

    // Bob holds the auditor role again, then the role goes.
    await h.patch(`/orgs/${orgId}/members/${bob.userId}/roles`, { role_slugs: ['member', 'auditor'] }, { token });
    const roleDeleted = await emitted(h, () => h.delete(`/orgs/${orgId}/roles/${roleId}`, { token }));
    assert.equal(roleDeleted.result.status, 200, roleDeleted.result.text);
    assert.deepEqual(types(roleDeleted.events), ['role.deleted']);
    assertEvent(h, roleDeleted.events[0], { type: 'role.deleted', actor: owner.userId, user: null, org: orgId, keys: ['role_id', 'slug', 'members_detached'], data: { role_id: roleId, slug: 'auditor', members_detached: 1 } });

    const removed = await emitted(h, () => h.delete(`/orgs/${orgId}/members/${bob.userId}`, { token }));
    assert.equal(removed.result.status, 200, removed.result.text);
    assert.deepEqual(types(removed.events), ['member.removed']);
    assertEvent(h, removed.events[0], { type: 'member.removed', actor: owner.userId, user: bob.userId, org: orgId, keys: ['from', 'roles', 'sent_invites_revoked'], data: { from: 'active', roles: ['member'], sent_invites_revoked: 0 } });

    const deleted = await emitted(h, () => h.delete(`/orgs/${orgId}`, { token }));
    assert.equal(deleted.result.status, 200, deleted.result.text);
    assert.deepEqual(types(deleted.events), ['org.deleted']);
    assertEvent(h, deleted.events[0], { type: 'org.deleted', actor: owner.userId, user: null, org: orgId, keys: ['sessions_revoked', 'invites_revoked'], data: { sessions_revoked: 1, invites_revoked: 1 } });
  });

  test('user administration: user.disabled, user.enabled, user.deleted; login by a disabled account is a recorded failure', async () => {
    const root = await superadmin(h);
    const target = await h.signUp(uniqueEmail('target'));
    const disabled = await emitted(h, () => h.post(`/users/${target.userId}/disable`, undefined, { token: root.accessToken }));
    assert.equal(disabled.result.status, 200, disabled.result.text);
    assert.deepEqual(types(disabled.events), ['user.disabled']);
    assertEvent(h, disabled.events[0], { type: 'user.disabled', actor: root.userId, user: target.userId, org: null, keys: ['sessions_revoked'], data: { sessions_revoked: 1 } });

    const refused = await emitted(h, () => h.post('/auth/login', { email: target.email, password: target.password }));
    assertError(refused.result, 403, 'account_disabled');
    assert.deepEqual(types(refused.events), ['user.login_failed']);
    assertEvent(h, refused.events[0], { type: 'user.login_failed', actor: null, user: target.userId, org: null, keys: ['reason'], data: { reason: 'account_disabled' } });

    const enabled = await emitted(h, () => h.post(`/users/${target.userId}/enable`, undefined, { token: root.accessToken }));
    assert.equal(enabled.result.status, 200, enabled.result.text);
    assert.deepEqual(types(enabled.events), ['user.enabled']);
    assertEvent(h, enabled.events[0], { type: 'user.enabled', actor: root.userId, user: target.userId, org: null, keys: ['previous_status'], data: { previous_status: 'disabled' } });

    const deleted = await emitted(h, () => h.delete(`/users/${target.userId}`, { token: root.accessToken }));
    assert.equal(deleted.result.status, 200, deleted.result.text);
    assert.deepEqual(types(deleted.events), ['user.deleted']);
    assertEvent(h, deleted.events[0], {
      type: 'user.deleted',
      actor: root.userId,
      user: target.userId,
      org: null,
      keys: ['self', 'sessions_revoked', 'memberships_ended', 'invites_revoked', 'sent_invites_revoked'],
      data: { self: false, sessions_revoked: 0, memberships_ended: 0, invites_revoked: 0, sent_invites_revoked: 0 },
    });
  });

  test('every event of spec 6 is an exported event type, and the scenarios above emitted each of them', () => {
    for (const type of SPEC_EVENTS) assert.ok(EVENT_TYPES.includes(type), `${type} is not in EVENT_TYPES`);
    const seen = new Set(h.events.map((event) => event.type));
    assert.deepEqual(SPEC_EVENTS.filter((type) => !seen.has(type)), [], 'events of spec 6 never emitted');
  });
});

/**
 * Spec 7 and response conventions: a semantic failure is `{error, message}` plus optional context
 * fields; CONTRACT 5: every 401 carries WWW-Authenticate.
 */
function assertSemantic(response: TestResponse, status: number, code: string, extraKeys: string[] = [], context = ''): void {
  assertError(response, status, code, context);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json/, context);
  assert.deepEqual(Object.keys(response.body).sort(), ['error', 'message', ...extraKeys].sort(), `${context} ${response.text}`);
  if (status === 401) assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/, `${context}: a 401 carries WWW-Authenticate`);
}

describe('spec 7: every error code is reachable with its status, shape and headers', () => {
  let h: Harness;
  before(async () => {
    h = await start();
  });

  test('400 invalid_token: e-mail verify (invalid, expired) and invite accept (invalid, used, expired)', async () => {
    assertSemantic(await h.post('/auth/email/verify', { token: 'not-a-real-token-at-all' }), 400, 'invalid_token');
    const email = uniqueEmail('late');
    await h.post('/auth/register', { email, password: STRONG_PASSWORD });
    const token = h.tokenFromMail(email, 'verify_email');
    h.clock.advance(24 * 3600 + 1);
    assertSemantic(await h.post('/auth/email/verify', { token }), 400, 'invalid_token', [], 'expired verification token');

    const org = await createOrg(h);
    assertSemantic(await h.post('/auth/invites/accept', { token: 'not-a-real-token-at-all' }, { token: org.owner.accessToken }), 400, 'invalid_token', [], 'invalid invite token');
    const member = await addMember(h, org, org.owner.token);
    const used = h.tokenFromMail(member.email, 'invite');
    assertSemantic(await h.post('/auth/invites/accept', { token: used }, { token: member.accessToken }), 400, 'invalid_token', [], 'used invite token');
    const late = await h.signUp(uniqueEmail('late'));
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: late.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
    h.clock.advance(7 * 24 * 3600 + 1);
    const relogin = await h.post('/auth/login', { email: late.email, password: late.password });
    assertSemantic(await h.post('/auth/invites/accept', { token: h.tokenFromMail(late.email, 'invite') }, { token: relogin.body.data.access_token }), 400, 'invalid_token', [], 'expired invite token');
  });

  test('401 unauthorized, step_up_required, invalid_credentials, invalid_grant, invalid_token, session_ended', async () => {
    for (const response of [await h.get('/auth/me'), await h.get('/auth/me', { token: 'garbage' }), await h.get('/orgs', { headers: { authorization: 'Basic Zm9vOmJhcg==' } }), await h.get('/permissions'), await h.get('/users/x')]) {
      assertSemantic(response, 401, 'unauthorized');
      assert.equal(response.headers.get('www-authenticate'), 'Bearer');
    }
    // The MFA ticket is not an access token.
    const mfaUser = await h.signUp(uniqueEmail('ticket'));
    const totp = await enrollTotp(h, mfaUser.accessToken);
    const { ticket } = await loginForTicket(h, mfaUser);
    assertSemantic(await h.get('/auth/me', { token: ticket }), 401, 'unauthorized', [], 'ticket as access token');

    // step_up_required: a stale auth_time on a step-up route, for a user with a confirmed factor.
    h.clock.advance(301);
    const stale = await h.post('/auth/login', { email: mfaUser.email, password: mfaUser.password });
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: stale.body.data.mfa_token });
    const access = verified.body.data.access_token;
    h.clock.advance(301);
    const stepUp = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: access });
    assertSemantic(stepUp, 401, 'step_up_required', ['step_up']);
    assert.equal(stepUp.body.step_up, '/auth/mfa/step-up');
    assert.equal(stepUp.headers.get('www-authenticate'), 'Bearer error="step_up_required"');

    const user = await h.signUp(uniqueEmail('cred'));
    assertSemantic(await h.post('/auth/login', { email: user.email, password: 'not the password' }), 401, 'invalid_credentials', [], 'wrong password');
    assertSemantic(await h.post('/auth/login', { email: uniqueEmail('none'), password: 'not the password' }), 401, 'invalid_credentials', [], 'unknown account');

    assertSemantic(await h.post('/auth/token/refresh', { refresh_token: 'unknown-refresh-token-value' }), 401, 'invalid_grant', [], 'unknown refresh token');
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    assert.equal(refreshed.status, 200);
    assertSemantic(await h.post('/auth/token/refresh', { refresh_token: user.refreshToken }), 401, 'invalid_grant', [], 'replayed refresh token');
    const other = await h.signUp(uniqueEmail('expiring'));
    h.clock.advance(30 * 24 * 3600 + 1);
    assertSemantic(await h.post('/auth/token/refresh', { refresh_token: other.refreshToken }), 401, 'invalid_grant', [], 'expired refresh token');

    assertSemantic(await h.post('/auth/password/reset', { token: 'unknown-reset-token-value', new_password: 'another good passphrase' }), 401, 'invalid_token', [], 'bad reset token');
    await h.post('/auth/password/forgot', { email: user.email });
    const resetToken = h.tokenFromMail(user.email, 'password_reset');
    assert.equal((await h.post('/auth/password/reset', { token: resetToken, new_password: 'another good passphrase' })).status, 200);
    assertSemantic(await h.post('/auth/password/reset', { token: resetToken, new_password: 'yet another passphrase' }), 401, 'invalid_token', [], 'replayed reset token');
    await h.post('/auth/password/forgot', { email: user.email });
    const expiring = h.tokenFromMail(user.email, 'password_reset');
    h.clock.advance(3601);
    assertSemantic(await h.post('/auth/password/reset', { token: expiring, new_password: 'yet another passphrase' }), 401, 'invalid_token', [], 'expired reset token');

    const org = await createOrg(h);
    const live = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    const revokedToken = live.body.data.access_token;
    assert.equal((await h.post('/auth/logout', undefined, { token: revokedToken })).status, 200);
    assertSemantic(await h.post('/auth/switch-org', { organization_id: org.id }, { token: revokedToken }), 401, 'session_ended');
  });

  test('403 forbidden (path org, guards, missing permission), email_unverified, account_disabled, invalid_credentials on change', async () => {
    const org = await createOrg(h);
    const otherOrg = await createOrg(h);
    // Path organization is not the active organization.
    assertSemantic(await h.get(`/orgs/${otherOrg.id}`, { token: org.owner.token }), 403, 'forbidden', [], 'path org');
    // Missing permission.
    const member = await addMember(h, org, org.owner.token, ['member']);
    assertSemantic(await h.get(`/orgs/${org.id}/invites`, { token: member.token }), 403, 'forbidden', [], 'missing permission');
    // Escalation guard: an admin cannot grant owner.
    const admin = await addMember(h, org, org.owner.token, ['admin']);
    assertSemantic(await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: admin.token }), 403, 'forbidden', [], 'escalation');
    // Owner protection: an admin cannot suspend an owner.
    assertSemantic(await h.patch(`/orgs/${org.id}/members/${org.owner.userId}`, { status: 'suspended' }, { token: admin.token }), 403, 'forbidden', [], 'owner protection');
    // Invite e-mail mismatch.
    const invitee = uniqueEmail('invitee');
    await h.post(`/orgs/${org.id}/invites`, { email: invitee, role_slugs: ['member'] }, { token: org.owner.token });
    const stranger = await h.signUp(uniqueEmail('stranger'));
    assertSemantic(await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee, 'invite') }, { token: stranger.accessToken }), 403, 'forbidden', [], 'invite e-mail mismatch');
    // Not an active member.
    assertSemantic(await h.post('/auth/switch-org', { organization_id: org.id }, { token: stranger.accessToken }), 403, 'forbidden', [], 'not a member');

    // email_unverified: organization creation, and login when verification is required.
    const unverifiedEmail = uniqueEmail('unverified');
    await h.post('/auth/register', { email: unverifiedEmail, password: STRONG_PASSWORD });
    const unverified = await h.post('/auth/login', { email: unverifiedEmail, password: STRONG_PASSWORD });
    assertSemantic(await h.post('/orgs', { name: 'Nope' }, { token: unverified.body.data.access_token }), 403, 'email_unverified', ['resend'], 'org creation');
    const strict = await start({ config: { auth: { requireVerifiedEmail: true } } });
    await strict.post('/auth/register', { email: unverifiedEmail, password: STRONG_PASSWORD });
    const refused = await strict.post('/auth/login', { email: unverifiedEmail, password: STRONG_PASSWORD });
    assertSemantic(refused, 403, 'email_unverified', ['resend'], 'login with verification required');
    assert.equal(refused.body.resend, '/auth/email/verify/resend');

    const root = await superadmin(h);
    const victim = await h.signUp(uniqueEmail('victim'));
    assert.equal((await h.post(`/users/${victim.userId}/disable`, undefined, { token: root.accessToken })).status, 200);
    assertSemantic(await h.post('/auth/login', { email: victim.email, password: victim.password }), 403, 'account_disabled');

    const changer = await h.signUp(uniqueEmail('changer'));
    const wrong = await h.post('/auth/password/change', { current_password: 'not my password', new_password: 'a different passphrase' }, { token: changer.accessToken });
    assertSemantic(wrong, 403, 'invalid_credentials');
  });

  test('404 not_found: unknown or soft-deleted org, unknown or foreign session or factor, unknown invite', async () => {
    const org = await createOrg(h);
    const root = await superadmin(h);
    assertSemantic(await h.get('/orgs/00000000-0000-4000-8000-000000000000', { token: root.accessToken }), 404, 'not_found', [], 'unknown org');
    assertSemantic(await h.post('/auth/switch-org', { organization_id: '00000000-0000-4000-8000-000000000000' }, { token: org.owner.accessToken }), 404, 'not_found', [], 'switch to unknown org');
    const doomed = await createOrg(h);
    assert.equal((await h.delete(`/orgs/${doomed.id}`, { token: doomed.owner.token })).status, 200);
    assertSemantic(await h.get(`/orgs/${doomed.id}`, { token: root.accessToken }), 404, 'not_found', [], 'soft-deleted org');
    const relog = await h.post('/auth/login', { email: doomed.owner.email, password: doomed.owner.password });
    assertSemantic(await h.post('/auth/switch-org', { organization_id: doomed.id }, { token: relog.body.data.access_token }), 404, 'not_found', [], 'switch to soft-deleted org');

    const alice = await h.signUp(uniqueEmail('alice'));
    const bob = await h.signUp(uniqueEmail('bob'));
    assertSemantic(await h.delete('/auth/sessions/00000000-0000-4000-8000-000000000000', { token: alice.accessToken }), 404, 'not_found', [], 'unknown session');
    assertSemantic(await h.delete(`/auth/sessions/${decodeJwt(bob.accessToken).sid}`, { token: alice.accessToken }), 404, 'not_found', [], 'foreign session');
    const bobFactor = (await h.post('/auth/mfa/totp/enroll', undefined, { token: bob.accessToken })).body.data.factor_id;
    assertSemantic(await h.patch(`/auth/mfa/factors/${bobFactor}`, { label: 'mine' }, { token: alice.accessToken }), 404, 'not_found', [], 'foreign factor');
    assertSemantic(await h.post('/auth/mfa/totp/confirm', { factor_id: bobFactor, code: '123456' }, { token: alice.accessToken }), 404, 'not_found', [], 'foreign factor confirm');
    assertSemantic(await h.delete('/auth/mfa/factors/00000000-0000-4000-8000-000000000000', { token: alice.accessToken }), 404, 'not_found', [], 'unknown factor');
    assertSemantic(await h.delete(`/orgs/${org.id}/invites/00000000-0000-4000-8000-000000000000`, { token: org.owner.token }), 404, 'not_found', [], 'unknown invite');
  });

  test('409 conflict (slug, last owner, self-disable, tombstone enable, invited member, active member) and last_factor_protected', async () => {
    const org = await createOrg(h);
    assertSemantic(await h.post('/orgs', { name: 'Another', slug: org.slug }, { token: org.owner.accessToken }), 409, 'conflict', [], 'taken slug');
    assertSemantic(await h.patch(`/orgs/${org.id}/members/${org.owner.userId}`, { status: 'suspended' }, { token: org.owner.token }), 409, 'conflict', [], 'last owner');
    const root = await superadmin(h);
    assertSemantic(await h.post(`/users/${root.userId}/disable`, undefined, { token: root.accessToken }), 409, 'conflict', [], 'self-disable');
    const gone = await h.signUp(uniqueEmail('gone'));
    assert.equal((await h.delete(`/users/${gone.userId}`, { token: gone.accessToken })).status, 200);
    assertSemantic(await h.post(`/users/${gone.userId}/enable`, undefined, { token: root.accessToken }), 409, 'conflict', [], 'tombstone enable');
    const pending = await h.signUp(uniqueEmail('pending'));
    assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: pending.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
    assertSemantic(await h.patch(`/orgs/${org.id}/members/${pending.userId}`, { status: 'suspended' }, { token: org.owner.token }), 409, 'conflict', [], 'suspending an invited member');
    const member = await addMember(h, org, org.owner.token);
    assertSemantic(await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: ['member'] }, { token: org.owner.token }), 409, 'conflict', [], 'already an active member');

    const enforced = await h.signUp(uniqueEmail('enforced'));
    const totp = await enrollTotp(h, enforced.accessToken);
    await h.identity.service.setMfaEnforced(enforced.userId, true);
    const { ticket } = await loginForTicket(h, enforced);
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
    assertSemantic(await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: verified.body.data.access_token }), 409, 'last_factor_protected');
  });

  test('422: the errors array, invalid_code, unsupported_factor, invalid_state', async () => {
    const missing = await h.post('/auth/login', {});
    assertValidationErrors(missing);
    assert.deepEqual(Object.keys(missing.body), ['errors'], 'a validation failure is {errors} and nothing else');
    const user = await h.signUp(uniqueEmail('codes'));
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket, factors } = await loginForTicket(h, user);
    assert.equal(factors.length, 1);
    assertSemantic(await h.post('/auth/mfa/challenge', { factor_id: totp.factorId }, { token: ticket }), 422, 'unsupported_factor');
    assertSemantic(await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongTotp(h, totp.secret) }, { token: ticket }), 422, 'invalid_code');
    assertSemantic(await h.post('/auth/mfa/verify', { code: 'aaaaa-bbbbb' }, { token: ticket }), 422, 'invalid_code', [], 'recovery code');
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
    const pending = await h.post('/auth/mfa/totp/enroll', undefined, { token: verified.body.data.access_token });
    assert.equal(pending.status, 200, pending.text);
    assertSemantic(await h.patch(`/auth/mfa/factors/${pending.body.data.factor_id}`, { default: true }, { token: verified.body.data.access_token }), 422, 'invalid_state');
  });

  test('429 rate_limited (group, send budget) and too_many_requests (challenge resend cooldown)', async () => {
    const limited = await start({ rateLimits: true, config: { auth: { rateLimits: { register: { limit: 1, windowSec: 3600 } } } } });
    await limited.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD });
    const over = await limited.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD });
    assertSemantic(over, 429, 'rate_limited', ['retry_after']);
    for (const header of ['retry-after', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) assert.ok(over.headers.get(header), `${header} on a rate-limit 429`);

    // The per-destination send budget (5 per hour across accounts).
    const phone = uniquePhone();
    for (let index = 0; index < 5; index += 1) {
      const enrolling = await h.signUp(uniqueEmail('pump'));
      assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: enrolling.accessToken })).status, 200);
    }
    const sixth = await h.signUp(uniqueEmail('pump'));
    const budget = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: sixth.accessToken });
    assertSemantic(budget, 429, 'rate_limited', ['retry_after'], 'send budget');
    assert.ok(Number(budget.headers.get('retry-after')) >= 1);

    // The challenge resend cooldown: too_many_requests.
    const user = await h.signUp(uniqueEmail('cool'));
    const email = await enrollEmail(h, user);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket })).status, 200);
    const cooldown = await h.post('/auth/mfa/challenge', { factor_id: email.factorId }, { token: ticket });
    assertSemantic(cooldown, 429, 'too_many_requests', ['retry_after']);
    assert.equal(cooldown.headers.get('retry-after'), '30');
  });
});

const ALL_GROUPS = ['login', 'register', 'password_forgot', 'token_refresh', 'token_consume', 'mfa_send', 'mfa_confirm', 'mfa_enroll', 'social', 'authenticated'] as const;

/** A harness where only `group` is limited, at its default. */
function onlyGroup(group: (typeof ALL_GROUPS)[number]): Promise<Harness> {
  return start({ rateLimits: true, config: { auth: { rateLimits: Object.fromEntries(ALL_GROUPS.filter((other) => other !== group).map((other) => [other, false])) } } });
}

/** Spec 8: 429 past the limit, with the group's limit and window in the headers. */
function assertOverLimit(response: TestResponse, limit: number, windowSec: number, context: string): void {
  assertError(response, 429, 'rate_limited', context);
  assert.equal(response.headers.get('x-ratelimit-limit'), String(limit), context);
  assert.equal(response.headers.get('x-ratelimit-remaining'), '0', context);
  const retryAfter = Number(response.headers.get('retry-after'));
  assert.ok(retryAfter > windowSec - 30 && retryAfter <= windowSec, `${context}: Retry-After ${retryAfter} for a ${windowSec} s window`);
  const reset = Number(response.headers.get('x-ratelimit-reset'));
  const expected = Date.now() / 1000 + windowSec;
  assert.ok(Math.abs(reset - expected) < 30, `${context}: X-RateLimit-Reset ${reset}, expected about ${expected}`);
}

/** Sends `count` requests cycling through `calls`, each of which must not be refused by the limiter. */
async function spend(calls: Array<() => Promise<TestResponse>>, count: number, context: string): Promise<void> {
  for (let index = 0; index < count; index += 1) {
    const response = await calls[index % calls.length]!();
    assert.notEqual(response.status, 429, `${context}: request ${index + 1} of ${count} refused: ${response.text}`);
  }
}

describe('spec 8: every rate-limit group at its default, over all of its endpoints', () => {
  test('login: 10 per 300 s on /auth/login', async () => {
    const h = await onlyGroup('login');
    const call = () => h.post('/auth/login', { email: uniqueEmail(), password: 'whatever password' });
    await spend([call], 10, 'login');
    assertOverLimit(await call(), 10, 300, 'login');
  });

  test('register: 5 per 3600 s on /auth/register', async () => {
    const h = await onlyGroup('register');
    const call = () => h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD });
    await spend([call], 5, 'register');
    assertOverLimit(await call(), 5, 3600, 'register');
  });

  test('password_forgot: 5 per 3600 s on /auth/password/forgot', async () => {
    const h = await onlyGroup('password_forgot');
    const call = () => h.post('/auth/password/forgot', { email: uniqueEmail() });
    await spend([call], 5, 'password_forgot');
    assertOverLimit(await call(), 5, 3600, 'password_forgot');
  });

  test('token_refresh: 60 per 60 s on /auth/token/refresh', async () => {
    const h = await onlyGroup('token_refresh');
    const call = () => h.post('/auth/token/refresh', { refresh_token: 'no-such-refresh-token' });
    await spend([call], 60, 'token_refresh');
    assertOverLimit(await call(), 60, 60, 'token_refresh');
  });

  test('token_consume: 10 per 300 s shared by /auth/email/verify, /auth/email/verify/resend, /auth/password/reset, /auth/invites/accept', async () => {
    const h = await onlyGroup('token_consume');
    const user = await h.signUp();
    const calls = [
      () => h.post('/auth/email/verify', { token: 'no-such-token-value' }),
      () => h.post('/auth/email/verify/resend', { email: uniqueEmail() }),
      () => h.post('/auth/password/reset', { token: 'no-such-token-value', new_password: STRONG_PASSWORD }),
      () => h.post('/auth/invites/accept', { token: 'no-such-token-value' }, { token: user.accessToken }),
    ];
    // signUp spent one (its verification).
    await spend(calls, 9, 'token_consume');
    for (const call of calls) assertOverLimit(await call(), 10, 300, 'token_consume');
  });

  test('mfa_send: 5 per 600 s shared by /auth/mfa/challenge, /auth/mfa/step-up/challenge, sms and email enroll', async () => {
    const h = await onlyGroup('mfa_send');
    const user = await h.signUp();
    const calls = [
      () => h.post('/auth/mfa/challenge', { factor_id: 'x' }, { token: 'not-a-ticket' }),
      () => h.post('/auth/mfa/step-up/challenge', { factor_id: 'x' }, { token: user.accessToken }),
      () => h.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken }),
      () => h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken }),
    ];
    await spend(calls, 5, 'mfa_send');
    for (const call of calls) assertOverLimit(await call(), 5, 600, 'mfa_send');
  });

  test('mfa_confirm: 10 per 300 s shared by /auth/mfa/verify, /auth/mfa/step-up and the three confirms', async () => {
    const h = await onlyGroup('mfa_confirm');
    const user = await h.signUp();
    const calls = [
      () => h.post('/auth/mfa/verify', { code: '123456' }, { token: 'not-a-ticket' }),
      () => h.post('/auth/mfa/step-up', { code: 'aaaaa-bbbbb' }, { token: user.accessToken }),
      () => h.post('/auth/mfa/totp/confirm', { factor_id: 'x', code: '123456' }, { token: user.accessToken }),
      () => h.post('/auth/mfa/sms/confirm', { factor_id: 'x', code: '123456' }, { token: user.accessToken }),
      () => h.post('/auth/mfa/email/confirm', { factor_id: 'x', code: '123456' }, { token: user.accessToken }),
    ];
    await spend(calls, 10, 'mfa_confirm');
    for (const call of calls) assertOverLimit(await call(), 10, 300, 'mfa_confirm');
  });

  test('mfa_enroll: 5 per 3600 s shared by /auth/mfa/totp/enroll and /auth/mfa/factors*', async () => {
    const h = await onlyGroup('mfa_enroll');
    const user = await h.signUp();
    const calls = [
      () => h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }),
      () => h.get('/auth/mfa/factors', { token: user.accessToken }),
      () => h.patch('/auth/mfa/factors/00000000-0000-4000-8000-000000000000', { label: 'x' }, { token: user.accessToken }),
      () => h.delete('/auth/mfa/factors/00000000-0000-4000-8000-000000000000', { token: user.accessToken }),
    ];
    await spend(calls, 5, 'mfa_enroll');
    for (const call of calls) assertOverLimit(await call(), 5, 3600, 'mfa_enroll');
    // Routes outside the group are not counted by it.
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  });

  test('authenticated: 600 per 60 s per user id, counted after token authentication', async () => {
    const h = await onlyGroup('authenticated');
    const alice = await h.signUp();
    const bob = await h.signUp();
    await spend([() => h.get('/auth/me', { token: alice.accessToken }), () => h.get('/auth/sessions', { token: alice.accessToken })], 600, 'authenticated');
    assertOverLimit(await h.get('/auth/me', { token: alice.accessToken }), 600, 60, 'authenticated');
    assertOverLimit(await h.get('/orgs', { token: alice.accessToken }), 600, 60, 'authenticated, another route');
    // Keyed by user id: the same IP, another user, passes; an unauthenticated request is not counted.
    assert.equal((await h.get('/auth/me', { token: bob.accessToken })).status, 200);
    assertError(await h.get('/auth/me'), 401, 'unauthorized');
  });
});

describe('spec 8: the other constants', () => {
  let h: Harness;
  before(async () => {
    h = await start({ config: { auth: { lockout: { threshold: 100, window: 900, duration: 900 } } } });
  });

  test('access token lifetime 900 s; MFA ticket about 5 minutes', async () => {
    const user = await h.signUp();
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.body.data.expires_in, 900);
    assert.equal(login.body.data.token_type, 'Bearer');
    const claims = decodeJwt(login.body.data.access_token);
    assert.equal(claims.exp - claims.iat, 900);
    h.clock.advance(899);
    assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).status, 200);
    h.clock.advance(2);
    assertError(await h.get('/auth/me', { token: login.body.data.access_token }), 401, 'unauthorized');

    const mfaUser = await h.signUp();
    const totp = await enrollTotp(h, mfaUser.accessToken);
    const { ticket } = await loginForTicket(h, mfaUser);
    const ticketClaims = decodeJwt(ticket);
    assert.equal(ticketClaims.exp - ticketClaims.iat, 300);
    assert.equal(decodeJwtHeader(ticket).typ, 'mfa+jwt');
    h.clock.advance(301);
    assertError(await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: ticket }), 401, 'unauthorized');
  });

  test('OTP: 6 digits, 300 s lifetime, 5 attempts then burned, 30 s resend cooldown', async () => {
    const user = await h.signUp();
    const factor = await enrollEmail(h, user);
    h.clock.advance(31);
    const login = async () => (await loginForTicket(h, user)).ticket;

    // Lifetime (step-up codes, bound to the session, so no ticket expiry interferes): valid at 299 s, refused at 301 s.
    let ticket = await login();
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket })).status, 200);
    const code = lastMailCode(h, user.email);
    assert.match(code, /^\d{6}$/);
    const signedIn = await h.post('/auth/mfa/verify', { factor_id: factor.factorId, code }, { token: ticket });
    assert.equal(signedIn.status, 200, signedIn.text);
    const stepUpSession = signedIn.body.data.access_token;
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: factor.factorId }, { token: stepUpSession })).status, 200);
    const lasting = lastMailCode(h, user.email);
    h.clock.advance(299);
    assert.equal((await h.post('/auth/mfa/step-up', { factor_id: factor.factorId, code: lasting }, { token: stepUpSession })).status, 200, 'a code is valid for 300 s');
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: factor.factorId }, { token: stepUpSession })).status, 200);
    const expiring = lastMailCode(h, user.email);
    h.clock.advance(301);
    assertError(await h.post('/auth/mfa/step-up', { factor_id: factor.factorId, code: expiring }, { token: stepUpSession }), 422, 'invalid_code', 'a code is dead after 300 s');

    // Cooldown: 429 at 29 s, a new code at 30 s.
    ticket = await login();
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket })).status, 200);
    h.clock.advance(29);
    assertError(await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket }), 429, 'too_many_requests');
    h.clock.advance(1);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket })).status, 200, 'the cooldown is 30 s');

    // Five failed attempts burn the challenge (step-up: the session's challenge, no ticket involved).
    // Another user: the first has spent most of the per-destination send budget (5 per hour).
    const other = await h.signUp();
    const otherFactor = await enrollEmail(h, other);
    const otherTicket = (await loginForTicket(h, other)).ticket;
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: otherFactor.factorId }, { token: otherTicket })).status, 200);
    const session = (await h.post('/auth/mfa/verify', { factor_id: otherFactor.factorId, code: lastMailCode(h, other.email) }, { token: otherTicket })).body.data.access_token;
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: otherFactor.factorId }, { token: session })).status, 200);
    const right = lastMailCode(h, other.email);
    const wrong = right === '000000' ? '111111' : '000000';
    for (let attempt = 1; attempt <= 4; attempt += 1) assertError(await h.post('/auth/mfa/step-up', { factor_id: otherFactor.factorId, code: wrong }, { token: session }), 422, 'invalid_code');
    assertError(await h.post('/auth/mfa/step-up', { factor_id: otherFactor.factorId, code: wrong }, { token: session }), 422, 'invalid_code');
    assertError(await h.post('/auth/mfa/step-up', { factor_id: otherFactor.factorId, code: right }, { token: session }), 422, 'invalid_code', 'after 5 failures the challenge is burned');
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: otherFactor.factorId }, { token: session })).status, 200);
    assert.equal((await h.post('/auth/mfa/step-up', { factor_id: otherFactor.factorId, code: lastMailCode(h, other.email) }, { token: session })).status, 200, 'a new challenge works');
  });

  test('OTP after 4 failures still accepts the right code (the cap is 5, not fewer)', async () => {
    const user = await h.signUp();
    const factor = await enrollEmail(h, user);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factor.factorId }, { token: ticket })).status, 200);
    const right = lastMailCode(h, user.email);
    const wrong = right === '000000' ? '111111' : '000000';
    for (let attempt = 1; attempt <= 4; attempt += 1) assertError(await h.post('/auth/mfa/verify', { factor_id: factor.factorId, code: wrong }, { token: ticket }), 422, 'invalid_code');
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: factor.factorId, code: right }, { token: ticket })).status, 200);
  });

  test('TOTP: 6 digits, 30 s, SHA1, window plus or minus 1; recovery codes: 10 per batch', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const uri = new URL(enrolled.body.data.otpauth_uri);
    assert.equal(uri.searchParams.get('digits'), '6');
    assert.equal(uri.searchParams.get('period'), '30');
    assert.ok([null, 'SHA1'].includes(uri.searchParams.get('algorithm')));
    const { factor_id: factorId, secret } = enrolled.body.data;
    assertError(await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret, 2) }, { token: user.accessToken }), 422, 'invalid_code');
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret, -1) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.body.data.recovery_codes.length, 10);
    for (const code of confirmed.body.data.recovery_codes) assert.match(code, /^[a-z2-7]{5}-[a-z2-7]{5}$/i);
    h.clock.advance(60);
    const { ticket } = await loginForTicket(h, user);
    assertError(await h.post('/auth/mfa/verify', { factor_id: factorId, code: totpCodeAt(h, secret, -2) }, { token: ticket }), 422, 'invalid_code');
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: factorId, code: totpCodeAt(h, secret, 1) }, { token: ticket })).status, 200);
  });

  test('step-up freshness: 300 s', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const session = (await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket })).body.data.access_token;
    h.clock.advance(300);
    const fresh = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: session });
    assert.equal(fresh.status, 200, `at exactly 300 s the session is still fresh: ${fresh.text}`);
    assert.equal(fresh.body.data.recovery_codes.length, 10);
    h.clock.advance(1);
    assertError(await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: session }), 401, 'step_up_required');
  });

  test('e-mail max 320 octets; display_name max 120 chars; organization name 1-160 chars, slug max 160', async () => {
    const domain = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(59)}.com`;
    assert.equal(domain.length, 255);
    const longest = `${'x'.repeat(64)}@${domain}`;
    assert.equal(Buffer.byteLength(longest), 320);
    assert.equal((await h.post('/auth/register', { email: longest, password: STRONG_PASSWORD })).status, 202);
    assertValidationErrors(await h.post('/auth/register', { email: `${'x'.repeat(64)}@${domain}x`, password: STRONG_PASSWORD }));

    const user = await h.signUp();
    assert.equal((await h.patch(`/users/${user.userId}`, { display_name: 'é'.repeat(120) }, { token: user.accessToken })).status, 200, '120 characters (240 octets) fit');
    assert.equal((await h.patch(`/users/${user.userId}`, { display_name: '😀'.repeat(120) }, { token: user.accessToken })).status, 200, '120 characters outside the BMP fit');
    assertValidationErrors(await h.patch(`/users/${user.userId}`, { display_name: 'e'.repeat(121) }, { token: user.accessToken }));
    assertValidationErrors(await h.patch(`/users/${user.userId}`, { display_name: '😀'.repeat(121) }, { token: user.accessToken }));
    assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: 'e'.repeat(121) }));

    assertValidationErrors(await h.post('/orgs', { name: '' }, { token: user.accessToken }));
    assertValidationErrors(await h.post('/orgs', { name: 'n'.repeat(161) }, { token: user.accessToken }));
    assert.equal((await h.post('/orgs', { name: '😀'.repeat(160), slug: 'emoji-name' }, { token: user.accessToken })).status, 201, '160 characters outside the BMP fit');
    const longName = await h.post('/orgs', { name: 'n'.repeat(160) }, { token: user.accessToken });
    assert.equal(longName.status, 201, longName.text);
    assert.ok(longName.body.data.slug.length <= 160);
    assert.equal((await h.post('/orgs', { name: 'x', slug: 's'.repeat(160) }, { token: user.accessToken })).status, 201);
    assertValidationErrors(await h.post('/orgs', { name: 'x', slug: 't'.repeat(161) }, { token: user.accessToken }));
    const one = await h.post('/orgs', { name: 'Q' }, { token: user.accessToken });
    assert.equal(one.status, 201, one.text);
  });
});

describe('spec 9: relative, unversioned routes; key rotation', () => {
  test('the router assumes no base path: mounted at the root or under a host prefix, the same relative routes answer', async () => {
    const h = await start();
    const user = await h.signUp();
    for (const mount of ['/', '/api/v7/auth-service']) {
      const app = express();
      app.use(mount, h.identity);
      const server = app.listen(0, '127.0.0.1');
      await new Promise((resolve) => server.once('listening', resolve));
      try {
        const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}${mount === '/' ? '' : mount}`;
        const jwks = await fetch(`${base}/auth/.well-known/jwks.json`);
        assert.equal(jwks.status, 200, mount);
        const body = (await jwks.json()) as { keys: Array<Record<string, string>> };
        for (const key of body.keys) {
          assert.equal(key.kty, 'RSA');
          assert.equal(key.use, 'sig');
          for (const member of ['alg', 'kid', 'n', 'e']) assert.equal(typeof key[member], 'string', member);
        }
        const me = await fetch(`${base}/auth/me`, { headers: { authorization: `Bearer ${user.accessToken}` } });
        assert.equal(me.status, 200, mount);
        // No version prefix of its own.
        assert.equal((await fetch(`${base}/v1/auth/me`, { headers: { authorization: `Bearer ${user.accessToken}` } })).status, 404, mount);
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    }
  });

  test('a rotated-out key stays in the JWKS for at least one access-token lifetime, then leaves', async () => {
    const h = await start();
    const user = await h.signUp();
    const oldKid = decodeJwtHeader(user.accessToken).kid;
    await h.identity.service.rotateSigningKey();
    h.clock.advance(900);
    assert.ok((await h.get('/auth/.well-known/jwks.json')).body.keys.some((key: { kid: string }) => key.kid === oldKid), 'listed for one access-token lifetime');
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 401, 'its last token has expired');
    h.clock.advance(3600);
    assert.ok(!(await h.get('/auth/.well-known/jwks.json')).body.keys.some((key: { kid: string }) => key.kid === oldKid), 'then removed');
  });
});
