import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { resolveConfig } from '../../src/config/schema.js';
import type { IdentityConfig } from '../../src/index.js';
import { countRows, assertError } from '../helpers/account.js';
import { decodeJwt, Harness, TEST_DB, type SignedUpUser } from '../helpers/harness.js';
import { enrollTotp, loginForTicket } from '../helpers/mfa.js';
import {
  fixtures,
  fixtureWebauthnConfig,
  loginChallengeFor,
  passGateWithRecorded,
  passwordlessLogin,
  registerRecorded,
  stepUpWithRecorded,
} from '../helpers/passkeys.js';

/*
 * Passkeys against assertions and attestations recorded from a real Chromium ceremony
 * (test/fixtures/webauthn-fixtures.json, scripts/record-webauthn-fixtures.ts). Threats: a
 * replayed or expired challenge, a cloned authenticator (counter going backwards), an
 * assertion made for another origin or RP id, a credential of someone else, a passkey
 * login without user verification, and one assertion raced many times.
 */
const { primary, second, otherRp } = fixtures;
const [a0, a1, a2, a3, a4] = primary.assertions as [typeof primary.assertions[0], typeof primary.assertions[0], typeof primary.assertions[0], typeof primary.assertions[0], typeof primary.assertions[0]];
const noUv = primary.assertionWithoutUserVerification;
const generous = { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } };

async function sessionCount(h: Harness, userId: string): Promise<number> {
  return countRows(h, 'sessions', { user_id: userId });
}

describe('recorded fixtures', () => {
  test('were recorded with user verification and rising counters, and one assertion without UV', () => {
    // The tests below rely on these properties of the recording; a bad re-recording fails here first.
    assert.deepEqual(primary.assertions.map((entry) => entry.userVerified), [true, true, true, true, true]);
    const counts = primary.assertions.map((entry) => entry.signCount);
    assert.deepEqual([...counts].sort((x, y) => x - y), counts);
    assert.ok(counts[0]! > 0, 'the virtual authenticator counts signatures');
    assert.equal(noUv.userVerified, false);
    assert.ok(noUv.signCount > counts[4]!);
  });
});

