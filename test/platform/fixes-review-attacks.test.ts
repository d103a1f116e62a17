import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { waitingOnALock, withRequestInTheWindow } from '../helpers/interleaving.js';
import { ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';
import { SsoConnectionRepository } from '../../src/store/sso-repository.js';
import { Store } from '../../src/store/store.js';
import { tableNames } from '../../src/store/table-names.js';
import { callRouterCallback, handoffPair, PROVIDER_ID, REDIRECT_BASE, startLogin, TestOpenIdProvider, withSocialHarness } from '../helpers/oidc.js';

// Attacks on the fixes of the last audit round (git log 8d8484d..HEAD): quotas, retention, the
// bidi-control rule, mailbox spellings, the SSO issuer move, SignInRules.recordingRefusal.

let op: TestOpenIdProvider;
let h: Harness;
withSocialHarness((started) => ({ op, h } = started));

describe('the control-character rule never turns a callback into a 422', () => {
  // CONTRACT 9.2/9.7: a provider's `error=…` comes back as a 303 with social_error=provider_error.
  // The provider's descriptive text is neither stored nor shown; an Arabic or Hebrew IdP marks
  // its direction with U+200F, and Entra ID's descriptions carry "\r\n" between their lines.
  for (const [what, description] of [
    ['a right-to-left mark (an Arabic or Hebrew IdP)', 'تم رفض الوصول\u200f (AADSTS65004)'],
    ['CR LF between lines (Entra ID)', 'AADSTS65004: User declined to consent.\r\nTrace ID: 1\r\nCorrelation ID: 2'],
  ] as const) {
    test(`error_description with ${what} still answers 303 social_error=provider_error`, async () => {
      assert.ok(op);
      const started = await startLogin(h);
      const state = new URL(started.authorizationUrl).searchParams.get('state')!;
      const query = new URLSearchParams({ state, error: 'access_denied', error_description: description, error_uri: `https://idp.example/help\u200f` });
      const trip = await callRouterCallback(h, `/auth/social/${PROVIDER_ID}/callback?${query}`);
      assert.equal(trip.response.status, 303, trip.response.text);
      assert.equal(trip.error, 'provider_error');
      assert.equal(trip.location?.searchParams.get('social_error_detail'), 'access_denied');
    });
  }
});

describe('a batched prune deletes only rows that still match when it deletes them', () => {
  // Repository.deleteInBatches chose ids in a subquery and deleted `WHERE id IN (…)`: on
  // PostgreSQL a row changed by a transaction that commits while the DELETE waits for its lock is
  // re-checked against the DELETE's own condition only, so a counter whose window a hit just
  // restarted (reset_at in the future) was deleted: its hit lost, one request more past the limit.
  // Likewise a dead webhook delivery replayed at that moment: answered, then never delivered.
  test('a rate-limit counter restarted while the prune waits for its row stays', { skip: TEST_DB !== 'pg' && 'SQLite runs one write transaction at a time', timeout: 60_000 }, async () => {
    const store = new Store(h.knex, tableNames(h.tablePrefix), 'pg');
    const table = `${h.tablePrefix}rate_limit_counters`;
    const key = `fixes-review:${Date.now()}`;
    const now = h.clock.now();
    await h.knex(table).insert({ key, hits: 5, reset_at: now - 1000 });
    const hit = await h.knex.transaction();
    try {
      // A hit of the new window, as RateLimitCounterRepository.increment writes it, not yet committed.
      await hit(table).where({ key }).update({ hits: 1, reset_at: now + 60_000 });
      const prune = store.repos.rateLimitCounters.pruneEnded(now);
      for (let turn = 0; turn < 5000 && !(await waitingOnALock(h)); turn += 1) await new Promise((resolve) => setImmediate(resolve));
      await hit.commit();
      await prune;
    } finally {
      if (!hit.isCompleted()) await hit.rollback();
    }
    const row = await h.knex(table).where({ key }).first();
    assert.ok(row, 'the restarted window was deleted');
    assert.equal(Number(row.hits), 1);
  });
});

/** An issuer an attacker runs: a discovery document, and a token endpoint that records what it is sent. */
async function recordingIdp(): Promise<{ origin: string; received: string[]; close: () => Promise<void> }> {
  const received: string[] = [];
  let origin = '';
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      received.push(`${req.url} ${req.headers.authorization ?? ''} ${decodeURIComponent(body.replace(/\+/g, ' '))}`);
      if (req.url === '/.well-known/openid-configuration') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ issuer: origin, authorization_endpoint: `${origin}/auth`, token_endpoint: `${origin}/token`, jwks_uri: `${origin}/jwks`, response_types_supported: ['code'], subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['RS256'] }));
        return;
      }
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":"invalid_grant"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    received,
    close: async () => {
      server.closeAllConnections?.();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('the SSO issuer move is decided against the connection under the lock (PostgreSQL)', { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's" }, () => {
  let ssoOp: TestOpenIdProvider;
  let evil: Awaited<ReturnType<typeof recordingIdp>>;
  let hs: Harness;
  const dns = new StubDns();
  before(async () => {
    ssoOp = await TestOpenIdProvider.start();
    evil = await recordingIdp();
    hs = await startSsoHarness(ssoOp, dns, { sso: { allowPrivateNetworks: [ssoOp.issuer, evil.origin] } });
  });
  after(async () => {
    await hs?.close();
    await evil?.close();
    await ssoOp?.close();
  });

  // An administrator moved the connection to an issuer they run (with a secret of their own). The
  // owner moves it back with a new secret from the real IdP; at that moment the attacker's PATCH
  // naming their issuer (no move by what it read, so no secret asked) is in discovery. It then
  // stored its issuer over the owner's move, keeping the latest secret: the real IdP's new one,
  // which the next sign-in's code exchange hands to the attacker's token endpoint.
  test('an update naming the issuer it read, racing a move back with a new secret, never keeps that secret for its issuer', { timeout: 60_000 }, async () => {
    const { org } = await ssoOrg(hs, dns, ssoOp);
    const moved = await hs.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin, client_secret: 'attacker-own-secret' }, { token: org.owner.token });
    assert.equal(moved.status, 200, moved.text);
    const rotated = `rotated-real-secret-${Math.random().toString(36).slice(2)}`;
    let armed = false;
    const { outer: stale, inner: back } = await withRequestInTheWindow(
      hs,
      { prototype: SsoConnectionRepository.prototype, method: 'findForOrganization', when: (organizationId) => armed && organizationId === org.id },
      () => hs.patch(`/orgs/${org.id}/sso`, { issuer: ssoOp.issuer, client_secret: rotated }, { token: org.owner.token }),
      () => {
        armed = true;
        return hs.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin, jit: true }, { token: org.owner.token });
      },
    );
    assert.ok(back, 'the move back ran inside the window');
    assert.equal(back.status, 200, back.text);
    evil.received.length = 0;
    const handoff = handoffPair();
    const started = await hs.post('/auth/sso/authorize', { organization_slug: org.slug, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
    const url = new URL(started.body.data.authorization_url);
    const callback = (url.searchParams.get('redirect_uri') ?? '').slice(REDIRECT_BASE.length);
    await hs.get(`${callback}?code=attacker-code&state=${encodeURIComponent(url.searchParams.get('state') ?? '')}&iss=${encodeURIComponent(url.origin)}`);
    const basic = evil.received.map((line) => /Basic ([A-Za-z0-9+/=]+)/.exec(line)?.[1]).filter((value): value is string => value !== undefined).map((value) => decodeURIComponent(Buffer.from(value, 'base64').toString('utf8')));
    assert.ok(!evil.received.some((line) => line.includes(rotated)) && !basic.some((line) => line.includes(rotated)), 'the real IdP\'s new secret reached the attacker\'s issuer');
    assert.equal(stale.status, 422, stale.text);
    assert.ok(JSON.stringify(stale.body.errors).includes('client_secret'), stale.text);
  });
});

describe('the control-character rule and what a browser sends on its own', () => {
  let hw: Harness;
  before(async () => {
    hw = await Harness.start({ config: { webauthn: fixtureWebauthnConfig } });
  });
  after(async () => {
    await hw?.close();
  });

  // WebAuthn Level 3's credProps extension answers the authenticator's display name, a name the
  // user gave their device ("هاتف سارة" with its right-to-left mark). The browser puts it in
  // `clientExtensionResults`, unsigned and never stored: a passkey registration must not 422 on it.
  test('a passkey registration whose clientExtensionResults names the device in Arabic is registered', async () => {
    const owner = await hw.signUp();
    const recorded = fixtures.primary.registration.response;
    const response = { ...recorded, clientExtensionResults: { credProps: { rk: true, authenticatorDisplayName: 'هاتف سارة\u200f' } } };
    const registered = await registerRecorded(hw, owner.accessToken, { ...fixtures.primary, registration: { ...fixtures.primary.registration, response } });
    assert.equal(registered.status, 200, registered.text);
  });
});
