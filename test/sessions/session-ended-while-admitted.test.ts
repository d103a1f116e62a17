import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AccessPolicy } from '../../src/services/access/access-policy.js';
import { assertError, assertUnauthorized, countRows } from '../helpers/account.js';
import { Harness, type SignedUpUser, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { loginForTicket, nextTotpCode, signUpWithTotp, totpCodeAt } from '../helpers/mfa.js';
import { createOrg } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';
import { authorizeAtProvider, callRouterCallback, exchangeCode, handoffPair, newSubject, PROVIDER_ID, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';

/*
 * Threat: a thief's request is admitted while its session is live, and the owner ends that
 * session (logout-all) before the request writes. A credential, codes standing in for one, or a
 * webhook and its secret must not be added by a session that had already ended when the write
 * committed, nor any other write an organization's rule admits: the write re-checks its
 * caller's session inside its transaction, its row locked (`AccessPolicy.assertSessionLive`,
 * called by the credential gate and `grant.recheck`, docs/security.md).
 */

let h: Harness;
before(async () => {
  h = await Harness.start({
    config: { webauthn: fixtureWebauthnConfig, webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true }, events: { delivery: { pollMs: 3_600_000 } } },
  });
});
after(async () => {
  await h.close();
});

/** A second sign-in of `user`: the owner's own session, beside the one a thief holds. */
async function ownersSession(user: Pick<SignedUpUser, 'email' | 'password'>): Promise<string> {
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  return login.body.data.access_token;
}

/**
 * Sends `request`, and runs the owner's logout-all once, after the access policy admitted the
 * request to `path` and before its service writes anything.
 */
async function endedAfterAdmission(path: string, ownerToken: string, request: () => ReturnType<Harness['post']>) {
  const admit = AccessPolicy.prototype.admit;
  let ended = false;
  AccessPolicy.prototype.admit = async function (this: AccessPolicy, ...args: Parameters<typeof admit>) {
    const grant = await admit.apply(this, args);
    if (!ended && (args[1] as { path?: string }).path === path) {
      ended = true;
      const logoutAll = await h.post('/auth/logout-all', undefined, { token: ownerToken });
      assert.equal(logoutAll.status, 200, logoutAll.text);
    }
    return grant;
  } as typeof admit;
  try {
    const answer = await request();
    assert.ok(ended, 'the owner’s logout-all ran after the admission');
    return answer;
  } finally {
    AccessPolicy.prototype.admit = admit;
  }
}

describe(`a session ended between a request's admission and its write, on ${TEST_DB}`, () => {
  test('confirming a TOTP factor: 401, and the factor stays unconfirmed', async () => {
    const user = await h.signUp(uniqueEmail('totp-ended'));
    const owner = await ownersSession(user);
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const { factor_id: factorId, secret } = enrolled.body.data;
    const confirmed = await endedAfterAdmission('/auth/mfa/totp/confirm', owner, () =>
      h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: user.accessToken }),
    );
    assertUnauthorized(confirmed);
    assert.equal(await confirmedFactors(user.userId), 0);
    assert.equal(h.eventsOfType('mfa.enrolled').filter((event) => event.user_id === user.userId).length, 0);
    // The owner signs in with the password alone: no second factor was bound.
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    assert.equal(typeof login.body.data.access_token, 'string');
  });

  test('registering a passkey: 401, and no passkey', async () => {
    const user = await h.signUp(uniqueEmail('passkey-ended'));
    const owner = await ownersSession(user);
    const registered = await endedAfterAdmission('/auth/passkeys/register/verify', owner, () => registerRecorded(h, user.accessToken, fixtures.primary));
    assertUnauthorized(registered);
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId }), 0);
  });

  test('regenerating recovery codes: 401, and the old codes stay the account’s', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const owner = await h.post('/auth/mfa/verify', { factor_id: user.factorId, code: nextTotpCode(h, user.secret) }, { token: ticket });
    assert.equal(owner.status, 200, owner.text);
    const before = await recoveryCodeRows(user.userId);
    const regenerated = await endedAfterAdmission('/auth/mfa/recovery-codes/regenerate', owner.body.data.access_token, () =>
      h.post('/auth/mfa/recovery-codes/regenerate', {}, { token: user.accessToken }),
    );
    assertUnauthorized(regenerated);
    assert.deepEqual(await recoveryCodeRows(user.userId), before);
  });

  test('creating an API key: 401, and no key', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const created = await endedAfterAdmission('/orgs/:orgId/api-keys', owner, () =>
      h.post(`/orgs/${org.id}/api-keys`, { name: 'Exporter', permission_keys: ['org.read'] }, { token: org.owner.token }),
    );
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'api_keys', { user_id: org.owner.userId }), 0);
  });

  test('creating a webhook: 401, and no webhook', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const created = await endedAfterAdmission('/orgs/:orgId/webhooks', owner, () =>
      h.post(`/orgs/${org.id}/webhooks`, { url: 'http://127.0.0.1:9/hooks', events: ['*'] }, { token: org.owner.token }),
    );
    assertUnauthorized(created);
    assert.equal(await countRows(h, 'webhooks', { organization_id: org.id }), 0);
  });

  test('rotating a webhook’s secret: 401, and the secret stays', async () => {
    const org = await createOrg(h);
    const webhook = await h.post(`/orgs/${org.id}/webhooks`, { url: 'http://127.0.0.1:9/hooks', events: ['*'] }, { token: org.owner.token });
    assert.equal(webhook.status, 201, webhook.text);
    const stored = async () => (await h.knex(`${h.tablePrefix}webhooks`).where({ id: webhook.body.data.id }).first()) as Record<string, unknown>;
    const before = await stored();
    const owner = await ownersSession(org.owner);
    const rotated = await endedAfterAdmission('/orgs/:orgId/webhooks/:webhookId/rotate-secret', owner, () =>
      h.post(`/orgs/${org.id}/webhooks/${webhook.body.data.id}/rotate-secret`, {}, { token: org.owner.token }),
    );
    assertUnauthorized(rotated);
    assert.deepEqual(await stored(), before);
  });

  test('renaming the organization: 401, and the name stays', async () => {
    const org = await createOrg(h, { name: 'Before the logout' });
    const owner = await ownersSession(org.owner);
    const renamed = await endedAfterAdmission('/orgs/:orgId', owner, () => h.patch(`/orgs/${org.id}`, { name: 'After the logout' }, { token: org.owner.token }));
    assertUnauthorized(renamed);
    assert.equal((await h.knex(`${h.tablePrefix}organizations`).where({ id: org.id }).first()).name, 'Before the logout');
  });

  test('inviting a member: 401, and no invitation', async () => {
    const org = await createOrg(h);
    const owner = await ownersSession(org.owner);
    const invited = await endedAfterAdmission('/orgs/:orgId/invites', owner, () =>
      h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invited-late'), role_slugs: ['member'] }, { token: org.owner.token }),
    );
    assertUnauthorized(invited);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id }), 0);
  });

  test('changing the password: 401, and the old password still signs in', async () => {
    const user = await h.signUp(uniqueEmail('change-ended'));
    const owner = await ownersSession(user);
    const changed = await endedAfterAdmission('/auth/password/change', owner, () =>
      h.post('/auth/password/change', { current_password: user.password, new_password: 'a thief’s new passphrase 7' }, { token: user.accessToken }),
    );
    assertUnauthorized(changed);
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  });
});

