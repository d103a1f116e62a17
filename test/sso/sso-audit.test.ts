import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, test } from 'node:test';
import { assertError, assertNoInternals, countRows } from '../helpers/account.js';
import { type Harness, STRONG_PASSWORD } from '../helpers/harness.js';
import { newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { enrollTotp, nextTotpCode } from '../helpers/mfa.js';
import { addMember, createOrg, superadmin } from '../helpers/orgs.js';
import { addressAt, addVerifiedDomain, connect, ssoLogin, ssoOrg, ssoRoundTrip, startSsoHarness, StubDns, uniqueDomain, withSsoHarness } from '../helpers/sso.js';

/*
 * docs/sso.md and CONTRACT 12, audited as an attacker would:
 * - enforcement reads an address's domain as verification stores it (the IDNA A-label): an
 *   employee whose address is written with the domain's Unicode form, or with its full-width
 *   form, is at the domain like everyone else, and signs in only through the IdP;
 * - a session from before enforcement ends at its next refresh: a switch of organization or a
 *   step-up, which sign fresh access tokens too, would otherwise keep it alive for good;
 * - an account at a domain that moved to an enforcing organization no longer signs in
 *   through the IdP of the organization that gave the domain up;
 * - what the organization's IdP asserts is input like any other: a subject longer than OpenID
 *   Connect allows, or control characters in its claims, never answer 500;
 * - a domain is a bare host name: domainToASCII would otherwise cut `acme.com/x` down to one;
 * - contract points no other file pins down, and bad input to every route.
 */

let op: TestOpenIdProvider;
let h: Harness;
const dns = new StubDns();

withSsoHarness(dns, (started) => ({ op, h } = started));

/**
 * An organization with two verified domains and a JIT connection, and an account its IdP
 * linked at the first (`shared`) one; the second (`kept`) is the one it keeps.
 */
async function linkedAtOneOfTwoDomains(localPart: string) {
  const previous = await createOrg(h);
  const shared = await addVerifiedDomain(h, dns, previous);
  await addVerifiedDomain(h, dns, previous);
  const kept = (await h.get(`/orgs/${previous.id}/domains`, { token: previous.owner.token })).body.data.domains.find((entry: any) => entry.id !== shared.id);
  await connect(h, op, previous, { jit: true });
  const email = addressAt(shared.domain, localPart);
  const subject = newSubject();
  const first = await ssoLogin(h, op, { sub: subject, email }, { email });
  assert.equal(first.exchanged!.status, 200, first.exchanged!.text);
  return { previous, shared, kept, email, subject, userId: first.exchanged!.body.data.user.id as string };
}

/** A domain with one non-ASCII letter: verified as its A-label, typed by people as its Unicode form. */
function unicodeDomain(): string {
  return `bücher${Math.random().toString(36).slice(2, 8)}.test`;
}

/** Full-width Latin letters and digits (U+FF01…): IDNA maps them to ASCII, so the host is the same. */
function fullWidth(text: string): string {
  return text.replace(/[a-z0-9]/g, (character) => String.fromCodePoint(character.codePointAt(0)! + 0xfee0));
}

describe('enforcement reads the domain as verification stores it', () => {
  test('an address written with the Unicode form of an IDN domain is refused on password login, registration and refresh', async () => {
    const org = await createOrg(h);
    const unicode = unicodeDomain();
    const verified = await addVerifiedDomain(h, dns, org, unicode);
    assert.match(verified.domain, /^xn--/);
    await connect(h, op, org, { jit: true });
    // Signed up with a password before enforcement, as the address is usually typed.
    const employee = await h.signUp(`ada${Math.random().toString(36).slice(2, 8)}@${unicode}`);
    const enforced = await h.patch(`/orgs/${org.id}/sso`, { enforce: true }, { token: org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);

    const login = await h.post('/auth/login', { email: employee.email, password: employee.password });
    assertError(login, 403, 'sso_required', 'password login');
    assert.equal(login.body.organization_slug, org.slug);
    assertError(await h.post('/auth/token/refresh', { refresh_token: employee.refreshToken }), 401, 'sso_required', 'refresh');
    const newcomer = `newcomer${Math.random().toString(36).slice(2, 8)}@${unicode}`;
    assertError(await h.post('/auth/register', { email: newcomer, password: STRONG_PASSWORD }), 403, 'sso_required', 'registration');
    assert.equal(await countRows(h, 'users', { email: newcomer }), 0);

    // Identifier-first routes the same address to the IdP: both rules see one domain.
    const started = await h.post('/auth/sso/authorize', { email: employee.email, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
  });

  test('an ASCII domain typed in full-width letters is the same domain: registration and login refused', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const enforced = await h.patch(`/orgs/${org.id}/sso`, { enforce: true }, { token: org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
    const email = `someone${Math.random().toString(36).slice(2, 8)}@${fullWidth(domain)}`;
    assertError(await h.post('/auth/register', { email, password: STRONG_PASSWORD }), 403, 'sso_required', 'registration');
    assert.equal(await countRows(h, 'users', { email }), 0);
    assertError(await h.post('/auth/login', { email, password: STRONG_PASSWORD }), 403, 'sso_required', 'login');
  });
});

describe('enforcement has no side door through a session or another connection', () => {
  test('a session from before enforcement cannot outlive it by switching organizations: 401 sso_required', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const employee = await addMember(h, org, org.owner.token, ['member'], await h.signUp(addressAt(domain, 'switcher')));
    const enforced = await h.patch(`/orgs/${org.id}/sso`, { enforce: true }, { token: org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
    // Each switch signs a new access token: chained before the last one expires, the session
    // would never need the refresh that enforcement refuses.
    const switched = await h.post('/auth/switch-org', { organization_id: org.id }, { token: employee.token });
    assertError(switched, 401, 'sso_required');
    assert.equal(switched.body.organization_slug, org.slug);
    assert.equal(switched.body.data, undefined, 'no token');

    // Through the connection, the same employee switches as before.
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: employee.email }, { email: employee.email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    assert.equal((await h.post('/auth/switch-org', { organization_id: org.id }, { token: exchanged!.body.data.access_token })).status, 200);
  });

  test('nor by stepping up: a second factor does not renew a session that enforcement ends, 401 sso_required', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const employee = await h.signUp(addressAt(domain, 'stepper'));
    const totp = await enrollTotp(h, employee.accessToken);
    const enforced = await h.patch(`/orgs/${org.id}/sso`, { enforce: true }, { token: org.owner.token });
    assert.equal(enforced.status, 200, enforced.text);
    const stepped = await h.post('/auth/mfa/step-up', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: employee.accessToken });
    assertError(stepped, 401, 'sso_required');
    assert.equal(stepped.body.data, undefined, 'no token');
  });

  test('nor by adding a way to sign in: an API key from such a session is 403 sso_required; the same session may still mend the connection', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    // A second owner, at the domain, signed in with a password before enforcement.
    const employee = await addMember(h, org, org.owner.token, ['owner'], await h.signUp(addressAt(domain, 'minter')));
    const enforced = await h.patch(`/orgs/${org.id}/sso`, { enforce: true }, { token: employee.token });
    assert.equal(enforced.status, 200, enforced.text);
    // A key outlives the session that enforcement ends at its next refresh.
    const minted = await h.post(`/orgs/${org.id}/api-keys`, { name: 'outlives the session', permission_keys: [] }, { token: employee.token });
    assertError(minted, 403, 'sso_required');
    assert.equal(await countRows(h, 'api_keys', { user_id: employee.userId }), 0);
    // The connection is the organization's, not a way into the caller's own account: an
    // administrator's session from before enforcement may still turn enforcement off.
    const relaxed = await h.patch(`/orgs/${org.id}/sso`, { enforce: false }, { token: employee.token });
    assert.equal(relaxed.status, 200, relaxed.text);
    const later = await h.post(`/orgs/${org.id}/api-keys`, { name: 'after enforcement', permission_keys: [] }, { token: employee.token });
    assert.equal(later.status, 201, later.text);
  });

  test("a domain given up and verified by an enforcing organization: the old organization's IdP no longer signs its accounts in", async () => {
    // The old owner of the domain links an account there, then keeps a second domain and its connection.
    const { previous, shared, kept, email, subject, userId } = await linkedAtOneOfTwoDomains('moved');
    assert.equal((await h.delete(`/orgs/${previous.id}/domains/${shared.id}`, { token: previous.owner.token })).status, 200);

    // The domain's new owner verifies it and requires single sign-on.
    const current = await createOrg(h);
    await addVerifiedDomain(h, dns, current, shared.domain);
    await connect(h, op, current, { jit: true, enforce: true });

    // The old IdP asserts the linked subject with an address at the domain it kept.
    const trip = await ssoRoundTrip(h, op, { sub: subject, email: addressAt(kept.domain, 'cover') }, { organization_slug: previous.slug });
    assert.equal(trip.error, 'sso_required');
    assert.equal(trip.code, null);
    assert.ok(h.events.some((event) => event.type === 'user.login_failed' && event.user_id === userId && event.data.reason === 'sso_required'));

    // Through the domain's own connection the account signs in.
    const own = await ssoLogin(h, op, { sub: newSubject(), email }, { email });
    assert.equal(own.exchanged!.status, 200, own.exchanged!.text);
    assert.equal(own.exchanged!.body.data.user.id, userId);
  });

  test("a domain given up, whoever holds it next: the old organization's IdP no longer signs in the accounts it linked there (sso_email_outside_domain)", async () => {
    // Threat: the domain moved to another organization (or nobody) that does not require single
    // sign-on; the old organization's administrator, who runs its IdP, still held a way into every
    // account linked there, memberships of other organizations included.
    const { previous, shared, kept, subject, userId } = await linkedAtOneOfTwoDomains('left');
    // While the organization holds the domain, the link signs in with any address it asserts at its domains.
    const again = await ssoLogin(h, op, { sub: subject, email: addressAt(kept.domain, 'cover') }, { organization_slug: previous.slug });
    assert.equal(again.exchanged!.status, 200, again.exchanged!.text);
    assert.equal((await h.delete(`/orgs/${previous.id}/domains/${shared.id}`, { token: previous.owner.token })).status, 200);

    // The domain's new owner verifies it and does not require single sign-on.
    const current = await createOrg(h);
    await addVerifiedDomain(h, dns, current, shared.domain);

    const trip = await ssoRoundTrip(h, op, { sub: subject, email: addressAt(kept.domain, 'cover') }, { organization_slug: previous.slug });
    assert.equal(trip.error, 'sso_email_outside_domain');
    assert.equal(trip.code, null);
    assert.ok(h.events.some((event) => event.type === 'user.login_failed' && event.user_id === userId && event.data.reason === 'sso_email_outside_domain'));
  });
});

describe("the organization's IdP asserts what it likes: never a 500", () => {
  test('a subject longer than 255 characters is provider_response_invalid at the callback; nothing created', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'longsub');
    const { trip, exchanged } = await ssoLogin(h, op, { sub: `s${'x'.repeat(300)}`, email }, { email });
    assertNoInternals(trip.response, 'callback');
    if (exchanged) assertNoInternals(exchanged, 'exchange');
    assert.equal(trip.error, 'provider_response_invalid');
    assert.equal(await countRows(h, 'users', { email }), 0);
  });

  test('a control character in the asserted e-mail is provider_response_invalid at the callback', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'nul').replace('@', '\u0000x@');
    const { trip, exchanged } = await ssoLogin(h, op, { sub: newSubject(), email }, { email: addressAt(domain) });
    assertNoInternals(trip.response, 'callback');
    if (exchanged) assertNoInternals(exchanged, 'exchange');
    assert.equal(trip.error, 'provider_response_invalid');
    const [row] = await h.knex(`${h.tablePrefix}users`).where('email', 'like', `%@${domain}`).count({ count: '*' });
    assert.equal(Number(row?.count), 0, 'nothing created at the domain');
  });

  test('control characters in the asserted name are dropped from the JIT display name', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'name');
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email, name: 'Ada\u0000 Love\u001blace\u007f' }, { email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    const me = await h.get('/auth/me', { token: exchanged!.body.data.access_token });
    assert.equal(me.status, 200, me.text);
    assert.equal(me.body.data.display_name, 'Ada Lovelace');
  });
});

