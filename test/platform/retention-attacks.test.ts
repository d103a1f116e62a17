/*
 * Retention: rows that outlive their use. An operator runs the router for years, and an attacker
 * with a cheap credential (or none) repeats a request that writes a row no request deletes. Each
 * test ages rows with the injected clock and counts them in the database. SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/platform/retention-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { eventually } from '../helpers/eventually.js';
import { type Harness, harnessesClosedAfterFile, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { enrollSms, enrollTotp, lastSmsCode, loginForTicket, uniquePhone } from '../helpers/mfa.js';
import { createOrg, switchOrg } from '../helpers/orgs.js';

const startHarness = harnessesClosedAfterFile();
const DAY = 86_400;

describe('SMS and e-mail code challenges', () => {
  // Threat: every code sent for an SMS or e-mail factor (each login through it, each step-up)
  // writes a challenge row, and a later send only marked the older ones expired: one account
  // signing in daily, or repeating POST /auth/mfa/challenge under its send budget (five an hour
  // per destination), left a row per code for ever.
  test("a factor's challenges that ended a day ago go with its next send", async () => {
    const h = await startHarness();
    const user = await h.signUp();
    const phone = uniquePhone();
    const { factorId } = await enrollSms(h, user.accessToken, phone);
    for (let round = 0; round < 3; round += 1) {
      h.clock.advance(31);
      const { ticket } = await loginForTicket(h, user);
      const sent = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
      assert.equal(sent.status, 200, sent.text);
    }
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId }), 4, 'the enrollment code and three login codes');
    h.clock.advance(2 * DAY);
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId }), 1, 'the challenges that ended a day ago pruned, the new one kept');
    // The new code still opens the login.
    const verified = await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
  });

  test('challenges that ended less than a day ago are kept', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    const { factorId } = await enrollSms(h, user.accessToken, uniquePhone());
    for (let round = 0; round < 2; round += 1) {
      h.clock.advance(3600);
      const { ticket } = await loginForTicket(h, user);
      assert.equal((await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })).status, 200);
    }
    assert.equal(await countRows(h, 'otp_challenges', { user_id: user.userId }), 3);
  });
});

describe('verification and reset links', () => {
  // Threat: POST /auth/password/forgot is public. Each call for a registered address (five an hour
  // per address under the link budget) wrote a reset link row; a newer link only marked the older
  // ones used, and nothing deleted them, so anyone holding a list of addresses added up to 120
  // rows a day per account, for ever.
  test("an account's links that expired a day ago go with its next link", async () => {
    const h = await startHarness();
    const user = await h.signUp();
    for (let round = 0; round < 3; round += 1) {
      assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    }
    const before = await countRows(h, 'one_time_tokens', { user_id: user.userId });
    assert.ok(before >= 3, `three reset links stored (${before})`);
    const staleLink = h.tokenFromMail(user.email, 'password_reset');
    h.clock.advance(2 * DAY);
    assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    assert.equal(await countRows(h, 'one_time_tokens', { user_id: user.userId }), 1, 'the links that expired a day ago pruned, the new one kept');
    // A pruned link answers as an expired one did; the new one resets.
    const stale = await h.post('/auth/password/reset', { token: staleLink, new_password: `${STRONG_PASSWORD}-1` });
    assert.equal(stale.status, 401, stale.text);
    assert.equal(stale.body.error, 'invalid_token', stale.text);
    const reset = await h.post('/auth/password/reset', { token: h.tokenFromMail(user.email, 'password_reset'), new_password: `${STRONG_PASSWORD}-2` });
    assert.equal(reset.status, 200, reset.text);
  });

  test('a link that expired less than a day ago is kept', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    const before = await countRows(h, 'one_time_tokens', { user_id: user.userId });
    // The reset link (an hour) has expired, but less than a day ago.
    h.clock.advance(3 * 3600);
    assert.equal((await h.post('/auth/password/forgot', { email: user.email })).status, 202);
    assert.equal(await countRows(h, 'one_time_tokens', { user_id: user.userId }), before + 1);
  });
});

/** The column lists of a table's indexes, each in index order. */
async function indexColumns(h: Harness, table: string): Promise<string[][]> {
  const name = `${h.tablePrefix}${table}`;
  if (h.knex.client.config.client === 'pg') {
    const result = await h.knex.raw(
      `select i.relname as index, array_agg(a.attname::text order by k.n) as columns
         from pg_index x
         join pg_class i on i.oid = x.indexrelid
         cross join lateral unnest(x.indkey) with ordinality as k(attnum, n)
         join pg_attribute a on a.attrelid = x.indrelid and a.attnum = k.attnum
        where x.indrelid = ?::regclass
        group by i.relname`,
      [name],
    );
    return (result.rows as Array<{ columns: string[] }>).map((row) => row.columns);
  }
  const indexes = (await h.knex.raw(`pragma index_list(${JSON.stringify(name)})`)) as Array<{ name: string }>;
  const lists: string[][] = [];
  for (const index of indexes) {
    const columns = (await h.knex.raw(`pragma index_info(${JSON.stringify(index.name)})`)) as Array<{ seqno: number; name: string }>;
    lists.push(columns.sort((a, b) => a.seqno - b.seqno).map((column) => column.name));
  }
  return lists;
}

