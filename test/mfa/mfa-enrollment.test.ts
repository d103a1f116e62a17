import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
// jsqr is CommonJS whose types declare a `default` export only; require gives the function itself.
const jsQR = createRequire(import.meta.url)('jsqr') as (data: Uint8ClampedArray, width: number, height: number) => { data: string } | null;
import speakeasy from 'speakeasy';
import { matchTotpStep } from '../../src/crypto/totp.js';
import { rateLimitHeaders } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { enrollSms, enrollTotp, lastMailCode, lastSmsCode, nextTotpCode, totpCodeAt, uniquePhone } from '../helpers/mfa.js';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs') as { PNG: { sync: { read(buffer: Buffer): { width: number; height: number; data: Buffer } } } };

const ISSUER = 'Acme Identity';

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { otp: { totp: { issuer: ISSUER } }, appName: 'Acme' } });
});
after(async () => {
  await h.close();
});

describe('TOTP primitives', () => {
  test('RFC 6238 SHA-1 vectors through the verification path the service uses', () => {
    const secret = '12345678901234567890';
    const vectors: Array<[number, string]> = [
      [59, '94287082'],
      [1111111109, '07081804'],
      [1111111111, '14050471'],
      [1234567890, '89005924'],
      [2000000000, '69279037'],
    ];
    for (const [time, code] of vectors) {
      const step = Math.floor(time / 30);
      assert.equal(matchTotpStep({ secret, encoding: 'ascii', code, timeSeconds: time, digits: 8 }), step, `8 digits at ${time}`);
      assert.equal(matchTotpStep({ secret, encoding: 'ascii', code: code.slice(2), timeSeconds: time, digits: 6 }), step, `6 digits at ${time}`);
      // Ten minutes later the same code is outside the window.
      assert.equal(matchTotpStep({ secret, encoding: 'ascii', code: code.slice(2), timeSeconds: time + 600, digits: 6 }), undefined);
    }
  });

  test('only exactly six ASCII digits are compared (speakeasy alone would parseInt "5924ab")', () => {
    // Threat: a code that is not six digits matches after parseInt, widening the guess space.
    const secret = '12345678901234567890';
    const time = 1234567890; // 6-digit code 005924
    for (const sloppy of ['5924ab', ' 05924', '05924 ', '5924.0', '+05924', '0x1724']) {
      assert.equal(matchTotpStep({ secret, encoding: 'ascii', code: sloppy, timeSeconds: time, digits: 6 }), undefined, sloppy);
    }
    // The library by itself accepts at least one of them: the format check is what refuses it.
    assert.ok(speakeasy.totp.verifyDelta({ secret, encoding: 'ascii', token: '5924ab', time, window: 1, digits: 6 }) !== undefined);
  });
});