describe(`passkey lifecycle on ${TEST_DB}`, () => {
  let h: Harness;
  let owner: SignedUpUser;
  let factorId: string;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
    owner = await h.signUp();
  });
  after(async () => {
    await h.close();
  });

  test('register/options answers creation options for a discoverable credential', async () => {
    const options = await h.post('/auth/passkeys/register/options', {}, { token: owner.accessToken });
    assert.equal(options.status, 200, options.text);
    const data = options.body.data;
    assert.equal(data.rp.id, 'localhost');
    assert.equal(data.user.name, owner.email);
    assert.equal(data.authenticatorSelection.residentKey, 'required');
    assert.notEqual(Buffer.from(data.user.id, 'base64url').toString('utf8'), owner.userId, 'the user handle is not the user id');
    // Stored as a keyed hash only.
    assert.equal(await countRows(h, 'webauthn_challenges', { challenge_hash: data.challenge }), 0);
  });

  test('the recorded attestation becomes a confirmed, default webauthn factor with recovery codes', async () => {
    const registered = await registerRecorded(h, owner.accessToken, primary, 'Laptop');
    assert.equal(registered.status, 200, registered.text);
    assert.equal(registered.body.data.status, 'confirmed');
    assert.equal(registered.body.data.recovery_codes.length, 10);
    factorId = registered.body.data.factor_id;
    const factors = await h.get('/auth/mfa/factors', { token: owner.accessToken });
    assert.deepEqual(factors.body.data.factors, [{ id: factorId, type: 'webauthn', default: true, label: 'Laptop', confirmed: true }]);
    const enrolled = h.eventsOfType('mfa.enrolled').at(-1)!;
    assert.deepEqual(enrolled.data, { factor_id: factorId, type: 'webauthn' });
    // Only public data: the credential id, the public key and the counter.
    const row = await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: factorId }).first();
    assert.equal(row.credential_id, primary.registration.response.id);
    assert.equal(row.secret_sealed, null);
    assert.equal(row.destination, null);
    assert.ok(String(row.credential_public_key).length > 0);
    assert.ok(Number(row.sign_count) < a0.signCount);
  });

  test('the same credential cannot be registered by another user (credential ids are unique)', async () => {
    const other = await h.signUp();
    const again = await registerRecorded(h, other.accessToken, primary);
    assertError(again, 409, 'conflict');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: other.userId }), 0);
  });

  test('passwordless login gives mfa true, amr [hwk, user] and user.logged_in with method passkey', async () => {
    const before = await sessionCount(h, owner.userId);
    const login = await passwordlessLogin(h, a0);
    assert.equal(login.status, 200, login.text);
    assert.equal(login.body.data.user.id, owner.userId);
    const claims = decodeJwt(login.body.data.access_token);
    assert.equal(claims.mfa, true);
    assert.deepEqual(claims.amr, ['hwk', 'user']);
    assert.equal(await sessionCount(h, owner.userId), before + 1);
    const event = h.eventsOfType('user.logged_in').at(-1)!;
    assert.equal(event.data.method, 'passkey');
    assert.equal(event.user_id, owner.userId);
  });

  test('a replayed challenge is refused (422 invalid_code) and opens no session', async () => {
    const challengeId = await loginChallengeFor(h, a1);
    const first = await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: a1.response });
    assert.equal(first.status, 200, first.text);
    const before = await sessionCount(h, owner.userId);
    const replay = await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: a1.response });
    assertError(replay, 422, 'invalid_code');
    assert.equal(await sessionCount(h, owner.userId), before);
  });

  test('a signature counter that goes backwards is refused and reported', async () => {
    // a0 was accepted before a1: presenting it now, on a fresh challenge, is what a clone would do.
    const before = await sessionCount(h, owner.userId);
    const cloned = await passwordlessLogin(h, a0);
    assertError(cloned, 422, 'invalid_code');
    const regressed = h.eventsOfType('mfa.passkey_counter_regressed').at(-1);
    assert.ok(regressed, 'mfa.passkey_counter_regressed emitted');
    assert.deepEqual(regressed.data, { factor_id: factorId, stored_count: a1.signCount, presented_count: a0.signCount });
    assert.equal(h.eventsOfType('user.login_failed').at(-1)!.data.reason, 'counter_regressed');
    // An equal counter is a regression too.
    assertError(await passwordlessLogin(h, a1), 422, 'invalid_code');
    assert.equal(await sessionCount(h, owner.userId), before);
  });

  test('an expired challenge is refused; the same assertion on a live challenge passes', async () => {
    const challengeId = await loginChallengeFor(h, a2);
    h.clock.advance(301); // otp.ttl is 300 s
    assertError(await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: a2.response }), 422, 'invalid_code');
    const live = await passwordlessLogin(h, a2);
    assert.equal(live.status, 200, live.text);
  });

  test('passwordless login requires user verification', async () => {
    const login = await passwordlessLogin(h, noUv);
    assertError(login, 422, 'invalid_code');
    const row = await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: factorId }).first();
    assert.equal(Number(row.sign_count), a2.signCount, 'a refused assertion does not move the counter');
  });

  test('step-up with the passkey before deleting another factor', async () => {
    // Enrolling a second factor through the API would itself need a step-up (docs/mfa.md), and each
    // recorded assertion moves the counter once, so the other factor is planted as a row.
    const totp = { factorId: randomUUID() };
    await h.knex(`${h.tablePrefix}mfa_factors`).insert({ id: totp.factorId, user_id: owner.userId, type: 'totp', label: null, destination: null, secret_sealed: 'planted', is_default: false, last_used_step: null, confirmed_at: h.clock.now(), created_at: h.clock.now() });
    h.clock.advance(301);
    assertError(await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: owner.accessToken }), 401, 'step_up_required');
    const challenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: owner.accessToken });
    assert.equal(challenge.status, 200, challenge.text);
    assert.deepEqual(challenge.body.data.options.allowCredentials.map((entry: { id: string }) => entry.id), [primary.registration.response.id]);
    const stepped = await stepUpWithRecorded(h, owner.accessToken, factorId, a3);
    assert.equal(stepped.status, 200, stepped.text);
    assert.deepEqual(decodeJwt(stepped.body.data.access_token).amr, ['pwd', 'hwk']);
    assert.equal(h.eventsOfType('mfa.step_up_completed').at(-1)!.data.method, 'webauthn');
    const deleted = await h.delete(`/auth/mfa/factors/${totp.factorId}`, { token: stepped.body.data.access_token });
    assert.equal(deleted.status, 200, deleted.text);
    owner.accessToken = stepped.body.data.access_token;
  });

  test('the MFA gate after a password accepts the passkey (presence is enough for a second factor)', async () => {
    const { ticket, factors } = await loginForTicket(h, owner);
    assert.deepEqual(factors, [{ id: factorId, type: 'webauthn', default: true, label: 'Laptop' }]);
    const verified = await passGateWithRecorded(h, ticket, factorId, noUv);
    assert.equal(verified.status, 200, verified.text);
    const claims = decodeJwt(verified.body.data.access_token);
    assert.equal(claims.mfa, true);
    assert.deepEqual(claims.amr, ['pwd', 'hwk']);
    assert.deepEqual(h.eventsOfType('mfa.verified').at(-1)!.data, { method: 'webauthn', factor_id: factorId });
  });

  test('a foreign credential does not pass the gate, and counts as a failed attempt', async () => {
    const stranger = await h.signUp();
    assert.equal((await registerRecorded(h, stranger.accessToken, second)).status, 200);
    const { ticket } = await loginForTicket(h, owner);
    const failuresBefore = h.eventsOfType('mfa.verify_failed').length;
    const verified = await passGateWithRecorded(h, ticket, factorId, second.assertions[0]!);
    assertError(verified, 422, 'invalid_code');
    assert.equal(h.eventsOfType('mfa.verify_failed').length, failuresBefore + 1);
    assert.equal(h.eventsOfType('mfa.verify_failed').at(-1)!.data.method, 'webauthn');
    const user = await h.knex(`${h.tablePrefix}users`).where({ id: owner.userId }).first();
    assert.ok(Number(user.failed_login_count) >= 1, 'counted toward the lockout');
  });

  test('once a factor is confirmed, register/options needs step-up', async () => {
    const holder = await h.signUp();
    await enrollTotp(h, holder.accessToken);
    h.clock.advance(301);
    assertError(await h.post('/auth/passkeys/register/options', {}, { token: holder.accessToken }), 401, 'step_up_required');
  });

  test('register/verify needs step-up too: options fetched while fresh do not carry over a stale session', async () => {
    const holder = await h.signUp();
    await enrollTotp(h, holder.accessToken);
    const options = await h.post('/auth/passkeys/register/options', {}, { token: holder.accessToken });
    assert.equal(options.status, 200, options.text);
    h.clock.advance(301);
    assertError(await h.post('/auth/passkeys/register/verify', { response: second.registration.response }, { token: holder.accessToken }), 401, 'step_up_required');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: holder.userId, type: 'webauthn' }), 0);
  });
});

