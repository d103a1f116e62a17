import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { assertError } from './account.js';
import { Harness, type HarnessOptions, type TestResponse, uniqueEmail } from './harness.js';
import { authorizeAtProvider, callRouterCallback, CLIENT_ID, CLIENT_SECRET, handoffPair, REDIRECT_BASE, RETURN_URL, type ProviderAccount, TestOpenIdProvider } from './oidc.js';
import { createOrg, type CreatedOrg } from './orgs.js';

/*
 * Single sign-on (docs/sso.md) in tests: a stub `adapters.dns` playing the organization's
 * DNS (TXT records and name resolution, never real DNS), an organization with a verified
 * domain, and a connection to a real oidc-provider on loopback. Loopback is an exempt origin
 * through `sso.allowPrivateNetworks`, the guard's documented test allowance.
 */

export class StubDns {
  readonly txt = new Map<string, string[][]>();
  readonly answers = new Map<string, string[]>();
  readonly lookups: string[] = [];
  txtQueries = 0;
  private txtHold: { waiting: number; release: () => void; arrived: Promise<void> } | undefined;
  private txtHook: (() => Promise<void>) | undefined;
  readonly adapter = {
    resolveTxt: async (name: string) => {
      this.txtQueries += 1;
      if (this.txtHook) {
        const hook = this.txtHook;
        this.txtHook = undefined;
        await hook();
      }
      if (this.txtHold) {
        // Races: every query waits until `holdTxt(n)` has seen n of them, so all pass their checks before any writes.
        const hold = this.txtHold;
        hold.waiting -= 1;
        if (hold.waiting === 0) {
          this.txtHold = undefined;
          hold.release();
        }
        await hold.arrived;
      }
      const records = this.txt.get(name);
      if (!records) throw Object.assign(new Error(`queryTxt ENOTFOUND ${name}`), { code: 'ENOTFOUND' });
      return records;
    },
    lookup: async (hostname: string) => {
      this.lookups.push(hostname);
      const addresses = this.answers.get(hostname);
      if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      return addresses.map((address) => ({ address, family: (address.includes(':') ? 6 : 4) as 4 | 6 }));
    },
  };

  /** The next TXT query answers only once `hook` has run: a change made while a verify waits on DNS. */
  duringNextTxt(hook: () => Promise<void>): void {
    this.txtHook = hook;
  }

  /** The next `count` TXT queries answer only once all of them have arrived. */
  holdTxt(count: number): void {
    let release!: () => void;
    const arrived = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.txtHold = { waiting: count, release, arrived };
  }
}

export const SSO_RETURN_URL = RETURN_URL;

export function ssoConfig(op: TestOpenIdProvider | undefined, overrides: Record<string, unknown> = {}) {
  return {
    redirectBase: REDIRECT_BASE,
    returnUrls: [RETURN_URL],
    ...(op ? { allowPrivateNetworks: [op.issuer] } : {}),
    ...overrides,
  };
}

export async function startSsoHarness(op: TestOpenIdProvider | undefined, dns: StubDns, options: HarnessOptions & { sso?: Record<string, unknown> } = {}): Promise<Harness> {
  op?.allowRedirectPrefix(`${REDIRECT_BASE}/auth/sso/`);
  const { sso, config, ...rest } = options;
  return Harness.start({ ...rest, dns: dns.adapter, config: { ...config, sso: ssoConfig(op, sso) } });
}

let domainCounter = 0;
export function uniqueDomain(prefix = 'acme'): string {
  domainCounter += 1;
  return `${prefix}${domainCounter}-${Math.random().toString(36).slice(2, 8)}.test`;
}

/** Adds a domain and publishes its TXT record in the stub DNS, then verifies it. */
export async function addVerifiedDomain(h: Harness, dns: StubDns, org: CreatedOrg, domain = uniqueDomain()): Promise<any> {
  const added = await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token });
  assert.equal(added.status, 201, added.text);
  dns.txt.set(added.body.data.txt_name, [[added.body.data.txt_value]]);
  const verified = await h.post(`/orgs/${org.id}/domains/${added.body.data.id}/verify`, {}, { token: org.owner.token });
  assert.equal(verified.status, 200, verified.text);
  return verified.body.data;
}

export async function connect(h: Harness, op: TestOpenIdProvider, org: CreatedOrg, body: Record<string, unknown> = {}): Promise<any> {
  const created = await h.post(`/orgs/${org.id}/sso`, { issuer: op.issuer, client_id: CLIENT_ID, client_secret: CLIENT_SECRET, ...body }, { token: org.owner.token });
  assert.equal(created.status, 201, created.text);
  return created.body.data;
}

/** An organization with a verified domain and an active connection to `op`. */
export async function ssoOrg(h: Harness, dns: StubDns, op: TestOpenIdProvider, body: Record<string, unknown> = {}): Promise<{ org: CreatedOrg; domain: string; connection: any }> {
  const org = await createOrg(h);
  const domain = (await addVerifiedDomain(h, dns, org)).domain as string;
  const connection = await connect(h, op, org, body);
  return { org, domain, connection };
}

export function addressAt(domain: string, prefix = 'user'): string {
  return uniqueEmail(prefix).replace(/@.*$/, `@${domain}`);
}

/** Identifier-first: authorize by e-mail (or slug), log in at the IdP as `account`, come back through the callback. */
export async function ssoRoundTrip(h: Harness, op: TestOpenIdProvider, account: ProviderAccount, start: Record<string, unknown>) {
  op.use(account);
  const handoff = handoffPair();
  const started = await h.post('/auth/sso/authorize', { handoff_challenge: handoff.challenge, handoff_challenge_method: 'S256', ...start });
  assert.equal(started.status, 200, started.text);
  const callbackPath = await authorizeAtProvider(started.body.data.authorization_url);
  return { handoff, authorizationUrl: started.body.data.authorization_url as string, callbackPath, ...(await callRouterCallback(h, callbackPath)) };
}

export async function ssoLogin(h: Harness, op: TestOpenIdProvider, account: ProviderAccount, start: Record<string, unknown>) {
  const trip = await ssoRoundTrip(h, op, account, start);
  if (!trip.code) return { trip, exchanged: undefined };
  const exchanged = await h.post('/auth/social/exchange', { code: trip.code, handoff_verifier: trip.handoff.verifier });
  return { trip, exchanged };
}

/**
 * The test IdP and a router for it, started before the tests of the file (or describe) that calls
 * this and closed after them; `started` hands both over for the caller's `op` and `h`.
 */
export function withSsoHarness(dns: StubDns, started: (running: { op: TestOpenIdProvider; h: Harness }) => void): void {
  let running: { op: TestOpenIdProvider; h: Harness } | undefined;
  before(async () => {
    const op = await TestOpenIdProvider.start();
    running = { op, h: await startSsoHarness(op, dns) };
    started(running);
  });
  after(async () => {
    await running?.h.close();
    await running?.op.close();
  });
}

/** `status` (403 unless said) `sso_required`, naming the organization whose single sign-on the address needs. */
export function assertSsoRequiredBy(response: TestResponse, organizationSlug: string, status = 403, context = ''): void {
  assertError(response, status, 'sso_required', context);
  assert.equal(response.body.organization_slug, organizationSlug, context);
}
