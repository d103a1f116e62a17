import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError } from '../helpers/account.js';
import type { Harness, SignedUpUser, TestResponse } from '../helpers/harness.js';
import { enrollTotp, loginForTicket, nextTotpCode } from '../helpers/mfa.js';
import { newSubject, socialConfig, socialRoundTrip, type SocialStart, startLink, TestOpenIdProvider, exchangeCode } from '../helpers/oidc.js';
import { fixtures, fixtureWebauthnConfig, loginChallengeFor, type RecordedAssertion, registerRecorded } from '../helpers/passkeys.js';
import { addressAt, assertSsoRequiredBy, ssoLogin, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';

/*
 * Features combined: "require SSO" (docs/sso.md, CONTRACT 12.6) where it meets the other ways in.
 * Each feature was attacked alone; these are the seams.
 *
 * Threats:
 * - A passkey login at an enforcing domain compared the assertion and counted a wrong one toward
 *   the lockout, where enforcement decides from the domain alone and counts toward no lockout:
 *   whoever knows a credential id (not a secret in WebAuthn) locked an employee out of the
 *   company's IdP with a handful of forged assertions.
 * - An MFA ticket from a first factor taken before enforcement, spent after it, opened a session
 *   that never went through the organization's IdP.
 * - A provider link whose provider speaks for another address signed in an account at an
 *   enforcing domain (the local address decides, not the provider's).
 * - A superadmin's exemption outliving the grant: a session kept alive after the role is revoked.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();
let setup: Awaited<ReturnType<typeof ssoOrg>>;
/** At the domain, with a passkey registered before enforcement. */
let employee: SignedUpUser;
/** At the domain, with a TOTP factor, holding an MFA ticket from a password login before enforcement. */
let mfaEmployee: SignedUpUser;
let mfaFactorId: string;
let mfaSecret: string;
let ticketBeforeEnforcement: string;
/** At the domain, with a provider link whose provider speaks for an address elsewhere. */
let linkedEmployee: SignedUpUser;
let linkedSubject: string;
/** At the domain, with a provider link flow started before enforcement and finished after it. */
let linker: SignedUpUser;
let linkStartedBeforeEnforcement: SocialStart;
/** A superadmin at the domain, with a passkey; another with a password alone. */
let root: SignedUpUser;
let chief: SignedUpUser;

before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSsoHarness(op, dns, { config: { social: socialConfig(op), webauthn: fixtureWebauthnConfig } });
  setup = await ssoOrg(h, dns, op, { jit: true });

  employee = await h.signUp(addressAt(setup.domain, 'employee'));
  assert.equal((await registerRecorded(h, employee.accessToken, fixtures.primary)).status, 200);

  root = await h.signUp(addressAt(setup.domain, 'root'));
  await h.identity.service.grantSuperadmin(root.userId);
  assert.equal((await registerRecorded(h, root.accessToken, fixtures.second)).status, 200);
  chief = await h.signUp(addressAt(setup.domain, 'chief'));
  await h.identity.service.grantSuperadmin(chief.userId);

  mfaEmployee = await h.signUp(addressAt(setup.domain, 'mfa'));
  ({ factorId: mfaFactorId, secret: mfaSecret } = await enrollTotp(h, mfaEmployee.accessToken));
  ({ ticket: ticketBeforeEnforcement } = await loginForTicket(h, mfaEmployee));

  linkedEmployee = await h.signUp(addressAt(setup.domain, 'linked'));
  linkedSubject = newSubject();
  const linked = await exchangeCode(
    h,
    await socialRoundTrip(h, op, { sub: linkedSubject, email: addressAt('elsewhere.test', 'private'), email_verified: true }, startLink(h, linkedEmployee.accessToken)),
    linkedEmployee.accessToken,
  );
  assert.equal(linked.status, 200, linked.text);

  linker = await h.signUp(addressAt(setup.domain, 'linker'));
  linkStartedBeforeEnforcement = await startLink(h, linker.accessToken)();

  const enforced = await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: setup.org.owner.token });
  assert.equal(enforced.status, 200, enforced.text);
});
after(async () => {
  await h.close();
  await op.close();
});

function assertSsoRequired(response: TestResponse, status = 403, context = ''): void {
  assertSsoRequiredBy(response, setup.org.slug, status, context);
}

/** The recorded assertion with its signature altered: what someone who knows the credential id can send. */
function forged(assertion: RecordedAssertion): RecordedAssertion {
  const signature: string = assertion.response.response.signature;
  const flipped = (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1);
  return { ...assertion, response: { ...assertion.response, response: { ...assertion.response.response, signature: flipped } } };
}

async function passkeyLogin(assertion: RecordedAssertion): Promise<TestResponse> {
  const challengeId = await loginChallengeFor(h, assertion);
  return h.post('/auth/passkeys/login/verify', { challenge_id: challengeId, response: assertion.response });
}