describe(`mfa.factor_added on ${TEST_DB}`, () => {
  test('a passkey added after a TOTP factor emits mfa.factor_added and returns no recovery codes', async () => {
    const h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
    try {
      const user = await h.signUp();
      await enrollTotp(h, user.accessToken);
      const registered = await registerRecorded(h, user.accessToken, primary);
      assert.equal(registered.status, 200, registered.text);
      assert.equal(registered.body.data.recovery_codes, undefined);
      assert.deepEqual(h.eventsOfType('mfa.factor_added').at(-1)!.data, { factor_id: registered.body.data.factor_id, type: 'webauthn' });
      assert.equal(h.eventsOfType('mfa.enrolled').length, 1, 'only the TOTP factor enrolled');
    } finally {
      await h.close();
    }
  });
});

describe(`origin, RP id and unknown credentials on ${TEST_DB}`, () => {
  let h: Harness;
  let owner: SignedUpUser;
  before(async () => {
    h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
    owner = await h.signUp();
    assert.equal((await registerRecorded(h, owner.accessToken, primary)).status, 200);
  });
  after(async () => {
    await h.close();
  });

  test('an assertion made on an origin the router does not list is refused', async () => {
    const elsewhere = await Harness.start({ shareDatabaseWith: h, config: { ...generous, webauthn: { rpId: 'localhost', origins: ['http://localhost:1'] } } });
    try {
      assertError(await passwordlessLogin(elsewhere, a0), 422, 'invalid_code');
      const user = await elsewhere.signUp();
      assertError(await registerRecorded(elsewhere, user.accessToken, second), 422, 'invalid_code');
    } finally {
      await elsewhere.close();
    }
    // The same assertion on the router it was made for passes: the origin was the only fault.
    assert.equal((await passwordlessLogin(h, a0)).status, 200);
  });

  test('an assertion made for another RP id is refused', async () => {
    const rpHome = await Harness.start({ config: { ...generous, webauthn: { rpId: otherRp.rpId, origins: [otherRp.origin] } } });
    try {
      const user = await rpHome.signUp();
      assert.equal((await registerRecorded(rpHome, user.accessToken, otherRp)).status, 200, 'registered under its own RP id');
      // Same origin allowed, RP id `localhost`: the authenticator data's RP id hash does not match.
      const parentRp = await Harness.start({ shareDatabaseWith: rpHome, config: { ...generous, webauthn: { rpId: 'localhost', origins: [otherRp.origin] } } });
      try {
        assertError(await passwordlessLogin(parentRp, otherRp.assertions[0]!), 422, 'invalid_code');
      } finally {
        await parentRp.close();
      }
      assert.equal((await passwordlessLogin(rpHome, otherRp.assertions[0]!)).status, 200, 'valid under its own RP id');
      // And the registration of the primary (RP id localhost) is refused by the passkeys.localhost router.
      const another = await rpHome.signUp();
      assertError(await registerRecorded(rpHome, another.accessToken, primary), 422, 'invalid_code');
    } finally {
      await rpHome.close();
    }
  });

  test('an unknown credential cannot log in', async () => {
    assertError(await passwordlessLogin(h, second.assertions[0]!), 422, 'invalid_code');
  });

  test('malformed assertions answer 422, never 500', async () => {
    const challengeId = await loginChallengeFor(h, a1);
    const broken = [
      { challenge_id: challengeId, response: { ...a1.response, response: { ...a1.response.response, clientDataJSON: 'bm90IGpzb24' } } },
      { challenge_id: challengeId, response: { ...a1.response, response: { ...a1.response.response, signature: 'AAAA' } } },
      { challenge_id: challengeId, response: { ...a1.response, type: 'password' } },
      { challenge_id: 'x'.repeat(65), response: a1.response },
      { challenge_id: challengeId },
    ];
    for (const body of broken) {
      const answer = await h.post('/auth/passkeys/login/verify', body);
      assert.equal(answer.status, 422, `${JSON.stringify(body).slice(0, 80)}: ${answer.text}`);
    }
  });

  test('login/options never lists credentials: an e-mail, known or unknown, changes nothing in the answer', async () => {
    // docs/mfa.md: allowCredentials is always empty, so the answer tells no account or credential id.
    const known = await h.post('/auth/passkeys/login/options', { email: owner.email });
    assert.equal(known.status, 200);
    assert.deepEqual(known.body.data.options.allowCredentials, []);
    assert.equal(known.body.data.options.userVerification, 'required');
    assert.ok(!known.text.includes(primary.registration.response.id), 'no credential id of the owner');
    const unknown = await h.post('/auth/passkeys/login/options', { email: 'nobody@example.com' });
    assert.equal(unknown.status, 200);
    assert.deepEqual(unknown.body.data.options.allowCredentials, []);
    const discoverable = await h.post('/auth/passkeys/login/options', {});
    assert.deepEqual(discoverable.body.data.options.allowCredentials, []);
    const shape = (response: typeof known) => ({ ...response.body.data.options, challenge: undefined });
    assert.deepEqual(shape(known), shape(unknown));
    assert.deepEqual(shape(known), shape(discoverable));
  });
});

