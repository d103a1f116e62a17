import assert from 'node:assert/strict';
import { test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { type Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { authorizeAtProvider, newSubject, socialLogin, startLogin, type TestOpenIdProvider, withSocialHarness } from '../helpers/oidc.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { totpCodeAt } from '../helpers/mfa.js';
import { MfaFactorRepository } from '../../src/store/mfa-repository.js';
import { SocialIdentityRepository } from '../../src/store/social-repository.js';

// docs/social-login.md: single-use by one conditional update, and one user per new subject, under
// concurrency. Meaningful on PostgreSQL (real concurrent transactions); SQLite serialises
// writers and must give the same answers.

let op: TestOpenIdProvider;
let h: Harness;
withSocialHarness((started) => ({ op, h } = started));

test('one callback URL sent 20 times at once yields exactly one social_code', async () => {
  // Threat: a replayed callback racing the real one to obtain a second sign-in.
  op.use({ sub: newSubject(), email: uniqueEmail('race'), email_verified: true });
  const started = await startLogin(h);
  const callbackPath = await authorizeAtProvider(started.authorizationUrl);
  const responses = await Promise.all(Array.from({ length: 20 }, () => h.get(callbackPath)));
  const codes = responses.map((response) => new URL(response.headers.get('location') ?? 'http://x/').searchParams.get('social_code')).filter(Boolean);
  assert.equal(codes.length, 1, responses.map((response) => response.status).join(','));
  assert.deepEqual(responses.filter((response) => response.status === 400).length, 19);
  assert.ok(responses.every((response) => response.status === 303 || response.body?.error === 'social_state_invalid'));
});

test('two first logins of the same new subject at once create one user and one link', async () => {
  // Threat: duplicate accounts (and a link on each) when a user double-clicks or two tabs finish together.
  const email = uniqueEmail('twin');
  const sub = newSubject();
  op.use({ sub, email, email_verified: true });
  const flows = [await startLogin(h), await startLogin(h)];
  const callbackPaths = [await authorizeAtProvider(flows[0]!.authorizationUrl), await authorizeAtProvider(flows[1]!.authorizationUrl)];
  const responses = await Promise.all(callbackPaths.map((path) => h.get(path)));
  const codes = responses.map((response) => new URL(response.headers.get('location')!).searchParams.get('social_code'));
  assert.ok(codes.every(Boolean), responses.map((response) => response.headers.get('location')).join(' | '));
  // The callback creates nothing (docs/social-login.md): the account is resolved at the exchange, so the race is there.
  assert.equal(await countRows(h, 'users', { email }), 0);
  const exchanged = await Promise.all(codes.map((code, index) => h.post('/auth/social/exchange', { code, handoff_verifier: flows[index]!.handoff.verifier })));
  assert.deepEqual(exchanged.map((response) => response.status), [200, 200]);
  assert.equal(await countRows(h, 'users', { email }), 1);
  assert.equal(await countRows(h, 'social_identities', { subject: sub }), 1);
  assert.equal(exchanged[0]!.body.data.user.id, exchanged[1]!.body.data.user.id);
  assert.deepEqual(exchanged.map((response) => response.body.data.is_new_user).sort(), [false, true]);
});

test(
  'a first login of a subject committed between the exchange\'s two lookups: the exchange signs into that account',
  { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no sign-in can commit inside another's" },
  async () => {
    // The interleaving behind the race above, made certain: exchange B finds no link for the
    // subject (rule 1), then exchange A creates the account and its link, and B's lookup by
    // address (rule 3) finds that account. It is this subject's own: B signs in, not 409.
    const email = uniqueEmail('twin-order');
    const sub = newSubject();
    op.use({ sub, email, email_verified: true });
    const flows = [await startLogin(h), await startLogin(h)];
    const codes: (string | null)[] = [];
    for (const flow of flows) {
      const location = (await h.get(await authorizeAtProvider(flow.authorizationUrl))).headers.get('location')!;
      codes.push(new URL(location).searchParams.get('social_code'));
    }
    const { outer: second, inner: firstExchange } = await withRequestInTheWindow(
      h,
      { prototype: SocialIdentityRepository.prototype, method: 'findByProviderSubject', when: (_provider, subject) => subject === sub },
      () => h.post('/auth/social/exchange', { code: codes[0], handoff_verifier: flows[0]!.handoff.verifier }),
      () => h.post('/auth/social/exchange', { code: codes[1], handoff_verifier: flows[1]!.handoff.verifier }),
    );
    assert.equal(firstExchange?.status, 200, firstExchange?.text);
    assert.equal(firstExchange.body.data.is_new_user, true);
    assert.equal(second.status, 200, second.text);
    assert.equal(second.body.data.is_new_user, false);
    assert.equal(second.body.data.user.id, firstExchange.body.data.user.id);
    assert.equal(await countRows(h, 'users', { email }), 1);
    assert.equal(await countRows(h, 'social_identities', { subject: sub }), 1);
  },
);

test('a factor confirmed after the MFA gate looked at a social sign-in: the sign-in asks for it and opens no session', async () => {
  // Threat: a sign-in that passes the gate a moment before the owner confirms a factor would
  // open a session without it. The session's write checks again (MfaService.throughLoginGate).
  const account = { sub: newSubject(), email: uniqueEmail('gate-race'), email_verified: true };
  const first = await socialLogin(h, op, account);
  assert.equal(first.status, 200, first.text);
  const { user, access_token: accessToken } = first.body.data;
  const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const { factor_id: factorId, secret } = enrolled.body.data;
  const listConfirmed = MfaFactorRepository.prototype.listConfirmed;
  let confirmedUnderTheSignIn = false;
  MfaFactorRepository.prototype.listConfirmed = async function (this: MfaFactorRepository, userId: string) {
    const confirmed = await listConfirmed.call(this, userId);
    if (!confirmedUnderTheSignIn && userId === user.id) {
      assert.deepEqual(confirmed, [], 'the gate saw no factor');
      confirmedUnderTheSignIn = true;
      const confirmation = await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: accessToken });
      assert.equal(confirmation.status, 200, confirmation.text);
    }
    return confirmed;
  };
  try {
    const sessionsBefore = await countRows(h, 'sessions', { user_id: user.id });
    const gated = await socialLogin(h, op, account);
    assert.ok(confirmedUnderTheSignIn);
    assert.equal(gated.status, 200, gated.text);
    assert.equal(gated.body.data.mfa_required, true, gated.text);
    assert.equal(gated.body.data.access_token, undefined);
    assert.equal(await countRows(h, 'sessions', { user_id: user.id }), sessionsBefore, 'no session was opened');
  } finally {
    MfaFactorRepository.prototype.listConfirmed = listConfirmed;
  }
});
