/*
 * Threat: a client crafts a page cursor with values the router never issues (a fraction,
 * an overflowing number, a NUL byte, a wrong type). PostgreSQL refuses such values in a
 * bigint or text comparison with an error, which would surface as a 500. Every list that
 * pages must answer 422 instead.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { assertValidationErrors } from '../helpers/account.js';
import { createOrg, superadmin } from '../helpers/orgs.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const FORGED: unknown[][] = [[1.5], ['1e400'], ['a\u0000b'], [{ id: 1 }], [], ['x'.repeat(500)]];

function encode(parts: unknown[]): string {
  // JSON has no Infinity: write the overflowing literal by hand.
  return Buffer.from(JSON.stringify(parts).replace('"1e400"', '1e400'), 'utf8').toString('base64url');
}

test('forged cursors on members, invites and the audit log are 422, never a 500', async () => {
  const org = await createOrg(h);
  for (const path of ['members', 'invites', 'audit-log']) {
    for (const forged of FORGED) {
      const response = await h.get(`/orgs/${org.id}/${path}?cursor=${encode(forged)}`, { token: org.owner.token });
      assertValidationErrors(response, /cursor/, `${path} ${JSON.stringify(forged)}`);
    }
  }
});

test('a superadmin naming an impossible organization id gets 404, not a database error', async () => {
  const admin = await superadmin(h);
  for (const orgId of ['%00', 'a%00b', 'x'.repeat(200)]) {
    const response = await h.get(`/orgs/${orgId}/members`, { token: admin.accessToken });
    assert.equal(response.status, 404, `${orgId}: ${response.text}`);
  }
});
