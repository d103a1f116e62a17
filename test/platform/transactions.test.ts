import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
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
