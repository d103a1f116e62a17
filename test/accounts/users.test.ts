import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { createOrganizationOwnedBy, grantSuperadmin, signUpSuperadmin, tableOf } from '../helpers/users.js';

// docs/security.md: GET and PATCH /users/{id}, and who may call them.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

describe('GET /users/{id}', () => {
  test('a user reads their own record: exactly id, email, display_name, status', async () => {
    const user = await h.signUp();
    const response = await h.get(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { id: user.userId, email: user.email, display_name: null, status: 'active' } });
  });

  test('without a bearer token: 401 unauthorized with WWW-Authenticate', async () => {
    const user = await h.signUp();
    const response = await h.get(`/users/${user.userId}`);
    assert.equal(response.status, 401);
    assert.equal(response.body.error, 'unauthorized');
    assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/);
  });

  // Threat: enumeration of account ids by a regular user. The permission check runs before
  // the lookup, so an unknown id and someone else's id answer identically.
  test('a non-admin gets the same 403 for another user and for an unknown id', async () => {
    const caller = await h.signUp();
    const other = await h.signUp();
    const foreign = await h.get(`/users/${other.userId}`, { token: caller.accessToken });
    const unknown = await h.get(`/users/${UNKNOWN_ID}`, { token: caller.accessToken });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error, 'forbidden');
    assert.equal(unknown.status, 403);
    assert.deepEqual(unknown.body, foreign.body);
    assert.equal(foreign.text.includes(other.email), false);
  });

  test('a superadmin (users.read) reads anyone, and gets 404 not_found for an unknown id', async () => {
    const admin = await signUpSuperadmin(h);
    const other = await h.signUp();
    const response = await h.get(`/users/${other.userId}`, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body.data, { id: other.userId, email: other.email, display_name: null, status: 'active' });
    const unknown = await h.get(`/users/${UNKNOWN_ID}`, { token: admin.accessToken });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error, 'not_found');
  });

  // Threat: a stale claim keeps admin power after the grant is withdrawn. Authority comes
  // from the database on every request, never from the token.
  test('users.read is resolved from the database: granted and withdrawn under the same token', async () => {
    const caller = await h.signUp();
    const other = await h.signUp();
    assert.equal((await h.get(`/users/${other.userId}`, { token: caller.accessToken })).status, 403);
    await grantSuperadmin(h, caller.userId);
    assert.equal((await h.get(`/users/${other.userId}`, { token: caller.accessToken })).status, 200);
    await h.knex(tableOf(h, 'globalRoleGrants')).where({ user_id: caller.userId }).delete();
    assert.equal((await h.get(`/users/${other.userId}`, { token: caller.accessToken })).status, 403);
  });

  // Threat: an organization owner treating users.* as an organization permission. These
  // keys are global-only: only the superadmin role holds them.
  test('an organization owner does not hold users.read', async () => {
    const owner = await h.signUp();
    const other = await h.signUp();
    await createOrganizationOwnedBy(h, [owner]);
    const response = await h.get(`/users/${other.userId}`, { token: owner.accessToken });
    assert.equal(response.status, 403);
    assert.equal(response.body.error, 'forbidden');
  });
});