describe('POST /auth/mfa/totp/enroll and confirm', () => {
  test('enroll answers a 160-bit base32 secret, the exact provisioning URI and an SVG QR code', async () => {
    const user = await h.signUp();
    const response = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    const { factor_id, secret, otpauth_uri, qr_svg } = response.body.data;
    assert.match(factor_id, /^[0-9a-f-]{36}$/);
    assert.match(secret, /^[A-Z2-7]{32}$/, '160 bits are 32 base32 characters');
    const issuer = encodeURIComponent(ISSUER);
    assert.equal(otpauth_uri, `otpauth://totp/${issuer}:${encodeURIComponent(user.email)}?secret=${secret}&issuer=${issuer}&digits=6&period=30`);
    assert.match(qr_svg, /^<svg[\s\S]*<\/svg>\s*$/);
    assert.equal(response.body.data.qr_png_base64, undefined);
  });

  test('format=png answers a PNG QR code that decodes to the same URI', async () => {
    const user = await h.signUp();
    const response = await h.post('/auth/mfa/totp/enroll?format=png', undefined, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.qr_svg, undefined);
    const png = PNG.sync.read(Buffer.from(response.body.data.qr_png_base64, 'base64'));
    const decoded = jsQR(new Uint8ClampedArray(png.data), png.width, png.height);
    assert.ok(decoded, 'the QR code decodes');
    assert.equal(decoded.data, response.body.data.otpauth_uri);
    const bad = await h.post('/auth/mfa/totp/enroll?format=gif', undefined, { token: user.accessToken });
    assert.equal(bad.status, 422);
    assert.ok(Array.isArray(bad.body.errors));
  });

  test('the secret is stored encrypted, bound to its factor row', async () => {
    // Threat: a database dump reveals TOTP secrets.
    const user = await h.signUp();
    const response = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const { factor_id, secret } = response.body.data;
    const row = await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: factor_id }).first();
    assert.ok(row.secret_sealed, 'a sealed secret is stored');
    assert.ok(!String(row.secret_sealed).includes(secret));
    assert.ok(!JSON.stringify(row).includes(secret), 'no column holds the plaintext');
    assert.ok(!String(row.secret_sealed).includes(Buffer.from(secret).toString('base64')));
    // Copying the ciphertext onto another factor row must not make that factor usable.
    const other = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: other.body.data.factor_id }).update({ secret_sealed: row.secret_sealed });
    const swapped = await h.post('/auth/mfa/totp/confirm', { factor_id: other.body.data.factor_id, code: totpCodeAt(h, secret) }, { token: user.accessToken });
    assert.notEqual(swapped.status, 200);
  });

  test('confirm: wrong, malformed and far-off codes are 422 invalid_code; a valid code confirms with ten recovery codes', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const { factor_id, secret } = enrolled.body.data;
    const good = totpCodeAt(h, secret);
    const wrong = good === '000000' ? '111111' : '000000';
    for (const code of [wrong, `${good.slice(1)}a`, ` ${good.slice(1)}`, totpCodeAt(h, secret, 2), totpCodeAt(h, secret, -2)]) {
      const refused = await h.post('/auth/mfa/totp/confirm', { factor_id, code }, { token: user.accessToken });
      assert.equal(refused.status, 422, code);
      assert.equal(refused.body.error, 'invalid_code');
    }
    assert.equal(h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId).length, 0);
    // Window of plus or minus one step: the previous period's code is still good.
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id, code: totpCodeAt(h, secret, -1) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.body.data.status, 'confirmed');
    const codes: string[] = confirmed.body.data.recovery_codes;
    assert.equal(codes.length, 10);
    for (const code of codes) assert.match(code, /^[a-z2-7]{5}-[a-z2-7]{5}$/);
    assert.equal(new Set(codes).size, 10);
    const enrolledEvents = h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId);
    assert.equal(enrolledEvents.length, 1);
    assert.equal(enrolledEvents[0]!.data.factor_id, factor_id);
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.recovery_codes_remaining, 10);
    // Confirming again is not a second enrollment.
    const again = await h.post('/auth/mfa/totp/confirm', { factor_id, code: nextTotpCode(h, secret) }, { token: user.accessToken });
    assert.equal(again.status, 422);
  });

  test('a second confirmed factor gets no recovery codes and no second mfa.enrolled', async () => {
    const user = await h.signUp();
    const first = await enrollTotp(h, user.accessToken);
    assert.equal(first.recoveryCodes.length, 10);
    const second = await enrollSms(h, user.accessToken, uniquePhone());
    assert.deepEqual(second.recoveryCodes, []);
    assert.equal(h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId).length, 1);
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    const defaults = list.body.data.factors.filter((factor: any) => factor.default);
    assert.deepEqual(defaults.map((factor: any) => factor.id), [first.factorId], 'the first confirmed factor is the default');
  });

  test('confirm of an unknown or foreign factor is 404 not_found', async () => {
    const owner = await h.signUp();
    const stranger = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: owner.accessToken });
    const { factor_id, secret } = enrolled.body.data;
    const foreign = await h.post('/auth/mfa/totp/confirm', { factor_id, code: totpCodeAt(h, secret) }, { token: stranger.accessToken });
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.error, 'not_found');
    const unknown = await h.post('/auth/mfa/totp/confirm', { factor_id: '00000000-0000-0000-0000-000000000000', code: '123456' }, { token: owner.accessToken });
    assert.equal(unknown.status, 404);
    const wrongRoute = await h.post('/auth/mfa/sms/confirm', { factor_id, code: totpCodeAt(h, secret) }, { token: owner.accessToken });
    assert.equal(wrongRoute.status, 404);
    const missing = await h.post('/auth/mfa/totp/confirm', {}, { token: owner.accessToken });
    assert.equal(missing.status, 422);
    assert.ok(Array.isArray(missing.body.errors));
  });

  test('enroll and confirm need an access token', async () => {
    for (const path of ['/auth/mfa/totp/enroll', '/auth/mfa/totp/confirm', '/auth/mfa/sms/enroll', '/auth/mfa/sms/confirm', '/auth/mfa/email/enroll', '/auth/mfa/email/confirm']) {
      const response = await h.post(path, {});
      assert.equal(response.status, 401, path);
      assert.equal(response.body.error, 'unauthorized');
      assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/);
    }
  });

  test('an unconfirmed factor is pruned after 24 hours and can no longer be confirmed', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const { factor_id, secret } = enrolled.body.data;
    let list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors.map((factor: any) => [factor.id, factor.confirmed]), [[factor_id, false]]);
    h.clock.advance(24 * 3600 + 1);
    const fresh = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    const token = fresh.body.data.access_token;
    list = await h.get('/auth/mfa/factors', { token });
    assert.deepEqual(list.body.data.factors, []);
    const late = await h.post('/auth/mfa/totp/confirm', { factor_id, code: totpCodeAt(h, secret) }, { token });
    assert.equal(late.status, 404);
  });
});

