import assert from 'node:assert/strict';
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { isoCBOR } from '@simplewebauthn/server/helpers';
import { resolveConfig } from '../../src/config/schema.js';
import type { IdentityConfig } from '../../src/index.js';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, type SignedUpUser } from '../helpers/harness.js';
import { loginForTicket } from '../helpers/mfa.js';

/*
 * Passkeys under attack with a software authenticator (P-256, attestation `none`) that signs
 * over the challenges the option routes really issue, so every flag, origin, type and counter
 * can be chosen: a challenge carried to another purpose or past its expiry, user presence or
 * verification off, an assertion typed `webauthn.create`, cross-origin ceremonies, origins
 * that differ from the configured ones by a port, a scheme or a subdomain, a credential id
 * past the WebAuthn size limit, counters that never move or wrap, and account states.
 */
const RP_ID = 'example.com';
const ORIGIN = 'https://example.com';
const APP_ORIGIN = 'https://app.example.com';
const webauthn = { rpId: RP_ID, origins: [ORIGIN, APP_ORIGIN] };
const generous = { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } };
const sha256 = (data: Uint8Array | string): Buffer => createHash('sha256').update(data).digest();
const b64u = (data: Uint8Array | string): string => Buffer.from(data).toString('base64url');

interface ClientData {
  type?: string;
  origin?: string;
  crossOrigin?: boolean;
  topOrigin?: string;
}
interface Flags {
  up?: boolean;
  uv?: boolean;
}

interface Statement {
  fmt: string;
  selfSigned?: 'genuine' | 'forged';
  junk?: boolean;
}

/** A soft authenticator holding one discoverable credential. */
class SoftAuthenticator {
  readonly credentialId: Buffer;
  private readonly key: KeyObject;
  private readonly publicJwk: { x: string; y: string };
  userHandle: string | undefined;
  counter: number;

  constructor(options: { credentialIdBytes?: number; counter?: number } = {}) {
    this.credentialId = randomBytes(options.credentialIdBytes ?? 32);
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.key = pair.privateKey;
    const jwk = pair.publicKey.export({ format: 'jwk' });
    this.publicJwk = { x: jwk.x!, y: jwk.y!};
    this.counter = options.counter ?? 1;
  }

  get id(): string {
    return b64u(this.credentialId);
  }

  private authData(flags: Flags, counter: number, attested?: boolean, rpId = RP_ID): Buffer {
    let bits = 0;
    if (flags.up ?? true) bits |= 0x01;
    if (flags.uv ?? true) bits |= 0x04;
    if (attested) bits |= 0x40;
    const head = Buffer.alloc(37);
    sha256(rpId).copy(head, 0);
    head[32] = bits;
    head.writeUInt32BE(counter >>> 0, 33);
    if (!attested) return head;
    const cose = isoCBOR.encode(
      new Map<number, number | Uint8Array>([
        [1, 2],
        [3, -7],
        [-1, 1],
        [-2, Buffer.from(this.publicJwk.x, 'base64url')],
        [-3, Buffer.from(this.publicJwk.y, 'base64url')],
      ]),
    );
    const length = Buffer.alloc(2);
    length.writeUInt16BE(this.credentialId.length);
    return Buffer.concat([head, Buffer.alloc(16), length, this.credentialId, Buffer.from(cose)]);
  }

  private clientData(challenge: string, defaults: { type: string }, client: ClientData): string {
    return b64u(JSON.stringify({ type: client.type ?? defaults.type, challenge, origin: client.origin ?? ORIGIN, ...('crossOrigin' in client ? { crossOrigin: client.crossOrigin } : { crossOrigin: false }), ...(client.topOrigin ? { topOrigin: client.topOrigin } : {}) }));
  }

