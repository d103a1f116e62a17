import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { IdentityEvent } from '../../src/index.js';
import { EVENT_TYPES } from '../../src/index.js';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { countRows } from '../helpers/account.js';

// docs/events.md and docs/adapters.md and docs/events.md: events are audited in the transaction, handed to onEvent after commit,
// never carry secrets, and a failing listener or mailer never fails the request.

let h: Harness;
const auditRowSeenByListener: Array<Promise<boolean>> = [];
before(async () => {
  h = await Harness.start({
    onEvent: (event) => {
      // After commit the audit row is visible from another query (and, on SQLite, the single connection is free).
      auditRowSeenByListener.push(h.knex(`${h.tablePrefix}audit_events`).where({ id: event.id }).first().then((row) => row !== undefined));
    },
  });
});
after(async () => {
  await h.close();
});

test('a full account flow emits the spec events, each audited and delivered after commit', async () => {
  const email = uniqueEmail('flow');
  const password = STRONG_PASSWORD;
  await h.post('/auth/register', { email, password });
  const verifyToken = h.tokenFromMail(email, 'verify_email');
  await h.post('/auth/email/verify', { token: verifyToken });
  await h.post('/auth/login', { email, password: 'a wrong password!' });
  const login = await h.post('/auth/login', { email, password });
  const { access_token: accessToken, refresh_token: refreshToken } = login.body.data;
  const refreshed = await h.post('/auth/token/refresh', { refresh_token: refreshToken });
  await h.post('/auth/token/refresh', { refresh_token: refreshToken }); // replay
  await h.post('/auth/password/forgot', { email });
  const resetToken = h.tokenFromMail(email, 'password_reset');
  const newPassword = 'the second passphrase';
  await h.post('/auth/password/reset', { token: resetToken, new_password: newPassword });
  const again = await h.post('/auth/login', { email, password: newPassword });
  const thirdPassword = 'the third passphrase!';
  await h.post('/auth/password/change', { current_password: newPassword, new_password: thirdPassword }, { token: again.body.data.access_token });
  await h.post('/auth/logout-all', {}, { token: again.body.data.access_token });

  const userId = login.body.data.user.id;
  const mine = h.events.filter((event) => event.user_id === userId);
  assert.deepEqual(mine.map((event) => event.type), [
    'user.registered',
    'user.email_verified',
    'user.login_failed',
    'user.logged_in',
    'auth.token_refreshed',
    'auth.refresh_reuse_detected',
    'user.password_reset_requested',
    'user.password_changed',
    'user.logged_in',
    'user.password_changed',
    'auth.sessions_revoked',
  ]);
  for (const event of mine) {
    assert.deepEqual(Object.keys(event).sort(), ['actor_id', 'data', 'id', 'ip', 'occurred_at', 'organization_id', 'type', 'user_id']);
    assert.ok(EVENT_TYPES.includes(event.type));
    assert.equal(event.occurred_at, new Date(Date.parse(event.occurred_at)).toISOString());
    assert.equal(typeof event.ip, 'string');
  }
  // Written to the audit table (same ids, same types).
  const rows = await h.knex(`${h.tablePrefix}audit_events`).where({ user_id: userId }).orderBy('seq');
  assert.deepEqual(rows.map((row) => row.id), mine.map((event) => event.id));
  assert.deepEqual(rows.map((row) => row.type), mine.map((event) => event.type));
  const seen = await Promise.all(auditRowSeenByListener);
  assert.ok(seen.length >= mine.length);
  assert.ok(seen.every(Boolean), 'every event reached the listener after its audit row committed');

  // Threat: secrets leaking into the audit trail or the host's event pipeline (docs/events.md).
  const secrets = [password, newPassword, thirdPassword, verifyToken, resetToken, accessToken, refreshToken, refreshed.body.data.refresh_token, refreshed.body.data.access_token, 'a wrong password!'];
  const published = JSON.stringify(h.events);
  const audited = JSON.stringify(await h.knex(`${h.tablePrefix}audit_events`).select());
  const logged = JSON.stringify(h.logs);
  for (const secret of secrets) {
    assert.ok(!published.includes(secret), `an event carries a secret (${secret.slice(0, 8)}…)`);
    assert.ok(!audited.includes(secret), `the audit table carries a secret (${secret.slice(0, 8)}…)`);
    assert.ok(!logged.includes(secret), `the log carries a secret (${secret.slice(0, 8)}…)`);
  }
});

test('refused requests write no audit row and emit nothing', async () => {
  const before = await countRows(h, 'audit_events');
  const eventsBefore = h.events.length;
  await h.post('/auth/register', { email: uniqueEmail(), password: 'short' });
  await h.post('/auth/email/verify', { token: 'nope' });
  await h.post('/auth/password/reset', { token: 'nope', new_password: STRONG_PASSWORD });
  assert.equal(await countRows(h, 'audit_events'), before);
  assert.equal(h.events.length, eventsBefore);
});

test('a throwing onEvent listener never fails the request', async () => {
  const failures: IdentityEvent[] = [];
  const throwing = await Harness.start({
    onEvent: (event) => {
      failures.push(event);
      throw new Error('listener exploded');
    },
  });
  const rejecting = await Harness.start({ onEvent: async () => Promise.reject(new Error('listener rejected')) });
  try {
    for (const harness of [throwing, rejecting]) {
      const user = await harness.signUp();
      assert.equal((await harness.post('/auth/token/refresh', { refresh_token: user.refreshToken })).status, 200);
      assert.equal((await harness.post('/auth/logout-all', {}, { token: user.accessToken })).status, 200);
      assert.ok(harness.logs.some((line) => line.level === 'error' && /onEvent listener failed/.test(line.msg)));
      assert.ok((await countRows(harness, 'audit_events', { user_id: user.userId })) >= 4, 'the changes committed');
    }
    assert.ok(failures.length >= 4);
  } finally {
    await throwing.close();
    await rejecting.close();
  }
});

test('a failing mailer never fails register, resend or forgot', async () => {
  const broken = await Harness.start({ mailerFails: true });
  try {
    const email = uniqueEmail('nomail');
    assert.equal((await broken.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    assert.equal(await countRows(broken, 'users', { email }), 1);
    assert.equal((await broken.post('/auth/email/verify/resend', { email })).status, 202);
    assert.equal((await broken.post('/auth/password/forgot', { email })).status, 202);
    await new Promise((resolve) => setImmediate(resolve));
    assert.ok(broken.logs.some((line) => line.level === 'error' && /after-commit delivery failed/.test(line.msg)), JSON.stringify(broken.logs));
    assert.equal(broken.eventsOfType('user.registered').length, 1);
  } finally {
    await broken.close();
  }
});
