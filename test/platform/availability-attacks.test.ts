/*
 * Availability: what a client with no credential (or a cheap one) can make the router store
 * or do without bound. Each test names its threat and counts rows, requests or connections;
 * none measures time. Frozen clock; SQLite and PostgreSQL:
 *   node scripts/run-tests.mjs test/platform/availability-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { eventually } from '../helpers/eventually.js';
import { harnessesClosedAfterFile, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';
import { enrollTotp } from '../helpers/mfa.js';
import { CLIENT_ID, CLIENT_SECRET, handoffPair } from '../helpers/oidc.js';
import { createOrg } from '../helpers/orgs.js';
import { fixtureWebauthnConfig } from '../helpers/passkeys.js';
import { addressAt, addVerifiedDomain, ssoConfig, StubDns } from '../helpers/sso.js';

const startHarness = harnessesClosedAfterFile();

describe('passwordless challenges of addresses typed once', () => {
  // Threat: POST /auth/passwordless/start is public and answers every well-formed address with a
  // challenge row, mailed or not. Ended challenges went only on the same address's next start, so
  // one start per address (a new address each time, from as many IP addresses as the attacker
  // has) left a row, with the sealed address of a stranger, for ever.
  test('ended challenges are pruned without the address ever starting again', async () => {
    const h = await startHarness({ config: { passwordless: { allowSignup: true } } });
    const user = await h.signUp();
    const typedOnce = [uniqueEmail('stranger'), uniqueEmail('stranger'), user.email];
    for (const email of typedOnce) assert.equal((await h.post('/auth/passwordless/start', { email })).status, 202);
    assert.equal(await countRows(h, 'passwordless_challenges'), 3);
    // Past the challenges' end and the day they are kept for, another address starts.
    h.clock.advance(2 * 86400);
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('later') })).status, 202);
    await eventually(async () => (await countRows(h, 'passwordless_challenges')) === 1, 'the challenges that ended a day ago pruned, the new one kept');
  });

  test('that pruning keeps a challenge that ended less than a day ago', async () => {
    const h = await startHarness({ config: { passwordless: { allowSignup: true } } });
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('recent') })).status, 202);
    // Ended (ttl 600 s) an hour ago: its address may still be starting again, and it stays.
    h.clock.advance(3600);
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('other') })).status, 202);
    h.clock.advance(3600);
    assert.equal((await h.post('/auth/passwordless/start', { email: uniqueEmail('third') })).status, 202);
    assert.equal(await countRows(h, 'passwordless_challenges'), 3);
  });
});

describe('MFA tickets of password logins', () => {
  // Threat: a cheap credential (one's own account with a factor) signs in again and again; every
  // password login writes an MFA ticket (with the client's IP and user agent), valid five minutes
  // and never deleted afterwards: a row per login for ever, the `login` group limiting each IP only.
  test('tickets that ended a day ago are pruned by later logins', async () => {
    const h = await startHarness();
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    for (let round = 0; round < 3; round += 1) {
      const gated = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
      assert.equal(gated.body.data.mfa_required, true, gated.text);
    }
    assert.equal(await countRows(h, 'mfa_tickets'), 3);
    h.clock.advance(2 * 86400);
    const later = await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD });
    assert.equal(later.body.data.mfa_required, true, later.text);
    await eventually(async () => (await countRows(h, 'mfa_tickets')) === 1, 'the tickets that ended a day ago pruned, the new one kept');
    // The new ticket still works.
    assert.equal((await h.post('/auth/mfa/verify', { code: 'wrong-code' }, { token: later.body.data.mfa_token })).status, 422);
  });
});

/**
 * An organization's IdP that counts its discovery requests and answers each after `delayMs`
 * (so that requests sent together overlap), with a valid discovery document, or a 500.
 */
class CountingIdp {
  discoveries = 0;
  failing = false;
  /** Answer with this many bytes of padding in the document (valid JSON, if it were read whole). */
  paddingBytes = 0;
  issuer = '';
  private server!: Server;

  static async start(delayMs: number): Promise<CountingIdp> {
    const idp = new CountingIdp();
    idp.server = createServer((req, res) => {
      if (req.url !== '/.well-known/openid-configuration') {
        res.writeHead(404).end();
        return;
      }
      idp.discoveries += 1;
      res.on('error', () => undefined);
      setTimeout(() => {
        if (idp.failing) {
          res.writeHead(500).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            issuer: idp.issuer,
            authorization_endpoint: `${idp.issuer}/auth`,
            token_endpoint: `${idp.issuer}/token`,
            jwks_uri: `${idp.issuer}/jwks`,
            response_types_supported: ['code'],
            subject_types_supported: ['public'],
            id_token_signing_alg_values_supported: ['RS256'],
            ...(idp.paddingBytes > 0 ? { padding: 'x'.repeat(idp.paddingBytes) } : {}),
          }),
        );
      }, delayMs);
    });
    await new Promise<void>((resolve) => idp.server.listen(0, '127.0.0.1', () => resolve()));
    idp.issuer = `http://127.0.0.1:${(idp.server.address() as AddressInfo).port}`;
    after(() => new Promise<void>((resolve) => idp.server.close(() => resolve())));
    return idp;
  }
}