  /** A registration response to creation options (their challenge and user handle). */
  attest(options: { challenge: string; user: { id: string } }, client: ClientData = {}, flags: Flags = {}, statement: Statement = { fmt: 'none' }): any {
    this.userHandle = options.user.id;
    const authData = this.authData(flags, 0, true);
    const clientDataJSON = this.clientData(options.challenge, { type: 'webauthn.create' }, client);
    const attStmt = new Map<string, number | Uint8Array>();
    if (statement.selfSigned) {
      // Packed self attestation (WebAuthn 8.2): the credential's own key signs authData || hash(clientDataJSON).
      const signed = sign('sha256', Buffer.concat([authData, sha256(Buffer.from(clientDataJSON, 'base64url'))]), this.key);
      attStmt.set('alg', -7);
      attStmt.set('sig', statement.selfSigned === 'forged' ? randomBytes(signed.length) : signed);
    }
    if (statement.junk) attStmt.set('junk', 1);
    const attestationObject = isoCBOR.encode(
      new Map<string, string | Map<string, number | Uint8Array> | Uint8Array>([
        ['fmt', statement.fmt],
        ['attStmt', attStmt],
        ['authData', authData],
      ]),
    );
    return {
      id: this.id,
      rawId: this.id,
      type: 'public-key',
      clientExtensionResults: {},
      response: { clientDataJSON, attestationObject: b64u(attestationObject), transports: ['internal'] },
    };
  }

  /** An assertion over `challenge`; the counter moves forward unless `counter` is given. */
  assert(challenge: string, client: ClientData = {}, flags: Flags = {}, counter?: number): any {
    const count = counter ?? ++this.counter;
    const authenticatorData = this.authData(flags, count);
    const clientDataJSON = this.clientData(challenge, { type: 'webauthn.get' }, client);
    const signature = sign('sha256', Buffer.concat([authenticatorData, sha256(Buffer.from(clientDataJSON, 'base64url'))]), this.key);
    return {
      id: this.id,
      rawId: this.id,
      type: 'public-key',
      clientExtensionResults: {},
      response: { clientDataJSON, authenticatorData: b64u(authenticatorData), signature: b64u(signature), userHandle: this.userHandle ?? null },
    };
  }
}

async function registerSoft(h: Harness, token: string, authenticator = new SoftAuthenticator()): Promise<{ authenticator: SoftAuthenticator; factorId: string }> {
  const options = await h.post('/auth/passkeys/register/options', {}, { token });
  assert.equal(options.status, 200, options.text);
  const verified = await h.post('/auth/passkeys/register/verify', { response: authenticator.attest(options.body.data) }, { token });
  assert.equal(verified.status, 200, verified.text);
  return { authenticator, factorId: verified.body.data.factor_id };
}

async function loginOptions(h: Harness): Promise<{ challengeId: string; challenge: string }> {
  const options = await h.post('/auth/passkeys/login/options', {});
  assert.equal(options.status, 200, options.text);
  return { challengeId: options.body.data.challenge_id, challenge: options.body.data.options.challenge };
}

async function passkeyLogin(h: Harness, authenticator: SoftAuthenticator, client: ClientData = {}, flags: Flags = {}, counter?: number) {
  const { challengeId, challenge } = await loginOptions(h);
  return h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: authenticator.assert(challenge, client, flags, counter) });
}

function refused(response: { status: number; text: string; body: any }, error = 'invalid_code'): void {
  assert.equal(response.status, 422, response.text);
  assert.equal(response.body.error, error, response.text);
}

/** One router for every ceremony below: each test signs up accounts of its own. */
let h: Harness;
before(async () => {
  h = await Harness.start({ config: { ...generous, webauthn } });
});
after(async () => {
  await h.close();
});

describe(`the soft authenticator itself on ${TEST_DB}`, () => {
  test('registers, signs in without a password, passes the gate and steps up', async () => {
    const user = await h.signUp();
    const { authenticator, factorId } = await registerSoft(h, user.accessToken);
    const login = await passkeyLogin(h, authenticator);
    assert.equal(login.status, 200, login.text);
    // The second configured origin is as good as the first.
    assert.equal((await passkeyLogin(h, authenticator, { origin: APP_ORIGIN })).status, 200);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    const gate = await h.post('/auth/mfa/verify', { factor_id: factorId, response: authenticator.assert(challenge.body.data.options.challenge) }, { token: ticket });
    assert.equal(gate.status, 200, gate.text);
    const token = gate.body.data.access_token;
    const stepUpChallenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token });
    const stepUp = await h.post('/auth/mfa/step-up', { factor_id: factorId, response: authenticator.assert(stepUpChallenge.body.data.options.challenge) }, { token });
    assert.equal(stepUp.status, 200, stepUp.text);
  });
});