describe(`lockout on ${TEST_DB}`, () => {
  test('failed passkey assertions count toward the lockout like failed codes', async () => {
    const h = await Harness.start({ config: { auth: { lockout: { threshold: 2 } }, webauthn: fixtureWebauthnConfig } });
    try {
      const owner = await h.signUp();
      assert.equal((await registerRecorded(h, owner.accessToken, primary)).status, 200);
      assertError(await passwordlessLogin(h, noUv), 422, 'invalid_code');
      assertError(await passwordlessLogin(h, noUv), 422, 'invalid_code');
      assert.equal(h.eventsOfType('user.locked').at(-1)?.user_id, owner.userId, 'user.locked after two failures');
      // Locked: even a valid assertion is refused, like a correct password.
      assertError(await passwordlessLogin(h, a0), 401, 'invalid_credentials');
      assertError(await h.post('/auth/login', { email: owner.email, password: owner.password }), 401, 'invalid_credentials');
    } finally {
      await h.close();
    }
  });
});

describe(`concurrent attempts on ${TEST_DB}`, () => {
  test('a valid assertion that finds every slot held by attempts being compared waits; past the bound 429, never invalid_credentials (issue 22)', async () => {
    const h = await Harness.start({ config: { auth: { lockout: { threshold: 2 } }, webauthn: fixtureWebauthnConfig } });
    try {
      const owner = await h.signUp();
      assert.equal((await registerRecorded(h, owner.accessToken, primary)).status, 200);
      // Both slots held, as if two attempts were being compared on other instances.
      await h.knex(`${h.tablePrefix}users`).where({ id: owner.userId }).update({ attempts_in_flight: 2, attempts_in_flight_at: h.clock.now() });
      const refused = await passwordlessLogin(h, a0);
      assertError(refused, 429, 'rate_limited');
      assert.ok(Number(refused.headers.get('retry-after')) >= 1);
      // One of them ends: the same assertion, on a fresh challenge, signs in.
      await h.knex(`${h.tablePrefix}users`).where({ id: owner.userId }).update({ attempts_in_flight: 1 });
      const login = await passwordlessLogin(h, a0);
      assert.equal(login.status, 200, login.text);
    } finally {
      await h.close();
    }
  });
});