describe("an organization's IdP discovered at sign-in", () => {
  // Threat: POST /auth/sso/authorize is public. Discovery of the connection's IdP runs on the
  // first sign-in after start-up, after each hour, after each edit of the connection, and on
  // every sign-in while the IdP fails: each request that found no discovery cached sent one of
  // its own, so a burst of anonymous requests (the social group limits each IP, not their sum)
  // became as many concurrent requests to the IdP, each held up to 10 s with up to 1 MB read.
  // Social login discovers each provider once at a time; single sign-on did not.
  test('concurrent sign-ins at one connection share one discovery request', async () => {
    const idp = await CountingIdp.start(200);
    const dns = new StubDns();
    const h = await startHarness({ dns: dns.adapter, config: { sso: ssoConfig(undefined, { allowPrivateNetworks: [idp.issuer] }) } });
    const org = await createOrg(h);
    const domain = (await addVerifiedDomain(h, dns, org)).domain as string;
    const created = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET }, { token: org.owner.token });
    assert.equal(created.status, 201, created.text);
    const atCreate = idp.discoveries;

    const authorize = () => h.post('/auth/sso/authorize', { email: addressAt(domain), handoff_challenge: handoffPair().challenge, handoff_challenge_method: 'S256' });
    const answers = await Promise.all(Array.from({ length: 8 }, authorize));
    assert.deepEqual(answers.map((answer) => answer.status), Array(8).fill(200));
    assert.equal(idp.discoveries - atCreate, 1, 'eight sign-ins sent together: one discovery');

    // An hour on, the discovery is due again, and the IdP fails: nothing is cached, still one discovery for the requests sent together.
    h.clock.advance(3601);
    idp.failing = true;
    const beforeFailing = idp.discoveries;
    const refused = await Promise.all(Array.from({ length: 8 }, authorize));
    assert.deepEqual(refused.map((answer) => answer.status), Array(8).fill(502));
    assert.equal(idp.discoveries - beforeFailing, 1, 'eight sign-ins sent together while the IdP fails: one discovery');
  });
});

