import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';

// Issue 11: a login whose client has gone while it waits for a hashing thread is dropped
// before its hash. It compares nothing, records nothing, opens no session and gives its
// failed-attempt slot back; the logins behind it get the thread sooner. A guess a thread has
// taken is compared and counted whether or not its client stays.

// One thread at bcrypt cost 12 (about a fifth of a second a hash here): the two logins the
// thread takes first keep it busy long enough for the rest to wait in the queue.
let h: Harness;
before(async () => {
  h = await Harness.start({ config: { password: { bcryptCost: 12, workers: 1 } } });
});
after(async () => {
  await h.close();
});

async function failedLoginCount(email: string): Promise<number> {
  const row = await h.knex(`${h.tablePrefix}users`).where({ email }).first('failed_login_count');
  return Number(row.failed_login_count);
}

/** Failed-attempt slots held by attempts still being compared (counted apart from failures). */
async function slotsInFlight(email: string): Promise<number> {
  const row = await h.knex(`${h.tablePrefix}users`).where({ email }).first('attempts_in_flight');
  return Number(row.attempts_in_flight);
}

/** Polls the database (no clock involved) until every account has its slot taken. */
async function untilSlotsTaken(emails: string[]): Promise<void> {
  for (let attempt = 0; attempt < 500; attempt += 1) {
    const counts = await Promise.all(emails.map(slotsInFlight));
    if (counts.every((count) => count === 1)) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.fail(`the logins of ${emails.join(', ')} never took their slots`);
}

function login(email: string, signal?: AbortSignal, password = STRONG_PASSWORD): Promise<Response> {
  return fetch(`${h.baseUrl}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password }),
    signal,
  });
}

test('a login abandoned while it waits for a hashing thread is never compared and gives its slot back; a guess a thread took still counts', async () => {
  const [first, guesser, latecomer, ...gone] = await Promise.all(['first', 'guesser', 'latecomer', 'gone-a', 'gone-b', 'gone-c'].map((name) => h.signUp(uniqueEmail(name))));
  const sessionsOf = async (userIds: string[]) => Number((await h.knex(`${h.tablePrefix}sessions`).whereIn('user_id', userIds).count({ n: '*' }))[0]!.n);
  const goneIds = gone.map((user) => user.userId);
  const goneSessionsBefore = await sessionsOf(goneIds);
  const eventsBefore = h.events.length;

  // The thread takes these two at once (the one it hashes and the next); the guesser's client will not wait for its answer.
  const guesserClient = new AbortController();
  const served = login(first!.email);
  const guess = login(guesser!.email, guesserClient.signal, 'a wrong guess at the password').catch((error: Error) => error);
  await untilSlotsTaken([first!.email, guesser!.email]);

  // Three logins of real accounts and one of an unknown address queue behind them; their clients go away.
  const clients = gone.map(() => new AbortController());
  const unknownClient = new AbortController();
  const abandoned = [
    ...gone.map((user, index) => login(user.email, clients[index]!.signal).catch((error: Error) => error)),
    login(uniqueEmail('nobody'), unknownClient.signal).catch((error: Error) => error),
  ];
  await untilSlotsTaken(gone.map((user) => user.email));
  for (const client of [guesserClient, ...clients, unknownClient]) client.abort();
  for (const outcome of await Promise.all([guess, ...abandoned])) assert.equal((outcome as Error).name, 'AbortError');

  // The queue is first in, first out: the latecomer's hash runs after whatever of the abandoned work was not dropped.
  const late = await login(latecomer!.email);
  assert.equal(late.status, 200);
  assert.equal((await served).status, 200);

  const events = h.events.slice(eventsBefore);
  const signedIn = new Set(events.filter((event) => event.type === 'user.logged_in').map((event) => event.user_id));
  assert.deepEqual(signedIn, new Set([first!.userId, latecomer!.userId]), 'only the logins whose clients stayed signed in');
  const failures = events.filter((event) => event.type === 'user.login_failed');
  assert.deepEqual(
    failures.map((event) => [event.user_id, event.data.reason]),
    [[guesser!.userId, 'wrong_password']],
    'the guess a thread took counts; a dropped attempt is not a failure, not even for an unknown address',
  );
  assert.equal(await failedLoginCount(guesser!.email), 1, 'the taken guess counts as a failure');
  assert.equal(await slotsInFlight(guesser!.email), 0, 'and its slot is no longer in flight');
  assert.equal(await sessionsOf(goneIds), goneSessionsBefore, 'no session was opened for a client that had gone');
  for (const user of gone) {
    assert.equal(await slotsInFlight(user.email), 0, `${user.email} got its slot back`);
    assert.equal(await failedLoginCount(user.email), 0, `${user.email} has no failure`);
  }
  assert.deepEqual(h.logs.filter((line) => line.level === 'error'), [], 'a client going away is not an error of the service');
});
