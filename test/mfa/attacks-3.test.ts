import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { createOrg } from '../helpers/orgs.js';
import { decodeJwt, Harness, TEST_DB } from '../helpers/harness.js';
import { enrollTotp, loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt } from '../helpers/mfa.js';
import { fixtures, fixtureWebauthnConfig, loginChallengeFor, passwordlessLogin, swapChallenge } from '../helpers/passkeys.js';

/*
 * Second factors, recovery and passkeys, attacked again (docs/security.md, threat table):
 * guesses raced on one MFA ticket, a TOTP code replayed across routes and instances, a
 * passkey registration challenge carried to another session, and attestations made for
 * another relying party. Races run for real on PostgreSQL; on SQLite the same requests run
 * and the same outcome is required.
 */
const generous = { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } };
const parallel = <T>(count: number, make: (index: number) => Promise<T>) => Promise.all(Array.from({ length: count }, (_, index) => make(index)));

/** A six-digit code that is none of the codes the factor accepts now (window plus or minus 1). */
function wrongTotp(h: Harness, secret: string, index: number): string {
  const accepted = new Set([-1, 0, 1].map((offset) => totpCodeAt(h, secret, offset)));
  for (let candidate = index; ; candidate += 1000) {
    const guess = String(candidate % 1_000_000).padStart(6, '0');
    if (!accepted.has(guess)) return guess;
  }
}

describe(`guesses raced on one MFA ticket on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    // The lockout and the verify window far away: only the ticket's own cap stands.
    h = await Harness.start({ config: generous });
  });
  after(async () => {
    await h.close();
  });

  test('twenty concurrent wrong TOTP codes on one ticket: at most otp.maxAttempts are compared and counted', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    h.clock.advance(30);
    const { ticket } = await loginForTicket(h, user);
    const ticketId = decodeJwt(ticket).jti as string;
    const responses = await parallel(20, (index) => h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: wrongTotp(h, totp.secret, index) }, { token: ticket }));
    assert.ok(responses.every((response) => response.status === 422 && response.body.error === 'invalid_code'), responses.map((response) => response.status).join(','));
    const row = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ id: ticketId }).first();
    assert.equal(Number(row.failed_attempts), 5, 'the ticket counts at most otp.maxAttempts failures');
    const account = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).first();
    assert.equal(Number(account.failed_login_count), 5, 'only the compared guesses count toward the lockout');
    // Exhausted: the right code is refused too, and a new login is needed.
    const right = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: ticket });
    assert.equal(right.status, 422, right.text);
  });

  test('twenty concurrent wrong recovery codes on one ticket: at most otp.maxAttempts are compared and counted', async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const ticketId = decodeJwt(ticket).jti as string;
    const responses = await parallel(20, (index) => h.post('/auth/mfa/verify', { code: `zzzzz-zz${'abcdefghijklmnopqrstuvwxyz'[index]}zz` }, { token: ticket }));
    assert.ok(responses.every((response) => response.status === 422), responses.map((response) => response.status).join(','));
    const row = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ id: ticketId }).first();
    assert.equal(Number(row.failed_attempts), 5, 'the ticket counts at most otp.maxAttempts failures');
    const account = await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).first();
    assert.equal(Number(account.failed_login_count), 5, 'only the compared guesses count toward the lockout');
  });
});

describe(`a TOTP code replayed across routes and instances on ${TEST_DB}`, () => {
  let h: Harness;
  let other: Harness;
  before(async () => {
    h = await Harness.start({ config: generous });
    // A second router on the same database, as another instance behind the load balancer.
    other = await Harness.start({ shareDatabaseWith: h, ownConnection: true, config: generous });
  });
  after(async () => {
    await other.close();
    await h.close();
  });

  test('a code spent at the gate on one instance is refused at step-up and at another ticket\'s verify on the other', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    h.clock.advance(30);
    other.clock.set(h.clock.now());
    const code = totpCodeAt(h, totp.secret);
    const { ticket } = await loginForTicket(h, user);
    const { ticket: second } = await loginForTicket(other, user);
    const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
    const stepUp = await other.post('/auth/mfa/step-up', { factor_id: totp.factorId, code }, { token: verified.body.data.access_token });
    assert.equal(stepUp.status, 422, stepUp.text);
    assert.equal(stepUp.body.error, 'invalid_code');
    const replay = await other.post('/auth/mfa/verify', { factor_id: totp.factorId, code }, { token: second });
    assert.equal(replay.status, 422, replay.text);
    // The code of the step before is older than the one accepted: a replay too.
    const older = await other.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret, -1) }, { token: second });
    assert.equal(older.status, 422, older.text);
  });

  test('one code sent at once to the gate and to step-up, on both instances: it is accepted once', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const stepUpToken = user.accessToken;
    h.clock.advance(30);
    other.clock.set(h.clock.now());
    const tickets = await parallel(4, async (index) => (await loginForTicket(index % 2 === 0 ? h : other, user)).ticket);
    const code = totpCodeAt(h, totp.secret);
    const responses = await Promise.all([
      ...tickets.map((ticket, index) => (index % 2 === 0 ? h : other).post('/auth/mfa/verify', { factor_id: totp.factorId, code }, { token: ticket })),
      h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code }, { token: stepUpToken }),
      other.post('/auth/mfa/step-up', { factor_id: totp.factorId, code }, { token: stepUpToken }),
    ]);
    assert.equal(responses.filter((response) => response.status === 200).length, 1, responses.map((response) => response.status).join(','));
  });
});

describe(`MFA tickets against other accounts and ended accounts on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: generous });
  });
  after(async () => {
    await h.close();
  });

  test("a ticket naming another account's factor: 404 for verify and challenge, nothing counted, and the victim's code is not spent", async () => {
    const attacker = await h.signUp();
    const attackerTotp = await enrollTotp(h, attacker.accessToken);
    const victim = await h.signUp();
    const victimTotp = await enrollTotp(h, victim.accessToken);
    h.clock.advance(30);
    const { ticket } = await loginForTicket(h, attacker);
    const victimCode = totpCodeAt(h, victimTotp.secret);
    const foreign = await h.post('/auth/mfa/verify', { factor_id: victimTotp.factorId, code: victimCode }, { token: ticket });
    assert.equal(foreign.status, 404, foreign.text);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: victimTotp.factorId }, { token: ticket })).status, 404);
    const row = await h.knex(`${h.tablePrefix}mfa_tickets`).where({ id: decodeJwt(ticket).jti }).first();
    assert.equal(Number(row.failed_attempts), 0);
    // The victim's code of this step is still good for the victim; the attacker's own ticket still works.
    const { ticket: victimTicket } = await loginForTicket(h, victim);
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: victimTotp.factorId, code: victimCode }, { token: victimTicket })).status, 200);
    assert.equal((await h.post('/auth/mfa/verify', { factor_id: attackerTotp.factorId, code: totpCodeAt(h, attackerTotp.secret) }, { token: ticket })).status, 200);
  });

  test("a recovery code of another account is no recovery code here", async () => {
    const attacker = await h.signUp();
    await enrollTotp(h, attacker.accessToken);
    const victim = await h.signUp();
    const victimTotp = await enrollTotp(h, victim.accessToken);
    const { ticket } = await loginForTicket(h, attacker);
    const refused = await h.post('/auth/mfa/verify', { code: victimTotp.recoveryCodes[0] }, { token: ticket });
    assert.equal(refused.status, 422, refused.text);
    assert.equal(await countRows(h, 'recovery_codes', { user_id: victim.userId, used_at: null, retired_at: null }), 10);
  });

  test('a ticket of an account deleted since its password: 401 at challenge and verify, no session', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    h.clock.advance(30);
    const { ticket } = await loginForTicket(h, user);
    // The owner (a fresh session: the enrollment's own) deletes the account while the ticket is open.
    const fresh = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: user.accessToken });
    assert.equal(fresh.status, 200, fresh.text);
    const deleted = await h.delete(`/users/${user.userId}`, { token: fresh.body.data.access_token });
    assert.equal(deleted.status, 200, deleted.text);
    h.clock.advance(30);
    const verify = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: ticket });
    assert.equal(verify.status, 401, verify.text);
    const recovery = await h.post('/auth/mfa/verify', { code: totp.recoveryCodes[0] }, { token: ticket });
    assert.equal(recovery.status, 401, recovery.text);
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId, revoked_at: null }), 0);
  });
});

