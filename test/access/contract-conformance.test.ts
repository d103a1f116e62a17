/*
 * CONTRACT 1, 2, 3, 5, 6 and 7 held to the letter, sentence by sentence, where no other file
 * already pins the sentence: the package surface's error shapes, each option's default and the
 * problem a wrong value gives, the adapters' contexts and failures, the decisions the spec leaves
 * open, the host middleware's gates, and what several instances promise.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig, type MailMessage } from '../../src/index.js';
import { Harness, STRONG_PASSWORD, TEST_DB, decodeJwt, decodeJwtHeader, uniqueEmail, type HarnessOptions } from '../helpers/harness.js';
import { assertError, assertUnauthorized, assertValidationErrors, registerOnly } from '../helpers/account.js';
import { enrollEmail, enrollSms, enrollTotp, lastSmsCode, loginForTicket, nextTotpCode, signUpWithTotp, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin, switchOrg } from '../helpers/orgs.js';

const DAY = 86_400;
const quiet = { logger: { info() {}, warn() {}, error() {} } };
const validConfig: IdentityConfig = {
  database: { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true },
  secret: 's'.repeat(32),
  issuer: 'https://id.example.test',
};

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(() => h.close());

/** A harness for one test, closed by it. */
async function withHarness(options: HarnessOptions, run: (harness: Harness) => Promise<void>): Promise<void> {
  const harness = await Harness.start(options);
  try {
    await run(harness);
  } finally {
    await harness.close();
  }
}

function configProblems(config: Record<string, unknown>): string[] {
  try {
    createIdentityRouter(config as unknown as IdentityConfig, quiet);
  } catch (error) {
    assert.ok(error instanceof IdentityConfigError, String(error));
    return error.problems;
  }
  return assert.fail(`accepted ${JSON.stringify(config)}`);
}