describe('the once-a-minute prunes across all rows', () => {
  // Threat: each prune deletes by age across the whole table (tickets, passwordless challenges,
  // budget events, finished deliveries). Without an index that leads with the age column, each
  // run read every row kept (a sequential scan on PostgreSQL, once a minute per instance), and
  // one DELETE removed the whole pile at once, holding every row lock of it.
  const prunes: Array<[table: string, leading: string[]]> = [
    ['mfa_tickets', ['expires_at']],
    ['passwordless_challenges', ['expires_at']],
    ['rate_events', ['occurred_at']],
    ['event_deliveries', ['status', 'updated_at']],
    ['rate_limit_counters', ['reset_at']],
    ['social_flows', ['created_at']],
    ['webauthn_challenges', ['expires_at']],
    ['sessions', ['created_at']],
    ['sessions', ['revoked_at']],
  ];
  test('every prune by age is served by an index on that age', async () => {
    const h = await startHarness();
    for (const [table, leading] of prunes) {
      const lists = await indexColumns(h, table);
      const served = lists.some((columns) => leading.every((column, at) => columns[at] === column));
      assert.ok(served, `${table}: an index leading with (${leading.join(', ')}); found ${JSON.stringify(lists)}`);
    }
  });

  test('a pile larger than one batch is pruned whole, the live ticket kept', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const now = h.clock.now();
    const ended = Array.from({ length: 2_500 }, () => ({ id: randomUUID(), user_id: user.userId, failed_attempts: 0, created_at: now - 3 * DAY * 1000, expires_at: now - 2 * DAY * 1000, consumed_at: null }));
    await h.knex.batchInsert(`${h.tablePrefix}mfa_tickets`, ended, 250);
    assert.equal(await countRows(h, 'mfa_tickets'), 2_500);
    const gated = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
    assert.equal(gated.body.data.mfa_required, true, gated.text);
    await eventually(async () => (await countRows(h, 'mfa_tickets')) === 1, 'every ended ticket pruned over several batches, the new one kept');
  });
});

describe('sessions that ended', () => {
  // Threat: every sign-in writes a session row (its IP and user agent among it), and nothing
  // deleted one: expired and revoked sessions stayed for ever, a row per login of every account
  // since the router was installed, and a signed-up attacker's scripted logins (under the login
  // limits) added rows that outlived their 30 days. A session's refresh tokens answer 401
  // invalid_grant once it has ended, and its access tokens last at most a day, so a day after its
  // end nothing reads it.
  test('sessions revoked a day ago, or a day past their absolute lifetime, are pruned by later sign-ins; live ones are kept', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    const login = async () => {
      const response = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
      assert.equal(response.status, 200, response.text);
      return response.body.data as { access_token: string; refresh_token: string };
    };
    // Two sessions that outlive their absolute lifetime (90 days); one revoked on day 60; one
    // opened on day 80, still live at the end.
    await login();
    await login();
    h.clock.advance(60 * DAY);
    const revoked = await login();
    assert.equal((await h.post('/auth/logout', undefined, { token: revoked.access_token })).status, 200);
    h.clock.advance(20 * DAY);
    const kept = await login();
    assert.equal(await countRows(h, 'sessions', { user_id: user.userId }), 4);
    // Day 91 and a minute: the first two are a day past 90 days, the revoked one 31 days past its end.
    h.clock.advance(11 * DAY + 60);
    await login();
    await eventually(async () => (await countRows(h, 'sessions', { user_id: user.userId })) === 2, 'the ended sessions pruned, the live one and the new one kept');
    const stale = await h.post('/auth/token/refresh', { refresh_token: revoked.refresh_token });
    assert.equal(stale.status, 401, stale.text);
    assert.equal(stale.body.error, 'invalid_grant', stale.text);
    const refreshed = await h.post('/auth/token/refresh', { refresh_token: kept.refresh_token });
    assert.equal(refreshed.status, 200, refreshed.text);
  });

  test('a refresh writes no index of the prune: the session row is updated in place', async () => {
    // Every refresh moves `expires_at`: an index on it would cost each refresh an index write.
    const h = await startHarness();
    for (const columns of await indexColumns(h, 'sessions')) assert.ok(!columns.includes('expires_at') && !columns.includes('last_used_at') && !columns.includes('refresh_generation'), JSON.stringify(columns));
  });
});

