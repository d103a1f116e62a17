import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import express, { type Request } from 'express';
import { decide, read, type Steps } from '../../src/services/access/decision-steps.js';
import { Harness } from '../helpers/harness.js';
import { addMember, createOrg } from '../helpers/orgs.js';

/*
 * Issue 28: the access policy's rules are written once, as steps that yield their reads. A
 * decision whose reads are all in memory is made within the request's own event; the first
 * read that waits turns the rest into a promise. Both ways must run the same rules in the
 * same order, and a failure must surface where it happened.
 */

function* rules(log: string[], reads: Array<() => unknown>): Steps<string> {
  let answer = '';
  for (const [index, next] of reads.entries()) {
    const value = yield* read(next() as string);
    log.push(`read ${index}: ${value}`);
    if (value === 'refuse') throw new Error(`refused at ${index}`);
    answer += value;
  }
  return answer;
}

test('reads in memory are decided at once, in order', () => {
  const log: string[] = [];
  const answer = decide(rules(log, [() => 'a', () => 'b', () => 'c']));
  assert.equal(answer, 'abc');
  assert.deepEqual(log, ['read 0: a', 'read 1: b', 'read 2: c']);
});

test('the first read that waits makes the rest a promise, and the same rules finish it', async () => {
  const log: string[] = [];
  const answer = decide(rules(log, [() => 'a', () => Promise.resolve('b'), () => 'c', () => Promise.resolve('d')]));
  assert.ok(answer instanceof Promise);
  assert.deepEqual(log, ['read 0: a'], 'nothing after the waiting read ran yet');
  assert.equal(await answer, 'abcd');
  assert.deepEqual(log, ['read 0: a', 'read 1: b', 'read 2: c', 'read 3: d']);
});

test('a refusal before any wait throws at once; after a wait it rejects the promise', async () => {
  assert.throws(() => decide(rules([], [() => 'a', () => 'refuse', () => 'never'])), /refused at 1/);
  const later = decide(rules([], [() => Promise.resolve('a'), () => 'refuse']));
  assert.ok(later instanceof Promise);
  await assert.rejects(later, /refused at 1/);
});

test('a read that fails is thrown into the rules where they asked for it', async () => {
  function* recovering(): Steps<string> {
    try {
      yield* read(Promise.reject(new Error('database down')));
      return 'not reached';
    } catch (error) {
      return `caught: ${(error as Error).message}`;
    }
  }
  assert.equal(await decide(recovering()), 'caught: database down');
  await assert.rejects(decide(rules([], [() => Promise.reject(new Error('gone'))])) as Promise<string>, /gone/);
});

test('a thenable that is not a promise (a Knex query is one) is waited for, never handed over as the value', async () => {
  const log: string[] = [];
  // biome-ignore lint/suspicious/noThenProperty: a thenable that is not a Promise is what this test is about.
  const thenable = { then: (resolve: (value: string) => void) => resolve('b') };
  const answer = decide(rules(log, [() => 'a', () => thenable, () => 'c']));
  assert.ok(answer instanceof Promise);
  assert.equal(await answer, 'abc');
});

// Through HTTP: requirePermission calls the host's next handler within the request's own event
// once what it reads is cached, and still refuses at once when the cache is told of a change.
const HOST_PERMISSION = 'reports.read';
let h: Harness;
let url: string;
let server: ReturnType<express.Express['listen']>;

before(async () => {
  h = await Harness.start({ config: { permissions: [{ key: HOST_PERMISSION, description: 'Read reports' }] } });
  const returned = new WeakMap<Request, () => boolean>();
  const app = express();
  app.get(
    '/reports',
    (req, _res, next) => {
      let hasReturned = false;
      returned.set(req, () => hasReturned);
      next();
      hasReturned = true;
    },
    h.identity.requirePermission(HOST_PERMISSION),
    (req, res) => {
      res.json({ same_event: !returned.get(req)!(), caller: h.identity.caller(req) });
    },
  );
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/reports`;
});
after(async () => {
  await new Promise((resolve) => server.close(resolve));
  await h.close();
});

test('a host route is admitted within its own event once its reads are cached, with the same caller, and refused at once after a change', async () => {
  const org = await createOrg(h);
  const member = await addMember(h, org, org.owner.token, ['admin']);
  const get = async () => {
    const response = await fetch(url, { headers: { authorization: `Bearer ${member.token}` } });
    return { status: response.status, body: (await response.json()) as { same_event?: boolean; caller?: { permissions: string[] } } };
  };
  const cold = await get();
  assert.equal(cold.status, 200);
  assert.equal(cold.body.same_event, false, 'the first request reads the database');
  const warm = await get();
  assert.equal(warm.status, 200);
  assert.equal(warm.body.same_event, true, 'a cached request is admitted without waiting');
  assert.deepEqual(warm.body.caller, cold.body.caller);
  assert.ok(warm.body.caller!.permissions.includes(HOST_PERMISSION));

  const demoted = await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token });
  assert.equal(demoted.status, 200, JSON.stringify(demoted.body));
  assert.equal((await get()).status, 403, 'the change is in force at once');
});