describe('PATCH /users/{id}', () => {
  test('self edits display_name: trimmed, answers the user body', async () => {
    const user = await h.signUp();
    const response = await h.patch(`/users/${user.userId}`, { display_name: '  Ada Lovelace  ' }, { token: user.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body, { data: { id: user.userId, email: user.email, display_name: 'Ada Lovelace', status: 'active' } });
    const read = await h.get(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(read.body.data.display_name, 'Ada Lovelace');
  });

  test('null and the empty string clear display_name', async () => {
    const user = await h.signUp();
    for (const clearing of [null, '', '   ']) {
      await h.patch(`/users/${user.userId}`, { display_name: 'Someone' }, { token: user.accessToken });
      const response = await h.patch(`/users/${user.userId}`, { display_name: clearing }, { token: user.accessToken });
      assert.equal(response.status, 200, response.text);
      assert.equal(response.body.data.display_name, null, `clearing with ${JSON.stringify(clearing)}`);
    }
  });

  test('display_name is at most 120 characters (after trimming); longer is 422', async () => {
    const user = await h.signUp();
    const longest = 'é'.repeat(120);
    const accepted = await h.patch(`/users/${user.userId}`, { display_name: `  ${longest}  ` }, { token: user.accessToken });
    assert.equal(accepted.status, 200, accepted.text);
    assert.equal(accepted.body.data.display_name, longest);
    const refused = await h.patch(`/users/${user.userId}`, { display_name: 'x'.repeat(121) }, { token: user.accessToken });
    assert.equal(refused.status, 422);
    assert.ok(Array.isArray(refused.body.errors) && refused.body.errors.some((message: string) => message.includes('display_name')), refused.text);
    const read = await h.get(`/users/${user.userId}`, { token: user.accessToken });
    assert.equal(read.body.data.display_name, longest);
  });

  test('validation: an empty body, a non-string display_name, a non-boolean mfa_enforced are 422', async () => {
    const user = await h.signUp();
    for (const body of [{}, { display_name: 42 }, { mfa_enforced: 'yes' }]) {
      const response = await h.patch(`/users/${user.userId}`, body, { token: user.accessToken });
      assert.equal(response.status, 422, `${JSON.stringify(body)}: ${response.text}`);
      assert.ok(Array.isArray(response.body.errors));
    }
  });

  // Threat: a regular user renaming someone else, or probing ids through PATCH.
  test('a non-admin gets the same 403 for another user and for an unknown id, and nothing changes', async () => {
    const caller = await h.signUp();
    const other = await h.signUp();
    const foreign = await h.patch(`/users/${other.userId}`, { display_name: 'Mallory' }, { token: caller.accessToken });
    const unknown = await h.patch(`/users/${UNKNOWN_ID}`, { display_name: 'Mallory' }, { token: caller.accessToken });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error, 'forbidden');
    assert.deepEqual(unknown.body, foreign.body);
    assert.equal(unknown.status, 403);
    const row = await h.knex(tableOf(h, 'users')).where({ id: other.userId }).first();
    assert.equal(row.display_name, null);
  });

  test('a superadmin (users.manage) edits another user, and gets 404 for an unknown id', async () => {
    const admin = await signUpSuperadmin(h);
    const other = await h.signUp();
    const response = await h.patch(`/users/${other.userId}`, { display_name: 'Renamed' }, { token: admin.accessToken });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.data.display_name, 'Renamed');
    const unknown = await h.patch(`/users/${UNKNOWN_ID}`, { display_name: 'x' }, { token: admin.accessToken });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error, 'not_found');
  });

  // Threat: a user switching off an enforcement an administrator applied (or setting it to
  // lock others out). mfa_enforced needs users.manage, even on oneself.
  test('mfa_enforced on oneself without users.manage is 403 and changes nothing', async () => {
    const user = await h.signUp();
    for (const value of [true, false]) {
      const response = await h.patch(`/users/${user.userId}`, { mfa_enforced: value, display_name: 'Sneaky' }, { token: user.accessToken });
      assert.equal(response.status, 403, response.text);
      assert.equal(response.body.error, 'forbidden');
    }
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.mfa_enforced, false);
    assert.equal(me.body.data.display_name, null);
  });

  test('a superadmin sets and clears mfa_enforced on a user (CONTRACT 5)', async () => {
    const admin = await signUpSuperadmin(h);
    const target = await h.signUp();
    const on = await h.patch(`/users/${target.userId}`, { mfa_enforced: true }, { token: admin.accessToken });
    assert.equal(on.status, 200, on.text);
    assert.deepEqual(Object.keys(on.body.data).sort(), ['display_name', 'email', 'id', 'status']);
    const meOn = await h.get('/auth/me', { token: target.accessToken });
    assert.equal(meOn.status, 200, meOn.text);
    assert.equal(meOn.body.data.mfa_enforced, true);
    const off = await h.patch(`/users/${target.userId}`, { mfa_enforced: false }, { token: admin.accessToken });
    assert.equal(off.status, 200, off.text);
    const meOff = await h.get('/auth/me', { token: target.accessToken });
    assert.equal(meOff.body.data.mfa_enforced, false);
  });
});
