import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { type Harness, STRONG_PASSWORD, type SignedUpUser, type TestResponse } from '../helpers/harness.js';
import { newSubject, PROVIDER_ID, socialConfig, socialLogin, socialRoundTrip, TestOpenIdProvider } from '../helpers/oidc.js';
import { createOrg, switchOrg } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, passwordlessLogin, registerRecorded } from '../helpers/passkeys.js';
import { addressAt, assertSsoRequiredBy, ssoLogin, ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';

/*
 * docs/sso.md, "require SSO": while a connection is active with enforce on, every address at
 * the organization's verified domains is refused on every other path, from the domain alone,
 * before any credential is compared; superadmins pass only with a right credential. Threat:
 * a side door (password, reset, register, social, passkey, invite, refresh) that still lets a
 * user at the domain in past the company's IdP. Each test below fails without the one rule
 * (SignInRules) asked on its path.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();
let setup: Awaited<ReturnType<typeof ssoOrg>>;
/** Signed up at the domain before enforcement: a password, a verified address, a session. */
let employee: SignedUpUser;
let employeeBeforeSocial: string;
/** Another employee, with no second factor, and a superadmin at the domain. */
let colleague: SignedUpUser;
let root: SignedUpUser;

before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSsoHarness(op, dns, { config: { social: socialConfig(op), webauthn: fixtureWebauthnConfig, passwordless: {} } });
  setup = await ssoOrg(h, dns, op, { jit: true });
  employee = await h.signUp(addressAt(setup.domain, 'employee'));
  // A passkey and a social link made before enforcement.
  assert.equal((await registerRecorded(h, employee.accessToken, fixtures.primary)).status, 200);
  employeeBeforeSocial = newSubject();
  colleague = await h.signUp(addressAt(setup.domain, 'colleague'));
  root = await h.signUp(addressAt(setup.domain, 'root'));
  await h.identity.service.grantSuperadmin(root.userId);
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

describe('every path refused for an address at an enforcing domain', () => {
  test('POST /auth/login, right or wrong password, existing or not: 403 sso_required, no lockout counted', async () => {
    assertSsoRequired(await h.post('/auth/login', { email: employee.email, password: employee.password }), 403, 'right password');
    for (let attempt = 0; attempt < 6; attempt += 1) assertSsoRequired(await h.post('/auth/login', { email: employee.email, password: 'wrong password here' }), 403, 'wrong password');
    assertSsoRequired(await h.post('/auth/login', { email: addressAt(setup.domain, 'nobody'), password: STRONG_PASSWORD }), 403, 'no account');
    const [row] = await h.knex(`${h.tablePrefix}users`).where({ id: employee.userId });
    assert.equal(Number(row.failed_login_count ?? 0), 0);
  });

  test('POST /auth/register and /auth/password/forgot: 403, nothing created or sent', async () => {
    const email = addressAt(setup.domain, 'newcomer');
    assertSsoRequired(await h.post('/auth/register', { email, password: STRONG_PASSWORD }));
    assert.equal(await countRows(h, 'users', { email }), 0);
    const mails = h.mail.length;
    assertSsoRequired(await h.post('/auth/password/forgot', { email: employee.email }));
    assert.equal(h.mail.length, mails);
  });

  test('POST /auth/password/reset with a token issued before enforcement: 403, password unchanged', async () => {
    const other = await h.signUp(addressAt('elsewhere.test', 'x').replace(/@.*/, '@elsewhere.test'));
    assert.ok(other);
    // Issue a token with enforcement off, then turn it on again.
    assert.equal((await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: false }, { token: await freshOwnerToken() })).status, 200);
    assert.equal((await h.post('/auth/password/forgot', { email: employee.email })).status, 202);
    const token = h.tokenFromMail(employee.email, 'password_reset');
    assert.equal((await h.patch(`/orgs/${setup.org.id}/sso`, { enforce: true }, { token: await freshOwnerToken() })).status, 200);
    const [before] = await h.knex(`${h.tablePrefix}users`).where({ id: employee.userId });
    assertSsoRequired(await h.post('/auth/password/reset', { token, new_password: 'another strong passphrase 42' }));
    const [afterReset] = await h.knex(`${h.tablePrefix}users`).where({ id: employee.userId });
    assert.equal(afterReset.password_hash, before.password_hash);
  });

  test('a social login of an address at the domain: social_error=sso_required, nothing created', async () => {
    const email = addressAt(setup.domain, 'social');
    const trip = await socialRoundTrip(h, op, { sub: employeeBeforeSocial, email, email_verified: true });
    assert.equal(trip.error, 'sso_required');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('POST /auth/passkeys/login/verify: 403 sso_required', async () => {
    assertSsoRequired(await passwordlessLogin(h, fixtures.primary.assertions[0]!));
  });

  test('POST /auth/passwordless/verify with the right code: 403 sso_required; start answers as for anyone (CONTRACT 11)', async () => {
    const started = await h.post('/auth/passwordless/start', { email: employee.email });
    assert.equal(started.status, 202, 'start never tells an address under enforcement apart');
    const mail = h.lastMail(employee.email, 'login_code');
    assert.ok(mail, 'the code went out');
    const verified = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: String(mail.context.code) });
    assertSsoRequired(verified, 403, 'passwordless verify');
    assert.equal(verified.body.data, undefined, 'no tokens');
  });

  test('a session from before enforcement adds no way to sign in: a passkey or a provider link is 403 sso_required, nothing written', async () => {
    // Either would outlive the session that enforcement ends at its next refresh.
    const passkeys = await countRows(h, 'webauthn_challenges', {});
    assertSsoRequired(await h.post('/auth/passkeys/register/options', {}, { token: colleague.accessToken }), 403, 'passkey options');
    assertSsoRequired(await h.post('/auth/passkeys/register/verify', { response: fixtures.second.registration.response }, { token: colleague.accessToken }), 403, 'passkey verify');
    assert.equal(await countRows(h, 'webauthn_challenges', {}), passkeys, 'no registration challenge');
    assert.equal(await countRows(h, 'mfa_factors', { user_id: colleague.userId }), 0, 'no passkey');

    const flows = await countRows(h, 'social_flows', {});
    const handoff = { handoff_challenge: 'A'.repeat(43), handoff_challenge_method: 'S256' };
    assertSsoRequired(await h.post(`/auth/social/${PROVIDER_ID}/link`, handoff, { token: colleague.accessToken }), 403, 'provider link');
    assert.equal(await countRows(h, 'social_flows', {}), flows, 'no link flow');
  });

  test('refresh of a session opened before enforcement: 401 sso_required', async () => {
    assertSsoRequired(await h.post('/auth/token/refresh', { refresh_token: employee.refreshToken }), 401);
  });

  test('invite accepted from a session not opened through the connection: 403, the invite stays pending', async () => {
    const other = await createOrg(h);
    const invited = await h.post(`/orgs/${other.id}/invites`, { email: colleague.email, role_slugs: ['member'] }, { token: other.owner.token });
    assert.equal(invited.status, 201, invited.text);
    const token = h.tokenFromMail(colleague.email, 'invite');
    assertSsoRequired(await h.post('/auth/invites/accept', { token }, { token: colleague.accessToken }));
    const [invite] = await h.knex(`${h.tablePrefix}invites`).where({ organization_id: other.id });
    assert.equal(invite.status, 'pending');

    // Through the connection: the same user signs in, and the session accepts and refreshes.
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: colleague.email }, { email: colleague.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.user.id, colleague.userId);
    assert.equal((await h.post('/auth/invites/accept', { token }, { token: exchanged!.body.data.access_token })).status, 200);
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: exchanged!.body.data.refresh_token })).status, 200);
  });

  test('a session opened through the connection behind the MFA gate refreshes under enforcement', async () => {
    // The employee holds a passkey: single sign-on stops at the MFA gate, and the session it opens counts as SSO.
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: employee.email }, { email: employee.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal(exchanged!.body.data.mfa_required, true);
    const { passGateWithRecorded } = await import('../helpers/passkeys.js');
    const passed = await passGateWithRecorded(h, exchanged!.body.data.mfa_token, exchanged!.body.data.factors[0].id, fixtures.primary.assertions[1]!);
    assert.equal(passed.status, 200, passed.text);
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: passed.body.data.refresh_token })).status, 200);
  });

  test('addresses outside the domain are untouched', async () => {
    const outsider = await h.signUp();
    assert.equal((await h.post('/auth/login', { email: outsider.email, password: outsider.password })).status, 200);
  });
});

