import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import pg from 'pg';
import { Harness, TEST_DB, decodeJwtHeader } from '../helpers/harness.js';

// CONTRACT 7 (docs/multiple-instances.md) attacked across instances on one PostgreSQL: what one
// instance changes must reach another within 1 s, however the other's listening connection
// came to be. Each test holds two routers with pools and listening connections of their own.

const PG_ONLY = TEST_DB === 'pg' ? false : 'instances hear each other through PostgreSQL LISTEN/NOTIFY: PostgreSQL phase only';
const CONTRACT_MS = 1_000;

const open: Harness[] = [];
after(async () => {
  for (const h of open.reverse()) await h.close();
});

async function started(options: Parameters<typeof Harness.start>[0] = {}): Promise<Harness> {
  const h = await Harness.start(options);
  open.push(h);
  return h;
}

/**
 * Holds back the next `LISTEN` any pg client sends until `release` is called: an instance whose
 * listening connection comes up late (a slow connect, `max_connections` reached at start-up, a
 * retry with backoff) while it already serves.
 */
function holdNextListen(): { release: () => void; listened: Promise<void> } {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let listened!: () => void;
  const done = new Promise<void>((resolve) => (listened = resolve));
  prototype.query = function (this: unknown, ...args: unknown[]) {
    if (typeof args[0] === 'string' && args[0].startsWith('LISTEN')) {
      prototype.query = original;
      return gate.then(() => original.apply(this, args)).finally(listened);
    }
    return original.apply(this, args);
  };
  return { release, listened: done };
}

/** Waits until the harness's instance listens (its LISTEN is on the server), so the next LISTEN held is another's. */
async function listeningOn(h: Harness): Promise<void> {
  const channel = `LISTEN "${h.tablePrefix}instance_changes"`;
  for (let turn = 0; turn < 200; turn += 1) {
    const { rows } = await h.knex.raw('select count(*)::int as n from pg_stat_activity where query = ?', [channel]);
    if (rows[0].n > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail('the first instance never listened');
}

test('an instance whose listening connection came up after a rotation signs with the new key within 1 s', { skip: PG_ONLY }, async () => {
  const a = await started();
  await listeningOn(a);
  // B starts and reads the key table while its listening connection is still on its way.
  const listen = holdNextListen();
  const b = await started({ shareDatabaseWith: a, ownConnection: true });
  const before = decodeJwtHeader((await b.signUp()).accessToken).kid;
  // A rotates meanwhile: B cannot hear it.
  const { kid } = await a.identity.service.rotateSigningKey();
  const rotatedAt = performance.now();
  assert.notEqual(kid, before);
  // Then B's listening connection comes up (notifications are now live on B).
  listen.release();
  await listen.listened;
  let signedWith = decodeJwtHeader((await b.signUp()).accessToken).kid;
  while (signedWith !== kid && performance.now() - rotatedAt < CONTRACT_MS) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    signedWith = decodeJwtHeader((await b.signUp()).accessToken).kid;
  }
  assert.equal(signedWith, kid, `B signs with the key A activated within ${CONTRACT_MS} ms of the rotation`);
});

test('an instance serving before its listening connection came up keeps nothing: a logout on A meanwhile is in force on B at once, and after it listens', { skip: PG_ONLY }, async () => {
  const a = await started();
  await listeningOn(a);
  const listen = holdNextListen();
  const b = await started({ shareDatabaseWith: a, ownConnection: true });
  try {
    const user = await a.signUp();
    for (let round = 0; round < 3; round += 1) assert.equal((await b.get('/auth/sessions', { token: user.accessToken })).status, 200, 'B answers while deaf');
    assert.equal((await a.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
    assert.equal((await b.get('/auth/sessions', { token: user.accessToken })).status, 401, 'on B at once: it kept nothing it could not hear about');
  } finally {
    listen.release();
  }
  await listen.listened;
  const user = await a.signUp();
  const probe = async () => (await b.get('/auth/sessions', { token: user.accessToken })).status;
  assert.equal(await probe(), 200);
  assert.equal(await probe(), 200);
  const revokedAt = performance.now();
  assert.equal((await a.post('/auth/logout', {}, { token: user.accessToken })).status, 200);
  let answer = await probe();
  while (answer !== 401 && performance.now() - revokedAt < CONTRACT_MS) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    answer = await probe();
  }
  assert.equal(answer, 401, `on B once it listens, within ${CONTRACT_MS} ms`);
});

// Single-use credentials presented to two instances at once: each is spent by one conditional
// update in the shared database, never by what one instance remembers.
test('one passwordless code and one reset link, each sent ten times to A and ten to B at once: one sign-in, one new password', { skip: PG_ONLY }, async () => {
  const config = { passwordless: { link: true, allowSignup: true }, links: { passwordlessLogin: 'https://app.example.test/sign-in/link#token={token}' } };
  const a = await started({ config });
  const b = await started({ config, shareDatabaseWith: a, ownConnection: true });
  const user = await a.signUp();

  const startedChallenge = await a.post('/auth/passwordless/start', { email: user.email });
  assert.equal(startedChallenge.status, 202, startedChallenge.text);
  const challengeId = startedChallenge.body.data.challenge_id as string;
  const code = String(a.lastMail(user.email, 'login_code')!.context.code);
  const verifies = await Promise.all(Array.from({ length: 20 }, (_, index) => (index % 2 ? b : a).post('/auth/passwordless/verify', { challenge_id: challengeId, code })));
  const signedIn = verifies.filter((answer) => answer.status === 200);
  assert.equal(signedIn.length, 1, verifies.map((answer) => answer.status).join(','));
  for (const answer of verifies) assert.ok([200, 422, 429].includes(answer.status), answer.text);

  assert.equal((await a.post('/auth/password/forgot', { email: user.email })).status, 202);
  const token = a.tokenFromMail(user.email, 'password_reset');
  const passwords = Array.from({ length: 20 }, (_, index) => `new passphrase number ${index}`);
  const resets = await Promise.all(passwords.map((new_password, index) => (index % 2 ? b : a).post('/auth/password/reset', { token, new_password })));
  const winners = passwords.filter((_, index) => resets[index]!.status === 200);
  assert.equal(winners.length, 1, resets.map((answer) => answer.status).join(','));
  assert.equal((await b.post('/auth/login', { email: user.email, password: winners[0] })).status, 200, 'the winner\'s password signs in');
  // A few losers only: failures count toward the lockout.
  for (const password of passwords.filter((candidate) => candidate !== winners[0]).slice(0, 3)) {
    assert.equal((await a.post('/auth/login', { email: user.email, password })).status, 401, password);
  }
  // The reset ended every session, the passwordless one included, on both instances.
  const passwordlessToken = signedIn[0]!.body.data.access_token as string;
  for (const on of [a, b]) assert.equal((await on.get('/auth/sessions', { token: passwordlessToken })).status, 401);
});