describe(`a challenge carried to another purpose, or past its expiry, on ${TEST_DB}`, () => {
  let user: SignedUpUser;
  let authenticator: SoftAuthenticator;
  let factorId: string;
  before(async () => {
    user = await h.signUp();
    ({ authenticator, factorId } = await registerSoft(h, user.accessToken));
  });
  test('a passwordless-login challenge does not register a passkey', async () => {
    const { challenge } = await loginOptions(h);
    const fresh = await h.signUp();
    const stranger = new SoftAuthenticator();
    const carried = await h.post('/auth/passkeys/register/verify', { response: stranger.attest({ challenge, user: { id: b64u(randomBytes(32)) } }) }, { token: fresh.accessToken });
    refused(carried);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: fresh.userId }), 0);
  });

  test('a step-up challenge does not sign in without a password, nor pass the MFA gate', async () => {
    const token = (await passkeyLogin(h, authenticator)).body.data.access_token;
    const stepUp = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token });
    assert.equal(stepUp.status, 200, stepUp.text);
    const challenge = stepUp.body.data.options.challenge;
    const { challengeId } = await loginOptions(h);
    refused(await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: authenticator.assert(challenge) }));
    const { ticket } = await loginForTicket(h, user);
    refused(await h.post('/auth/mfa/verify', { factor_id: factorId, response: authenticator.assert(challenge) }, { token: ticket }));
    // The step-up challenge was not spent by those attempts: it still answers its own purpose.
    const own = await h.post('/auth/mfa/step-up', { factor_id: factorId, response: authenticator.assert(challenge) }, { token });
    assert.equal(own.status, 200, own.text);
  });

  test("an MFA-gate challenge does not sign in without a password, and a login challenge's id does not carry another challenge", async () => {
    const { ticket } = await loginForTicket(h, user);
    const gate = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    const gateChallenge = gate.body.data.options.challenge;
    const { challengeId } = await loginOptions(h);
    const sessions = await countRows(h, 'sessions', { user_id: user.userId });
    refused(await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: authenticator.assert(gateChallenge) }));
    // A live login challenge under another login challenge's id: refused too.
    const other = await loginOptions(h);
    refused(await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: authenticator.assert(other.challenge) }));
    // A login challenge at the gate: refused.
    const third = await loginOptions(h);
    refused(await h.post('/auth/mfa/verify', { factor_id: factorId, response: authenticator.assert(third.challenge) }, { token: ticket }));
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), sessions);
  });

  test('a challenge is dead at the very millisecond otp.ttl ends, alive the millisecond before', async () => {
    const early = await loginOptions(h);
    h.clock.set(h.clock.now() + 300_000 - 1);
    const justInTime = await h.post('/auth/passkeys/login/verify', { challenge_id: early.challengeId, response: authenticator.assert(early.challenge) });
    assert.equal(justInTime.status, 200, justInTime.text);
    const late = await loginOptions(h);
    h.clock.set(h.clock.now() + 300_000);
    refused(await h.post('/auth/passkeys/login/verify', { challenge_id: late.challengeId, response: authenticator.assert(late.challenge) }));
    // Registration options expire alike.
    const fresh = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: fresh.accessToken });
    h.clock.advance(300);
    const expired = await h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data) }, { token: fresh.accessToken });
    assert.notEqual(expired.status, 200, expired.text);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: fresh.userId }), 0);
  });
});

