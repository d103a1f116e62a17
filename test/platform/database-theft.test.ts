/*
 * Threat: an attacker who has READ the router's database (a stolen backup, a read-only SQL
 * injection elsewhere in the host) but not `config.secret`. docs/security.md ("The secret",
 * "What is hashed, what is encrypted") promises that such a copy yields no usable token, code,
 * recovery code, TOTP secret, webhook or client secret, or signing key, and CONTRACT/spec 2.4
 * that a deleted account leaves no personal data behind.
 *
 * One harness runs every flow over HTTP (register, verify, login, refresh, TOTP/SMS/e-mail
 * factors, recovery codes, step-up, passkey, password reset, invitations, passwordless code and
 * link, API keys, webhooks and their rotation, social sign-up, single sign-on, signing-key
 * rotation), collects every secret value the test itself is handed, then dumps every table
 * (all columns, all rows) and looks for each value in every form a careless store could
 * keep (clear, base64, base64url, hex, the decoded bytes, unkeyed digests). Then it plays the
 * thief with the rows: a stored hash presented as the thing it hashes, a sealed value opened
 * with a key not derived from the secret, a 6-digit code hash brute-forced without the key.
 * Frozen clock; SQLite and PostgreSQL.
 */
import assert from 'node:assert/strict';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { decrypt } from '../../src/crypto/aead.js';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { keyedHash } from '../../src/crypto/keyed-hash.js';
import { hashOtpCode } from '../../src/crypto/otp-code.js';
import { servicesOf } from '../../src/create-identity-router.js';
import { Harness, STRONG_PASSWORD, TEST_DB, uniqueEmail, type SignedUpUser } from '../helpers/harness.js';
import { enrollTotp, lastMailCode, lastSmsCode, loginForTicket, nextTotpCode, uniquePhone } from '../helpers/mfa.js';
import { CLIENT_SECRET, newSubject, socialConfig, socialRoundTrip, TestOpenIdProvider } from '../helpers/oidc.js';
import { createOrg, switchOrg } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';
import { addressAt, ssoConfig, ssoLogin, ssoOrg, StubDns } from '../helpers/sso.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const SECRET = 'test-secret-that-is-at-least-32-characters-long';
const KEYS = deriveKeys(SECRET);
/** What a thief without the secret can derive: the same HKDF over any other value. */
const GUESSED_KEYS = deriveKeys('a-guess-that-is-not-the-secret-of-this-router');
const LINK_PAGE = 'https://app.example.test/sign-in/link#token={token}';
const SECOND_PASSWORD = 'a different horse battery staple';

interface Secret {
  kind: string;
  value: string;
  /** false for a value whose digest is public by design (a PKCE-style verifier: its S256 challenge is sent in the clear). */
  digests?: boolean;
}

/** Every secret value the flows handed the test. */
const secrets: Secret[] = [];
function keep(kind: string, value: unknown, options: { digests?: boolean } = {}): string {
  assert.equal(typeof value, 'string', `${kind} should be a string`);
  assert.ok((value as string).length > 0, kind);
  secrets.push({ kind, value: value as string, ...options });
  return value as string;
}

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
function base32Decode(input: string): Buffer {
  const bits = input.replace(/=+$/, '').toUpperCase().split('').map((c) => BASE32.indexOf(c).toString(2).padStart(5, '0')).join('');
  const bytes: number[] = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) bytes.push(Number.parseInt(bits.slice(i, i + 8), 2));
  return Buffer.from(bytes);
}

/** The forms a value could be kept in by a store that forgot to hash or seal it. */
function formsOf(value: string, digests = true): string[] {
  const forms = new Set<string>([value]);
  const utf8 = Buffer.from(value, 'utf8');
  forms.add(utf8.toString('base64'));
  forms.add(utf8.toString('base64url'));
  forms.add(utf8.toString('hex'));
  for (const algorithm of digests ? ['sha256', 'sha1', 'sha512'] : []) {
    const digest = createHash(algorithm).update(value, 'utf8').digest();
    forms.add(digest.toString('hex'));
    forms.add(digest.toString('base64'));
    forms.add(digest.toString('base64url'));
  }
  // The raw bytes behind an encoded value (API keys and tokens are base64url; TOTP base32; whsec_ base64).
  const tail = value.replace(/^(irk_|whsec_)/, '');
  if (/^[A-Za-z0-9_-]{16,}$/.test(tail)) forms.add(Buffer.from(tail, 'base64url').toString('hex'));
  if (/^[A-Za-z0-9+/]{16,}={0,2}$/.test(tail)) forms.add(Buffer.from(tail, 'base64').toString('hex'));
  if (/^[A-Z2-7]{16,}=*$/.test(value)) {
    const raw = base32Decode(value);
    forms.add(raw.toString('hex'));
    forms.add(raw.toString('base64'));
    forms.add(raw.toString('base64url'));
  }
  // Recovery codes are accepted without their dash.
  if (/^[a-z2-7]{5}-[a-z2-7]{5}$/.test(value)) forms.add(value.replace('-', ''));
  return [...forms];
}

interface Cell {
  where: string;
  text: string;
}

