import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { type Harness, TEST_DB, type TestResponse } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { CLIENT_SECRET, handoffPair, REDIRECT_BASE, TestOpenIdProvider } from '../helpers/oidc.js';
import { ssoOrg, startSsoHarness, StubDns } from '../helpers/sso.js';
import knexFactory from 'knex';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig, noopSender } from '../../src/index.js';
import { SsoConnectionRepository } from '../../src/store/sso-repository.js';

/*
 * Where the organization's IdP client secret can be sent (docs/sso.md, CONTRACT 12.3):
 * - an administrator who never knew the stored secret (or a stolen session with step-up)
 *   points the connection at an issuer of their own without giving a secret: the next
 *   sign-in's code exchange would hand them the secret the real IdP issued;
 * - the same through a race: a secret rotation that read the connection under the real
 *   issuer must not be stored under another issuer committed meanwhile (PostgreSQL);
 * - the operator's `secret`, root of every key at rest: 32 characters that are one character
 *   repeated, or a short pattern repeated, are as easy to guess as that character or pattern.
 */

/** An issuer an attacker runs: a discovery document, and a token endpoint that records what it is sent. */
class RecordingIdp {
  origin!: string;
  /** Every request's Authorization header and body, token endpoint included. */
  readonly received: string[] = [];
  private server!: Server;

  static async start(): Promise<RecordingIdp> {
    const idp = new RecordingIdp();
    idp.server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      req.on('end', () => {
        idp.received.push(`${req.url} ${req.headers.authorization ?? ''} ${body}`);
        if (req.url === '/.well-known/openid-configuration') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              issuer: idp.origin,
              authorization_endpoint: `${idp.origin}/auth`,
              token_endpoint: `${idp.origin}/token`,
              jwks_uri: `${idp.origin}/jwks`,
              response_types_supported: ['code'],
              subject_types_supported: ['public'],
              id_token_signing_alg_values_supported: ['RS256'],
            }),
          );
          return;
        }
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":"invalid_grant"}');
      });
    });
    await new Promise<void>((resolve) => idp.server.listen(0, '127.0.0.1', () => resolve()));
    idp.origin = `http://127.0.0.1:${(idp.server.address() as AddressInfo).port}`;
    return idp;
  }

  /** Whether `secret` reached this issuer, in clear, form-encoded or in a Basic header (whose parts are form-encoded too). */
  saw(secret: string): boolean {
    const decode = (text: string) => {
      try {
        return decodeURIComponent(text.replace(/\+/g, ' '));
      } catch {
        return text;
      }
    };
    return this.received.some((line) => {
      const basic = /Basic ([A-Za-z0-9+/=]+)/.exec(line)?.[1];
      return decode(line).includes(secret) || (basic !== undefined && decode(Buffer.from(basic, 'base64').toString('utf8')).includes(secret));
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

let op: TestOpenIdProvider;
let evil: RecordingIdp;
let h: Harness;
const dns = new StubDns();

before(async () => {
  op = await TestOpenIdProvider.start();
  evil = await RecordingIdp.start();
  h = await startSsoHarness(op, dns, { sso: { allowPrivateNetworks: [op.issuer, evil.origin] } });
});
after(async () => {
  await h.close();
  await evil.close();
  await op.close();
});

/** A sign-in by slug up to the code exchange: the router sends the stored secret to the token endpoint of the issuer it holds. */
async function signInReachesTokenEndpoint(slug: string): Promise<void> {
  const handoff = handoffPair();
  const started = await h.post('/auth/sso/authorize', { organization_slug: slug, handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256' });
  assert.equal(started.status, 200, started.text);
  const url = new URL(started.body.data.authorization_url);
  const state = url.searchParams.get('state') ?? '';
  const callback = (url.searchParams.get('redirect_uri') ?? '').slice(REDIRECT_BASE.length);
  // The IdP answers the browser with a code of its own.
  await h.get(`${callback}?code=attacker-code&state=${encodeURIComponent(state)}&iss=${encodeURIComponent(url.origin)}`);
}

/** 422 in the spec's validation shape, naming the missing field. */
function assertRequiresSecret(response: TestResponse): void {
  assert.equal(response.status, 422, response.text);
  assert.ok(Array.isArray(response.body.errors) && JSON.stringify(response.body.errors).includes('client_secret'), response.text);
}

describe('a new issuer without the client secret', () => {
  test('is refused (422, client_secret required): the stored secret is never sent to the new issuer, the connection unchanged', async () => {
    const { org, connection } = await ssoOrg(h, dns, op);
    evil.received.length = 0;
    const moved = await h.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin }, { token: org.owner.token });
    await signInReachesTokenEndpoint(org.slug);
    assert.ok(!evil.saw(CLIENT_SECRET), 'the secret the real IdP issued reached the new issuer');
    assertRequiresSecret(moved);
    const read = await h.get(`/orgs/${org.id}/sso`, { token: org.owner.token });
    assert.equal(read.body.data.issuer, op.issuer);
    assert.ok(!h.events.some((event) => event.type === 'sso.connection_updated' && event.data.connection_id === connection.id));
  });

  test('with the client id or auth method changed alongside, still refused', async () => {
    const { org } = await ssoOrg(h, dns, op);
    evil.received.length = 0;
    const moved = await h.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin, client_id: 'attacker-client', token_endpoint_auth_method: 'client_secret_post' }, { token: org.owner.token });
    await signInReachesTokenEndpoint(org.slug);
    assert.ok(!evil.saw(CLIENT_SECRET), 'the stored secret reached the new issuer');
    assertRequiresSecret(moved);
  });

  test('the new issuer with a secret of its own is accepted: only that secret goes there', async () => {
    const { org } = await ssoOrg(h, dns, op);
    evil.received.length = 0;
    const own = `own-secret-${Math.random().toString(36).slice(2)}`;
    const moved = await h.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin, client_secret: own }, { token: org.owner.token });
    assert.equal(moved.status, 200, moved.text);
    await signInReachesTokenEndpoint(org.slug);
    assert.ok(evil.saw(own), 'the sign-in reached the new issuer with its own secret');
    assert.ok(!evil.saw(CLIENT_SECRET));
  });

  test('the issuer it already has, sent again without a secret, is no move: accepted with the other fields', async () => {
    const { org } = await ssoOrg(h, dns, op);
    const same = await h.patch(`/orgs/${org.id}/sso`, { issuer: op.issuer, jit: true }, { token: org.owner.token });
    assert.equal(same.status, 200, same.text);
    assert.equal(same.body.data.jit, true);
  });
});

