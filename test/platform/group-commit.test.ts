import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { GroupCommit } from '../../src/store/group-commit.js';
import { Harness, TEST_DB } from '../helpers/harness.js';

// Issue 28: on SQLite the small writes of one turn of the event loop share a transaction
// (src/store/group-commit.ts), so twenty refreshes in flight write their pages once instead of
// twenty times. What must hold: the members of a group see one another's writes in order, one
// that fails rolls back alone, a failed COMMIT fails every member and keeps nothing of theirs,
// and no member hears "done" before its write is committed.

const skip = TEST_DB !== 'sqlite' && 'group commit is SQLite’s; PostgreSQL commits concurrent transactions in groups itself';

let h: Harness;
let probe: string;
let parent: string;
before(async () => {
  h = await Harness.start();
  probe = `${h.tablePrefix}group_commit_probe`;
  parent = `${h.tablePrefix}group_commit_parent`;
  await h.knex.schema.createTable(parent, (table) => {
    table.string('id').primary();
  });
  await h.knex.schema.createTable(probe, (table) => {
    table.string('id').primary();
    table.string('parent_id').nullable().references('id').inTable(parent);
  });
});
after(async () => {
  await h.knex.schema.dropTableIfExists(probe);
  await h.knex.schema.dropTableIfExists(parent);
  await h.close();
});

const kept = async () => (await h.knex(probe).orderBy('id').pluck('id')) as string[];

test('writes started in one turn commit as one transaction, in the order they joined', { skip }, async () => {
  await h.knex(probe).delete();
  const group = new GroupCommit(h.knex);
  const seen = await Promise.all(
    ['a', 'b', 'c', 'd'].map((id) =>
      group.run(async (db) => {
        await db(probe).insert({ id });
        // Inside the shared transaction: every earlier member's row, not yet committed.
        return (await db(probe).orderBy('id').pluck('id')) as string[];
      }),
    ),
  );
  assert.deepEqual(seen, [['a'], ['a', 'b'], ['a', 'b', 'c'], ['a', 'b', 'c', 'd']]);
  assert.deepEqual(await kept(), ['a', 'b', 'c', 'd']);
  // A later turn forms a group of its own.
  assert.equal(await group.run(async (db) => ((await db(probe).pluck('id')) as string[]).length), 4);
});

test('a member that fails rolls back alone, and only its caller hears of it', { skip }, async () => {
  await h.knex(probe).delete();
  const group = new GroupCommit(h.knex);
  const refusal = new Error('refused halfway');
  const outcomes = await Promise.allSettled([
    group.run(async (db) => db(probe).insert({ id: 'first' })),
    group.run(async (db) => {
      await db(probe).insert({ id: 'refused' });
      throw refusal;
    }),
    // A statement the database refuses: a duplicate key.
    group.run(async (db) => db(probe).insert({ id: 'first' })),
    group.run(async (db) => db(probe).insert({ id: 'last' })),
  ]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.status),
    ['fulfilled', 'rejected', 'rejected', 'fulfilled'],
  );
  assert.equal((outcomes[1] as PromiseRejectedResult).reason, refusal);
  assert.match(String((outcomes[2] as PromiseRejectedResult).reason), /UNIQUE/);
  assert.deepEqual(await kept(), ['first', 'last']);
});

test('a COMMIT that fails fails every member, and keeps nothing of any', { skip }, async () => {
  await h.knex(probe).delete();
  const group = new GroupCommit(h.knex);
  const outcomes = await Promise.allSettled([
    group.run(async (db) => db(probe).insert({ id: 'innocent' })),
    group.run(async (db) => {
      // A foreign key checked only at COMMIT, which then fails.
      await db.raw('PRAGMA defer_foreign_keys = ON');
      await db(probe).insert({ id: 'orphan', parent_id: 'missing' });
    }),
  ]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.status),
    ['rejected', 'rejected'],
  );
  for (const outcome of outcomes) assert.match(String((outcome as PromiseRejectedResult).reason), /FOREIGN KEY/);
  assert.deepEqual(await kept(), []);
  // The connection went back to the pool usable.
  await group.run(async (db) => db(probe).insert({ id: 'after' }));
  assert.deepEqual(await kept(), ['after']);
});

test('a member settles only once its transaction has committed', { skip }, async () => {
  await h.knex(probe).delete();
  const group = new GroupCommit(h.knex);
  let completed: (() => boolean) | undefined;
  await group.run(async (db) => {
    completed = db.isCompleted;
    await db(probe).insert({ id: 'durable' });
  });
  assert.equal(completed?.(), true, 'the transaction had ended when the member settled');
  // Read on another connection: committed, not merely written.
  const other = new (await import('better-sqlite3')).default(String((h.knex.client.config.connection as { filename: string }).filename), { readonly: true });
  try {
    assert.deepEqual(other.prepare(`select id from ${probe}`).pluck().all(), ['durable']);
  } finally {
    other.close();
  }
});