/** Every cell of every table the router owns (its prefix), as text: a thief's copy. */
async function dumpDatabase(h: Harness): Promise<{ cells: Cell[]; tables: Map<string, Record<string, unknown>[]> }> {
  const names =
    TEST_DB === 'pg'
      ? ((await h.knex.raw(`select tablename as name from pg_tables where schemaname = current_schema() and tablename like ?`, [`${h.tablePrefix}%`])) as { rows: Array<{ name: string }> }).rows.map((row) => row.name)
      : ((await h.knex.raw(`select name from sqlite_master where type = 'table' and name like ?`, [`${h.tablePrefix}%`])) as Array<{ name: string }>).map((row) => row.name);
  assert.ok(names.length >= 29, `every table of the router: ${names.join(', ')}`);
  const cells: Cell[] = [];
  const tables = new Map<string, Record<string, unknown>[]>();
  for (const name of names) {
    const rows = (await h.knex(name).select('*')) as Record<string, unknown>[];
    tables.set(name.slice(h.tablePrefix.length), rows);
    rows.forEach((row, index) => {
      for (const [column, value] of Object.entries(row)) {
        if (value === null || value === undefined) continue;
        const where = `${name}[${index}].${column}`;
        if (Buffer.isBuffer(value)) {
          cells.push({ where, text: value.toString('hex') }, { where, text: value.toString('base64') }, { where, text: value.toString('utf8') });
        } else if (typeof value === 'object' && !(value instanceof Date)) {
          cells.push({ where, text: JSON.stringify(value) });
        } else {
          cells.push({ where, text: String(value) });
        }
      }
    });
  }
  return { cells, tables };
}

/** Where (table, row, column) a form of `value` is found in the dump. */
function findIn(cells: Cell[], value: string, digests = true): string[] {
  const found: string[] = [];
  for (const form of formsOf(value, digests)) {
    const short = form.length < 16;
    const pattern = short ? new RegExp(`(?<![0-9A-Za-z])${form.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![0-9A-Za-z])`, 'i') : undefined;
    for (const cell of cells) {
      const hit = pattern ? pattern.test(cell.text) : cell.text.toLowerCase().includes(form.toLowerCase());
      if (hit) found.push(`${cell.where} holds ${form === value ? 'it' : `a form of it (${form.slice(0, 24)}...)`}`);
    }
  }
  return found;
}

function rowsOf(tables: Map<string, Record<string, unknown>[]>, table: string): Record<string, unknown>[] {
  const rows = tables.get(table);
  assert.ok(rows, `table ${table}`);
  return rows;
}

let h: Harness;
let op: TestOpenIdProvider;
let receiver: WebhookReceiver;
let hostBase: string;
let hostServer: ReturnType<express.Express['listen']>;
const dns = new StubDns();

/** What the flows produced that the thief-tests below reuse. */
const flow = {
  resetTokenPending: '',
  inviteTokenPending: '',
  verifyTokenPending: '',
  passwordlessLinkPending: '',
  passwordlessChallengePending: '',
  passwordlessCodePending: '',
  smsChallengeCode: '',
  apiKey: '',
  apiKeyId: '',
  webhookId: '',
  webhookSecret: '',
  totpFactorId: '',
  totpSecret: '',
  ssoConnectionId: '',
  refreshToken: '',
  sessionId: '',
  recoveryCodeUnused: '',
  signingKid: '',
  passkeyChallenge: '',
};
let alice: SignedUpUser;

/** Deleted accounts and the personal data they had. */
const deleted: Array<{ who: string; values: string[] }> = [];

