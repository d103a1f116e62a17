import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import knexFactory from 'knex';
import { URI } from 'otpauth';
import { createIdentityRouter, IdentityConfigError, noopSender, type IdentityConfig } from '../../src/index.js';
import { Harness } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { enrollEmail, enrollSms, lastMailCode, lastSmsCode, loginForTicket, uniquePhone } from '../helpers/mfa.js';

// Issue 10: TOTP label (docs/configuration.md), replacing a pending TOTP enrollment, the enrollment
// cooldown after confirmation, and send budgets of unconfirmed factors.

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { otp: { sendBudget: { perDestination: { limit: 3, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } } });
});
after(async () => {
  await h.close();
});

test('by default the TOTP issuer is the host of issuer, and otpauth parses the label as issuer and account', async () => {
  const user = await h.signUp();
  const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const totp = URI.parse(enrolled.body.data.otpauth_uri);
  assert.equal(totp.issuer, 'id.example.test');
  assert.equal(totp.label, user.email);
  assert.equal(totp.secret.base32, enrolled.body.data.secret);
});

test('appName is the TOTP issuer when set, "&" and spaces included', async () => {
  const named = await Harness.start({ config: { appName: 'Smith & Co Dev' } });
  try {
    const user = await named.signUp();
    const enrolled = await named.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const totp = URI.parse(enrolled.body.data.otpauth_uri);
    assert.equal(totp.issuer, 'Smith & Co Dev');
    assert.equal(totp.label, user.email);
  } finally {
    await named.close();
  }
});

test('a ":" in the TOTP issuer is refused at construction, whether from otp.totp.issuer, appName or a plain issuer', () => {
  const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
  const base = { database: knex, secret: 's'.repeat(32), issuer: 'https://id.example.test:8443/realm' } as IdentityConfig;
  const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
  const construct = (config: IdentityConfig) => () => createIdentityRouter(config, { logger: quiet, mailer: noopSender, sms: noopSender });
  assert.throws(construct({ ...base, otp: { totp: { issuer: 'Smith & Co: Dev' } } }), (error: unknown) => error instanceof IdentityConfigError && /otp\.totp\.issuer.*":"/.test(error.message));
  assert.throws(construct({ ...base, appName: 'Smith & Co: Dev' }), (error: unknown) => error instanceof IdentityConfigError && /appName.*otp\.totp\.issuer/.test(error.message));
  assert.throws(construct({ ...base, issuer: 'urn:acme' }), IdentityConfigError);
  void knex.destroy();
});

test('a new TOTP enrollment replaces the caller\'s pending one', async () => {
  const user = await h.signUp();
  const first = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
  const second = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
  assert.equal(second.status, 200);
  const factors = await h.get('/auth/mfa/factors', { token: user.accessToken });
  const pending = factors.body.data.factors.filter((factor: { type: string; confirmed: boolean }) => factor.type === 'totp' && !factor.confirmed);
  assert.deepEqual(pending.map((factor: { id: string }) => factor.id), [second.body.data.factor_id]);
  assertError(await h.post('/auth/mfa/totp/confirm', { factor_id: first.body.data.factor_id, code: '123456' }, { token: user.accessToken }), 404, 'not_found');
});

test('confirming a factor ends its enrollment cooldown: the first login challenge right after is sent', async () => {
  const user = await h.signUp();
  const { factorId } = await enrollEmail(h, user);
  const { ticket } = await loginForTicket(h, user);
  const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
  assert.equal(challenge.status, 200, challenge.text);
  assert.equal((await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastMailCode(h, user.email) }, { token: ticket })).status, 200);
  // The cooldown still holds between two challenges.
  h.clock.advance(31);
  const again = await loginForTicket(h, user);
  assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: again.ticket })).status, 200);
  assertError(await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: again.ticket }), 429, 'too_many_requests');
});

test('enrolling someone else\'s phone spends the number\'s budget shared by all accounts, never the owner\'s login codes', async () => {
  // Threats: SMS pumping through many accounts, and an attacker exhausting the
  // owner's login codes by enrolling the owner's number.
  const owner = await h.signUp();
  const phone = uniquePhone();
  const { factorId } = await enrollSms(h, owner.accessToken, phone);
  const attacker = await h.signUp();
  // The owner's enrollment code was the first of the number's 3.
  for (let send = 0; send < 2; send += 1) {
    h.clock.advance(31);
    assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: attacker.accessToken })).status, 200);
  }
  h.clock.advance(31);
  assertError(await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: attacker.accessToken }), 429, 'rate_limited');
  const { ticket } = await loginForTicket(h, owner);
  const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
  assert.equal(challenge.status, 200, challenge.text);
  assert.equal((await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket })).status, 200);
});
