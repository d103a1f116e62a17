/*
 * The router's dependencies failing, by accident or under an attacker's load: the DNS resolver
 * of the domain TXT proof, the mailer, PostgreSQL's connection killed mid-transaction. Each
 * answer must be a 4xx or 503 in the error shape within a bound (never a 500, never a hang),
 * and no state may be left half-written. SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/platform/dependency-failure-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { UserRepository } from '../../src/store/user-repository.js';
import { assertError, countRows } from '../helpers/account.js';
import { harnessesClosedAfterFile, STRONG_PASSWORD, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { createOrg } from '../helpers/orgs.js';
import { StubDns, ssoConfig, uniqueDomain } from '../helpers/sso.js';

const startHarness = harnessesClosedAfterFile();

/** `answer`, or 'hung' when it has not settled after `ms` of wall time. */
function orHung<T>(answer: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([answer, new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  })]).finally(() => clearTimeout(timer));
}

describe("the DNS resolver of the domains' TXT proof", () => {
  // Threat: POST /orgs/{id}/domains/{id}/verify awaited adapters.dns.resolveTxt with no bound, so
  // a resolver that never answers (a DNS server dropping the queries, a host's DoH adapter whose
  // fetch has no timeout) held the request, and its socket, for ever; an administrator repeating
  // the verify piled them up. CONTRACT: "DNS errors included, is 422 domain_not_verified".
  test('a resolver that never answers is 422 domain_not_verified within the bound, the domain pending', { timeout: 30_000 }, async () => {
    const dns = new StubDns();
    let hanging = true;
    const adapter = {
      resolveTxt: (name: string) => (hanging ? new Promise<string[][]>(() => undefined) : dns.adapter.resolveTxt(name)),
      lookup: dns.adapter.lookup,
    };
    const h = await startHarness({ dns: adapter, config: { sso: ssoConfig(undefined) } });
    const org = await createOrg(h);
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    const started = performance.now();
    const verify = await orHung(h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token }), 15_000);
    assert.notEqual(verify, 'hung', 'the verify answered');
    if (verify === 'hung') return;
    assertError(verify, 422, 'domain_not_verified');
    assert.ok(performance.now() - started < 12_000);
    const listed = await h.get(`/orgs/${org.id}/domains`, { token: org.owner.token });
    assert.equal(listed.body.data.domains.find((row: { id: string }) => row.id === added.body.data.id).status, 'pending');
    // The resolver answers again: the same domain verifies.
    hanging = false;
    dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
    const again = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.data.status, 'verified');
  });

  test('a resolver that throws synchronously, rejects, or answers garbage is 422 domain_not_verified, never 500', async () => {
    let answer: () => unknown = () => [];
    const adapter = { resolveTxt: ((() => answer()) as unknown) as (name: string) => Promise<string[][]> };
    const h = await startHarness({ dns: adapter, config: { sso: ssoConfig(undefined) } });
    const org = await createOrg(h);
    const added = await h.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
    assert.equal(added.status, 201, added.text);
    const answers: Array<[string, () => unknown]> = [
      ['a synchronous throw', () => {
        throw new Error('resolver crashed');
      }],
      ['a rejection', () => Promise.reject(Object.assign(new Error('queryTxt ESERVFAIL'), { code: 'ESERVFAIL' }))],
      ['a rejection with no Error', () => Promise.reject(undefined)],
      ['undefined', () => Promise.resolve(undefined)],
      ['a string', () => Promise.resolve(added.body.data.txt_value)],
      ['an object', () => Promise.resolve({ 0: [added.body.data.txt_value], length: 1 })],
      ['null records and chunks', () => Promise.resolve([null, [null], [undefined, 3], 'x'])],
      ['the value as one flat list of chunks', () => Promise.resolve([added.body.data.txt_value])],
    ];
    for (const [what, next] of answers) {
      answer = next;
      const verify = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
      assertError(verify, 422, 'domain_not_verified', what);
    }
    assert.ok(!h.logs.some((line) => line.level === 'error'), JSON.stringify(h.logs.filter((line) => line.level === 'error')));
    answer = () => Promise.resolve([['unrelated'], [added.body.data.txt_value.slice(0, 10), added.body.data.txt_value.slice(10)]]);
    const verified = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
    assert.equal(verified.status, 200, verified.text);
  });
});