describe(`passkeys: a registration challenge carried elsewhere, a user handle swapped, a removed passkey on ${TEST_DB}`, () => {
  const { primary, second } = fixtures;
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await h.close();
  });

  test("a registration challenge issued to one session is refused from another session, the user's own or another account's", async () => {
    const owner = await h.signUp();
    const otherSession = await h.post('/auth/login', { email: owner.email, password: owner.password });
    assert.equal(otherSession.status, 200, otherSession.text);
    const stranger = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: owner.accessToken });
    assert.equal(options.status, 200, options.text);
    await swapChallenge(h, options.body.data.challenge, primary.registration.challenge, primary.userHandle);
    for (const token of [otherSession.body.data.access_token, stranger.accessToken]) {
      const carried = await h.post('/auth/passkeys/register/verify', { response: primary.registration.response }, { token });
      assert.equal(carried.status, 422, carried.text);
      assert.equal(carried.body.error, 'invalid_code');
    }
    assert.equal(await countRows(h, 'mfa_factors', { type: 'webauthn', credential_id: primary.registration.response.id }), 0);
    // The session it was issued to may still use it: the binding was the only fault.
    const own = await h.post('/auth/passkeys/register/verify', { response: primary.registration.response }, { token: owner.accessToken });
    assert.equal(own.status, 200, own.text);
    // Used once: the same attestation again is a replayed challenge.
    const replay = await h.post('/auth/passkeys/register/verify', { response: primary.registration.response }, { token: owner.accessToken });
    assert.equal(replay.status, 422, replay.text);

    // A user handle other than the one registered with the credential: refused, counted, nothing opened.
    const assertion = primary.assertions[0]!;
    const sessionsBefore = await countRows(h, 'sessions', { user_id: owner.userId });
    const swapped = structuredClone(assertion.response);
    swapped.response.userHandle = second.userHandle;
    const challengeId = await loginChallengeFor(h, assertion);
    const mismatch = await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: swapped });
    assert.equal(mismatch.status, 422, mismatch.text);
    assert.equal(await countRows(h, 'sessions', { user_id: owner.userId }), sessionsBefore);
    const account = await h.knex(`${h.tablePrefix}users`).where({ id: owner.userId }).first();
    assert.equal(Number(account.failed_login_count), 1, 'the refused assertion counts toward the lockout');
    // The genuine assertion still signs in (the counter did not move for the refused one).
    assert.equal((await passwordlessLogin(h, assertion)).status, 200);

    // Removed (step-up is fresh: the sign-up's session is minutes old), the passkey signs no one in.
    const removed = await h.delete(`/auth/mfa/factors/${own.body.data.factor_id}`, { token: owner.accessToken });
    assert.equal(removed.status, 200, removed.text);
    const afterRemoval = await passwordlessLogin(h, primary.assertions[1]!);
    assert.equal(afterRemoval.status, 422, afterRemoval.text);
    assert.equal(await countRows(h, 'sessions', { user_id: owner.userId }), sessionsBefore + 1);
  });
});