describe('CONTRACT 1: package surface', () => {
  test('a malformed JSON body is 400 invalid_json with a message', async () => {
    const response = await h.request('POST', '/auth/login', { rawBody: '{"email": "a@example.com",' });
    assertError(response, 400, 'invalid_json');
    assert.doesNotMatch(response.text, /SyntaxError|at .+:\d+:\d+/);
  });

  test('a failed initialisation answers 503 unavailable on the host middleware too, at once, and is logged', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-failed-start-'));
    const errors: string[] = [];
    const identity = createIdentityRouter(
      { ...validConfig, database: { client: 'better-sqlite3', connection: { filename: join(dir, 'missing-dir', 'db.sqlite') }, useNullAsDefault: true }, password: { bcryptCost: 4, workers: 1 } },
      { logger: { info() {}, warn() {}, error: (message: string) => void errors.push(message) } },
    );
    await assert.rejects(identity.ready);
    const app = express();
    app.get('/whoami', identity.authenticate(), (_req, res) => void res.json({ reached: true }));
    app.get('/reports', identity.requirePermission('org.read'), (_req, res) => void res.json({ reached: true }));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      for (const path of ['/whoami', '/reports']) {
        const answer = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`, { headers: { authorization: 'Bearer x.y.z' }, signal: AbortSignal.timeout(6000) });
        assert.equal(answer.status, 503, path);
        assert.equal(((await answer.json()) as { error: string }).error, 'unavailable', path);
      }
      assert.ok(errors.some((message) => /failed to start/.test(message)), errors.join('; '));
    } finally {
      await new Promise((resolve) => server.close(resolve));
      await identity.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('identity.close() leaves a Knex instance the host passed usable', async () => {
    const shared = await Harness.start({ shareDatabaseWith: h });
    await shared.close();
    // The harness closed its router; the Knex it passed belongs to the first harness and still answers.
    const [row] = await h.knex(`${h.tablePrefix}users`).count({ count: '*' });
    assert.ok(Number(row?.count) >= 0);
  });
});

describe('CONTRACT 2: configuration and defaults', () => {
  test('a wrong value of each option is listed, all at once, each naming its option', () => {
    const wrong: Array<[string, Record<string, unknown>, RegExp]> = [
      ['migrate', { migrate: 'yes' }, /"migrate"/],
      ['audience', { audience: '' }, /"audience"/],
      ['appName', { appName: '' }, /"appName"/],
      ['tokens.refreshTtl', { tokens: { refreshTtl: 0 } }, /"tokens.refreshTtl"/],
      ['tokens.mfaTicketTtl', { tokens: { mfaTicketTtl: -1 } }, /"tokens.mfaTicketTtl"/],
      ['tokens.inviteTtl', { tokens: { inviteTtl: 1.5 } }, /"tokens.inviteTtl"/],
      ['password.minLength', { password: { minLength: 0 } }, /"password.minLength"/],
      ['auth.requireVerifiedEmail', { auth: { requireVerifiedEmail: 'true' } }, /"auth.requireVerifiedEmail"/],
      ['auth.lockout.window', { auth: { lockout: { window: 0 } } }, /"auth.lockout.window"/],
      ['auth.rateLimits', { auth: { rateLimits: true } }, /"auth.rateLimits"/],
      ['auth.rateLimitStore', { auth: { rateLimitStore: 'redis' } }, /"auth.rateLimitStore"/],
      ['otp.length', { otp: { length: 3 } }, /"otp.length"/],
      ['otp.maxAttempts', { otp: { maxAttempts: 0 } }, /"otp.maxAttempts"/],
      ['otp.sendBudget', { otp: { sendBudget: { perDestination: { limit: 0, windowSec: 60 } } } }, /"otp.sendBudget.perDestination.limit"/],
      ['otp.verifyBudget', { otp: { verifyBudget: { limit: 5 } } }, /"otp.verifyBudget.windowSec"/],
      ['otp.totp.issuer', { otp: { totp: { issuer: 'Acme:ID' } } }, /"otp.totp.issuer"/],
      ['mfa.enforce', { mfa: { enforce: 1 } }, /"mfa.enforce"/],
      ['mfa.enforcementMode', { mfa: { enforcementMode: 'strict' } }, /"mfa.enforcementMode"/],
      ['security.stepUp.maxAge', { security: { stepUp: { maxAge: 0 } } }, /"security.stepUp.maxAge"/],
      ['permissions', { permissions: [{ key: 'Invoices', description: 'x' }] }, /"permissions\[0\].key"/],
      ['links.acceptInvite', { links: { acceptInvite: 'https://app.example.test/accept' } }, /"links.acceptInvite"/],
    ];
    for (const [option, override, expected] of wrong) {
      const problems = configProblems({ ...validConfig, ...override });
      assert.ok(problems.some((problem) => expected.test(problem)), `${option}: ${problems.join('; ')}`);
    }
    // Every problem at once: one config with every wrong value above (one per top-level key merged).
    const merged: Record<string, unknown> = { ...validConfig, migrate: 'yes', audience: '', mfa: { enforce: 1, enforcementMode: 'strict' }, security: { stepUp: { maxAge: 0 } } };
    const problems = configProblems(merged);
    assert.equal(problems.length, 5, problems.join('; '));
  });

  test('every table the router owns carries the table prefix, the migration tables included', async () => {
    const tables: string[] = TEST_DB === 'sqlite'
      ? (await h.knex.raw<Array<{ name: string }>>("select name from sqlite_master where type = 'table' and name not like 'sqlite_%'")).map((row) => row.name)
      : (await h.knex.raw<{ rows: Array<{ tablename: string }> }>("select tablename from pg_tables where schemaname = current_schema() and tablename like 'knex%'")).rows.map((row) => row.tablename);
    assert.ok(TEST_DB === 'pg' || tables.length > 10, tables.join(', '));
    assert.deepEqual(tables.filter((name) => !name.startsWith(h.tablePrefix)), []);
    assert.ok(TEST_DB === 'pg' || tables.includes(`${h.tablePrefix}migrations`));
    assert.equal(configProblems({ ...validConfig, tablePrefix: undefined, database: { ...(validConfig.database as object), tablePrefix: '9bad' } }).length, 1);
  });

  test('a colon in the TOTP issuer taken from appName is refused at construction', () => {
    const problems = configProblems({ ...validConfig, appName: 'Acme: Identity' });
    assert.ok(problems.some((problem) => /otp\.totp\.issuer/.test(problem) && /:/.test(problem)), problems.join('; '));
    // Set explicitly, the issuer wins and appName may hold a colon.
    const router = createIdentityRouter({ ...validConfig, appName: 'Acme: Identity', otp: { totp: { issuer: 'Acme' } }, password: { bcryptCost: 4, workers: 1 } }, quiet);
    return router.ready.then(() => router.close());
  });

  test('secret: at least 32 characters, counted as characters, not UTF-16 units', () => {
    // 16 characters outside the BMP are 32 UTF-16 units: still 16 characters.
    const problems = configProblems({ ...validConfig, secret: '🔑'.repeat(16) });
    assert.ok(problems.some((problem) => /"secret" length must be at least 32 characters/.test(problem)), problems.join('; '));
    assert.ok(configProblems({ ...validConfig, secret: 's'.repeat(31) }).some((problem) => /"secret"/.test(problem)));
  });

  test('every problem is listed at once, the cross-option ones too: a colon in the TOTP issuer and a lease shorter than two timeouts beside a wrong secret', () => {
    const problems = configProblems({ ...validConfig, secret: 'short', appName: 'Acme: Identity', events: { delivery: { leaseSec: 10 } } });
    assert.ok(problems.some((problem) => /"secret"/.test(problem)), problems.join('; '));
    assert.ok(problems.some((problem) => /TOTP issuer/.test(problem)), `the colon is listed too: ${problems.join('; ')}`);
    assert.ok(problems.some((problem) => /"events.delivery.leaseSec"/.test(problem)), `the lease is listed too: ${problems.join('; ')}`);
    assert.equal(problems.length, 3, problems.join('; '));
    // A wrong value of the option a cross-option rule reads is listed once, by the schema.
    assert.equal(configProblems({ ...validConfig, appName: 42 }).length, 1);
    assert.equal(configProblems({ ...validConfig, events: { delivery: { leaseSec: 'long' } } }).length, 1);
  });

  test('duplicate host permission keys are a config error', () => {
    const problems = configProblems({ ...validConfig, permissions: [{ key: 'invoices.read', description: 'a' }, { key: 'invoices.read', description: 'b' }] });
    assert.ok(problems.some((problem) => /permissions/.test(problem)), problems.join('; '));
  });

  test('tokens: expires_in and exp - iat are 900 s, iss is the issuer, and no aud without an audience', async () => {
    const user = await h.signUp();
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.body.data.expires_in, 900);
    const claims = decodeJwt(login.body.data.access_token);
    assert.equal(claims.exp - claims.iat, 900);
    assert.equal(claims.iat, Math.floor(h.clock.now() / 1000), 'iat follows the injected clock');
    assert.equal(claims.iss, 'https://id.example.test');
    assert.equal(claims.aud, undefined);
    assert.equal(decodeJwtHeader(login.body.data.access_token).typ, 'at+jwt');
  });

  test('tokens.refreshTtl is 30 days and sliding: each rotation issues a token valid that long', async () => {
    const user = await h.signUp();
    h.clock.advance(29 * DAY);
    const first = await h.post('/auth/token/refresh', { refresh_token: user.refreshToken });
    assert.equal(first.status, 200, first.text);
    h.clock.advance(29 * DAY);
    const second = await h.post('/auth/token/refresh', { refresh_token: first.body.data.refresh_token });
    assert.equal(second.status, 200, `58 days after login, 29 after the last rotation: ${second.text}`);
    h.clock.advance(30 * DAY + 1);
    const expired = await h.post('/auth/token/refresh', { refresh_token: second.body.data.refresh_token });
    assertError(expired, 401, 'invalid_grant');
  });

  test('tokens.refreshRotation false: the refresh answers no new refresh token and the presented one keeps working', async () => {
    await withHarness({ config: { tokens: { refreshRotation: false } } }, async (x) => {
      const user = await x.signUp();
      const first = await x.post('/auth/token/refresh', { refresh_token: user.refreshToken });
      assert.equal(first.status, 200, first.text);
      assert.ok(first.body.data.refresh_token === undefined || first.body.data.refresh_token === user.refreshToken, `no new refresh token: ${first.text}`);
      const again = await x.post('/auth/token/refresh', { refresh_token: user.refreshToken });
      assert.equal(again.status, 200, again.text);
    });
  });

  test('tokens.mfaTicketTtl is 300 s', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const claims = decodeJwt(ticket);
    assert.equal(claims.exp - claims.iat, 300);
    h.clock.advance(301);
    assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket }));
  });

  test('tokens.emailVerifyTtl is 24 h (400 invalid_token after) and passwordResetTtl 1 h (401 invalid_token after)', async () => {
    const email = uniqueEmail();
    const verifyToken = await registerOnly(h, email, STRONG_PASSWORD);
    h.clock.advance(DAY + 1);
    assertError(await h.post('/auth/email/verify', { token: verifyToken }), 400, 'invalid_token');
    await h.post('/auth/email/verify/resend', { email });
    const fresh = h.tokenFromMail(email, 'verify_email');
    h.clock.advance(DAY - 1);
    assert.equal((await h.post('/auth/email/verify', { token: fresh })).status, 200);

    await h.post('/auth/password/forgot', { email });
    const reset = h.tokenFromMail(email, 'password_reset');
    h.clock.advance(3600 + 1);
    const late = await h.post('/auth/password/reset', { token: reset, new_password: 'another fine passphrase' });
    assertError(late, 401, 'invalid_token');
    assert.match(late.headers.get('www-authenticate') ?? '', /^Bearer/);
    await h.post('/auth/password/forgot', { email });
    const inTime = h.tokenFromMail(email, 'password_reset');
    h.clock.advance(3600 - 1);
    assert.equal((await h.post('/auth/password/reset', { token: inTime, new_password: 'another fine passphrase' })).status, 200);
  });

  test('tokens.inviteTtl is 7 days: the invite mail says so and acceptance after it is 400 invalid_token', async () => {
    const org = await createOrg(h);
    const invitee = await h.signUp(uniqueEmail('late'));
    const invited = await h.post(`/orgs/${org.id}/invites`, { email: invitee.email, role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invited.status, 201, invited.text);
    assert.equal(Date.parse(invited.body.data.expires_at), h.clock.now() + 7 * DAY * 1000);
    h.clock.advance(7 * DAY + 1);
    const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(invitee.email, 'invite') }, { token: (await h.post('/auth/login', { email: invitee.email, password: invitee.password })).body.data.access_token });
    assertError(accepted, 400, 'invalid_token');
  });

  test('password: 8 to 128 characters counted as characters, no composition rules, common passwords and the e-mail refused', async () => {
    const email = uniqueEmail('policy');
    const attempt = (password: string) => h.post('/auth/register', { email, password });
    assertValidationErrors(await attempt('qzkvmwp'), /at least 8/);
    assertValidationErrors(await attempt('q'.repeat(129)), /at most 128/);
    assertValidationErrors(await attempt('password123'), /common/);
    assertValidationErrors(await attempt(email.toUpperCase()), /e-mail/);
    // Eight characters that are sixteen UTF-16 units; 128 emoji are 256 units.
    assert.equal((await h.post('/auth/register', { email: uniqueEmail(), password: '🔑'.repeat(8) })).status, 202);
    assert.equal((await h.post('/auth/register', { email: uniqueEmail(), password: '🔑'.repeat(128) })).status, 202);
    assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: '🔑'.repeat(7) }), /at least 8/);
    assert.equal((await attempt('qzkvmwpt')).status, 202, 'lower-case letters only are enough');
  });

  test('auth.lockout: 5 failures within 900 s lock for 900 s; me reads locked, then active', async () => {
    const user = await h.signUp();
    for (let i = 0; i < 5; i += 1) assertError(await h.post('/auth/login', { email: user.email, password: 'wrong password here' }), 401, 'invalid_credentials');
    assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
    h.clock.advance(899);
    assertError(await h.post('/auth/login', { email: user.email, password: user.password }), 401, 'invalid_credentials');
    h.clock.advance(2);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).body.data.status, 'active');
  });

  test('auth.lockout: failures further apart than the window do not lock', async () => {
    const user = await h.signUp();
    for (let i = 0; i < 4; i += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    h.clock.advance(901);
    for (let i = 0; i < 4; i += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  });

  test('otp: 6 digits, 300 s lifetime, 30 s resend cooldown', async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    assert.match(lastSmsCode(h, phone), /^\d{6}$/);
    const factorId = enrolled.body.data.factor_id;
    const resend = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(resend.status, 429, `a resend within 30 s: ${resend.text}`);
    assert.equal(resend.body.error, 'rate_limited');
    h.clock.advance(301);
    assertError(await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: user.accessToken }), 422, 'invalid_code');
  });

  test('otp.totp.issuer: the host of issuer by default, appName when set', async () => {
    const user = await h.signUp();
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    const uri = new URL(enrolled.body.data.otpauth_uri);
    assert.equal(uri.searchParams.get('issuer'), 'id.example.test');
    await withHarness({ config: { appName: 'Acme ID' } }, async (x) => {
      const other = await x.signUp();
      const named = await x.post('/auth/mfa/totp/enroll', undefined, { token: other.accessToken });
      assert.equal(new URL(named.body.data.otpauth_uri).searchParams.get('issuer'), 'Acme ID');
    });
  });

  test("mfa.enforcementMode 'block': the login itself answers 403 mfa_enrollment_required", async () => {
    await withHarness({ config: { mfa: { enforce: true, enforcementMode: 'block' } } }, async (x) => {
      const email = uniqueEmail();
      await x.post('/auth/email/verify', { token: await registerOnly(x, email, STRONG_PASSWORD) });
      assertError(await x.post('/auth/login', { email, password: STRONG_PASSWORD }), 403, 'mfa_enrollment_required');
    });
  });

  test("mfa.enforce in 'grace' mode: mfa=false, and only me, logout, factors and enroll/confirm answer", async () => {
    await withHarness({ config: { mfa: { enforce: true } } }, async (x) => {
      const user = await x.signUp();
      assert.equal(decodeJwt(user.accessToken).mfa, false);
      assert.equal((await x.get('/auth/me', { token: user.accessToken })).status, 200);
      assert.equal((await x.get('/auth/mfa/factors', { token: user.accessToken })).status, 200);
      assertError(await x.get('/auth/sessions', { token: user.accessToken }), 403, 'mfa_enrollment_required');
      assertError(await x.get('/orgs', { token: user.accessToken }), 403, 'mfa_enrollment_required');
      assertError(await x.post('/orgs', { name: 'Acme' }, { token: user.accessToken }), 403, 'mfa_enrollment_required');
      assert.equal((await x.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken })).status, 200);
      assert.equal((await x.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
    });
  });

  test('security.stepUp.maxAge is 300 s', async () => {
    const user = await signUpWithTotp(h);
    h.clock.advance(299);
    assert.equal((await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken })).status, 200);
    h.clock.advance(2);
    const stale = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken });
    assertError(stale, 401, 'step_up_required');
  });

  test('permissions: host keys are added to the catalog with their description', async () => {
    await withHarness({ config: { permissions: [{ key: 'invoices.read', description: 'Read invoices' }] } }, async (x) => {
      const user = await x.signUp();
      const catalog = await x.get('/permissions', { token: user.accessToken });
      assert.equal(catalog.status, 200, catalog.text);
      assert.deepEqual(catalog.body.data.find((entry: { key: string }) => entry.key === 'invoices.read'), { key: 'invoices.read', description: 'Read invoices' });
    });
  });

  test('auth.requireVerifiedEmail: an unverified login is 403 email_unverified with a resend pointer', async () => {
    await withHarness({ config: { auth: { requireVerifiedEmail: true } } }, async (x) => {
      const email = uniqueEmail();
      await registerOnly(x, email, STRONG_PASSWORD);
      const login = await x.post('/auth/login', { email, password: STRONG_PASSWORD });
      assertError(login, 403, 'email_unverified');
      assert.equal(typeof login.body.resend, 'string');
    });
  });
});

describe('CONTRACT 3: adapters', () => {
  test('otp_code mail: code, ttl, purpose enroll, login_mfa and step_up, app_name', async () => {
    const user = await h.signUp();
    await enrollEmail(h, user);
    const enrollMail = h.lastMail(user.email, 'otp_code') as MailMessage;
    assert.deepEqual(Object.keys(enrollMail.context).sort(), ['app_name', 'code', 'purpose', 'ttl']);
    assert.equal(enrollMail.context.purpose, 'enroll');
    assert.equal(enrollMail.context.ttl, 300);
    assert.equal(enrollMail.context.app_name, 'https://id.example.test', 'appName defaults to issuer');
    const { ticket, factors } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factors[0].id }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    assert.equal(challenge.body.data.destination, `${user.email[0]}***@example.com`, 'CONTRACT 5: the masked e-mail');
    assert.equal((h.lastMail(user.email, 'otp_code') as MailMessage).context.purpose, 'login_mfa');
    h.clock.advance(31);
    const stepUp = await h.post('/auth/mfa/step-up/challenge', { factor_id: factors[0].id }, { token: user.accessToken });
    assert.equal(stepUp.status, 200, stepUp.text);
    assert.equal((h.lastMail(user.email, 'otp_code') as MailMessage).context.purpose, 'step_up');
  });

  test('SMS text carries the code, the app name and the lifetime; the phone is masked to its last 4 digits', async () => {
    await withHarness({ config: { appName: 'Acme ID' } }, async (x) => {
      const user = await x.signUp();
      const phone = '+15551234567';
      await enrollSms(x, user.accessToken, phone);
      const text = x.sms.at(-1)?.message ?? '';
      assert.ok(text.includes(lastSmsCode(x, phone)));
      assert.match(text, /Acme ID/);
      assert.match(text, /5 min|300/);
      const factors = await x.get('/auth/mfa/factors', { token: user.accessToken });
      const sms = factors.body.data.factors.find((factor: { type: string }) => factor.type === 'sms');
      assert.equal(sms.destination ?? sms.phone ?? sms.masked_destination, '+*******4567', JSON.stringify(sms));
    });
  });

  test('invite mail: token, url from links.acceptInvite, organization_name, inviter_email, expires_at, app_name', async () => {
    await withHarness({ config: { appName: 'Acme ID', links: { acceptInvite: 'https://app.example.test/join/{token}' } } }, async (x) => {
      const org = await createOrg(x, { name: 'Widgets Inc' });
      const email = uniqueEmail('invitee');
      const invited = await x.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token });
      assert.equal(invited.status, 201, invited.text);
      const mail = x.lastMail(email, 'invite') as MailMessage;
      const token = String(mail.context.token);
      assert.deepEqual(mail.context, {
        app_name: 'Acme ID',
        token,
        url: `https://app.example.test/join/${encodeURIComponent(token)}`,
        organization_name: 'Widgets Inc',
        inviter_email: org.owner.email,
        expires_at: invited.body.data.expires_at,
      });
      const event = x.eventsOfType('member.invited').at(-1);
      assert.equal(event?.data.invite_id, invited.body.data.id);
      assert.ok(!JSON.stringify(event).includes(token), 'the event never carries the token');
    });
  });

  test('without a mailer or SMS sender, the development ones write the message, token and code included, to the logger', async () => {
    const lines: string[] = [];
    const logger = { debug() {}, info: (message: string) => void lines.push(message), warn: (message: string) => void lines.push(message), error() {} };
    const identity = createIdentityRouter({ ...validConfig, password: { bcryptCost: 4, workers: 1 } }, { logger });
    const app = express();
    app.use('/identity', identity);
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      await identity.ready;
      const email = uniqueEmail('devmail');
      const registered = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/identity/auth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password: STRONG_PASSWORD }),
      });
      assert.equal(registered.status, 202);
      await identity.service.deliverDueEvents();
      const mail = lines.find((line) => line.includes(email) && line.includes('verify_email'));
      assert.ok(mail, lines.join('\n'));
      assert.ok(lines.some((line) => /development mailer/.test(line)), 'a warning at start-up');
      assert.ok(lines.some((line) => /development SMS sender/.test(line)), 'a warning at start-up');
    } finally {
      await new Promise((resolve) => server.close(resolve));
      await identity.close();
    }
  });

  test('a failing mailer or listener never fails the request; each failure is logged', async () => {
    const failing = await Harness.start({
      mailerFails: true,
      onEvent: () => {
        throw new Error('listener down');
      },
    });
    try {
      const email = uniqueEmail();
      assert.equal((await failing.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
      assert.equal((await failing.post('/auth/password/forgot', { email })).status, 202);
      await failing.identity.service.deliverDueEvents();
      assert.ok(failing.logs.some((line) => line.level === 'error' || line.level === 'warn'), 'logged');
    } finally {
      await failing.close();
    }
  });
});