describe('API keys that ended', () => {
  // Threat: the quota counts live keys only, so a member with a verified address (fresh
  // authentication is a login) could create key after key and revoke each: every one stayed for
  // ever. Only revoked keys are pruned: an expiry is read off the clock, and a clock stepped far
  // ahead would delete every live key (test/platform/expiry-boundaries.test.ts); expired keys stay
  // listed with their `expires_at`.
  test("a member's keys revoked a day ago go with their next key; expired ones stay listed", async () => {
    const h = await startHarness();
    const org = await createOrg(h);
    const create = async (token: string, expiresIn?: number) => {
      const created = await h.post(`/orgs/${org.id}/api-keys`, { name: 'job', permission_keys: ['org.read'], ...(expiresIn ? { expires_in: expiresIn } : {}) }, { token });
      assert.equal(created.status, 201, created.text);
      return created.body.data.id as string;
    };
    for (let round = 0; round < 3; round += 1) await create(org.owner.token, 60);
    const revoked = await create(org.owner.token);
    assert.equal((await h.delete(`/orgs/${org.id}/api-keys/${revoked}`, { token: org.owner.token })).status, 200);
    const live = await create(org.owner.token);
    assert.equal(await countRows(h, 'api_keys', { organization_id: org.id }), 5);
    h.clock.advance(2 * DAY);
    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    assert.equal(login.status, 200, login.text);
    const token = await switchOrg(h, login.body.data.access_token, org.id);
    const next = await create(token, 60);
    assert.equal(await countRows(h, 'api_keys', { organization_id: org.id }), 5, 'the key revoked a day ago pruned; the expired, the live and the new ones kept');
    assert.equal(await countRows(h, 'api_keys', { id: revoked }), 0, 'the revoked key is gone');
    const list = await h.get(`/orgs/${org.id}/api-keys`, { token });
    assert.equal(list.status, 200, list.text);
    const listed = list.body.data.keys.map((key: { id: string }) => key.id);
    assert.ok(listed.includes(live) && listed.includes(next) && listed.length === 5, JSON.stringify(listed));
  });
});

describe('invitations that ended', () => {
  // Threat: an organization's owner (anyone can create one) invites and revokes, again and again
  // under the send budget (50 an hour): every revoked or accepted invitation stayed for ever, a
  // stranger's address in it.
  test("an organization's invitations that ended a day ago go with its next invitation", async () => {
    const h = await startHarness();
    const org = await createOrg(h);
    const invite = async (token: string) => {
      const created = await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invitee'), role_slugs: ['member'] }, { token });
      assert.equal(created.status, 201, created.text);
      return created.body.data.id as string;
    };
    for (let round = 0; round < 3; round += 1) {
      const id = await invite(org.owner.token);
      assert.equal((await h.delete(`/orgs/${org.id}/invites/${id}`, { token: org.owner.token })).status, 200);
    }
    const pending = await invite(org.owner.token);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id }), 4);
    h.clock.advance(2 * DAY);
    const login = await h.post('/auth/login', { email: org.owner.email, password: org.owner.password });
    const token = await switchOrg(h, login.body.data.access_token, org.id);
    const next = await invite(token);
    assert.equal(await countRows(h, 'invites', { organization_id: org.id }), 2, 'the revoked invitations pruned; the pending one and the new one kept');
    assert.deepEqual((await h.knex(`${h.tablePrefix}invites`).where({ organization_id: org.id }).pluck('id')).sort(), [pending, next].sort());
  });
});
