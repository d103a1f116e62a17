/*
 * docs/passwordless.md: findings of the passwordless audit, each a test that failed before its fix.
 * Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/passwordless/passwordless-audit.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Harness, uniqueEmail, harnessesClosedAfterFile } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';

const startWith = harnessesClosedAfterFile();
const startHarness = (config: Record<string, unknown>): Promise<Harness> => startWith({ config });

async function start(h: Harness, email: string): Promise<string> {
  const started = await h.post('/auth/passwordless/start', { email });
  assert.equal(started.status, 202, started.text);
  return started.body.data.challenge_id;
}

/** What an attacker who knows only the address sees: the status of each of `rounds` guesses at one challenge. */
async function guessStatuses(h: Harness, email: string, rounds: number): Promise<number[]> {
  const challengeId = await start(h, email);
  const statuses: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    const guess = String(round).padStart(6, '0');
    statuses.push((await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code: guess })).status);
  }
  return statuses;
}

describe('verify answers the same for every address (enumeration)', () => {
  // The lockout below the verify budget, as by default (5 failures against 20).
  const config = { passwordless: { allowSignup: false }, auth: { lockout: { threshold: 3 } }, otp: { verifyBudget: { limit: 6, windowSec: 900 } } };

  test('wrong guesses at the challenge of an account and of an unknown address get the same answers, 429 past the verify budget for both', async () => {
    const h = await startHarness(config);
    const user = await h.signUp();
    const unknown = await guessStatuses(h, uniqueEmail('nobody'), 8);
    const account = await guessStatuses(h, user.email, 8);
    assert.deepEqual(unknown, [422, 422, 422, 422, 422, 422, 429, 429]);
    assert.deepEqual(account, unknown, 'an account must not be told apart by its lockout swallowing the verify budget');
  });

  test('an account locked before the start answers like an unknown address too', async () => {
    const h = await startHarness(config);
    const user = await h.signUp();
    for (let attempt = 0; attempt < 3; attempt += 1) await h.post('/auth/login', { email: user.email, password: 'wrong password here' });
    assert.equal(h.eventsOfType('user.locked').at(-1)?.user_id, user.userId);
    const unknown = await guessStatuses(h, uniqueEmail('nobody'), 8);
    const locked = await guessStatuses(h, user.email, 8);
    assert.deepEqual(locked, unknown);
  });

  // Threat: guesses at a victim's address, refused by its lockout, filling the victim's own verify
  // budget, which their factor enrollments and MFA gate also spend (a denial of service beyond the lock).
  test("refusals under a lockout spend the address's budget, not the account's: once the lock is over, the owner confirms a factor", async () => {
    const h = await startHarness({ ...config, auth: { lockout: { threshold: 3, duration: 60 } } });
    const user = await h.signUp();
    assert.deepEqual(await guessStatuses(h, user.email, 8), [422, 422, 422, 422, 422, 422, 429, 429]);
    h.clock.advance(61);
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    await enrollTotp(h, login.body.data.access_token);
  });
});

describe('a live lockout is 422 invalid_code, on a sign-up challenge too', () => {
  test('a sign-up code whose address was registered and locked meanwhile answers 422 and proves nothing; after the lock it signs in', async () => {
    const h = await startHarness({ passwordless: { allowSignup: true, ttl: 3600 }, auth: { lockout: { threshold: 3, duration: 900 } } });
    const email = uniqueEmail('latecomer');
    const challengeId = await start(h, email);
    const code = String(h.lastMail(email, 'login_code')!.context.code);
    // Someone registers the address (unverified) and it is locked by wrong passwords.
    assert.equal((await h.post('/auth/register', { email, password: 'squatter password 1234' })).status, 202);
    for (let attempt = 0; attempt < 3; attempt += 1) await h.post('/auth/login', { email, password: 'wrong password here' });
    const locked = h.eventsOfType('user.locked').at(-1)!;
    const refused = await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.body.error, 'invalid_code');
    assert.equal(h.eventsOfType('user.email_verified').filter((event) => event.user_id === locked.user_id).length, 0, 'a refused verify proves nothing');
    // The lock over, the same code proves the address and signs in.
    h.clock.advance(901);
    const signedIn = await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
    assert.equal(signedIn.status, 200, signedIn.text);
    assert.equal(signedIn.body.data.user.id, locked.user_id);
  });
});

/* CONTRACT 11 points that had no test of their own; these passed before the audit. */
describe('the lifetime, the code length and the mail (CONTRACT 11)', () => {
  test('passwordless.ttl is expires_in and the life of code and link; otp.length sets the digits; the mail context is {app_name, code, ttl} plus {token, url} with link on', async () => {
    const h = await startHarness({ appName: 'Acme', passwordless: { ttl: 120, link: true }, links: { passwordlessLogin: 'https://app.example.test/in#t={token}' }, otp: { length: 8 } });
    const user = await h.signUp();
    const started = await h.post('/auth/passwordless/start', { email: user.email });
    assert.equal(started.status, 202, started.text);
    assert.equal(started.body.data.expires_in, 120);
    const mail = h.lastMail(user.email, 'login_code')!;
    assert.deepEqual(Object.keys(mail.context).sort(), ['app_name', 'code', 'token', 'ttl', 'url']);
    const { code, token, url, ttl, app_name: appName } = mail.context as Record<string, unknown>;
    assert.equal(ttl, 120);
    assert.equal(appName, 'Acme');
    assert.match(String(code), /^[0-9]{8}$/);
    assert.equal(url, `https://app.example.test/in#t=${encodeURIComponent(String(token))}`);
    assert.match(String(token), /^[A-Za-z0-9_-]{43}$/, '32 random bytes in base64url');
    const challengeId = started.body.data.challenge_id;
    // Six of the eight digits are a wrong code.
    assert.equal((await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code: String(code).slice(0, 6) })).status, 422);
    h.clock.advance(119);
    assert.equal((await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code })).status, 200, 'alive at 119 s');

    h.clock.advance(31);
    await start(h, user.email);
    const next = h.lastMail(user.email, 'login_code')!.context as Record<string, unknown>;
    h.clock.advance(120);
    const expired = await h.post('/auth/passwordless/verify', { token: next.token });
    assert.equal(expired.status, 422, 'the link is dead at 120 s');
    assert.equal(expired.body.error, 'invalid_code');

    const codeOnly = await startHarness({ passwordless: {} });
    const other = await codeOnly.signUp();
    await start(codeOnly, other.email);
    assert.deepEqual(Object.keys(codeOnly.lastMail(other.email, 'login_code')!.context).sort(), ['app_name', 'code', 'ttl']);
  });

  test("a deleted account's address gets the common answer and no mail; a code mailed before the deletion opens nothing", async () => {
    const h = await startHarness({ passwordless: {} });
    const user = await h.signUp();
    const challengeId = await start(h, user.email);
    const { code } = h.lastMail(user.email, 'login_code')!.context as Record<string, string>;
    assert.equal((await h.delete(`/users/${user.userId}`, { token: user.accessToken })).status, 200);
    const refused = await h.post('/auth/passwordless/verify', { challenge_id: challengeId, code });
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.body.error, 'invalid_code');
    h.clock.advance(31);
    const mails = h.mail.length;
    const again = await h.post('/auth/passwordless/start', { email: user.email });
    assert.equal(again.status, 202);
    assert.equal(h.mail.length, mails, 'no mail to a deleted account');
  });
});