describe('superadmins', () => {
  test('exempt only with a right credential: a wrong password answers the same 403', async () => {
    assert.equal((await h.post('/auth/login', { email: root.email, password: root.password })).status, 200);
    assertSsoRequired(await h.post('/auth/login', { email: root.email, password: 'not the password at all' }));
    assert.equal((await h.post('/auth/token/refresh', { refresh_token: root.refreshToken })).status, 200);
  });
});

describe('enforcement ends with the connection', () => {
  test('enforce off, or the last verified domain removed: the paths open again', async () => {
    const local = await ssoOrg(h, dns, op);
    const user = await h.signUp(addressAt(local.domain, 'later'));
    assert.equal((await h.patch(`/orgs/${local.org.id}/sso`, { enforce: true }, { token: local.org.owner.token })).status, 200);
    assertSsoRequiredBy(await h.post('/auth/login', { email: user.email, password: user.password }), local.org.slug);
    const domains = await h.get(`/orgs/${local.org.id}/domains`, { token: local.org.owner.token });
    assert.equal((await h.delete(`/orgs/${local.org.id}/domains/${domains.body.data.domains[0].id}`, { token: local.org.owner.token })).status, 200);
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
    const connection = await h.get(`/orgs/${local.org.id}/sso`, { token: local.org.owner.token });
    assert.equal(connection.body.data.status, 'inactive');
  });
});

/** The owner's sign-in is older than step-up's max age by now in some runs; sign in again for a fresh one. */
async function freshOwnerToken(): Promise<string> {
  const owner = setup.org.owner;
  const login = await h.post('/auth/login', { email: owner.email, password: owner.password });
  assert.equal(login.status, 200, login.text);
  return switchOrg(h, login.body.data.access_token, setup.org.id);
}

void socialLogin;