const skipUnlessPg = TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's";

describe('a secret rotation racing a move to another issuer (PostgreSQL)', { skip: skipUnlessPg }, () => {
  test('a secret given for the issuer the request read is not stored under another issuer committed meanwhile (422), and never reaches it', async () => {
    const { org } = await ssoOrg(h, dns, op);
    evil.received.length = 0;
    const rotated = `rotated-real-secret-${Math.random().toString(36).slice(2)}`;
    let armed = false;
    const { outer: rotation, inner: move } = await withRequestInTheWindow(
      h,
      // The rotation's first read of the connection, before its discovery and its transaction.
      { prototype: SsoConnectionRepository.prototype, method: 'findForOrganization', when: (organizationId) => armed && organizationId === org.id },
      () => h.patch(`/orgs/${org.id}/sso`, { issuer: evil.origin, client_secret: 'attacker-own-secret' }, { token: org.owner.token }),
      () => {
        armed = true;
        return h.patch(`/orgs/${org.id}/sso`, { client_secret: rotated }, { token: org.owner.token });
      },
    );
    assert.ok(move, 'the move ran inside the window');
    assert.equal(move.status, 200, move.text);
    await signInReachesTokenEndpoint(org.slug);
    assert.ok(!evil.saw(rotated), 'the rotated secret reached the issuer committed meanwhile');
    assertRequiresSecret(rotation);
  });
});

describe("the operator's secret: long enough, yet easy to guess", () => {
  const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
  const previous = process.env.NODE_ENV;
  after(async () => {
    process.env.NODE_ENV = previous;
    if (previous === undefined) delete process.env.NODE_ENV;
    await knex.destroy();
  });

  /** Constructs a router under `nodeEnv` with real (no-op) adapters: the error it throws, and what it warned. */
  async function construct(secret: string, nodeEnv: string): Promise<{ error: unknown; warnings: string[] }> {
    const warnings: string[] = [];
    const logger = { info: () => undefined, warn: (message: string) => void warnings.push(message), error: () => undefined };
    process.env.NODE_ENV = nodeEnv;
    try {
      const router = createIdentityRouter({ database: knex, secret, issuer: 'https://id.example.test', migrate: false } as IdentityConfig, { logger, mailer: noopSender, sms: noopSender });
      await router.ready.catch(() => undefined);
      await router.close();
      return { error: undefined, warnings };
    } catch (error) {
      return { error, warnings };
    } finally {
      process.env.NODE_ENV = previous;
      if (previous === undefined) delete process.env.NODE_ENV;
    }
  }

  const weak: Array<[string, string, RegExp]> = [
    ['one character repeated', 'a'.repeat(48), /"secret" holds only 1 distinct character/],
    ['four characters repeated', '0123'.repeat(8), /"secret" holds only 4 distinct characters/],
    ['a handful of characters, unevenly', `${'ab'.repeat(15)}cdefg`, /"secret" holds only 7 distinct characters/],
    ['a pattern of eight repeated', 'abcdefgh'.repeat(4), /"secret" is 8 characters repeated/],
    ['half of it repeated', 'Kq8#zP1!mW4$xR7&'.repeat(2), /"secret" is 16 characters repeated/],
  ];

  for (const [what, secret, message] of weak) {
    test(`${what}: refused at start-up under NODE_ENV=production with a clear message, and warned about elsewhere`, async () => {
      const { error } = await construct(secret, 'production');
      assert.ok(error instanceof IdentityConfigError, String(error));
      assert.match(error.message, message);
      assert.match(error.message, /openssl rand/);
      const development = await construct(secret, 'development');
      assert.equal(development.error, undefined, String(development.error));
      assert.ok(development.warnings.some((warning) => message.test(warning)), development.warnings.join('; '));
    });
  }

  test("random secrets, the test helpers' and the documented ones, start under NODE_ENV=production without a warning about the secret", async () => {
    for (const secret of [
      'test-secret-that-is-at-least-32-characters-long',
      'operator-secret-that-is-at-least-32-characters',
      'docs-test-secret-that-is-at-least-32-characters',
      'several-instances-secret-at-least-32-characters',
      randomBytes(32).toString('base64url'),
      randomBytes(48).toString('base64'),
      randomBytes(16).toString('hex'),
    ]) {
      const { error, warnings } = await construct(secret, 'production');
      assert.equal(error, undefined, `${secret}: ${String(error)}`);
      assert.ok(!warnings.some((warning) => /"secret"/.test(warning)), `${secret}: ${warnings.join('; ')}`);
    }
  });
});
