import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertValidationErrors } from '../helpers/account.js';
import { Harness } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';
import { createOrg, type CreatedOrg } from '../helpers/orgs.js';

/*
 * Text a person types (src/http/schemas.ts `typedText`): the limits of SPEC 2 and 8, CONTRACT
 * 10 and docs/openapi.yaml count characters, and surrounding spaces are trimmed, not refused.
 * Joi's own `max` counts UTF-16 code units, so a name of emoji was refused at half its length,
 * and `trim()` without conversion refused ` Nightly ` outright.
 */

const EMOJI = '\u{1F600}';
let h: Harness;
let org: CreatedOrg;
before(async () => {
  h = await Harness.start();
  org = await createOrg(h);
});
after(() => h.close());

test('an API key name is 1 to 120 characters (CONTRACT 10), counted as characters, trimmed', async () => {
  const create = (name: string) => h.post(`/orgs/${org.id}/api-keys`, { name, permission_keys: ['org.read'] }, { token: org.owner.token });
  const longest = await create(EMOJI.repeat(120));
  assert.equal(longest.status, 201, longest.text);
  assert.equal(longest.body.data.name, EMOJI.repeat(120));
  assertValidationErrors(await create(EMOJI.repeat(121)), /"name" must be at most 120 characters/);
  const spaced = await create('  Nightly export  ');
  assert.equal(spaced.status, 201, spaced.text);
  assert.equal(spaced.body.data.name, 'Nightly export');
  assertValidationErrors(await create('   '), /"name"/);
});

test("a factor's label is at most 100 characters (docs/openapi.yaml), counted as characters, trimmed", async () => {
  const { factorId } = await enrollTotp(h, org.owner.accessToken);
  const label = (value: string) => h.patch(`/auth/mfa/factors/${factorId}`, { label: value }, { token: org.owner.accessToken });
  const longest = await label(EMOJI.repeat(100));
  assert.equal(longest.status, 200, longest.text);
  assertValidationErrors(await label(EMOJI.repeat(101)), /"label" must be at most 100 characters/);
  assert.equal((await label('  Phone  ')).status, 200);
  const factors = await h.get('/auth/mfa/factors', { token: org.owner.accessToken });
  const listed = (factors.body.data.factors ?? factors.body.data).find((factor: { id: string }) => factor.id === factorId);
  assert.equal(listed.label, 'Phone');
});