describe(`what the authenticator and the browser signed on ${TEST_DB}`, () => {
  let user: SignedUpUser;
  let authenticator: SoftAuthenticator;
  let factorId: string;
  before(async () => {
    user = await h.signUp();
    ({ authenticator, factorId } = await registerSoft(h, user.accessToken));
  });
  async function atGate(response: (challenge: string) => unknown) {
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    return h.post('/auth/mfa/verify', { factor_id: factorId, response: response(challenge.body.data.options.challenge) }, { token: ticket });
  }

  test('user verification off: refused at passwordless login, enough at the MFA gate (CONTRACT 8)', async () => {
    refused(await passkeyLogin(h, authenticator, {}, { uv: false }));
    const gate = await atGate((challenge) => authenticator.assert(challenge, {}, { uv: false }));
    assert.equal(gate.status, 200, gate.text);
  });

  test('user presence off: refused at login, at the gate and at registration', async () => {
    refused(await passkeyLogin(h, authenticator, {}, { up: false }));
    refused(await atGate((challenge) => authenticator.assert(challenge, {}, { up: false })));
    const fresh = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: fresh.accessToken });
    refused(await h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data, {}, { up: false }) }, { token: fresh.accessToken }));
  });

  test('an assertion whose clientDataJSON.type is webauthn.create is refused at login and at the gate', async () => {
    refused(await passkeyLogin(h, authenticator, { type: 'webauthn.create' }));
    refused(await atGate((challenge) => authenticator.assert(challenge, { type: 'webauthn.create' })));
    // And an attestation typed webauthn.get does not register.
    const fresh = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: fresh.accessToken });
    refused(await h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data, { type: 'webauthn.get' }) }, { token: fresh.accessToken }));
  });

  test('a cross-origin assertion naming a top origin is refused (no top origin is configured)', async () => {
    refused(await passkeyLogin(h, authenticator, { crossOrigin: true, topOrigin: 'https://evil.example' }));
    refused(await passkeyLogin(h, authenticator, { crossOrigin: false, topOrigin: 'https://evil.example' }));
    refused(await atGate((challenge) => authenticator.assert(challenge, { crossOrigin: true, topOrigin: 'https://evil.example' })));
  });

  test('a cross-origin registration naming a top origin is refused, as the same assertion is at login', async () => {
    const fresh = await h.signUp();
    for (const client of [{ crossOrigin: true, topOrigin: 'https://evil.example' }, { crossOrigin: false, topOrigin: 'https://evil.example' }]) {
      const options = await h.post('/auth/passkeys/register/options', {}, { token: fresh.accessToken });
      refused(await h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data, client) }, { token: fresh.accessToken }));
    }
    assert.equal(await countRows(h, 'mfa_factors', { user_id: fresh.userId }), 0);
  });

  test('every origin but the configured ones is refused: port, scheme, subdomain, suffix, case, trailing slash', async () => {
    const origins = [
      'https://example.com:8443',
      'http://example.com',
      'https://evil.example.com',
      'https://app.example.com.evil.net',
      'https://example.com.evil.net',
      'https://EXAMPLE.com',
      'https://example.com/',
      'https://example.com:443',
      'null',
    ];
    for (const origin of origins) {
      const login = await passkeyLogin(h, authenticator, { origin });
      assert.equal(login.status, 422, `${origin}: ${login.text}`);
    }
    refused(await atGate((challenge) => authenticator.assert(challenge, { origin: 'https://evil.example.com' })));
    const fresh = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: fresh.accessToken });
    refused(await h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data, { origin: 'https://example.com:8443' }) }, { token: fresh.accessToken }));
  });

  test('counters: an authenticator that never counts (always 0) signs in again and again; a counter that wraps to 0 is refused', async () => {
    const fresh = await h.signUp();
    const zero = new SoftAuthenticator({ counter: 0 });
    await registerSoft(h, fresh.accessToken, zero);
    for (let round = 0; round < 3; round += 1) assert.equal((await passkeyLogin(h, zero, {}, {}, 0)).status, 200);
    // Highest uint32, then the wrap.
    const top = await passkeyLogin(h, authenticator, {}, {}, 0xffffffff);
    assert.equal(top.status, 200, top.text);
    const stored = await h.knex(`${h.tablePrefix}mfa_factors`).where({ id: factorId }).first();
    assert.equal(Number(stored.sign_count), 0xffffffff);
    refused(await passkeyLogin(h, authenticator, {}, {}, 0));
    refused(await passkeyLogin(h, authenticator, {}, {}, 1));
  });
});