describe('CONTRACT 5: decisions on what the spec leaves open', () => {
  test('401 answers carry WWW-Authenticate: invalid_credentials, invalid_grant, session_ended, step_up_required', async () => {
    const user = await h.signUp();
    const wrong = await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    assertError(wrong, 401, 'invalid_credentials');
    assert.match(wrong.headers.get('www-authenticate') ?? '', /^Bearer/);
    const grant = await h.post('/auth/token/refresh', { refresh_token: 'not-a-token' });
    assertError(grant, 401, 'invalid_grant');
    assert.match(grant.headers.get('www-authenticate') ?? '', /^Bearer/);
    await h.post('/auth/logout', {}, { token: user.accessToken });
    const ended = await h.post('/auth/switch-org', { organization_id: '00000000-0000-4000-8000-000000000000' }, { token: user.accessToken });
    assertError(ended, 401, 'session_ended');
    assert.match(ended.headers.get('www-authenticate') ?? '', /^Bearer/);
  });

  test('404s answer not_found; the 400 token failures answer invalid_token', async () => {
    const user = await h.signUp();
    assertError(await h.delete('/auth/sessions/00000000-0000-4000-8000-000000000000', { token: user.accessToken }), 404, 'not_found');
    const root = await superadmin(h);
    assertError(await h.get('/orgs/00000000-0000-4000-8000-000000000000', { token: root.accessToken }), 404, 'not_found');
    assertError(await h.post('/auth/email/verify', { token: 'nope' }), 400, 'invalid_token');
    assertError(await h.post('/auth/invites/accept', { token: 'nope' }, { token: user.accessToken }), 400, 'invalid_token');
  });

  test('e-mail verification is idempotent: the same token answers 200 again and user.email_verified is emitted once', async () => {
    const email = uniqueEmail();
    const token = await registerOnly(h, email, STRONG_PASSWORD);
    assert.equal((await h.post('/auth/email/verify', { token })).status, 200);
    assert.equal((await h.post('/auth/email/verify', { token })).status, 200);
    const login = await h.post('/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal(h.events.filter((event) => event.type === 'user.email_verified' && event.user_id === login.body.data.user.id).length, 1);
  });

  test('login opens a session with org null; GET /auth/me adds orgs, roles and recovery_codes_remaining', async () => {
    const org = await createOrg(h, { name: 'Me Corp' });
    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    assert.equal(decodeJwt(login.body.data.access_token).org ?? null, null);
    const me = await h.get('/auth/me', { token: org.owner.token });
    assert.deepEqual(me.body.data.orgs, [{ id: org.id, name: 'Me Corp', slug: org.slug, roles: ['owner'] }]);
    assert.deepEqual(me.body.data.roles, ['owner']);
    assert.equal(me.body.data.recovery_codes_remaining, 0);
    const withCodes = await signUpWithTotp(h);
    await h.identity.service.grantSuperadmin(withCodes.userId);
    const mine = await h.get('/auth/me', { token: withCodes.accessToken });
    assert.equal(mine.body.data.recovery_codes_remaining, 10);
    assert.ok(mine.body.data.roles.includes('superadmin'));
  });

  test('recovery codes: accepted case-insensitively and without the dash; regeneration answers 10 strings', async () => {
    const user = await signUpWithTotp(h);
    const code = user.recoveryCodes[0]!;
    const { ticket } = await loginForTicket(h, user);
    const verified = await h.post('/auth/mfa/verify', { code: code.replace('-', '').toUpperCase() }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: verified.body.data.access_token });
    assert.equal(regenerated.status, 200, regenerated.text);
    assert.equal(regenerated.body.data.recovery_codes.length, 10);
    for (const entry of regenerated.body.data.recovery_codes) assert.equal(typeof entry, 'string');
  });

  test('step-up takes a recovery code when factor_id is absent', async () => {
    const user = await signUpWithTotp(h);
    h.clock.advance(301);
    const stepped = await h.post('/auth/mfa/step-up', { code: user.recoveryCodes[1]!.toUpperCase() }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    assert.equal(stepped.body.data.token_type, 'Bearer');
    assert.equal(decodeJwt(stepped.body.data.access_token).auth_time, Math.floor(h.clock.now() / 1000));
  });

  test('lockout: the user status reads locked while it lasts and active after it', async () => {
    const root = await superadmin(h);
    const user = await h.signUp();
    for (let i = 0; i < 5; i += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    const locked = await h.get(`/users/${user.userId}`, { token: root.accessToken });
    assert.equal(locked.status, 200, locked.text);
    assert.equal(locked.body.data.status, 'locked');
    h.clock.advance(901);
    const fresh = await h.post('/auth/login', { email: root.email, password: root.password });
    assert.equal((await h.get(`/users/${user.userId}`, { token: fresh.body.data.access_token })).body.data.status, 'active');
  });

  test('step-up answers {access_token, token_type} with amr pwd+otp, like the login gate', async () => {
    const user = await signUpWithTotp(h);
    assert.deepEqual(decodeJwt(user.accessToken).amr, ['pwd', 'otp']);
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: user.accessToken });
    assert.equal(stepped.status, 200, stepped.text);
    assert.deepEqual(Object.keys(stepped.body.data).sort(), ['access_token', 'token_type']);
    assert.deepEqual(decodeJwt(stepped.body.data.access_token).amr, ['pwd', 'otp']);
  });

  test('the MFA ticket is HS256 with typ mfa+jwt and never passes as an access token', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    assert.deepEqual([decodeJwtHeader(ticket).alg, decodeJwtHeader(ticket).typ], ['HS256', 'mfa+jwt']);
    assertUnauthorized(await h.get('/auth/me', { token: ticket }));
  });

  test('failed codes of any kind, TOTP included, exhaust the ticket after otp.maxAttempts; then even the right code is 422 invalid_code', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    for (let i = 0; i < 5; i += 1) assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: '000000' }, { token: ticket }), 422, 'invalid_code');
    assertError(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket }), 422, 'invalid_code');
    assertUnauthorized(await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: '000000' }, { token: 'not.a.ticket' }));
  });

  test('the resend cooldown applies per factor: a second factor may be challenged at once, the first not', async () => {
    const user = await h.signUp();
    const sms = await enrollSms(h, user.accessToken, uniquePhone());
    const mail = await enrollEmail(h, user);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket })).status, 200);
    const other = await h.post('/auth/mfa/challenge', { factor_id: mail.factorId }, { token: ticket });
    assert.equal(other.status, 200, `another factor at once: ${other.text}`);
    const again = await h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket });
    assertError(again, 429, 'too_many_requests', 'spec 7: the challenge resend cooldown');
    assert.ok(Number(again.headers.get('retry-after')) > 0);
  });

  test('MFA enforced through the user flag (PATCH /users, users.manage only) puts the user under grace enrollment', async () => {
    const root = await superadmin(h);
    const user = await h.signUp();
    const self = await h.patch(`/users/${user.userId}`, { mfa_enforced: true }, { token: user.accessToken });
    assertError(self, 403, 'forbidden');
    const patched = await h.patch(`/users/${user.userId}`, { mfa_enforced: true }, { token: root.accessToken });
    assert.equal(patched.status, 200, patched.text);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(decodeJwt(login.body.data.access_token).mfa, false);
    assertError(await h.get('/auth/sessions', { token: login.body.data.access_token }), 403, 'mfa_enrollment_required');
    assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).body.data.mfa_enforced, true);
  });

  test('MFA enforced through an active membership of a require_mfa organization', async () => {
    const org = await createOrg(h, { owner: await signUpWithTotp(h) });
    const member = await addMember(h, org, org.owner.token);
    assert.equal((await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token })).status, 200);
    const login = await h.post('/auth/login', { email: member.email, password: member.password });
    assertError(await h.get('/auth/sessions', { token: login.body.data.access_token }), 403, 'mfa_enrollment_required');
    assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token: login.body.data.access_token }), 403, 'mfa_enrollment_required');
  });

  test('credentials bind only to a proven address: an unverified account cannot enroll a factor or create an API key', async () => {
    const user = await h.signUp(uniqueEmail('unproven'), STRONG_PASSWORD, { verify: false });
    for (const [path, body] of [['/auth/mfa/totp/enroll', undefined], ['/auth/mfa/sms/enroll', { phone_e164: uniquePhone() }], ['/auth/mfa/email/enroll', {}]] as const) {
      assertError(await h.post(path, body, { token: user.accessToken }), 403, 'email_unverified', path);
    }
  });

  test('invites and members: list shapes, the invited entry, revoke and remove answers', async () => {
    const org = await createOrg(h);
    const existing = await h.signUp(uniqueEmail('existing'));
    const stranger = uniqueEmail('stranger');
    const toExisting = await h.post(`/orgs/${org.id}/invites`, { email: existing.email, role_slugs: ['member'] }, { token: org.owner.token });
    const toStranger = await h.post(`/orgs/${org.id}/invites`, { email: stranger, role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(toStranger.status, 201, toStranger.text);
    const invites = await h.get(`/orgs/${org.id}/invites`, { token: org.owner.token });
    assert.ok(Array.isArray(invites.body.data), invites.text);
    assert.equal(invites.body.data.length, 2);
    const members = await h.get(`/orgs/${org.id}/members`, { token: org.owner.token });
    const invited = members.body.data.filter((member: { status: string }) => member.status === 'invited');
    assert.deepEqual(invited.map((member: { user_id: string }) => member.user_id), [existing.userId]);
    const revoked = await h.delete(`/orgs/${org.id}/invites/${toExisting.body.data.id}`, { token: org.owner.token });
    assert.deepEqual(revoked.body, { data: { status: 'revoked' } });
    const member = await addMember(h, org, org.owner.token);
    const removed = await h.delete(`/orgs/${org.id}/members/${member.userId}`, { token: org.owner.token });
    assert.deepEqual(removed.body, { data: { status: 'removed' } });
  });

  test('mutation bodies: member mutations answer {data: member}; role create and update {data: role}; role delete {status: deleted}', async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token);
    const suspended = await h.patch(`/orgs/${org.id}/members/${member.userId}`, { status: 'suspended' }, { token: org.owner.token });
    assert.equal(suspended.status, 200, suspended.text);
    assert.equal(suspended.body.data.user_id, member.userId);
    assert.equal(suspended.body.data.status, 'suspended');
    const created = await h.post(`/orgs/${org.id}/roles`, { name: 'Auditor', slug: 'auditor', permission_keys: ['org.read'] }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.data.slug, 'auditor');
    assert.deepEqual(created.body.data.permission_keys, ['org.read']);
    const updated = await h.patch(`/orgs/${org.id}/roles/${created.body.data.id}`, { name: 'Auditors' }, { token: org.owner.token });
    assert.equal(updated.status, 200, updated.text);
    assert.equal(updated.body.data.name, 'Auditors');
    assert.equal(updated.body.data.id, created.body.data.id);
    const rolesChanged = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['auditor'] }, { token: org.owner.token });
    assert.equal(rolesChanged.status, 200, rolesChanged.text);
    assert.deepEqual(rolesChanged.body.data.roles, ['auditor']);
    assert.equal(rolesChanged.body.data.user_id, member.userId);
    await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
    const deleted = await h.delete(`/orgs/${org.id}/roles/${created.body.data.id}`, { token: org.owner.token });
    assert.deepEqual(deleted.body, { data: { status: 'deleted' } });
  });

  test('list endpoints take limit and cursor; data keeps its shape and the next cursor is in X-Next-Cursor', async () => {
    const org = await createOrg(h);
    for (let i = 0; i < 3; i += 1) await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('page'), role_slugs: ['member'] }, { token: org.owner.token });
    const first = await h.get(`/orgs/${org.id}/invites?limit=2`, { token: org.owner.token });
    assert.equal(first.body.data.length, 2);
    const cursor = first.headers.get('x-next-cursor');
    assert.ok(cursor, 'a next cursor');
    const second = await h.get(`/orgs/${org.id}/invites?limit=2&cursor=${encodeURIComponent(cursor)}`, { token: org.owner.token });
    assert.equal(second.body.data.length, 1);
    assert.equal(second.headers.get('x-next-cursor'), null);
    const sessions = await h.get('/auth/sessions?limit=1', { token: org.owner.token });
    assert.equal(sessions.status, 200, sessions.text);
    assert.equal(sessions.body.data.sessions.length, 1);
  });

  test('audit log: newest first with cursor pagination in data', async () => {
    const org = await createOrg(h);
    await h.patch(`/orgs/${org.id}`, { name: 'Renamed once' }, { token: org.owner.token });
    await h.patch(`/orgs/${org.id}`, { name: 'Renamed twice' }, { token: org.owner.token });
    const page = await h.get(`/orgs/${org.id}/audit-log?limit=1`, { token: org.owner.token });
    assert.equal(page.status, 200, page.text);
    assert.equal(page.body.data.events.length, 1);
    assert.equal(page.body.data.events[0].type, 'org.updated');
    assert.equal(typeof page.body.data.next_cursor, 'string');
    const next = await h.get(`/orgs/${org.id}/audit-log?limit=100&cursor=${encodeURIComponent(page.body.data.next_cursor)}`, { token: org.owner.token });
    assert.equal(next.body.data.events[0].type, 'org.updated');
    assert.notEqual(next.body.data.events[0].id, page.body.data.events[0].id);
    assert.equal(next.body.data.next_cursor, null);
  });

  test('per-organization policy: PATCH settings.require_mfa; GET returns settings; switch-org refuses an mfa=false session', async () => {
    const org = await createOrg(h, { owner: await signUpWithTotp(h) });
    const patched = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual((await h.get(`/orgs/${org.id}`, { token: org.owner.token })).body.data.settings, { require_mfa: true });
    const member = await h.signUp(uniqueEmail('nomfa'));
    await enrollTotp(h, member.accessToken);
    const invite = await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: ['member'] }, { token: org.owner.token });
    assert.equal(invite.status, 201, invite.text);
    // A password-only session of a user with a confirmed factor cannot exist after login; the pre-enrollment token is one.
    await h.post('/auth/invites/accept', { token: h.tokenFromMail(member.email, 'invite') }, { token: member.accessToken });
    assertError(await h.post('/auth/switch-org', { organization_id: org.id }, { token: member.accessToken }), 403, 'mfa_required');
  });
});

