import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { countingDeadlocks, waitingOnALock } from '../helpers/interleaving.js';
import { createOrg } from '../helpers/orgs.js';
import { UserRepository } from '../../src/store/user-repository.js';

/*
 * Store.transaction's safety net (docs/database.md): a transaction PostgreSQL rolls back to
 * break a deadlock runs again instead of answering 500. The services lock in one order, so no
 * two requests of the router deadlock any more; here the other side of the cycle is the test's
 * own transaction, which locks the same two rows in the opposite order.
 */
const SKIP = TEST_DB !== 'pg' && 'SQLite takes no row locks: no deadlock to break';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function untilSomeoneWaits(): Promise<void> {
  for (let turn = 0; turn < 5000; turn += 1) {
    if (await waitingOnALock(h)) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('no transaction waited on a lock');
}

test('a request PostgreSQL rolls back to break a deadlock runs again and answers as if alone', { skip: SKIP, timeout: 60_000 }, async () => {
  const org = await createOrg(h);
  const lockAccount = UserRepository.prototype.findByIdForUpdate;
  let other: Promise<void> | undefined;
  // The key's creation holds the organization's row and asks for its creator's. The test's
  // transaction takes the creator's first, so the creation waits first, and PostgreSQL's check
  // (run by the waiter whose deadlock_timeout ends first) rolls the creation back once the
  // test's transaction asks for the organization's row.
  UserRepository.prototype.findByIdForUpdate = async function (this: UserRepository, id: string) {
    if (other || id !== org.owner.userId) return lockAccount.call(this, id);
    const trx = await h.knex.transaction();
    await trx(`${h.tablePrefix}users`).where({ id }).forUpdate().select('id');
    const creationsLock = lockAccount.call(this, id);
    creationsLock.catch(() => undefined);
    await untilSomeoneWaits();
    other = trx(`${h.tablePrefix}organizations`)
      .where({ id: org.id })
      .forUpdate()
      .select('id')
      .then(async () => {
        await trx.commit();
      });
    return creationsLock;
  };
  try {
    const { answer: created, deadlocks } = await countingDeadlocks(() => h.post(`/orgs/${org.id}/api-keys`, { name: 'after a deadlock', permission_keys: ['org.read'] }, { token: org.owner.token }));
    await other;
    assert.equal(deadlocks, 1, 'the creation was the deadlock victim');
    assert.equal(created.status, 201, created.text);
    const keys = await h.knex(`${h.tablePrefix}api_keys`).where({ organization_id: org.id, name: 'after a deadlock' }).count({ count: '*' });
    assert.equal(Number(keys[0]?.count), 1, 'one key: the rolled-back attempt wrote nothing');
    assert.equal(h.eventsOfType('api_key.created').filter((event) => event.organization_id === org.id).length, 1);
  } finally {
    UserRepository.prototype.findByIdForUpdate = lockAccount;
  }
});