describe('POST /auth/mfa/sms/enroll and confirm', () => {
  test('E.164 is required (422)', async () => {
    const user = await h.signUp();
    for (const phone_e164 of ['5551234567', '+0551234567', '+1 555 123 4567', '+12345', '+1234567890123456', 15551234567]) {
      const response = await h.post('/auth/mfa/sms/enroll', { phone_e164 }, { token: user.accessToken });
      assert.equal(response.status, 422, String(phone_e164));
      assert.ok(Array.isArray(response.body.errors));
    }
    assert.equal((await h.post('/auth/mfa/sms/enroll', {}, { token: user.accessToken })).status, 422);
  });

  test('sends a six-digit code by SMS, answers a masked destination, stores only a keyed hash', async () => {
    const user = await h.signUp();
    const phone = '+15550104567';
    const response = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.destination, '+*******4567');
    assert.ok(!response.text.includes(phone));
    const code = lastSmsCode(h, phone);
    assert.match(code, /^[0-9]{6}$/);
    const sms = [...h.sms].reverse().find((message) => message.to === phone)!;
    assert.equal(sms.message, `${code} is your Acme code. It expires in 5 minutes.`);
    const challenge = await h.knex(`${h.tablePrefix}otp_challenges`).where({ factor_id: response.body.data.factor_id }).first();
    assert.match(challenge.code_hash, /^[0-9a-f]{64}$/);
    assert.ok(!JSON.stringify(challenge).includes(code) || !challenge.code_hash.includes(code));
    assert.equal(challenge.purpose, 'enroll');
    const list = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.deepEqual(list.body.data.factors, [{ id: response.body.data.factor_id, type: 'sms', default: false, destination: '+*******4567', confirmed: false }]);
    const confirmed = await h.post('/auth/mfa/sms/confirm', { factor_id: response.body.data.factor_id, code }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.body.data.recovery_codes.length, 10);
  });

  test('five failures burn the challenge even if the next code is right', async () => {
    // Threat: brute force of a six-digit code.
    const user = await h.signUp();
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const code = lastSmsCode(h, phone);
    const wrong = code === '000000' ? '000001' : '000000';
    for (let i = 0; i < 5; i += 1) {
      const refused = await h.post('/auth/mfa/sms/confirm', { factor_id: enrolled.body.data.factor_id, code: wrong }, { token: user.accessToken });
      assert.equal(refused.status, 422);
      assert.equal(refused.body.error, 'invalid_code');
    }
    const burned = await h.post('/auth/mfa/sms/confirm', { factor_id: enrolled.body.data.factor_id, code }, { token: user.accessToken });
    assert.equal(burned.status, 422);
    assert.equal(burned.body.error, 'invalid_code');
  });

  test('an expired code is refused; a resend after the cooldown replaces it', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    const factorId = enrolled.body.data.factor_id;
    const first = lastSmsCode(h, phone);
    // Inside the cooldown (per factor) a resend is 429 rate_limited with Retry-After.
    h.clock.advance(10);
    const early = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(early.status, 429);
    assert.equal(early.body.error, 'rate_limited');
    assert.equal(early.headers.get('retry-after'), '20');
    // Spec 7: a rate-limit 429 carries X-RateLimit-* too; a cooldown is a budget of one send.
    assert.deepEqual(rateLimitHeaders(early), { limit: '1', remaining: '0', reset: String(Math.ceil(h.clock.now() / 1000) + 20) });
    h.clock.advance(300);
    const expired = await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: first }, { token: user.accessToken });
    assert.equal(expired.status, 422);
    const resent = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(resent.status, 200, resent.text);
    assert.equal(resent.body.data.factor_id, factorId, 'the pending factor is reused');
    const second = lastSmsCode(h, phone);
    if (second !== first) {
      const old = await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: first }, { token: user.accessToken });
      assert.equal(old.status, 422);
    }
    const confirmed = await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: second }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
  });
});