describe('CONTRACT 6: host middleware', () => {
  let base: string;
  let server: ReturnType<express.Express['listen']>;
  before(async () => {
    const app = express();
    app.get('/whoami', h.identity.authenticate(), (req, res) => void res.json({ caller: h.identity.caller(req) }));
    app.get('/reports', h.identity.requirePermission('org.read'), (req, res) => void res.json({ caller: h.identity.caller(req) }));
    await new Promise<void>((resolve) => {
      server = app.listen(0, '127.0.0.1', () => resolve());
    });
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  async function call(path: string, token?: string): Promise<{ status: number; body: any; headers: Headers }> {
    const response = await fetch(`${base}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    return { status: response.status, body: await response.json(), headers: response.headers };
  }

  test('authenticate(): no token is 401 unauthorized with WWW-Authenticate; a token with org null passes; requirePermission with org null is 403 forbidden', async () => {
    const missing = await call('/whoami');
    assert.equal(missing.status, 401);
    assert.equal(missing.body.error, 'unauthorized');
    assert.match(missing.headers.get('www-authenticate') ?? '', /^Bearer/);
    const user = await h.signUp();
    const whoami = await call('/whoami', user.accessToken);
    assert.equal(whoami.status, 200, JSON.stringify(whoami.body));
    assert.equal(whoami.body.caller.user_id, user.userId);
    assert.equal(whoami.body.caller.kind, 'session');
    const refused = await call('/reports', user.accessToken);
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error, 'forbidden');
  });

  test('a token of an organization the user has left is 403 forbidden on both, though the session lives on in another; superadmins aside', async () => {
    const orgA = await createOrg(h);
    const orgB = await createOrg(h);
    const member = await addMember(h, orgA, orgA.owner.token);
    await addMember(h, orgB, orgB.owner.token, ['member'], member);
    const tokenA = await switchOrg(h, member.accessToken, orgA.id);
    assert.equal((await call('/reports', tokenA)).status, 200);
    // The same session moves on to B; the token issued for A is still within its lifetime.
    const tokenB = await switchOrg(h, tokenA, orgB.id);
    assert.equal((await h.delete(`/orgs/${orgA.id}/members/${member.userId}`, { token: orgA.owner.token })).status, 200);
    for (const path of ['/whoami', '/reports']) {
      const answer = await call(path, tokenA);
      assert.equal(answer.status, 403, `${path} ${JSON.stringify(answer.body)}`);
      assert.equal(answer.body.error, 'forbidden', path);
      assert.equal((await call(path, tokenB)).status, 200, `${path}: the session lives on in B`);
    }

    // Superadmins aside: one removed from the organization keeps using its token there.
    const root = await superadmin(h);
    const rootInA = await addMember(h, orgA, orgA.owner.token, ['member'], root);
    await addMember(h, orgB, orgB.owner.token, ['member'], root);
    await switchOrg(h, rootInA.token, orgB.id);
    assert.equal((await h.delete(`/orgs/${orgA.id}/members/${root.userId}`, { token: orgA.owner.token })).status, 200);
    assert.equal((await call('/whoami', rootInA.token)).status, 200);
  });

  test('a deleted organization in the token is 403 forbidden on both', async () => {
    const orgA = await createOrg(h);
    const orgB = await createOrg(h);
    const member = await addMember(h, orgA, orgA.owner.token);
    await addMember(h, orgB, orgB.owner.token, ['member'], member);
    const tokenA = await switchOrg(h, member.accessToken, orgA.id);
    const tokenB = await switchOrg(h, tokenA, orgB.id);
    assert.equal((await call('/whoami', tokenA)).status, 200);
    const deleted = await h.delete(`/orgs/${orgA.id}`, { token: orgA.owner.token });
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    for (const path of ['/whoami', '/reports']) {
      const answer = await call(path, tokenA);
      assert.equal(answer.status, 403, `${path} ${JSON.stringify(answer.body)}`);
      assert.equal(answer.body.error, 'forbidden', path);
    }
    assert.equal((await call('/whoami', tokenB)).status, 200);
  });

  test('a disabled user is refused on both with the router error shape', async () => {
    const root = await superadmin(h);
    const user = await h.signUp();
    assert.equal((await call('/whoami', user.accessToken)).status, 200);
    const disabled = await h.post(`/users/${user.userId}/disable`, {}, { token: root.accessToken });
    assert.equal(disabled.status, 200, disabled.text);
    const answer = await call('/whoami', user.accessToken);
    assert.equal(answer.status, 401, JSON.stringify(answer.body));
    assert.equal(typeof answer.body.error, 'string');
    assert.match(answer.headers.get('www-authenticate') ?? '', /^Bearer/);
  });

  test('a locked user is refused by the host middleware', async () => {
    const user = await h.signUp();
    for (let i = 0; i < 5; i += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    const answer = await call('/whoami', user.accessToken);
    assert.ok(answer.status === 401 || answer.status === 403, JSON.stringify(answer.body));
    assert.equal(typeof answer.body.error, 'string');
  });
});

describe('CONTRACT 7: several instances', () => {
  test('rotateSigningKey activates the key published before it; a token of the new key verifies on the other instance', async () => {
    const other = await Harness.start({ shareDatabaseWith: h });
    try {
      const before = await h.get('/auth/.well-known/jwks.json');
      const kidsBefore = before.body.keys.map((key: { kid: string }) => key.kid);
      await h.identity.service.rotateSigningKey();
      const user = await h.signUp();
      const kid = decodeJwtHeader(user.accessToken).kid;
      assert.ok(kidsBefore.includes(kid), 'the new active key was already published');
      assert.equal((await other.get('/auth/me', { token: user.accessToken })).status, 200);
      // The other instance signs with the newly active key within 1 s (real time: propagation, not expiry).
      const deadline = performance.now() + 1000;
      let otherKid: string | undefined;
      do {
        const onOther = await other.post('/auth/login', { email: user.email, password: user.password });
        otherKid = decodeJwtHeader(onOther.body.data.access_token).kid;
        if (otherKid === kid) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      } while (performance.now() < deadline);
      assert.equal(otherKid, kid, 'the other instance signs with the new key within 1 s');
    } finally {
      await other.close();
    }
  });

  test('a logout on one instance is in force on the other at once', async () => {
    const other = await Harness.start({ shareDatabaseWith: h });
    try {
      const user = await h.signUp();
      assert.equal((await other.get('/auth/me', { token: user.accessToken })).status, 200);
      await h.post('/auth/logout', {}, { token: user.accessToken });
      assertUnauthorized(await other.get('/auth/me', { token: user.accessToken }));
    } finally {
      await other.close();
    }
  });
});