describe('webhook attempts started by changes', () => {
  // Threat: any verified account can create an organization and, where webhooks are on, ten
  // webhooks (step-up only once it has a factor). Every change made on an instance was attempted
  // there at once, each attempt holding a socket for up to `webhooks.timeoutMs`, with no bound on
  // how many: a receiver that never answers and a loop of renames (the `authenticated` budget
  // allows 600 a minute, ten attempts each; more accounts, more) held thousands of sockets at once,
  // until the process ran out of file descriptors and failed its own database connections and clients.
  test('the attempts made at once are bounded; the rest wait for the worker, leased to none', async () => {
    const held = new Set<import('node:net').Socket>();
    let connections = 0;
    const silent = createServer(() => {
      // Never answers: the attempt holds its socket until it times out.
    });
    silent.on('connection', (socket) => {
      connections += 1;
      held.add(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', () => resolve()));
    after(() => {
      for (const socket of held) socket.destroy();
      return new Promise<void>((resolve) => silent.close(() => resolve()));
    });
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/hook`;
    const h = await startHarness({
      config: {
        webhooks: { enabled: true, allowHttp: true, allowPrivateNetworks: true, timeoutMs: 3000 },
        // The worker's own passes stay out of the count.
        events: { delivery: { pollMs: 600_000 } },
      },
    });
    const org = await createOrg(h);
    for (let index = 0; index < 10; index += 1) {
      const created = await h.post(`/orgs/${org.id}/webhooks`, { url, events: ['org.updated'] }, { token: org.owner.token });
      assert.equal(created.status, 201, created.text);
    }
    for (let rename = 0; rename < 8; rename += 1) {
      const renamed = await h.patch(`/orgs/${org.id}`, { name: `Renamed ${rename}` }, { token: org.owner.token });
      assert.equal(renamed.status, 200, renamed.text);
    }
    const webhookRows = { target: 'webhook', status: 'pending' };
    assert.equal(await countRows(h, 'event_deliveries', webhookRows), 80);
    await eventually(() => connections >= IMMEDIATE_WEBHOOK_ATTEMPTS, `${IMMEDIATE_WEBHOOK_ATTEMPTS} attempts under way`);
    // The others are left to the worker: pending, due, and leased to no instance any longer.
    await eventually(
      async () => {
        const released = await h.knex(`${h.tablePrefix}event_deliveries`).where(webhookRows).andWhere('locked_until', '<=', h.clock.now()).count({ count: '*' }).first();
        return Number(released?.count ?? 0) === 80 - IMMEDIATE_WEBHOOK_ATTEMPTS;
      },
      'the attempts past the bound given back to the worker',
    );
    assert.equal(connections, IMMEDIATE_WEBHOOK_ATTEMPTS, 'eighty attempts due at once: no more sockets than the bound');
  });
});

describe('answered, now tested', () => {
  // Threat: POST /auth/passkeys/login/options is public and writes a challenge on every call.
  // Answered: each new challenge deletes every challenge a day past its end, whoever it was for.
  test('passkey login challenges from anonymous requests are pruned by later ones', async () => {
    const h = await startHarness({ config: { webauthn: fixtureWebauthnConfig } });
    for (let round = 0; round < 3; round += 1) assert.equal((await h.post('/auth/passkeys/login/options', {})).status, 200);
    assert.equal(await countRows(h, 'webauthn_challenges'), 3);
    h.clock.advance(2 * 86400);
    assert.equal((await h.post('/auth/passkeys/login/options', {})).status, 200);
    assert.equal(await countRows(h, 'webauthn_challenges'), 1);
  });

  // Threat: lists in a body that each item of costs a lookup or a comparison against every other
  // (role slugs resolved, permission keys checked against the catalog and the actor's authority,
  // event types, scopes), thousands of them within the 100 kB body limit. Answered: each
  // list is bounded by its schema, and refused (422) before anything is looked up.
  // Threat: an organization's administrator (a cheap credential: any verified account can make
  // one) points the connection at an IdP that answers with a document of many megabytes, read into
  // memory on every discovery. Answered: the outbound guard stops reading at 1 MB (docs/sso.md).
  test("an organization's IdP answering with more than 1 MB is refused, and nothing is stored", async () => {
    const idp = await CountingIdp.start(0);
    idp.paddingBytes = 2 * 1024 * 1024;
    const dns = new StubDns();
    const h = await startHarness({ dns: dns.adapter, config: { sso: ssoConfig(undefined, { allowPrivateNetworks: [idp.issuer] }) } });
    const org = await createOrg(h);
    await addVerifiedDomain(h, dns, org);
    const created = await h.post(`/orgs/${org.id}/sso`, { issuer: idp.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET }, { token: org.owner.token });
    assert.equal(created.status, 422, created.text);
    assert.equal(created.body.reason, 'discovery_failed');
    assert.equal(idp.discoveries, 1);
    assert.equal(await countRows(h, 'sso_connections'), 0);
  });

  test('over-long lists in a body are refused before any lookup', async () => {
    const h = await startHarness({ config: { webhooks: { enabled: true } } });
    const org = await createOrg(h);
    const many = (count: number, item: (index: number) => string) => Array.from({ length: count }, (_, index) => item(index));
    const refusals = [
      await h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('invitee'), role_slugs: many(5_000, () => 'member') }, { token: org.owner.token }),
      await h.post(`/orgs/${org.id}/roles`, { name: 'Wide', slug: 'wide', permission_keys: many(5_000, () => 'org.read') }, { token: org.owner.token }),
      await h.post(`/orgs/${org.id}/api-keys`, { name: 'Wide', permission_keys: many(5_000, () => 'org.read') }, { token: org.owner.token }),
      await h.post(`/orgs/${org.id}/webhooks`, { url: 'https://hooks.example.com/x', events: many(5_000, () => 'org.updated') }, { token: org.owner.token }),
    ];
    assert.deepEqual(refusals.map((refusal) => refusal.status), [422, 422, 422, 422], refusals.map((refusal) => refusal.text).join('\n'));
    for (const refusal of refusals) assert.match(JSON.stringify(refusal.body.errors), /must contain less than or equal to \d+ items/);
    assert.equal(await countRows(h, 'invites'), 0);
    assert.equal(await countRows(h, 'webhooks'), 0);
    assert.equal(await countRows(h, 'api_keys'), 0);
  });
});

/** docs/webhooks.md: attempts of this instance's changes in flight at once. */
const IMMEDIATE_WEBHOOK_ATTEMPTS = 50;
