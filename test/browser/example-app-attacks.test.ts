/**
 * The example web app (examples/basic/) as a target while a developer runs `npm run example`,
 * attacked from another site or through a link. Each test names the threat it answers:
 * - DNS rebinding: a page of the attacker's site whose name is re-pointed at 127.0.0.1 reaches
 *   the example with its own name in `Host`, and is same-origin with itself: it could read the
 *   development inbox (every reset link), the demo provider's SSO client secret, and write TXT
 *   records. In development the example serves the names of this machine only;
 * - a cross-site form posting to the cookie route: it neither signs the developer out (clears
 *   the refresh cookie) nor signs them in as someone else;
 * - the demo OpenID provider sends a code to the router's callbacks only;
 * - a form of another origin of the same site (another port of localhost: a site ignores ports, so
 *   SameSite=Strict sends the cookie) neither clears nor uses it;
 * - the development inbox escapes what a mail carries (an organization's name in an invitation),
 *   and every answer keeps the strict headers (frame-ancestors, no Referer, no CORS).
 * Framing, `return_to` and an injected script are in client-attacks.test.ts.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { REFRESH_COOKIE } from '../../examples/basic/refresh-token-cookie.js';
import { type ListeningApp, listening } from '../helpers/host-app.js';
import { BrowserSuite, browserSkipReason, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';

const skip = browserSkipReason();

/** One request with a Host header of our choosing, as a rebound name sends it (fetch() will not set Host). */
function withHost(url: string, host: string, options: { method?: string; body?: string } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = request(
      { host: target.hostname, port: target.port, path: target.pathname + target.search, method: options.method ?? 'GET', headers: { host, ...(options.body ? { 'content-type': 'application/json' } : {}) } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

describe('the example app attacked from another site', { skip }, () => {
  let suite: BrowserSuite;
  let attacker: ListeningApp | undefined;
  let attackerPage = '';

  before(async () => {
    suite = await BrowserSuite.start('example-app-attacks');
  });
  after(async () => {
    await attacker?.close();
    await suite?.close();
  });

  test('DNS rebinding: a request naming a host other than this machine is refused in development, so no inbox, secret or TXT record is reached', async () => {
    const email = uniqueEmail('rebound');
    const registered = await fetch(`${suite.url}/identity/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: STRONG_PASSWORD }) });
    assert.equal(registered.status, 202, await registered.text());
    const port = new URL(suite.url).port;

    const rebound = `rebound.attacker.test:${port}`;
    for (const path of ['/dev/inbox', '/dev/inbox.json', '/dev/sso-demo.json', '/dev/dns.json', '/dev/webhook-receiver.json', '/login']) {
      const answer = await withHost(`${suite.url}${path}`, rebound);
      assert.equal(answer.status, 403, `${path} answered ${answer.status} to Host ${rebound}`);
      assert.ok(!answer.body.includes(email) && !answer.body.includes('client_secret'), `${path} leaked to a rebound name`);
    }
    const txt = await withHost(`${suite.url}/dev/dns/txt`, rebound, { method: 'POST', body: JSON.stringify({ name: '_identity-router.victim.example', value: 'x' }) });
    assert.equal(txt.status, 403, 'no TXT record is written through a rebound name');
    const login = await withHost(`${suite.url}/api/auth/login`, rebound, { method: 'POST', body: JSON.stringify({ email, password: STRONG_PASSWORD }) });
    assert.equal(login.status, 403, 'the cookie route answers no rebound name either');
    // Spellings of a rebound name: case, a trailing dot, no port.
    for (const host of [`ReBound.Attacker.Test:${port}`, `rebound.attacker.test.:${port}`, 'rebound.attacker.test', 'localhost.attacker.test']) {
      assert.equal((await withHost(`${suite.url}/dev/inbox.json`, host)).status, 403, host);
    }

    // Only this machine can connect at all: the example listens on loopback (server.ts: HOST, default localhost).
    assert.match(String((suite.example.server.address() as { address: string }).address), /^(127\.0\.0\.1|::1)$/);

    // This machine's names and any address stay served (a phone on the LAN uses an IP address).
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `app.localhost:${port}`, `192.168.1.20:${port}`]) {
      const answer = await withHost(`${suite.url}/dev/inbox.json`, host);
      assert.equal(answer.status, 200, `${host} answered ${answer.status}`);
    }
    assert.ok((await withHost(`${suite.url}/dev/inbox.json`, `127.0.0.1:${port}`)).body.includes(email));
  });

  /** The refresh cookie as the cookie route sets it: host-only, on /api/auth. */
  const developersCookie = () => ({ name: REFRESH_COOKIE, value: 'the-developers-session', domain: new URL(suite.url).hostname, path: '/api/auth', httpOnly: true, sameSite: 'Strict' as const });

  /** A page of another site (localhost; the app is on 127.0.0.1) that posts a form to the app on load. */
  async function crossSiteForm(path: string, fields: Record<string, string>): Promise<string> {
    if (!attacker) {
      const app = express();
      app.get('/form', (req, res) => {
        const inputs = Object.entries(JSON.parse(String(req.query.fields)) as Record<string, string>)
          .map(([name, value]) => `<input name="${name}" value='${value}'>`)
          .join('');
        res.type('html').send(`<!doctype html><title>another site</title><form method="post" enctype="text/plain" action="${suite.url}${String(req.query.path)}">${inputs}</form><script>document.forms[0].submit()</script>`);
      });
      attacker = await listening(app);
      attackerPage = attacker.base.replace('//127.0.0.1:', '//localhost:');
    }
    return `${attackerPage}/form?path=${encodeURIComponent(path)}&fields=${encodeURIComponent(JSON.stringify(fields))}`;
  }

  test('a cross-site form posted to the cookie route neither signs the developer out nor in', async () => {
    const { context, page } = await suite.newPage();
    try {
      await context.addCookies([developersCookie()]);
      const refreshCookie = async () => (await context.cookies(`${suite.url}/api/auth/logout`)).find((cookie) => cookie.name === REFRESH_COOKIE)?.value;
      assert.equal(await refreshCookie(), 'the-developers-session');

      for (const path of ['/api/auth/logout', '/api/auth/logout-all']) {
        await Promise.all([page.waitForURL(`${suite.url}${path}`), page.goto(await crossSiteForm(path, { '{"a":"': '"}' }))]);
        assert.match(await page.content(), /"error"/, `the form reached ${path}`);
        assert.equal(await refreshCookie(), 'the-developers-session', `a cross-site form to ${path} cleared the developer's session cookie`);
      }

      // Login CSRF: the attacker's own account put into the developer's browser. A form cannot send JSON.
      await Promise.all([page.waitForURL(`${suite.url}/api/auth/login`), page.goto(await crossSiteForm('/api/auth/login', { '{"email":"attacker@example.com","password":"': `${STRONG_PASSWORD}"}` }))]);
      assert.match(await page.content(), /unsupported_media_type/, 'the form reached the login route');
      assert.equal(await refreshCookie(), 'the-developers-session', 'a cross-site login replaced the session cookie');

      // The development endpoints read JSON only, which a form cannot send: no TXT record, no failing receiver.
      await Promise.all([page.waitForURL(`${suite.url}/dev/dns/txt`), page.goto(await crossSiteForm('/dev/dns/txt', { '{"name":"_identity-router.victim.example","value":"': 'x"}' }))]);
      const dns = (await (await fetch(`${suite.url}/dev/dns.json`)).json()) as { data: { records: Array<{ name: string }> } };
      assert.deepEqual(dns.data.records, [], 'a cross-site form published a TXT record');
      await Promise.all([page.waitForURL(`${suite.url}/dev/webhook-receiver/answer`), page.goto(await crossSiteForm('/dev/webhook-receiver/answer', { '{"status":500,"x":"': '"}' }))]);
      const receiver = (await (await fetch(`${suite.url}/dev/webhook-receiver.json`)).json()) as { data: { answer_with: number } };
      assert.equal(receiver.data.answer_with, 204, 'a cross-site form turned the receiver to failing');
    } finally {
      await context.close();
    }
  });

  test('a form on another origin of the same site (another port of this machine) posted to the cookie route leaves the session cookie alone', async () => {
    const { context, page } = await suite.newPage();
    try {
      await context.addCookies([developersCookie()]);
      const refreshCookie = async () => (await context.cookies(`${suite.url}/api/auth/logout`)).find((cookie) => cookie.name === REFRESH_COOKIE)?.value;
      // SameSite=Strict sends the cookie to a form of any port of the app's host: the site ignores ports.
      await crossSiteForm('/api/auth/logout', {});
      const sameSite = attacker!.base;
      for (const path of ['/api/auth/logout', '/api/auth/logout-all', '/api/auth/token/refresh']) {
        const form = `${sameSite}/form?path=${encodeURIComponent(path)}&fields=${encodeURIComponent('{}')}`;
        await Promise.all([page.waitForURL(`${suite.url}${path}`), page.goto(form)]);
        assert.match(await page.content(), /"errors?"/, `the form reached ${path}`);
        assert.equal(await refreshCookie(), 'the-developers-session', `a form of another origin posted to ${path} touched the developer's session cookie`);
      }
    } finally {
      await context.close();
    }
  });

  test('the demo OpenID provider sends a code to the router callbacks only', async () => {
    const issuer = suite.example.demoIssuer;
    assert.ok(issuer);
    const sso = (await (await fetch(`${suite.url}/dev/sso-demo.json`)).json()) as { data: { client_id: string } };
    const prefix = `${suite.url}/identity/auth/sso/`;
    const attempts: Array<[string, string]> = [
      ['identity-router-example', 'https://evil.example/callback'],
      ['identity-router-example', `${suite.url}/identity/auth/social/demo/callback/../../../../dev/inbox`],
      [sso.data.client_id, 'https://evil.example/identity/auth/sso/x'],
      [sso.data.client_id, `${prefix}x?next=https://evil.example`],
      [sso.data.client_id, `${suite.url.replace('127.0.0.1', '127.0.0.1.evil.example')}/identity/auth/sso/x`],
    ];
    for (const [clientId, redirectUri] of attempts) {
      const query = new URLSearchParams({ client_id: clientId, redirect_uri: redirectUri, response_type: 'code', scope: 'openid email', state: 's', nonce: 'n', code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256' });
      const answer: Response = await fetch(`${issuer}/auth?${query}`, { redirect: 'manual' });
      const sentTo = answer.headers.get('location');
      assert.equal(sentTo, null, `${clientId} sent the browser to ${sentTo} for ${redirectUri}`);
      assert.equal(answer.status, 400, `${clientId} with ${redirectUri} answered ${answer.status}`);
    }
  });

  test('the development inbox shows a mail as text: an organization named with markup invites someone, and nothing of it runs', async () => {
    const json = async (path: string, body: unknown, token?: string) => {
      const answer = await fetch(`${suite.url}/identity${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });
      return { status: answer.status, body: (await answer.json()) as any };
    };
    const email = uniqueEmail('markup-owner');
    assert.equal((await json('/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    const mailed = suite.example.inbox!.messages.find((message) => message.to === email);
    const token = /token=([\w-]+)/.exec(mailed?.text ?? '')?.[1];
    assert.ok(token, 'the verification mail carries its link');
    assert.equal((await json('/auth/email/verify', { token })).status, 200);
    const login = await json('/auth/login', { email, password: STRONG_PASSWORD });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    const markup = `<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>`;
    const org = await json('/orgs', { name: `Acme ${markup}`.slice(0, 100) }, login.body.data.access_token);
    assert.equal(org.status, 201, JSON.stringify(org.body));
    const switched = await json('/auth/switch-org', { organization_id: org.body.data.id }, login.body.data.access_token);
    assert.equal(switched.status, 200, JSON.stringify(switched.body));
    const invited = uniqueEmail('markup-invitee');
    const invite = await json(`/orgs/${org.body.data.id}/invites`, { email: invited, role_slugs: ['member'] }, switched.body.data.access_token);
    assert.equal(invite.status, 201, JSON.stringify(invite.body));

    const { context, page } = await suite.newPage();
    try {
      await page.goto(`${suite.url}/dev/inbox`);
      const message = page.locator('article.message', { has: page.locator('.to', { hasText: invited }) });
      await message.waitFor();
      assert.match((await message.textContent()) ?? '', /<img src=x/, 'the organization name shows as text');
      assert.equal(await page.locator('main img, main script').count(), 0, 'no element of the name was parsed');
      assert.notEqual(await page.title(), 'pwned');
    } finally {
      await context.close();
    }
  });

  test('every answer keeps the strict headers and none is readable by another site', async () => {
    for (const path of ['/', '/dev/inbox', '/dev/inbox.json', '/sso-return?sso_code=x', '/passwordless/link', '/reset-password?token=x', '/social-return?error=%3Cscript%3E', '/api-docs', '/dev/dns.json', '/dev/sso-demo.json']) {
      const answer = await fetch(`${suite.url}${path}`, { headers: { accept: 'text/html', origin: 'https://evil.example' } });
      assert.match(answer.headers.get('content-security-policy') ?? '', /frame-ancestors 'none'/, path);
      assert.equal(answer.headers.get('referrer-policy'), 'no-referrer', `${path}: a token in the address could leave through the Referer`);
      assert.equal(answer.headers.get('access-control-allow-origin'), null, `${path} is readable from other sites`);
    }
  });
});