async function confirmedFactors(userId: string): Promise<number> {
  const [row] = await h.knex(`${h.tablePrefix}mfa_factors`).where({ user_id: userId }).whereNotNull('confirmed_at').count({ count: '*' });
  return Number(row?.count ?? 0);
}

async function recoveryCodeRows(userId: string): Promise<string[]> {
  const rows = await h.knex(`${h.tablePrefix}recovery_codes`).where({ user_id: userId }).orderBy('id');
  return rows.map((row: { id: string }) => row.id);
}

describe(`a social link whose session ends while its exchange waits for the account, on ${TEST_DB}`, () => {
  let op: TestOpenIdProvider;
  let social: Harness;
  before(async () => {
    op = await TestOpenIdProvider.start();
    social = await startSocialHarness(op);
  });
  after(async () => {
    await social.close();
    await op.close();
  });

  test(
    'the link locks the account, then its session: a logout-all committed meanwhile refuses it with session_ended',
    { skip: TEST_DB !== 'pg' && 'SQLite runs one writer at a time; the lock order only means something on PostgreSQL' },
    async () => {
      const user = await social.signUp(uniqueEmail('link-ended'));
      const ownerLogin = await social.post('/auth/login', { email: user.email, password: user.password });
      assert.equal(ownerLogin.status, 200, ownerLogin.text);
      op.use({ sub: newSubject(), email: uniqueEmail('link-ended-provider'), email_verified: true });
      const handoff = handoffPair();
      const started = await social.post(`/auth/social/${PROVIDER_ID}/link`, { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' }, { token: user.accessToken });
      assert.equal(started.status, 200, started.text);
      const callback = await callRouterCallback(social, await authorizeAtProvider(started.body.data.authorization_url));
      assert.ok(callback.code, `the callback refuses nothing: ${callback.error}`);

      // Another change of the account holds its row (as an MFA change or a disable would).
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let held!: () => void;
      const accountHeld = new Promise<void>((resolve) => (held = resolve));
      const holder = social.knex.transaction(async (trx) => {
        await trx(`${social.tablePrefix}users`).where({ id: user.userId }).forUpdate().first();
        held();
        await released;
      });
      await accountHeld;
      let exchanged: ReturnType<typeof exchangeCode> | undefined;
      try {
        exchanged = exchangeCode(social, { handoff, authorizationUrl: started.body.data.authorization_url, ...callback }, user.accessToken);
        // The exchange has checked the bearer and waits for the account's row.
        const waitingForTheAccount = async () =>
          (await social.knex.raw("select query from pg_stat_activity where wait_event_type = 'Lock'")).rows.some((row: { query: string }) => /users/.test(row.query));
        for (let attempt = 0; attempt < 2000 && !(await waitingForTheAccount()); attempt += 1) await new Promise((resolve) => setImmediate(resolve));
        assert.ok(await waitingForTheAccount(), 'the link’s transaction waits for the account');
        const logoutAll = await social.post('/auth/logout-all', undefined, { token: ownerLogin.body.data.access_token });
        assert.equal(logoutAll.status, 200, logoutAll.text);
      } finally {
        release();
        await holder;
      }
      assertError(await exchanged!, 401, 'session_ended');
      assert.equal(await countRows(social, 'social_identities', { user_id: user.userId }), 0);
    },
  );
});
