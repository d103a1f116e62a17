/*
 * docs/mfa.md: findings of the MFA and passkey audit, each a test that failed before its fix.
 * Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/mfa/mfa-audit.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, assertNoInternals, countRows } from '../helpers/account.js';
import { Harness, TEST_DB, type SignedUpUser } from '../helpers/harness.js';
import { enrollSms, enrollTotp, lastSmsCode, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt, uniquePhone } from '../helpers/mfa.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';

describe(`hostile passkey registration input on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: { webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await h.close();
  });

  test('transports outside the attestation (unsigned) are kept only as known values: never a 500, never junk stored', async () => {
    const owner = await h.signUp();
    const recorded = fixtures.primary.registration.response;
    // Ten 32-character strings pass the route's bounds; their JSON overflows the column on PostgreSQL.
    const junk = Array.from({ length: 8 }, (_, index) => `${'x'.repeat(31)}${index}`);
    const response = { ...recorded, response: { ...recorded.response, transports: ['internal', 'usb', 'internal', ...junk.slice(0, 7)] } };
    const registered = await registerRecorded(h, owner.accessToken, { ...fixtures.primary, registration: { ...fixtures.primary.registration, response } });
    assertNoInternals(registered);
    assert.equal(registered.status, 200, registered.text);
    const row = await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: registered.body.data.factor_id }).first();
    assert.deepEqual(JSON.parse(String(row.transports)), ['internal', 'usb']);
  });
});

/*
 * Each code answers one purpose, one binding and one factor: these passed before the audit and
 * stay as guards (a step-up code at the login gate, a gate code at step-up, a code of a removed
 * factor, a TOTP time-step or a recovery code spent at the gate and replayed at step-up).
 */
describe(`a code answers only its own purpose, binding and factor on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: { auth: { lockout: { threshold: 50 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } } });
  });
  after(async () => {
    await h.close();
  });

  /** A user with a confirmed SMS factor and a session the gate let through. */
  async function smsUserSignedIn(): Promise<SignedUpUser & { factorId: string; phone: string; recoveryCodes: string[] }> {
    const user = await h.signUp();
    const phone = uniquePhone();
    const { factorId, recoveryCodes } = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    const verified = await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    return { ...user, factorId, phone, recoveryCodes, accessToken: verified.body.data.access_token, refreshToken: verified.body.data.refresh_token };
  }

  test("a step-up code does not open the login gate, and a gate code does not step up", async () => {
    const user = await smsUserSignedIn();
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/step-up/challenge', { factor_id: user.factorId }, { token: user.accessToken })).status, 200);
    const stepUpCode = lastSmsCode(h, user.phone);
    const { ticket } = await loginForTicket(h, user);
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: stepUpCode }, { token: ticket }), 422, 'invalid_code', 'step-up code at the gate');

    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: user.factorId }, { token: ticket })).status, 200);
    const gateCode = lastSmsCode(h, user.phone);
    assertError(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: gateCode }, { token: user.accessToken }), 422, 'invalid_code', 'gate code at step-up');
    // The gate code still answers its own ticket.
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: gateCode }, { token: ticket })).status, 200);
  });

  test('a gate code sent before its factor was removed opens nothing', async () => {
    const user = await smsUserSignedIn();
    await enrollTotp(h, user.accessToken);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: user.factorId }, { token: ticket })).status, 200);
    const code = lastSmsCode(h, user.phone);
    // The owner removes the SMS factor from the session the gate gave (fresh, so no step-up asked).
    assert.equal((await h.delete(`/auth/mfa/factors/${user.factorId}`, { token: user.accessToken })).status, 200);
    const sessions = await countRows(h, 'sessions', { user_id: user.userId });
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code }, { token: ticket }), 404, 'not_found');
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), sessions, 'no session opened');
  });

  test('a TOTP time-step or a recovery code spent at the gate is refused at step-up, and the other way round', async () => {
    const user = await signUpWithTotp(h);
    // signUpWithTotp spent the current step at the gate: that code, and the one before it, are replays at step-up.
    assertError(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: totpCodeAt(h, user.secret) }, { token: user.accessToken }), 422, 'invalid_code', 'same step');
    assertError(await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: totpCodeAt(h, user.secret, -1) }, { token: user.accessToken }), 422, 'invalid_code', 'earlier step');
    const stepUpCode = nextTotpCode(h, user.secret);
    assert.equal((await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: stepUpCode }, { token: user.accessToken })).status, 200);
    const { ticket } = await loginForTicket(h, user);
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: stepUpCode }, { token: ticket }), 422, 'invalid_code', 'step-up step at the gate');

    const [first, second] = user.recoveryCodes as [string, string];
    const { ticket: another } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/verify', { code: first }, { token: another })).status, 200);
    assertError(await h.post('/auth/mfa/step-up', { code: first }, { token: user.accessToken }), 422, 'invalid_code', 'recovery code spent at the gate');
    assert.equal((await h.post('/auth/mfa/step-up', { code: second }, { token: user.accessToken })).status, 200);
    const { ticket: third } = await loginForTicket(h, user);
    assertError(await h.post('/auth/mfa/verify', { code: second }, { token: third }), 422, 'invalid_code', 'recovery code spent at step-up');
  });
});