describe('at sign-in, a provider the router cannot use is provider_unavailable (CONTRACT 12.2)', () => {
  test('a token endpoint that answers a redirect, or drops the connection: social_error=provider_unavailable, the redirect never followed', async () => {
    const { domain } = await ssoOrg(h, dns, op, { jit: true });
    type Handler = (req: IncomingMessage, res: ServerResponse) => unknown;
    // The test provider's request handler, wrapped for the token endpoint only (the rest of the flow is real).
    const provider = op as unknown as { handle: Handler };
    const original = provider.handle;
    const answers: Array<[string, Handler]> = [
      ['a redirect', (_req, res) => {
        res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data' });
        res.end();
      }],
      ['a dropped connection', (req) => req.socket.destroy()],
    ];
    try {
      for (const [name, answer] of answers) {
        provider.handle = (req, res) => (req.url?.startsWith('/token') ? answer(req, res) : original.call(op, req, res));
        const email = addressAt(domain, 'unavailable');
        const trip = await ssoRoundTrip(h, op, { sub: newSubject(), email }, { email });
        assert.equal(trip.error, 'provider_unavailable', name);
        assert.equal(await countRows(h, 'users', { email }), 0, name);
      }
    } finally {
      provider.handle = original;
    }
  });
});

describe('contract points', () => {
  test('a JIT sign-up: user.registered, user.sso_linked (signup) and member.joined carry the contract fields and no subject', async () => {
    const { org, domain, connection } = await ssoOrg(h, dns, op, { jit: true });
    const email = addressAt(domain, 'events');
    const subject = newSubject();
    const { trip, exchanged } = await ssoLogin(h, op, { sub: subject, email }, { email });
    assert.equal(exchanged!.status, 200, exchanged!.text);
    const userId = exchanged!.body.data.user.id as string;
    const mine = h.events.filter((event) => event.user_id === userId);
    assert.deepEqual(mine.find((event) => event.type === 'user.registered')?.data, { method: 'sso', connection_id: connection.id });
    const linked = mine.find((event) => event.type === 'user.sso_linked');
    assert.equal(linked?.organization_id, org.id);
    assert.equal(linked?.data.connection_id, connection.id);
    assert.equal(linked?.data.method, 'signup');
    const [identity] = await h.knex(`${h.tablePrefix}sso_identities`).where({ user_id: userId });
    assert.equal(linked?.data.identity_id, identity.id);
    assert.equal(identity.issuer, op.issuer);
    assert.equal(mine.find((event) => event.type === 'member.joined')?.data.via, 'sso_jit');
    assert.ok(!JSON.stringify(mine).includes(subject));
    assert.ok(!JSON.stringify(mine).includes(trip.code!));
  });

  test('authorize answers expires_in as stateTtl; a PATCH without client_secret keeps it (sign-in still works)', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const patched = await h.patch(`/orgs/${org.id}/sso`, { jit: true, scopes: ['openid', 'email'] }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual(patched.body.data.scopes, ['openid', 'email']);
    const email = addressAt(domain, 'kept');
    const { trip, exchanged } = await ssoLogin(h, op, { sub: newSubject(), email }, { email });
    assert.equal(new URL(trip.authorizationUrl).searchParams.get('scope'), 'openid email');
    assert.equal(exchanged!.status, 200, exchanged!.text);
    const started = await h.post('/auth/sso/authorize', { organization_slug: org.slug, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' });
    assert.equal(started.status, 200, started.text);
    assert.equal(started.body.data.expires_in, 600);
  });

  test('a disabled connection is inactive: authorize 404 sso_not_configured, and enforce no longer applies', async () => {
    const { org, domain } = await ssoOrg(h, dns, op, { jit: true });
    const user = await h.signUp(addressAt(domain, 'disabled'));
    const patched = await h.patch(`/orgs/${org.id}/sso`, { enforce: true, enabled: false }, { token: org.owner.token });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body.data.status, 'inactive');
    assertError(await h.post('/auth/sso/authorize', { email: user.email, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' }), 404, 'sso_not_configured');
    assert.equal((await h.post('/auth/login', { email: user.email, password: user.password })).status, 200);
  });

  test("another organization's domain id is 404 on delete, nothing removed; a superadmin may manage any organization's single sign-on", async () => {
    const first = await createOrg(h);
    const second = await createOrg(h);
    const added = await h.post(`/orgs/${first.id}/domains`, { domain: uniqueDomain() }, { token: first.owner.token });
    assert.equal(added.status, 201, added.text);
    assertError(await h.delete(`/orgs/${second.id}/domains/${added.body.data.id}`, { token: second.owner.token }), 404, 'not_found');
    assert.equal(await countRows(h, 'org_domains', { id: added.body.data.id }), 1);

    const root = await superadmin(h);
    const listed = await h.get(`/orgs/${first.id}/domains`, { token: root.accessToken });
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(listed.body.data.domains.map((domain: any) => domain.id), [added.body.data.id]);
    assertError(await h.get(`/orgs/${first.id}/sso`, { token: root.accessToken }), 404, 'not_found');
  });
});

describe('bad input to the single sign-on routes', () => {
  test('a domain with a URL delimiter or percent-encoding is 422 invalid_domain, not the host name before it', async () => {
    const org = await createOrg(h);
    for (const domain of ['acme.test/x', 'acme.test?x', 'acme.test#x', 'acme.test\\x', 'ac%6de.test', 'https://acme.test/', 'ada@acme.test']) {
      assertError(await h.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token }), 422, 'invalid_domain', domain);
    }
    assert.equal(await countRows(h, 'org_domains', { organization_id: org.id }), 0);
  });


  test('wrong types, oversized and odd values: 4xx, never 500 or internals', async () => {
    const { org } = await ssoOrg(h, dns, op);
    const token = org.owner.token;
    const challenge = { handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'S256' };
    const cases: Array<[string, () => Promise<any>]> = [
      ['domain number', () => h.post(`/orgs/${org.id}/domains`, { domain: 42 }, { token })],
      ['domain array', () => h.post(`/orgs/${org.id}/domains`, { domain: ['acme.test'] }, { token })],
      ['domain oversized', () => h.post(`/orgs/${org.id}/domains`, { domain: `${'a'.repeat(5000)}.test` }, { token })],
      ['domain with a NUL', () => h.post(`/orgs/${org.id}/domains`, { domain: 'ac\u0000me.test' }, { token })],
      ['domain percent-encoded NUL', () => h.post(`/orgs/${org.id}/domains`, { domain: 'ac%00me.test' }, { token })],
      ['domain with a port', () => h.post(`/orgs/${org.id}/domains`, { domain: 'acme.test:443' }, { token })],
      ['domain bad punycode', () => h.post(`/orgs/${org.id}/domains`, { domain: 'xn--.test' }, { token })],
      ['domain only dots', () => h.post(`/orgs/${org.id}/domains`, { domain: '...' }, { token })],
      ['verify unknown id', () => h.post(`/orgs/${org.id}/domains/${'z'.repeat(64)}/verify`, {}, { token })],
      ['verify id too long', () => h.post(`/orgs/${org.id}/domains/${'z'.repeat(65)}/verify`, {}, { token })],
      ['sso scopes not strings', () => h.patch(`/orgs/${org.id}/sso`, { scopes: [1, 2] }, { token })],
      ['sso scopes with a space', () => h.patch(`/orgs/${org.id}/sso`, { scopes: ['openid email'] }, { token })],
      ['sso enforce string', () => h.patch(`/orgs/${org.id}/sso`, { enforce: 'yes' }, { token })],
      ['sso issuer not a URL', () => h.patch(`/orgs/${org.id}/sso`, { issuer: 'not a url' }, { token })],
      ['sso issuer oversized', () => h.patch(`/orgs/${org.id}/sso`, { issuer: `https://idp.test/${'a'.repeat(3000)}` }, { token })],
      ['sso issuer javascript:', () => h.patch(`/orgs/${org.id}/sso`, { issuer: 'javascript:alert(1)' }, { token })],
      ['sso default_role object', () => h.patch(`/orgs/${org.id}/sso`, { default_role: { slug: 'member' } }, { token })],
      ['sso empty patch', () => h.patch(`/orgs/${org.id}/sso`, {}, { token })],
      ['authorize both', () => h.post('/auth/sso/authorize', { email: 'a@b.test', organization_slug: org.slug, ...challenge })],
      ['authorize neither', () => h.post('/auth/sso/authorize', { ...challenge })],
      ['authorize slug oversized', () => h.post('/auth/sso/authorize', { organization_slug: 's'.repeat(5000), ...challenge })],
      ['authorize email not an address', () => h.post('/auth/sso/authorize', { email: 'no-at-sign', ...challenge })],
      ['authorize return_to elsewhere', () => h.post('/auth/sso/authorize', { organization_slug: org.slug, return_to: 'https://evil.test/', ...challenge })],
      ['authorize plain challenge method', () => h.post('/auth/sso/authorize', { organization_slug: org.slug, handoff_challenge: 'x'.repeat(43), handoff_challenge_method: 'plain' })],
      ['callback array state', () => h.get('/auth/sso/abc/callback?state=a&state=b')],
      ['callback oversized state', () => h.get(`/auth/sso/abc/callback?state=${'a'.repeat(5000)}`)],
      ['callback nested query', () => h.get('/auth/sso/abc/callback?state[x]=1')],
      ['callback unknown connection', () => h.get(`/auth/sso/${'9'.repeat(64)}/callback?state=abc&code=def`)],
    ];
    for (const [name, send] of cases) {
      const response = await send();
      assertNoInternals(response, name);
      assert.ok(response.status >= 400 && response.status < 500, `${name}: ${response.status} ${response.text}`);
      // SPEC: a validation failure is `{errors: [...]}`, every other refusal `{error, message}`.
      assert.ok(typeof response.body?.error === 'string' || Array.isArray(response.body?.errors), `${name}: ${response.status} ${response.text}`);
    }
  });
});

describe('blockedDomains', () => {
  test('an entry written in Unicode or with a trailing dot blocks the domain as it is stored', async () => {
    const other = await startSsoHarness(undefined, new StubDns(), { sso: { blockedDomains: ['Blöcked-Mail.test', 'trailing-mail.test.'] } });
    try {
      const org = await createOrg(other);
      for (const domain of ['blöcked-mail.test', 'xn--blcked-mail-sfb.test', 'trailing-mail.test', 'TRAILING-MAIL.test.']) {
        assertError(await other.post(`/orgs/${org.id}/domains`, { domain }, { token: org.owner.token }), 422, 'invalid_domain', domain);
      }
    } finally {
      await other.close();
    }
  });
});