describe(`without webauthn config on ${TEST_DB}`, () => {
  test('the passkey routes answer 404 and passkeys are not offered as factors', async () => {
    const h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
    const bare = await Harness.start({ shareDatabaseWith: h, config: generous });
    try {
      const owner = await h.signUp();
      const registered = await registerRecorded(h, owner.accessToken, primary);
      assert.equal(registered.status, 200);
      for (const path of ['/auth/passkeys/register/options', '/auth/passkeys/register/verify', '/auth/passkeys/login/options', '/auth/passkeys/login/verify']) {
        assertError(await bare.post(path, {}, { token: owner.accessToken }), 404, 'not_found', path);
      }
      const { ticket, factors } = await loginForTicket(bare, owner);
      assert.deepEqual(factors, [], 'the passkey is not offered');
      assertError(await bare.post('/auth/mfa/challenge', { factor_id: registered.body.data.factor_id }, { token: ticket }), 404, 'not_found');
    } finally {
      await bare.close();
      await h.close();
    }
  });
});

describe(`concurrency on ${TEST_DB}`, () => {
  // Threat: one captured assertion replayed in parallel. Races for real on PostgreSQL.
  test('one assertion sent 20 times at once logs in once', async () => {
    const h = await Harness.start({ config: { ...generous, webauthn: fixtureWebauthnConfig } });
    try {
      const owner = await h.signUp();
      assert.equal((await registerRecorded(h, owner.accessToken, primary)).status, 200);
      const challengeId = await loginChallengeFor(h, a4);
      const before = await sessionCount(h, owner.userId);
      const answers = await Promise.all(Array.from({ length: 20 }, () => h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: a4.response })));
      assert.equal(answers.filter((answer) => answer.status === 200).length, 1, answers.map((answer) => answer.status).join(','));
      assert.ok(answers.every((answer) => answer.status === 200 || answer.body.error === 'invalid_code'));
      assert.equal(await sessionCount(h, owner.userId), before + 1);
    } finally {
      await h.close();
    }
  });
});

describe('webauthn config is validated at construction', () => {
  const base = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 'x'.repeat(32), issuer: 'https://id.example.com' } as unknown as IdentityConfig;
  const problemsOf = (webauthn: unknown): string[] => {
    try {
      resolveConfig({ ...base, webauthn } as IdentityConfig);
      return [];
    } catch (error) {
      return (error as { problems: string[] }).problems;
    }
  };

  test('accepts an HTTPS origin on the RP id or a subdomain, and http only on localhost', () => {
    assert.deepEqual(problemsOf({ rpId: 'example.com', origins: ['https://example.com', 'https://app.example.com:8443'] }), []);
    assert.deepEqual(problemsOf({ rpId: 'localhost', origins: ['http://localhost:3000'] }), []);
    assert.equal(resolveConfig({ ...base, webauthn: { rpId: 'example.com', origins: ['https://example.com'] } }).webauthn?.rpName, 'https://id.example.com');
  });

  test('lists every problem', () => {
    assert.match(problemsOf({ rpId: 'https://example.com', origins: ['https://example.com'] }).join('\n'), /rpId/);
    assert.match(problemsOf({ rpId: 'example.com', origins: ['http://example.com'] }).join('\n'), /must use https/);
    assert.match(problemsOf({ rpId: 'example.com', origins: ['https://evil.com'] }).join('\n'), /not on "webauthn.rpId"/);
    assert.match(problemsOf({ rpId: 'example.com', origins: ['https://example.com/login'] }).join('\n'), /bare origin/);
    assert.match(problemsOf({ rpId: 'example.com', origins: [] }).join('\n'), /origins/);
    assert.match(problemsOf({ rpId: 'example.com' }).join('\n'), /origins/);
    assert.equal(problemsOf({ rpId: 'example.com', origins: ['http://example.com', 'https://evil.com'] }).length, 2);
  });
});