describe(`credential ids on ${TEST_DB}`, () => {
  test('a credential id past 1023 bytes (WebAuthn 7.1 step 24), or other than the one reported, is refused with 422, never stored, never a 500', async () => {
    const user = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    const oversized = new SoftAuthenticator({ credentialIdBytes: 1100 });
    // The route bounds the client's `id`, so the client reports a short one; the attested id (in the authenticator data) is 1100 bytes.
    const verify = await h.post('/auth/passkeys/register/verify', { response: { ...oversized.attest(options.body.data), id: 'c2hvcnQ', rawId: 'c2hvcnQ' } }, { token: user.accessToken });
    assert.equal(verify.status, 422, verify.text);
    assert.equal(verify.body.error, 'invalid_code');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    // A credential attested under one id and reported under another would never be found at login: refused too.
    const misreported = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    const otherId = b64u(randomBytes(32));
    const mismatch = await h.post('/auth/passkeys/register/verify', { response: { ...new SoftAuthenticator().attest(misreported.body.data), id: otherId, rawId: otherId } }, { token: user.accessToken });
    refused(mismatch);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    // 1023 bytes, the limit itself, is a passkey like any other.
    const limit = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    const largest = new SoftAuthenticator({ credentialIdBytes: 1023 });
    const ok = await h.post('/auth/passkeys/register/verify', { response: largest.attest(limit.body.data) }, { token: user.accessToken });
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await passkeyLogin(h, largest)).status, 200);
  });

  test("another user's credential id: 409 and nothing stored; their excludeCredentials and the gate's allowCredentials never list it", async () => {
    const victim = await h.signUp();
    const { authenticator } = await registerSoft(h, victim.accessToken);
    const attacker = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: attacker.accessToken });
    assert.deepEqual(options.body.data.excludeCredentials, []);
    const taken = await h.post('/auth/passkeys/register/verify', { response: authenticator.attest(options.body.data) }, { token: attacker.accessToken });
    assert.equal(taken.status, 409, taken.text);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: attacker.userId }), 0);
    const own = await registerSoft(h, attacker.accessToken);
    const again = await h.post('/auth/passkeys/register/options', {}, { token: attacker.accessToken });
    assert.deepEqual(
      again.body.data.excludeCredentials.map((entry: { id: string }) => entry.id),
      [own.authenticator.id],
    );
    const { ticket } = await loginForTicket(h, attacker);
    const gate = await h.post('/auth/mfa/challenge', { factor_id: own.factorId }, { token: ticket });
    assert.deepEqual(
      gate.body.data.options.allowCredentials.map((entry: { id: string }) => entry.id),
      [own.authenticator.id],
    );
  });

  test('odd credential ids at login (padding, standard base64, non-canonical bits, huge) answer 422, never 500', async () => {
    const user = await h.signUp();
    const { authenticator } = await registerSoft(h, user.accessToken);
    for (const id of [`${authenticator.id}=`, `${authenticator.id.replace(/-/g, '+').replace(/_/g, '/')}+/`, 'A'.repeat(5000), '']) {
      const { challengeId, challenge } = await loginOptions(h);
      const response = { ...authenticator.assert(challenge), id, rawId: id };
      const answer = await h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response });
      assert.ok(answer.status === 422 || answer.status === 400, `${id.slice(0, 20)}: ${answer.status} ${answer.text}`);
    }
  });
});

describe(`attestation formats and a registration challenge raced on ${TEST_DB}`, () => {
  async function register(user: SignedUpUser, statement: Statement) {
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    assert.equal(options.status, 200, options.text);
    return h.post('/auth/passkeys/register/verify', { response: new SoftAuthenticator().attest(options.body.data, {}, {}, statement) }, { token: user.accessToken });
  }

  test('an unknown format, a none statement that is not empty, and a forged packed self attestation are refused; a genuine one is accepted', async () => {
    const user = await h.signUp();
    refused(await register(user, { fmt: 'evil' }));
    refused(await register(user, { fmt: 'none', junk: true }));
    refused(await register(user, { fmt: 'packed', selfSigned: 'forged' }));
    refused(await register(user, { fmt: 'packed' }));
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
    // No attestation is asked (attestationType none), so a self attestation that verifies is a passkey like any other.
    const genuine = await register(user, { fmt: 'packed', selfSigned: 'genuine' });
    assert.equal(genuine.status, 200, genuine.text);
  });

  test('one registration challenge answered by two authenticators at once registers one passkey', async () => {
    const user = await h.signUp();
    const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
    const answers = await Promise.all(
      [new SoftAuthenticator(), new SoftAuthenticator(), new SoftAuthenticator()].map((authenticator) =>
        h.post('/auth/passkeys/register/verify', { response: authenticator.attest(options.body.data) }, { token: user.accessToken }),
      ),
    );
    assert.equal(answers.filter((answer) => answer.status === 200).length, 1, answers.map((answer) => answer.text).join('\n'));
    for (const answer of answers) assert.ok([200, 422].includes(answer.status), answer.text);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 1);
  });
});