async function failedLogins(userId: string): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}users`).where({ id: userId });
  return Number(row.failed_login_count ?? 0);
}

describe('a passkey login at an enforcing domain is decided by the domain alone', () => {
  test('a forged assertion gets the 403 a right one gets, and counts toward no lockout', async () => {
    for (let attempt = 0; attempt < 6; attempt += 1) {
      assertSsoRequired(await passkeyLogin(forged(fixtures.primary.assertions[attempt % 2]!)), 403, `forged assertion ${attempt}`);
    }
    assert.equal(await failedLogins(employee.userId), 0, 'no failure counted at an enforcing domain');
    assertSsoRequired(await passkeyLogin(fixtures.primary.assertions[2]!), 403, 'the right passkey');
  });

  test("forged assertions never lock the employee out of the organization's IdP", async () => {
    for (let attempt = 0; attempt < 6; attempt += 1) await passkeyLogin(forged(fixtures.primary.assertions[3]!));
    const { trip, exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: employee.email }, { email: employee.email });
    assert.ok(exchanged, `the callback handed out a code, not social_error=${trip.error}`);
    assert.equal(exchanged.status, 200, exchanged.text);
    // The employee holds a passkey: single sign-on goes on to the MFA gate, never to invalid_credentials.
    assert.equal(exchanged.body.data.mfa_required, true, exchanged.text);
  });

  test("a superadmin's forged assertion gets the same 403 (nothing tells the address apart); the right one signs in", async () => {
    assertSsoRequired(await passkeyLogin(forged(fixtures.second.assertions[0]!)), 403, 'forged superadmin assertion');
    const signedIn = await passkeyLogin(fixtures.second.assertions[1]!);
    assert.equal(signedIn.status, 200, signedIn.text);
    assert.ok(signedIn.body.data.access_token);
  });
});

describe('the MFA gate is a way in too', () => {
  test('a ticket from a password taken before enforcement opens no session after it: 403 sso_required, the code not spent', async () => {
    const verified = await h.post('/auth/mfa/verify', { factor_id: mfaFactorId, code: nextTotpCode(h, mfaSecret) }, { token: ticketBeforeEnforcement });
    assertSsoRequired(verified, 403, 'mfa verify');
    assert.equal(verified.body.data, undefined, 'no tokens');
    const sessions = await h.knex(`${h.tablePrefix}sessions`).where({ user_id: mfaEmployee.userId }).whereNull('revoked_at');
    assert.equal(sessions.length, 1, 'only the session from before enforcement');
    assert.equal(await failedLogins(mfaEmployee.userId), 0);
  });

  test('the same employee through the IdP passes the same gate and the session refreshes', async () => {
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: mfaEmployee.email }, { email: mfaEmployee.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.mfa_required, true);
    const verified = await h.post('/auth/mfa/verify', { factor_id: mfaFactorId, code: nextTotpCode(h, mfaSecret) }, { token: exchanged!.body.data.mfa_token });
    assert.equal(verified.status, 200, verified.text);
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: verified.body.data.refresh_token })).status, 200);
  });
});

describe('a provider link speaking for another address', () => {
  test("signs in no account at an enforcing domain: the account's own address decides (social_error or 403 sso_required)", async () => {
    const trip = await socialRoundTrip(h, op, { sub: linkedSubject, email: addressAt('elsewhere.test', 'private'), email_verified: true });
    if (trip.code) {
      const exchanged = await exchangeCode(h, trip);
      assertError(exchanged, 403, 'sso_required');
      assert.equal(exchanged.body.data, undefined);
    } else {
      assert.equal(trip.error, 'sso_required');
    }
  });
});

describe('a way in added by a session that enforcement ended', () => {
  test('a provider link started before enforcement and exchanged after it is not made: 403 sso_required, no identity', async () => {
    const trip = await socialRoundTrip(h, op, { sub: newSubject(), email: addressAt('elsewhere.test', 'home'), email_verified: true }, async () => linkStartedBeforeEnforcement);
    const exchanged = await exchangeCode(h, trip, linker.accessToken);
    assertSsoRequired(exchanged, 403, 'link exchange');
    const identities = await h.knex(`${h.tablePrefix}social_identities`).where({ user_id: linker.userId });
    assert.equal(identities.length, 0, 'no link outlives the session');
  });
});

describe("a superadmin's exemption lasts as long as the grant", () => {
  test('revoked, its session from a password at the enforcing domain refreshes no more: 401 sso_required', async () => {
    const login = await h.post('/auth/login', { email: chief.email, password: chief.password });
    assert.equal(login.status, 200, login.text);
    assert.ok(login.body.data.refresh_token, login.text);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: login.body.data.refresh_token });
    assert.equal(refreshed.status, 200, refreshed.text);
    await h.identity.service.revokeSuperadmin(chief.userId);
    assertSsoRequired(await h.post('/auth/token/refresh', { refresh_token: refreshed.body.data.refresh_token }), 401, 'refresh after revocation');
    assertSsoRequired(await h.post('/auth/login', { email: chief.email, password: chief.password }), 403, 'password after revocation');
  });
});
