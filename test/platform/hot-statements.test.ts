import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';

// Issue 11: the hot path's statements are prepared once per connection (named statements on
// PostgreSQL). During a rolling upgrade a newer instance may migrate the shared database
// while older ones keep serving: a column it adds must not break their prepared statements,
// which PostgreSQL refuses to run once their result columns change ("cached plan must not
// change result type"). Hot statements therefore name their columns.

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

test('columns added under a running instance leave its login, refresh and member page working', async () => {
  const user = await h.signUp();
  const login = () => h.post('/auth/login', { email: user.email, password: user.password });
  // Sequential requests reuse the pool's connection, so these statements are prepared on it.
  for (let attempt = 0; attempt < 3; attempt += 1) assert.equal((await login()).status, 200);
  const organization = (await h.post('/orgs', { name: 'Rolling' }, { token: user.accessToken })).body.data;
  const scoped = (await h.post('/auth/switch-org', { organization_id: organization.id }, { token: user.accessToken })).body.data;
  assert.equal((await h.get(`/orgs/${organization.id}/members`, { token: scoped.access_token })).status, 200);

  for (const table of ['users', 'sessions', 'mfa_factors', 'memberships', 'refresh_tokens']) {
    await h.knex.schema.alterTable(`${h.tablePrefix}${table}`, (columns) => {
      columns.text('added_by_a_newer_version');
    });
  }

  const again = await login();
  assert.equal(again.status, 200, again.text);
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: again.body.data.refresh_token });
  assert.equal(refreshed.status, 200, refreshed.text);
  const members = await h.get(`/orgs/${organization.id}/members`, { token: scoped.access_token });
  assert.equal(members.status, 200, members.text);
  assert.equal(members.body.data.length, 1);
});