describe('POST /auth/mfa/email/enroll and confirm', () => {
  test('defaults to the account address; the otp_code mail carries app_name, code, ttl and purpose', async () => {
    const user = await h.signUp();
    const response = await h.post('/auth/mfa/email/enroll', {}, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.destination, `${user.email[0]}***@example.com`);
    const mail = h.lastMail(user.email, 'otp_code')!;
    assert.deepEqual(Object.keys(mail.context).sort(), ['app_name', 'code', 'purpose', 'ttl']);
    assert.equal(mail.context.app_name, 'Acme');
    assert.equal(mail.context.ttl, 300);
    assert.equal(mail.context.purpose, 'enroll');
    assert.match(String(mail.context.code), /^[0-9]{6}$/);
    const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: response.body.data.factor_id, code: lastMailCode(h, user.email) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.body.data.recovery_codes.length, 10);
  });

  test('another address may be given; invalid ones are 422', async () => {
    const user = await h.signUp();
    const response = await h.post('/auth/mfa/email/enroll', { email: 'Backup.Box@Example.org' }, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.destination, 'b***@example.org');
    assert.ok(h.lastMail('backup.box@example.org', 'otp_code'));
    const invalid = await h.post('/auth/mfa/email/enroll', { email: 'not-an-address' }, { token: user.accessToken });
    assert.equal(invalid.status, 422);
  });
});

