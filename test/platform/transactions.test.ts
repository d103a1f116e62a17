import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { runTransaction } from '../../src/store/transaction.js';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { createOrg } from '../helpers/orgs.js';

// Issue 28: a change runs as one transaction on one pooled connection (src/store/transaction.ts),
// not through Knex's transaction. A change refused halfway must roll back, or its connection
// goes back to the pool with a transaction still open and the next change on it fails.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('a change refused inside its transaction rolls back, and the next changes commit', async () => {
  const org = await createOrg(h);
  const role = (slug: string) => h.post(`/orgs/${org.id}/roles`, { name: slug, slug, permission_keys: ['org.read'] }, { token: org.owner.token });
  assert.equal((await role('auditor')).status, 201);
  // Refused after its transaction began: the slug is looked up inside it.
  const refused = await role('auditor');
  assert.equal(refused.status, 409, refused.text);
  for (const slug of ['reviewer', 'approver', 'observer']) {
    const created = await role(slug);
    assert.equal(created.status, 201, created.text);
  }
  const slugs = await h.knex(`${h.tablePrefix}roles`).where({ organization_id: org.id, is_system: false }).orderBy('slug').pluck('slug');
  assert.deepEqual(slugs, ['approver', 'auditor', 'observer', 'reviewer']);
  assert.equal(h.eventsOfType('role.created').filter((event) => event.organization_id === org.id).length, 4);
});

// A work whose parts run side by side can fail in one part while another still starts a
// statement. Sent after ROLLBACK, that statement would run outside any transaction and stay.
// SQLite's ROLLBACK is synchronous and leaves no such window; PostgreSQL's is a round trip.
test(
  'a statement started after its work failed is refused, and nothing of the work stays',
  { skip: TEST_DB !== 'pg' && "SQLite's rollback is synchronous: no statement can start during it" },
  async () => {
    const probe = `${h.tablePrefix}transaction_probe`;
    await h.knex.schema.createTable(probe, (table) => {
      table.string('id').primary();
    });
    try {
      let late: Promise<unknown> | undefined;
      await assert.rejects(
        runTransaction(h.knex, 'pg', async (db) => {
          await db(probe).insert({ id: 'inside' });
          // Its refusal is caught where it is made, to be checked below rather than left unhandled.
          late = new Promise((resolve) => setImmediate(resolve))
            .then(() => db(probe).insert({ id: 'late' }))
            .then(
              () => 'ran',
              (error: unknown) => error,
            );
          throw new Error('refused halfway');
        }),
        /refused halfway/,
      );
      const outcome = await late;
      assert.ok(outcome instanceof Error && /Transaction already completed/.test(outcome.message), String(outcome));
      assert.deepEqual(await h.knex(probe).pluck('id'), []);
    } finally {
      await h.knex.schema.dropTableIfExists(probe);
    }
  },
);