before(async () => {
  op = await TestOpenIdProvider.start();
  op.allowRedirectPrefix('http://127.0.0.1/identity/auth/sso/');
  receiver = await WebhookReceiver.start();
  h = await Harness.start({
    dns: dns.adapter,
    config: {
      auth: { lockout: { threshold: 1000 } },
      otp: { verifyBudget: { limit: 1000, windowSec: 900 } },
      webauthn: fixtureWebauthnConfig,
      passwordless: { link: true, allowSignup: true },
      links: { passwordlessLogin: LINK_PAGE },
      webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 2000 },
      events: { delivery: { pollMs: 3_600_000, schedule: [0, 5, 5], jitter: 0, maxAttempts: 3 } },
      social: socialConfig(op),
      sso: ssoConfig(op),
    },
  });
  const app = express();
  app.get('/whoami', h.identity.authenticate({ apiKeys: true }), (req, res) => {
    res.json({ data: { caller: h.identity.caller(req) } });
  });
  await new Promise<void>((resolve) => {
    hostServer = app.listen(0, '127.0.0.1', () => resolve());
  });
  hostBase = `http://127.0.0.1:${(hostServer.address() as AddressInfo).port}`;
  keep('password', STRONG_PASSWORD);
  keep('password', SECOND_PASSWORD);
  keep('social client secret', CLIENT_SECRET);

  // --- Register, verify, login, refresh.
  const aliceEmail = uniqueEmail('alice');
  assert.equal((await h.post('/auth/register', { email: aliceEmail, password: STRONG_PASSWORD, display_name: 'Alice' })).status, 202);
  const verifyToken = keep('verification token', h.tokenFromMail(aliceEmail, 'verify_email'));
  assert.equal((await h.post('/auth/email/verify', { token: verifyToken })).status, 200);
  const login = await h.post('/auth/login', { email: aliceEmail, password: STRONG_PASSWORD });
  assert.equal(login.status, 200, login.text);
  keep('access token', login.body.data.access_token);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: keep('refresh token', login.body.data.refresh_token) });
  assert.equal(refreshed.status, 200, refreshed.text);
  keep('access token', refreshed.body.data.access_token);
  alice = { email: aliceEmail, password: STRONG_PASSWORD, userId: login.body.data.user.id, accessToken: refreshed.body.data.access_token, refreshToken: keep('refresh token', refreshed.body.data.refresh_token) };
  // An unverified account keeps a live verification link.
  const pendingEmail = uniqueEmail('pending');
  assert.equal((await h.post('/auth/register', { email: pendingEmail, password: STRONG_PASSWORD })).status, 202);
  flow.verifyTokenPending = keep('verification token', h.tokenFromMail(pendingEmail, 'verify_email'));

  // --- Second factors: TOTP, then SMS and e-mail (after step-up), recovery codes.
  const totp = await enrollTotp(h, alice.accessToken);
  flow.totpFactorId = totp.factorId;
  flow.totpSecret = keep('TOTP secret', totp.secret);
  for (const code of totp.recoveryCodes) keep('recovery code', code);
  const stepUp = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: alice.accessToken });
  assert.equal(stepUp.status, 200, stepUp.text);
  const stepped = keep('access token', stepUp.body.data.access_token);
  const phone = uniquePhone();
  const sms = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: stepped });
  assert.equal(sms.status, 200, sms.text);
  const smsConfirmed = await h.post('/auth/mfa/sms/confirm', { factor_id: sms.body.data.factor_id, code: keep('SMS code', lastSmsCode(h, phone)) }, { token: stepped });
  assert.equal(smsConfirmed.status, 200, smsConfirmed.text);
  const mailFactor = await h.post('/auth/mfa/email/enroll', {}, { token: stepped });
  assert.equal(mailFactor.status, 200, mailFactor.text);
  const mailConfirmed = await h.post('/auth/mfa/email/confirm', { factor_id: mailFactor.body.data.factor_id, code: keep('e-mail code', lastMailCode(h, aliceEmail)) }, { token: stepped });
  assert.equal(mailConfirmed.status, 200, mailConfirmed.text);
  const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: stepped });
  assert.equal(regenerated.status, 200, regenerated.text);
  const recoveryCodes = (regenerated.body.data.recovery_codes as string[]).map((code) => keep('recovery code', code));
  flow.recoveryCodeUnused = recoveryCodes[1]!;

  // The login gate: an SMS challenge, a recovery code, an e-mail step-up.
  const gate = await loginForTicket(h, alice);
  keep('MFA ticket', gate.ticket);
  const challenged = await h.post('/auth/mfa/challenge', { factor_id: sms.body.data.factor_id }, { token: gate.ticket });
  assert.equal(challenged.status, 200, challenged.text);
  const gateVerified = await h.post('/auth/mfa/verify', { factor_id: sms.body.data.factor_id, code: keep('SMS code', lastSmsCode(h, phone)) }, { token: gate.ticket });
  assert.equal(gateVerified.status, 200, gateVerified.text);
  keep('access token', gateVerified.body.data.access_token);
  keep('refresh token', gateVerified.body.data.refresh_token);
  const second = await loginForTicket(h, alice);
  keep('MFA ticket', second.ticket);
  const byRecovery = await h.post('/auth/mfa/verify', { code: recoveryCodes[0] }, { token: second.ticket });
  assert.equal(byRecovery.status, 200, byRecovery.text);
  const aliceToken = keep('access token', byRecovery.body.data.access_token);
  flow.refreshToken = keep('refresh token', byRecovery.body.data.refresh_token);
  flow.sessionId = JSON.parse(Buffer.from(aliceToken.split('.')[1]!, 'base64url').toString()).sid;
  const stepChallenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: mailFactor.body.data.factor_id }, { token: aliceToken });
  assert.equal(stepChallenge.status, 200, stepChallenge.text);
  const mailStep = await h.post('/auth/mfa/step-up', { factor_id: mailFactor.body.data.factor_id, code: keep('e-mail code', lastMailCode(h, aliceEmail)) }, { token: aliceToken });
  assert.equal(mailStep.status, 200, mailStep.text);
  keep('access token', mailStep.body.data.access_token);
  // A login challenge left outstanding: its code is a live secret in the database.
  const third = await loginForTicket(h, alice);
  keep('MFA ticket', third.ticket);
  h.clock.advance(31);
  assert.equal((await h.post('/auth/mfa/challenge', { factor_id: sms.body.data.factor_id }, { token: third.ticket })).status, 200);
  flow.smsChallengeCode = keep('SMS code', lastSmsCode(h, phone));

  // --- Password reset: one used, one left pending.
  const bob = await h.signUp(uniqueEmail('bob'));
  keep('access token', bob.accessToken);
  keep('refresh token', bob.refreshToken);
  assert.equal((await h.post('/auth/password/forgot', { email: bob.email })).status, 202);
  const resetToken = keep('password reset token', h.tokenFromMail(bob.email, 'password_reset'));
  const reset = await h.post('/auth/password/reset', { token: resetToken, new_password: SECOND_PASSWORD });
  assert.equal(reset.status, 200, reset.text);
  assert.equal((await h.post('/auth/password/forgot', { email: bob.email })).status, 202);
  flow.resetTokenPending = keep('password reset token', h.tokenFromMail(bob.email, 'password_reset'));

  // --- An organization: an invitation accepted, one pending; an API key; a webhook rotated.
  const org = await createOrg(h);
  keep('access token', org.owner.token);
  keep('refresh token', org.owner.refreshToken);
  const carol = await h.signUp(uniqueEmail('carol'));
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: carol.email, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const accepted = await h.post('/auth/invites/accept', { token: keep('invite token', h.tokenFromMail(carol.email, 'invite')) }, { token: carol.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
  const invitee = uniqueEmail('invitee');
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  flow.inviteTokenPending = keep('invite token', h.tokenFromMail(invitee, 'invite'));
  const apiKey = await h.post(`/orgs/${org.id}/api-keys`, { name: 'export', permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal(apiKey.status, 201, apiKey.text);
  flow.apiKey = keep('API key', apiKey.body.data.key);
  flow.apiKeyId = apiKey.body.data.id;
  const used = await fetch(`${hostBase}/whoami`, { headers: { authorization: `Bearer ${flow.apiKey}` } });
  assert.equal(used.status, 200, 'the API key works');
  const webhook = await h.post(`/orgs/${org.id}/webhooks`, { url: receiver.url('/hook'), events: ['*'] }, { token: org.owner.token });
  assert.equal(webhook.status, 201, webhook.text);
  flow.webhookId = webhook.body.data.id;
  keep('webhook secret', webhook.body.data.secret);
  const rotated = await h.post(`/orgs/${org.id}/webhooks/${flow.webhookId}/rotate-secret`, {}, { token: org.owner.token });
  assert.equal(rotated.status, 200, rotated.text);
  flow.webhookSecret = keep('webhook secret', rotated.body.data.secret);
  assert.equal((await h.patch(`/orgs/${org.id}`, { name: 'Renamed for the outbox' }, { token: org.owner.token })).status, 200);
  await h.identity.service.deliverDueEvents();

  // --- Passwordless: a code sign-in, a link sign-in, a sign-up left pending.
  const dave = await h.signUp(uniqueEmail('dave'));
  const started = await h.post('/auth/passwordless/start', { email: dave.email });
  assert.equal(started.status, 202, started.text);
  const codeMail = h.lastMail(dave.email, 'login_code')!;
  keep('passwordless link token', codeMail.context.token);
  const byCode = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: keep('passwordless code', String(codeMail.context.code)) });
  assert.equal(byCode.status, 200, byCode.text);
  keep('refresh token', byCode.body.data.refresh_token);
  h.clock.advance(61);
  assert.equal((await h.post('/auth/passwordless/start', { email: dave.email })).status, 202);
  const linkMail = h.lastMail(dave.email, 'login_code')!;
  keep('passwordless code', String(linkMail.context.code));
  const byLink = await h.post('/auth/passwordless/verify', { token: keep('passwordless link token', linkMail.context.token) });
  assert.equal(byLink.status, 200, byLink.text);
  keep('refresh token', byLink.body.data.refresh_token);
  const newcomer = uniqueEmail('newcomer');
  const signup = await h.post('/auth/passwordless/start', { email: newcomer });
  assert.equal(signup.status, 202, signup.text);
  const signupMail = h.lastMail(newcomer, 'login_code')!;
  flow.passwordlessChallengePending = signup.body.data.challenge_id;
  flow.passwordlessCodePending = keep('passwordless code', String(signupMail.context.code));
  flow.passwordlessLinkPending = keep('passwordless link token', signupMail.context.token);

  // --- A social sign-up (the provider vouches for the address).
  const socialEmail = uniqueEmail('social');
  const socialSubject = newSubject();
  const trip = await socialRoundTrip(h, op, { sub: socialSubject, email: socialEmail, email_verified: true, name: 'Sam Social' });
  keep('social exchange code', trip.code);
  keep('handoff verifier', trip.handoff.verifier, { digests: false });
  const socialExchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
  assert.equal(socialExchanged.status, 200, socialExchanged.text);
  keep('refresh token', socialExchanged.body.data.refresh_token);

  // --- Single sign-on: a connection with a client secret, a JIT sign-in.
  const { org: ssoOrganization, domain, connection } = await ssoOrg(h, dns, op, { jit: true });
  flow.ssoConnectionId = connection.id;
  keep('access token', ssoOrganization.owner.token);
  const ssoEmail = addressAt(domain, 'erin');
  const { trip: ssoTrip, exchanged: ssoExchanged } = await ssoLogin(h, op, { sub: newSubject(), email: ssoEmail, email_verified: true, name: 'Erin' }, { email: ssoEmail });
  keep('SSO exchange code', ssoTrip.code);
  keep('handoff verifier', ssoTrip.handoff.verifier, { digests: false });
  assert.equal(ssoExchanged!.status, 200, ssoExchanged!.text);
  keep('refresh token', ssoExchanged!.body.data.refresh_token);

  // --- A passkey (a recorded ceremony on a real, single-use challenge).
  const frank = await h.signUp(uniqueEmail('frank'));
  const passkey = await registerRecorded(h, frank.accessToken, fixtures.primary, 'laptop');
  assert.equal(passkey.status, 200, passkey.text);
  for (const code of passkey.body.data.recovery_codes ?? []) keep('recovery code', code);
  // Ceremonies left open: a registration challenge and a discoverable login challenge.
  const pendingPasskey = await h.post('/auth/passkeys/register/options', {}, { token: (await h.signUp(uniqueEmail('gail'))).accessToken });
  assert.equal(pendingPasskey.status, 200, pendingPasskey.text);
  flow.passkeyChallenge = keep('passkey challenge', pendingPasskey.body.data.challenge);
  const loginOptions = await h.post('/auth/passkeys/login/options', {});
  assert.equal(loginOptions.status, 200, loginOptions.text);
  keep('passkey challenge', loginOptions.body.data.options.challenge);

  // --- Signing keys: rotated twice; the private halves the router signs with.
  const ring = servicesOf(h.identity).context.keyRing;
  const before = await ring.signingKey();
  await h.identity.service.rotateSigningKey();
  await h.identity.service.rotateSigningKey();
  const now = await ring.signingKey();
  flow.signingKid = now.kid;
  for (const key of [before.privateKey, now.privateKey]) {
    const jwk = key.export({ format: 'jwk' });
    keep('signing private exponent', jwk.d);
    keep('signing prime', jwk.p);
    const der = key.export({ format: 'der', type: 'pkcs8' }).toString('base64');
    keep('signing key (PKCS#8, a slice)', der.slice(200, 264));
  }
  keep('access token', (await h.post('/auth/login', { email: carol.email, password: STRONG_PASSWORD })).body.data.access_token);

  // --- Deleted accounts: a password user with a phone factor, a social user, an SSO user.
  const goneEmail = uniqueEmail('gone');
  const goneAgent = `TheftTestAgent/${randomBytes(6).toString('hex')}`;
  // Invited before the account exists (the invite row holds the address), and a passwordless start.
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: goneEmail, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  assert.equal((await h.post('/auth/register', { email: goneEmail, password: STRONG_PASSWORD, display_name: 'Gina Gone' }, { headers: { 'user-agent': goneAgent } })).status, 202);
  assert.equal((await h.post('/auth/email/verify', { token: h.tokenFromMail(goneEmail, 'verify_email') }, { headers: { 'user-agent': goneAgent } })).status, 200);
  const goneLogin = await h.post('/auth/login', { email: goneEmail, password: STRONG_PASSWORD }, { headers: { 'user-agent': goneAgent } });
  const gonePhone = uniquePhone();
  const goneToken = goneLogin.body.data.access_token as string;
  const goneSms = await h.post('/auth/mfa/sms/enroll', { phone_e164: gonePhone }, { token: goneToken, headers: { 'user-agent': goneAgent } });
  assert.equal(goneSms.status, 200, goneSms.text);
  h.clock.advance(61);
  assert.equal((await h.post('/auth/passwordless/start', { email: goneEmail }, { headers: { 'user-agent': goneAgent } })).status, 202);
  const goneDeleted = await h.delete(`/users/${goneLogin.body.data.user.id}`, { token: goneToken, headers: { 'user-agent': goneAgent } });
  assert.equal(goneDeleted.status, 200, goneDeleted.text);
  deleted.push({ who: 'a password user', values: [goneEmail, 'Gina Gone', gonePhone, goneAgent] });

  const socialGone = await h.delete(`/users/${socialExchanged.body.data.user.id}`, { token: socialExchanged.body.data.access_token });
  assert.equal(socialGone.status, 200, socialGone.text);
  deleted.push({ who: 'a social user', values: [socialEmail, socialSubject, 'Sam Social'] });

  const ssoGoneEmail = addressAt(domain, 'sid');
  const ssoGoneSubject = newSubject();
  const { exchanged: ssoGoneExchanged } = await ssoLogin(h, op, { sub: ssoGoneSubject, email: ssoGoneEmail, email_verified: true, name: 'Sid Sso' }, { email: ssoGoneEmail });
  assert.equal(ssoGoneExchanged!.status, 200, ssoGoneExchanged!.text);
  const ssoGoneToken = await switchOrg(h, ssoGoneExchanged!.body.data.access_token, ssoOrganization.id);
  const ssoGone = await h.delete(`/users/${ssoGoneExchanged!.body.data.user.id}`, { token: ssoGoneToken });
  assert.equal(ssoGone.status, 200, ssoGone.text);
  deleted.push({ who: 'a single sign-on user', values: [ssoGoneEmail, ssoGoneSubject, 'Sid Sso'] });
  await h.identity.service.deliverDueEvents();
});