describe(`a step-up belongs to the access token it answered, not to every token of its session, on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: generous });
  });
  after(async () => {
    await h.close();
  });

  /**
   * An owner with TOTP whose access token has gone stale for step-up (a refresh 301 s after the
   * gate), a copy of that token in a thief's hands, and the owner's step-up on the same session.
   */
  async function ownerSteppedUpAfterTheft() {
    const owner = await signUpWithTotp(h);
    h.clock.advance(301);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: owner.refreshToken });
    assert.equal(refreshed.status, 200, refreshed.text);
    const stolen = refreshed.body.data.access_token as string;
    assert.equal((await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: stolen })).body.error, 'step_up_required');
    const steppedUp = await h.post('/auth/mfa/step-up', { factor_id: owner.factorId, code: nextTotpCode(h, owner.secret) }, { token: stolen });
    assert.equal(steppedUp.status, 200, steppedUp.text);
    return { owner, stolen, fresh: steppedUp.body.data.access_token as string };
  }

  test("the owner's step-up does not make a stolen, stale token of the same session pass step-up", async () => {
    const { owner, stolen, fresh } = await ownerSteppedUpAfterTheft();
    const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: stolen });
    assert.equal(regenerated.status, 401, `a stolen stale token got recovery codes: ${regenerated.text}`);
    assert.equal(regenerated.body.error, 'step_up_required');
    const removed = await h.delete(`/auth/mfa/factors/${owner.factorId}`, { token: stolen });
    assert.equal(removed.status, 401, removed.text);
    assert.equal(removed.body.error, 'step_up_required');
    // The token the step-up answered passes, as the client retries with it.
    assert.equal((await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: fresh })).status, 200);
  });

  test('nor does switching organization with the stolen token mint a fresh one', async () => {
    const { stolen } = await ownerSteppedUpAfterTheft();
    const created = await h.post('/orgs', { name: 'Thief target' }, { token: stolen });
    assert.equal(created.status, 201, created.text);
    const switched = await h.post('/auth/switch-org', { organization_id: created.body.data.id }, { token: stolen });
    assert.equal(switched.status, 200, switched.text);
    const minted = switched.body.data.access_token as string;
    assert.ok(h.clock.now() / 1000 - decodeJwt(minted).auth_time > 300, 'the switched token keeps the stale auth_time of the token that asked');
    const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: minted });
    assert.equal(regenerated.status, 401, regenerated.text);
  });
});

describe(`a step-up lifts no older token of its session into a require_mfa organization on ${TEST_DB}`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start({ config: generous });
  });
  after(async () => {
    await h.close();
  });

  test('a token issued before the factor (mfa false) stays refused by require_mfa after the owner steps up on the session', async () => {
    const owner = await h.signUp();
    const org = await createOrg(h, { owner });
    const totp = await enrollTotp(h, owner.accessToken);
    const required = await h.patch(`/orgs/${org.id}`, { settings: { require_mfa: true } }, { token: org.owner.token });
    assert.equal(required.status, 200, required.text);
    const copy = org.owner.token;
    const refused = await h.get(`/orgs/${org.id}`, { token: copy });
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.body.error, 'mfa_required');
    const steppedUp = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: copy });
    assert.equal(steppedUp.status, 200, steppedUp.text);
    assert.equal((await h.get(`/orgs/${org.id}`, { token: steppedUp.body.data.access_token })).status, 200);
    const stillRefused = await h.get(`/orgs/${org.id}`, { token: copy });
    assert.equal(stillRefused.status, 403, `the older token (mfa false) passed require_mfa: ${stillRefused.text}`);
    assert.equal(stillRefused.body.error, 'mfa_required');
  });
});
