import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { keyedHash } from '../../src/crypto/keyed-hash.js';
import type { Harness, TestResponse } from './harness.js';
import { servicesOf } from '../../src/create-identity-router.js';

export interface RecordedAssertion {
  challenge: string;
  userVerified: boolean;
  signCount: number;
  response: any;
}

export interface RecordedAuthenticator {
  userHandle: string;
  registration: { challenge: string; response: any };
  assertions: RecordedAssertion[];
  assertionWithoutUserVerification?: RecordedAssertion;
}

export interface WebauthnFixtures {
  rpId: string;
  origin: string;
  primary: RecordedAuthenticator & { assertionWithoutUserVerification: RecordedAssertion };
  second: RecordedAuthenticator;
  otherRp: RecordedAuthenticator & { rpId: string; origin: string };
}

/** Recorded from Chromium by scripts/record-webauthn-fixtures.ts. */
export const fixtures: WebauthnFixtures = JSON.parse(readFileSync(new URL('../fixtures/webauthn-fixtures.json', import.meta.url), 'utf8'));

/** The `webauthn` config the fixtures were recorded for. */
export const fixtureWebauthnConfig = { rpId: fixtures.rpId, origins: [fixtures.origin] };

/**
 * The recorded ceremonies were signed over challenges of their own. The option routes
 * store a random challenge (as a keyed hash); this replaces the stored hash of `issued`
 * with the hash of `recorded` (and the registration's user handle), so the recorded
 * response meets a real, live, single-use challenge row and every check runs as in production.
 * (Planting a recorded assertion on a fresh challenge stands for an authenticator that signed
 * that challenge; the counter-regression test uses it as a cloned key would.)
 */
export async function swapChallenge(h: Harness, issued: string, recorded: string, userHandle?: string): Promise<void> {
  const key = servicesOf(h.identity).context.keys.passkeyChallengeHash;
  const table = `${h.tablePrefix}webauthn_challenges`;
  // A recording is reused across tests; the row it was planted in before (consumed or stale) gives way.
  await h.knex(table).where({ challenge_hash: keyedHash(key, recorded) }).delete();
  const changed = await h
    .knex(`${h.tablePrefix}webauthn_challenges`)
    .where({ challenge_hash: keyedHash(key, issued) })
    .update({ challenge_hash: keyedHash(key, recorded), ...(userHandle ? { user_handle: userHandle } : {}) });
  assert.equal(changed, 1, 'the issued challenge is stored exactly once');
}

/** register/options, then register/verify with the recorded attestation. */
export async function registerRecorded(h: Harness, accessToken: string, authenticator: RecordedAuthenticator, label?: string): Promise<TestResponse> {
  const options = await h.post('/auth/passkeys/register/options', {}, { token: accessToken });
  if (options.status !== 200) return options;
  await swapChallenge(h, options.body.data.challenge, authenticator.registration.challenge, authenticator.userHandle);
  return h.post('/auth/passkeys/register/verify', { response: authenticator.registration.response, ...(label ? { label } : {}) }, { token: accessToken });
}

/** login/options, answering the challenge id the recorded assertion is bound to. */
export async function loginChallengeFor(h: Harness, assertion: RecordedAssertion, body: Record<string, unknown> = {}): Promise<string> {
  const options = await h.post('/auth/passkeys/login/options', body);
  assert.equal(options.status, 200, options.text);
  await swapChallenge(h, options.body.data.options.challenge, assertion.challenge);
  return options.body.data.challenge_id;
}

export async function passwordlessLogin(h: Harness, assertion: RecordedAssertion): Promise<TestResponse> {
  const challengeId = await loginChallengeFor(h, assertion);
  return h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: assertion.response });
}

/** The MFA gate with a passkey factor: challenge, then verify with the recorded assertion. */
export async function passGateWithRecorded(h: Harness, ticket: string, factorId: string, assertion: RecordedAssertion): Promise<TestResponse> {
  const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
  assert.equal(challenge.status, 200, challenge.text);
  assert.equal(challenge.body.data.channel, 'webauthn');
  await swapChallenge(h, challenge.body.data.options.challenge, assertion.challenge);
  return h.post('/auth/mfa/verify', { factor_id: factorId, response: assertion.response }, { token: ticket });
}

export async function stepUpWithRecorded(h: Harness, accessToken: string, factorId: string, assertion: RecordedAssertion): Promise<TestResponse> {
  const challenge = await h.post('/auth/mfa/step-up/challenge', { factor_id: factorId }, { token: accessToken });
  assert.equal(challenge.status, 200, challenge.text);
  assert.equal(challenge.body.data.channel, 'webauthn');
  await swapChallenge(h, challenge.body.data.options.challenge, assertion.challenge);
  return h.post('/auth/mfa/step-up', { factor_id: factorId, response: assertion.response }, { token: accessToken });
}