after(async () => {
  await new Promise<void>((resolve) => hostServer.close(() => resolve()));
  await h.close();
  await receiver.close();
  await op.close();
});

describe(`a stolen copy of the database (${TEST_DB})`, () => {
  test('the search finds what a careless store would keep (so an empty result means something)', () => {
    const value = `irk_${randomBytes(32).toString('base64url')}`;
    const code = '042917';
    const careless: Cell[] = [
      { where: 'clear', text: `key=${value}` },
      { where: 'sha256', text: createHash('sha256').update(value).digest('hex') },
      { where: 'raw bytes', text: Buffer.from(value.slice(4), 'base64url').toString('hex') },
      { where: 'code', text: `{"code":"${code}"}` },
      { where: 'code digest', text: createHash('sha256').update(code).digest('base64') },
    ];
    assert.deepEqual(findIn(careless, value).length, 3);
    assert.deepEqual(findIn(careless, code).length, 2);
    assert.deepEqual(findIn([{ where: 'a timestamp', text: '1893504291700' }, { where: 'a digest', text: 'ab042917cd' }], code), [], 'no false hit inside a number or a hex run');
  });

  test('holds none of the secrets the flows handed out, in any form, in any table, column or row', async () => {
    const { cells } = await dumpDatabase(h);
    const kinds = new Set(secrets.map((secret) => secret.kind));
    for (const expected of ['password', 'verification token', 'refresh token', 'TOTP secret', 'recovery code', 'SMS code', 'e-mail code', 'MFA ticket', 'password reset token', 'invite token', 'API key', 'webhook secret', 'passwordless code', 'passwordless link token', 'social exchange code', 'SSO exchange code', 'signing private exponent', 'social client secret']) {
      assert.ok(kinds.has(expected), `the flows handed out a ${expected}`);
    }
    const leaks: string[] = [];
    for (const secret of secrets) {
      for (const place of findIn(cells, secret.value, secret.digests)) leaks.push(`${secret.kind}: ${place}`);
    }
    assert.deepEqual(leaks, [], 'no secret at rest');
  });

  test('the JWKS publishes no private half of any signing key', async () => {
    const jwks = await h.get('/auth/.well-known/jwks.json');
    assert.equal(jwks.status, 200);
    for (const key of jwks.body.keys) for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi']) assert.equal(key[member], undefined, `${key.kid}.${member}`);
    for (const secret of secrets.filter((candidate) => candidate.kind.startsWith('signing'))) assert.deepEqual(findIn([{ where: 'jwks', text: jwks.text }], secret.value), []);
  });

  test('the events, the audit log, the outbox and what webhooks received carry no secret, nor a deleted account\'s personal data', async () => {
    const { tables } = await dumpDatabase(h);
    const audit = JSON.stringify(rowsOf(tables, 'audit_events'));
    const outbox = JSON.stringify(rowsOf(tables, 'event_deliveries'));
    const events = JSON.stringify(h.events);
    for (const secret of secrets) {
      for (const [name, text] of [['audit_events', audit], ['event_deliveries', outbox], ['onEvent', events]] as const) {
        assert.equal(findIn([{ where: name, text }], secret.value, secret.digests).length, 0, `${secret.kind} in ${name}`);
      }
    }
    assert.ok(rowsOf(tables, 'event_deliveries').length > 0, 'the outbox was written');
    assert.ok(receiver.requests.length > 0, 'the webhook was called');
    for (const request of receiver.requests) {
      for (const secret of secrets) assert.equal(findIn([{ where: 'webhook body', text: request.body }], secret.value, secret.digests).length, 0, `${secret.kind} sent to a webhook`);
    }
    const handedOut: Cell[] = [...h.events.map((event) => ({ where: `onEvent ${event.type}`, text: JSON.stringify(event) })), ...receiver.requests.map((request) => ({ where: 'webhook body', text: request.body }))];
    for (const { who, values } of deleted) {
      for (const value of values) assert.deepEqual(findIn(handedOut, value), [], `${who}: ${value}`);
    }
  });

  test("leaves no personal data of a deleted account in any table (address, name, phone, user agent, provider subject)", async () => {
    const { cells } = await dumpDatabase(h);
    const leaks: string[] = [];
    for (const { who, values } of deleted) {
      for (const value of values) {
        for (const place of findIn(cells, value)) leaks.push(`${who}, ${value}: ${place}`);
      }
    }
    assert.deepEqual(leaks, [], 'a deleted account is anonymized everywhere');
  });
});