describe('a mailer that fails, then comes back', () => {
  // Answered (docs/adapters.md): mail leaves after the commit and a rejected send() is logged,
  // never failing the request. Checked here for what the log line carries: the host's error,
  // not the link or code the mail held.
  test('the request answers as usual; the log line names the failure and holds no token, code or address', async () => {
    const options = { mailerFails: true, config: { passwordless: { allowSignup: true } } };
    const h = await startHarness(options);
    const email = uniqueEmail('nomail');
    assert.equal((await h.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    assert.equal((await h.post('/auth/password/forgot', { email })).status, 202);
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('pl') })).status, 202);
    await new Promise((resolve) => setImmediate(resolve));
    const failures = h.logs.filter((line) => /after-commit delivery failed/.test(line.msg));
    assert.ok(failures.length >= 3, JSON.stringify(h.logs));
    for (const line of failures) {
      const text = JSON.stringify(line);
      assert.ok(!text.includes(email) && !/\d{6}|token|https?:/i.test(text.replace(/SMTP down/, '')), text);
    }
    // The mailer is back: the same flows mail again.
    options.mailerFails = false;
    const other = uniqueEmail('mailed');
    assert.equal((await h.post('/auth/register', { email: other, password: STRONG_PASSWORD })).status, 202);
    assert.equal((await h.post('/auth/password/forgot', { email })).status, 202);
    assert.ok(h.mail.some((message) => message.to === other));
    assert.ok(h.mail.some((message) => message.to === email));
  });
});

describe('PostgreSQL: the connection killed mid-transaction', { skip: TEST_DB !== 'pg' && 'PostgreSQL only' }, () => {
  // Threat: a backend terminated (failover, pg_terminate_backend, an idle-in-transaction timeout)
  // between two statements of a registration: a 500, a half-made account, a mail for an account
  // that does not exist, or a pool left with a dead connection.
  test('a registration whose backend is terminated answers 503, leaves no account and sends no mail; the next one commits', async () => {
    const h = await startHarness();
    const email = uniqueEmail('killed');
    const { outer } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'insertIfEmailFree' },
      async () => {
        // Only this harness's backends (its random table prefix is in their last query), never another file's.
        await h.knex.raw(
          "select pg_terminate_backend(pid) from pg_stat_activity where pid <> pg_backend_pid() and state like 'idle in transaction%' and query like ?",
          [`%${h.tablePrefix}%`],
        );
      },
      () => h.post('/auth/register', { email, password: STRONG_PASSWORD }),
    );
    assertError(outer, 503, 'unavailable');
    assert.equal(await countRows(h, 'users', { email }), 0);
    await new Promise((resolve) => setImmediate(resolve));
    assert.ok(!h.mail.some((message) => message.to === email), 'no mail for a rolled-back account');
    const logged = JSON.stringify(h.logs);
    assert.ok(!logged.includes(email), 'the log quotes no bound value');
    assert.equal((await h.post('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    assert.equal(await countRows(h, 'users', { email }), 1);
    assert.equal(h.mail.filter((message) => message.to === email).length, 1);
  });
});

describe('an onEvent listener that never settles', () => {
  // Threat: the listener is the host's code; one awaiting a call with no timeout (a queue or an
  // HTTP API that stops answering) never settles. The worker's pass awaited every attempt of its
  // claim, so that one call held the pass, and the delivery of every event and webhook of the
  // instance after it, for ever (deliverDueEvents() never returned).
  test('a pass of the worker ends within webhooks.timeoutMs; the event is called again and delivered once the listener answers', { timeout: 30_000 }, async () => {
    let hanging = true;
    const calls: string[] = [];
    const h = await startHarness({
      onEvent: (event) => {
        calls.push(event.id);
        return hanging ? new Promise<void>(() => undefined) : undefined;
      },
      config: { webhooks: { timeoutMs: 500 }, events: { delivery: { worker: false } } },
    });
    await h.signUp();
    const pass = await orHung(h.identity.service.deliverDueEvents(), 10_000);
    assert.notEqual(pass, 'hung', 'the pass ended');
    assert.ok(calls.length > 0, 'the listener was called');
    const first = calls[0]!;
    const [failed] = await h.knex(`${h.tablePrefix}event_deliveries`).where({ event_id: first, target: 'listener' });
    assert.equal(failed.status, 'pending');
    assert.equal(Number(failed.attempts), 1);
    assert.ok(h.logs.some((line) => line.level === 'error' && /onEvent listener failed/.test(line.msg)));
    hanging = false;
    h.clock.advance(3600);
    const delivered = await orHung(h.identity.service.deliverDueEvents(), 10_000);
    assert.notEqual(delivered, 'hung');
    assert.ok(calls.filter((id) => id === first).length >= 2, 'called again');
    const [row] = await h.knex(`${h.tablePrefix}event_deliveries`).where({ event_id: first, target: 'listener' });
    assert.equal(row.status, 'delivered');
  });
});