describe('send and verify budgets kept in the database', () => {
  test('per-destination budget is shared by two router instances on one database (429 rate_limited)', async () => {
    // Threat: SMS pumping to one number through several instances. An unconfirmed factor's
    // sends are budgeted per destination across accounts; one account pumps here.
    const first = await Harness.start({ config: { otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 50, windowSec: 3600 } } } } });
    const second = await Harness.start({ shareDatabaseWith: first, config: { otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 50, windowSec: 3600 } } } } });
    try {
      const phone = uniquePhone();
      const alice = await first.signUp();
      assert.equal((await first.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: alice.accessToken })).status, 200);
      first.clock.advance(31);
      assert.equal((await second.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: alice.accessToken })).status, 200);
      first.clock.advance(31);
      const over = await second.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: alice.accessToken });
      assert.equal(over.status, 429, over.text);
      assert.equal(over.body.error, 'rate_limited');
      assert.equal(over.headers.get('retry-after'), String(3600 - 62));
      assert.deepEqual(rateLimitHeaders(over), { limit: '2', remaining: '0', reset: String(Math.ceil(first.clock.now() / 1000) + 3600 - 62) });
      // Bucket names are keyed hashes: the number is not in the table.
      const rows = await first.knex(`${first.tablePrefix}rate_events`).select('bucket');
      assert.ok(rows.length >= 2);
      assert.ok(!JSON.stringify(rows).includes(phone.slice(1)));
      first.clock.advance(3601);
      const relogin = await second.post('/auth/login', { email: alice.email, password: alice.password });
      assert.equal((await second.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: relogin.body.data.access_token })).status, 200);
    } finally {
      await second.close();
      await first.close();
    }
  });

  test('per-account send budget (429 rate_limited)', async () => {
    const local = await Harness.start({ config: { otp: { sendBudget: { perAccount: { limit: 2, windowSec: 600 } } } } });
    try {
      const user = await local.signUp();
      assert.equal((await local.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken })).status, 200);
      assert.equal((await local.post('/auth/mfa/email/enroll', {}, { token: user.accessToken })).status, 200);
      const over = await local.post('/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }, { token: user.accessToken });
      assert.equal(over.status, 429);
      assert.equal(over.body.error, 'rate_limited');
      assert.ok(Number(over.headers.get('retry-after')) > 0);
    } finally {
      await local.close();
    }
  });

  test('over the per-account verify window every code is refused with 429, the right one too', async () => {
    // Threat: spreading guesses over many challenges to dodge the per-challenge cap.
    const local = await Harness.start({ config: { otp: { verifyBudget: { limit: 3, windowSec: 900 } } } });
    try {
      const user = await local.signUp();
      const enrolled = await local.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
      const { factor_id, secret } = enrolled.body.data;
      const good = totpCodeAt(local, secret);
      const wrong = good === '000000' ? '111111' : '000000';
      for (let i = 0; i < 3; i += 1) assert.equal((await local.post('/auth/mfa/totp/confirm', { factor_id, code: wrong }, { token: user.accessToken })).status, 422);
      const blocked = await local.post('/auth/mfa/totp/confirm', { factor_id, code: good }, { token: user.accessToken });
      assert.equal(blocked.status, 429);
      assert.equal(blocked.body.error, 'rate_limited');
      assert.ok(blocked.headers.get('retry-after'));
      local.clock.advance(901);
      const fresh = await local.post('/auth/token/refresh', { refresh_token: user.refreshToken });
      const accepted = await local.post('/auth/mfa/totp/confirm', { factor_id, code: totpCodeAt(local, secret) }, { token: fresh.body.data.access_token });
      assert.equal(accepted.status, 200, accepted.text);
    } finally {
      await local.close();
    }
  });
});

describe('rate-limit groups of spec 8', () => {
  test('each MFA route counts against its group', async () => {
    const one = { limit: 1, windowSec: 600 };
    const local = await Harness.start({ rateLimits: true, config: { auth: { rateLimits: { login: false, register: false, token_consume: false, mfa_send: one, mfa_confirm: one, mfa_enroll: one } } } });
    try {
      const user = await local.signUp();
      const token = user.accessToken;
      const groups: Record<string, Array<[string, string]>> = {
        mfa_enroll: [['POST', '/auth/mfa/totp/enroll'], ['GET', '/auth/mfa/factors'], ['PATCH', '/auth/mfa/factors/x'], ['DELETE', '/auth/mfa/factors/x']],
        mfa_send: [['POST', '/auth/mfa/sms/enroll'], ['POST', '/auth/mfa/email/enroll'], ['POST', '/auth/mfa/challenge'], ['POST', '/auth/mfa/step-up/challenge']],
        mfa_confirm: [['POST', '/auth/mfa/totp/confirm'], ['POST', '/auth/mfa/sms/confirm'], ['POST', '/auth/mfa/email/confirm'], ['POST', '/auth/mfa/verify'], ['POST', '/auth/mfa/step-up']],
      };
      for (const [group, routes] of Object.entries(groups)) {
        const [firstMethod, firstPath] = routes[0]!;
        const first = await local.request(firstMethod, firstPath, { token, ...(firstMethod === 'GET' ? {} : { body: {} }) });
        assert.notEqual(first.status, 429, `${group} first request`);
        for (const [method, path] of routes) {
          const limited = await local.request(method, path, { token, ...(method === 'GET' ? {} : { body: {} }) });
          assert.equal(limited.status, 429, `${method} ${path} counts against ${group}`);
          assert.equal(limited.body.error, 'rate_limited');
          assert.ok(limited.headers.get('retry-after'));
          assert.ok(limited.headers.get('x-ratelimit-limit'));
        }
      }
    } finally {
      await local.close();
    }
  });
});