describe(`account states and a passkey removed mid-ceremony on ${TEST_DB}`, () => {
  test('a disabled account: 403 account_disabled at passwordless login, no session at the gate', async () => {
    const user = await h.signUp();
    const { authenticator, factorId } = await registerSoft(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ status: 'disabled' });
    const sessions = await countRows(h, 'sessions', { user_id: user.userId });
    const login = await passkeyLogin(h, authenticator);
    assert.equal(login.status, 403, login.text);
    assert.equal(login.body.error, 'account_disabled');
    const gate = await h.post('/auth/mfa/verify', { factor_id: factorId, response: authenticator.assert(challenge.body.data.options.challenge) }, { token: ticket });
    assert.notEqual(gate.status, 200, gate.text);
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), sessions);
  });

  test('a locked account: 401 invalid_credentials at passwordless login, the assertion not even checked', async () => {
    const user = await h.signUp();
    const { authenticator } = await registerSoft(h, user.accessToken);
    await h.knex(`${h.tablePrefix}users`).where({ id: user.userId }).update({ locked_until: h.clock.now() + 600_000 });
    const login = await passkeyLogin(h, authenticator);
    assert.equal(login.status, 401, login.text);
    assert.equal(login.body.error, 'invalid_credentials');
    h.clock.advance(601);
    assert.equal((await passkeyLogin(h, authenticator)).status, 200);
  });

  test('a passkey removed between the gate challenge and its assertion, or between login options and verify, signs no one in', async () => {
    const user = await h.signUp();
    const { authenticator, factorId } = await registerSoft(h, user.accessToken);
    const second = await registerSoft(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    const pending = await loginOptions(h);
    const removed = await h.delete(`/auth/mfa/factors/${factorId}`, { token: user.accessToken });
    assert.equal(removed.status, 200, removed.text);
    const gate = await h.post('/auth/mfa/verify', { factor_id: factorId, response: authenticator.assert(challenge.body.data.options.challenge) }, { token: ticket });
    assert.notEqual(gate.status, 200, gate.text);
    refused(await h.post('/auth/passkeys/login/verify', { challenge_id: pending.challengeId, response: authenticator.assert(pending.challenge) }));
    // The other passkey still works.
    assert.equal((await passkeyLogin(h, second.authenticator)).status, 200);
  });
});

describe(`one assertion raced at the gate on ${TEST_DB}`, () => {
  test('one gate assertion sent ten times at once opens one session', async () => {
    const user = await h.signUp();
    const { authenticator, factorId } = await registerSoft(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    const response = authenticator.assert(challenge.body.data.options.challenge);
    const sessions = await countRows(h, 'sessions', { user_id: user.userId });
    const answers = await Promise.all(Array.from({ length: 10 }, () => h.post('/auth/mfa/verify', { factor_id: factorId, response }, { token: ticket })));
    assert.equal(answers.filter((answer) => answer.status === 200).length, 1, answers.map((answer) => answer.status).join(','));
    for (const answer of answers) assert.ok([200, 401, 422, 429].includes(answer.status), answer.text);
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), sessions + 1);
  });
});

describe('an RP id that is a public suffix', () => {
  const base = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 'x'.repeat(32), issuer: 'https://id.example.com' } as unknown as IdentityConfig;
  const problemsOf = (webauthn: IdentityConfig['webauthn']): string[] => {
    try {
      resolveConfig({ ...base, webauthn });
      return [];
    } catch (error) {
      return (error as { problems: string[] }).problems;
    }
  };

  test('is refused at construction (browsers refuse every ceremony for it), ICANN or private; a registrable domain, localhost and an intranet name are not', () => {
    for (const rpId of ['com', 'co.uk', 'github.io', 'appspot.com']) {
      assert.match(problemsOf({ rpId, origins: [`https://someone.${rpId}`] }).join('\n'), /public suffix/, rpId);
    }
    for (const [rpId, origin] of [['example.co.uk', 'https://example.co.uk'], ['me.github.io', 'https://me.github.io'], ['localhost', 'http://localhost:3000'], ['intranet', 'https://intranet']] as const) {
      assert.deepEqual(problemsOf({ rpId, origins: [origin] }), [], rpId);
    }
  });
});
