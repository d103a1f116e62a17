import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { type Harness, uniqueEmail } from '../helpers/harness.js';
import { authorizeAtProvider, newSubject, startLogin, startSocialHarness, TestOpenIdProvider } from '../helpers/oidc.js';

// docs/social-login.md: single-use by one conditional update, and one user per new subject, under
// concurrency. Meaningful on PostgreSQL (real concurrent transactions); SQLite serialises
// writers and must give the same answers.

let op: TestOpenIdProvider;
let h: Harness;

before(async () => {
  op = await TestOpenIdProvider.start();
  h = await startSocialHarness(op);
});
after(async () => {
  await h.close();
  await op.close();
});

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