describe(`what a thief can do with the rows (${TEST_DB})`, () => {
  test('a stored token hash is no token: verification, reset, invite and passwordless link hashes are refused where the token is', async () => {
    const { tables } = await dumpDatabase(h);
    const oneTime = rowsOf(tables, 'one_time_tokens');
    const invites = rowsOf(tables, 'invites');
    const passwordless = rowsOf(tables, 'passwordless_challenges');
    const resetRow = oneTime.find((row) => row.token_hash === keyedHash(KEYS.tokenHash, flow.resetTokenPending));
    assert.ok(resetRow, 'the pending reset link is stored as a keyed hash of the token, keyed from the secret');
    assert.ok(!oneTime.some((row) => row.token_hash === keyedHash(GUESSED_KEYS.tokenHash, flow.resetTokenPending)), 'no other key reproduces it');
    assert.ok(oneTime.some((row) => row.token_hash === keyedHash(KEYS.tokenHash, flow.verifyTokenPending)), 'the verification link likewise');
    assert.ok(invites.some((row) => row.token_hash === keyedHash(KEYS.tokenHash, flow.inviteTokenPending)), 'the invitation likewise');
    assert.ok(passwordless.some((row) => row.link_hash === keyedHash(KEYS.passwordlessHash, `link:${flow.passwordlessLinkPending}`)), 'the passwordless link under its own key');
    const thief = await h.signUp(uniqueEmail('thief'));
    for (const row of oneTime) {
      const value = String(row.token_hash);
      const asReset = await h.post('/auth/password/reset', { token: value, new_password: 'the thief sets this one' });
      assert.notEqual(asReset.status, 200, `a stored hash opened a reset: ${asReset.text}`);
      const asVerify = await h.post('/auth/email/verify', { token: value });
      assert.notEqual(asVerify.status, 200, `a stored hash verified an address: ${asVerify.text}`);
    }
    for (const row of invites) {
      const asInvite = await h.post('/auth/invites/accept', { token: String(row.token_hash) }, { token: thief.accessToken });
      assert.notEqual(asInvite.status, 200, `a stored hash accepted an invite: ${asInvite.text}`);
    }
    for (const row of passwordless) {
      if (row.link_hash === null) continue;
      const asLink = await h.post('/auth/passwordless/verify', { token: String(row.link_hash) });
      assert.notEqual(asLink.status, 200, `a stored hash signed in: ${asLink.text}`);
    }
    // The genuine pending link still works: the refusals above were the hashes', not a dead link.
    const realReset = await h.post('/auth/password/reset', { token: flow.resetTokenPending, new_password: STRONG_PASSWORD });
    assert.equal(realReset.status, 200, realReset.text);
  });

  test('a ceremony left open is a keyed hash of its challenge', async () => {
    const { tables } = await dumpDatabase(h);
    const rows = rowsOf(tables, 'webauthn_challenges');
    assert.ok(rows.some((row) => row.challenge_hash === keyedHash(KEYS.passkeyChallengeHash, flow.passkeyChallenge)));
    assert.ok(!rows.some((row) => row.challenge_hash === keyedHash(GUESSED_KEYS.passkeyChallengeHash, flow.passkeyChallenge)));
  });

  test('a session row is no refresh token: its id and generation without the MAC, or with a MAC under a guessed key, are invalid_grant', async () => {
    const { tables } = await dumpDatabase(h);
    const session = rowsOf(tables, 'sessions').find((row) => row.id === flow.sessionId);
    assert.ok(session, 'the session row');
    const generation = Number(session.refresh_generation);
    const [, sid, gen] = flow.refreshToken.split('.');
    assert.equal(sid, flow.sessionId);
    assert.equal(Number(gen), generation);
    const guessedMac = createHmac('sha256', GUESSED_KEYS.refreshTokenMac).update(`rt1.${sid}.${generation}`, 'utf8').digest('base64url');
    const forgeries = [flow.sessionId, `rt1.${sid}.${generation}`, `rt1.${sid}.${generation}.${guessedMac}`, `rt1.${sid}.${generation}.${'A'.repeat(43)}`];
    for (const row of rowsOf(tables, 'refresh_tokens')) forgeries.push(String(row.token_hash));
    for (const forged of forgeries) {
      const answer = await h.post('/auth/token/refresh', { refresh_token: forged });
      assert.equal(answer.status, 401, `${forged}: ${answer.text}`);
      assert.equal(answer.body.error, 'invalid_grant');
    }
    const genuine = await h.post('/auth/token/refresh', { refresh_token: flow.refreshToken });
    assert.equal(genuine.status, 200, `the session lives on: ${genuine.text}`);
  });

  test('an API key row is no API key: its digest and start, as a key or a bearer, are refused; the digest is keyed from the secret', async () => {
    const { tables } = await dumpDatabase(h);
    const row = rowsOf(tables, 'api_keys').find((candidate) => candidate.id === flow.apiKeyId);
    assert.ok(row);
    assert.equal(row.key_hash, keyedHash(KEYS.apiKeyHash, flow.apiKey));
    assert.notEqual(row.key_hash, keyedHash(GUESSED_KEYS.apiKeyHash, flow.apiKey));
    const digest = String(row.key_hash);
    for (const forged of [digest, `irk_${digest}`, `irk_${Buffer.from(digest, 'hex').toString('base64url')}`, `irk_${row.start}`]) {
      for (const headers of [{ authorization: `Bearer ${forged}` }, { 'x-api-key': forged }] as Array<Record<string, string>>) {
        const answer = await fetch(`${hostBase}/whoami`, { headers });
        assert.equal(answer.status, 401, `${forged} passed as an API key`);
      }
    }
    assert.equal((await fetch(`${hostBase}/whoami`, { headers: { 'x-api-key': flow.apiKey } })).status, 200, 'the real key still works');
  });

  test('sealed secrets open only with keys derived from the secret: TOTP, webhook, SSO client, signing key, passwordless address', async () => {
    const { tables } = await dumpDatabase(h);
    const factor = rowsOf(tables, 'mfa_factors').find((row) => row.id === flow.totpFactorId)!;
    const webhook = rowsOf(tables, 'webhooks').find((row) => row.id === flow.webhookId)!;
    const connection = rowsOf(tables, 'sso_connections').find((row) => row.id === flow.ssoConnectionId)!;
    const signing = rowsOf(tables, 'signing_keys').find((row) => row.kid === flow.signingKid)!;
    const pending = rowsOf(tables, 'passwordless_challenges').find((row) => row.id === flow.passwordlessChallengePending)!;
    const sealed: Array<[string, string, keyof typeof KEYS, string, string | undefined]> = [
      ['TOTP secret', String(factor.secret_sealed), 'totpSecretEncryption', `mfa-factor:${factor.id}:totp-secret`, flow.totpSecret],
      ['webhook secret', String(webhook.secret_enc), 'webhookSecretEncryption', `webhook-secret:${webhook.id}`, flow.webhookSecret],
      ['SSO client secret', String(connection.client_secret_enc), 'socialFlowEncryption', `sso-client-secret:${connection.id}`, CLIENT_SECRET],
      ['signing key', String(signing.private_key_sealed), 'signingKeyEncryption', `signing-key:${signing.kid}`, undefined],
      ['passwordless sign-up address', String(pending.address_sealed), 'passwordlessAddressEncryption', `passwordless-challenge:${pending.id}:address`, undefined],
    ];
    for (const row of rowsOf(tables, 'signing_keys')) sealed.push([`signing key ${row.kid} (${row.state})`, String(row.private_key_sealed), 'signingKeyEncryption', `signing-key:${row.kid}`, undefined]);
    const flows = rowsOf(tables, 'social_flows');
    assert.ok(flows.some((row) => row.claims_enc !== null), 'a flow holds sealed provider claims');
    for (const row of flows) {
      sealed.push([`flow ${row.id} verifier and nonce`, String(row.secrets_enc), 'socialFlowEncryption', `social-flow:${row.id}`, undefined]);
      if (row.claims_enc !== null) sealed.push([`flow ${row.id} provider claims`, String(row.claims_enc), 'socialFlowEncryption', `social-claims:${row.id}`, undefined]);
    }
    for (const [kind, value, key, context, plain] of sealed) {
      assert.match(value, /^v1\./, `${kind} is sealed`);
      assert.throws(() => decrypt(GUESSED_KEYS[key] as Buffer, value, context), `${kind} opens without the secret`);
      const opened = decrypt(KEYS[key] as Buffer, value, context).toString('utf8');
      if (plain !== undefined) assert.equal(opened, plain, `${kind} is sealed under a key derived from the secret`);
      // Sealed for its own row: copied onto another row it does not open.
      assert.throws(() => decrypt(KEYS[key] as Buffer, value, `${context}x`), `${kind} opens out of its row`);
    }
  });

  test('a 6-digit code hash cannot be brute-forced without the secret: every code under every unkeyed framing misses, the keyed one hits', async () => {
    const { tables } = await dumpDatabase(h);
    const pending = rowsOf(tables, 'passwordless_challenges').find((row) => row.id === flow.passwordlessChallengePending)!;
    const otp = rowsOf(tables, 'otp_challenges').filter((row) => row.consumed_at === null || row.consumed_at === undefined);
    const smsRow = otp.find((row) => row.code_hash === hashOtpCode(KEYS.otpCodeHash, String(row.id), flow.smsChallengeCode));
    assert.ok(smsRow, 'the outstanding SMS challenge is a keyed hash bound to its challenge');
    assert.equal(pending.code_hash, hashOtpCode(KEYS.otpCodeHash, String(pending.id), flow.passwordlessCodePending), 'the passwordless code likewise');
    const targets = new Map<string, string>([
      [String(smsRow.code_hash), `otp challenge ${smsRow.id}`],
      [String(pending.code_hash), `passwordless challenge ${pending.id}`],
    ]);
    // The thief's offline search over all 10^6 codes: unkeyed SHA-256 of the code, bare or framed
    // as the router frames it (and keyed from a guessed secret).
    for (let n = 0; n < 1_000_000; n += 1) {
      const code = String(n).padStart(6, '0');
      const digest = createHash('sha256').update(code).digest('hex');
      assert.ok(!targets.has(digest), `${targets.get(digest)} is an unkeyed SHA-256 of ${code}`);
    }
    for (const [hash, name] of targets) {
      const id = name.split(' ').at(-1)!;
      for (let n = 0; n < 1_000_000; n += 1) {
        const code = String(n).padStart(6, '0');
        if (createHash('sha256').update(`otp:${id}:${code}`).digest('hex') === hash) assert.fail(`${name} is an unkeyed SHA-256 of its framed code ${code}`);
      }
      assert.notEqual(hashOtpCode(GUESSED_KEYS.otpCodeHash, id, id === String(pending.id) ? flow.passwordlessCodePending : flow.smsChallengeCode), hash);
    }
    // With the code and the right challenge the keyed hash matches; on another challenge it does not.
    assert.notEqual(hashOtpCode(KEYS.otpCodeHash, String(pending.id), flow.smsChallengeCode), smsRow.code_hash, 'bound to its challenge');
    // Recovery codes: keyed and bound to their user.
    const recovery = rowsOf(tables, 'recovery_codes').filter((row) => row.user_id === alice.userId);
    const normalised = flow.recoveryCodeUnused.replace('-', '');
    assert.ok(recovery.some((row) => row.code_hash === keyedHash(KEYS.recoveryCodeHash, `recovery:${alice.userId}:${normalised}`)), 'recovery codes are keyed hashes bound to the user');
    assert.ok(!recovery.some((row) => row.code_hash === keyedHash(GUESSED_KEYS.recoveryCodeHash, `recovery:${alice.userId}:${normalised}`)));
  });

  test('a password hash is peppered: the stolen bcrypt hash does not verify the password without the secret', async () => {
    const { tables } = await dumpDatabase(h);
    const row = rowsOf(tables, 'users').find((candidate) => candidate.id === alice.userId)!;
    const hash = String(row.password_hash);
    assert.match(hash, /^\$2[aby]\$/);
    const bcrypt = (await import('bcryptjs')).default;
    assert.equal(await bcrypt.compare(STRONG_PASSWORD, hash), false, 'the bare password does not match the stolen hash');
    const peppered = createHmac('sha256', KEYS.passwordPepper).update(STRONG_PASSWORD, 'utf8').digest('base64');
    assert.equal(await bcrypt.compare(peppered, hash), true, 'the hash is of the password peppered with a key derived from the secret');
    const guessed = createHmac('sha256', GUESSED_KEYS.passwordPepper).update(STRONG_PASSWORD, 'utf8').digest('base64');
    assert.equal(await bcrypt.compare(guessed, hash), false);
  });
});
