/*
 * What the router writes for others to read: mails, links, logs, and the example app's pages
 * that show them. Each block names the threat:
 *
 *   node scripts/run-tests.mjs test/platform/output-injection-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { createExampleApp } from '../../examples/basic/app.js';
import { consoleLogger } from '../../src/adapters/console-logger.js';
import { createNodemailerMailer } from '../../src/adapters/nodemailer-mailer.js';
import type { MailMessage } from '../../src/adapters/types.js';
import { assertError, assertValidationErrors } from '../helpers/account.js';
import { harnessesClosedAfterFile, STRONG_PASSWORD, TestClock, uniqueEmail } from '../helpers/harness.js';
import { createOrg } from '../helpers/orgs.js';
import { fixtureWebauthnConfig } from '../helpers/passkeys.js';
import { rawHttp } from '../helpers/raw-request.js';

const start = harnessesClosedAfterFile();

interface Sent {
  envelopeTo: string[];
  raw: string;
}

/** The message as nodemailer would put it on the wire: the SMTP envelope's recipients and the raw MIME text. */
async function throughNodemailer(message: MailMessage): Promise<Sent> {
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  const sent: Sent[] = [];
  const mailer = createNodemailerMailer(
    {
      async sendMail(mail) {
        const info = (await transport.sendMail(mail)) as unknown as { envelope: { to: string[] }; message: Buffer };
        sent.push({ envelopeTo: info.envelope.to, raw: info.message.toString('utf8') });
        return info;
      },
    },
    { from: 'Acme <no-reply@acme.test>' },
  );
  await mailer.send(message);
  assert.equal(sent.length, 1);
  return sent[0]!;
}

/*
 * Threat: one mailbox behind endless spellings. nodemailer reads the `to` it is given as an
 * address list, and a Unicode space (U+00A0, U+2000-U+200A, U+3000, U+FEFF, U+2028...) inside a
 * local part splits it: `x\u00a0victim@corp.test` is delivered to `victim@corp.test`. Each
 * spelling is an address of its own to the router (its own account, invite, per-destination
 * and per-address budget), so one mailbox could be sent unlimited verification mails, sign-up
 * codes, invitations and factor codes, and the router's rule "mail goes to the address it
 * names" broke. RFC 5321 has no unquoted space in a local part: such an address is refused
 * wherever one is typed.
 */
test('an address with a Unicode space in its local part is refused everywhere an address is mailed', async () => {
  const h = await start({ config: { passwordless: { allowSignup: true } } });
  const mailbox = uniqueEmail('victim');
  const [local, domain] = mailbox.split('@') as [string, string];
  const spaces = ['\u00a0', '\u2003', '\u202f', '\u3000', '\ufeff', '\u2028'];
  const spellings = spaces.flatMap((space) => [`x${space}${local}@${domain}`, `${local}${space}@${domain}`]);
  // The harm, shown with nodemailer given the address as a string (as the bundled mailer did
  // before it passed an address object): such an address reaches the other mailbox.
  const asString = await nodemailer.createTransport({ streamTransport: true, buffer: true }).sendMail({ from: 'no-reply@acme.test', to: spellings[0]!, text: 't' });
  assert.deepEqual(asString.envelope.to, [mailbox]);

  const org = await createOrg(h);
  const enrolling = await h.signUp();
  for (const email of spellings) {
    const label = JSON.stringify(email);
    assertValidationErrors(await h.post('/auth/register', { email, password: STRONG_PASSWORD }), /must not contain a space/, `register ${label}`);
    assertValidationErrors(await h.post('/auth/passwordless/start', { email }), /must not contain a space/, `passwordless start ${label}`);
    assertValidationErrors(await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token }), /must not contain a space/, `invite ${label}`);
    assertValidationErrors(await h.post('/auth/mfa/email/enroll', { email }, { token: enrolling.accessToken }), /must not contain a space/, `e-mail factor ${label}`);
  }
  for (const message of h.mail) {
    const { envelopeTo } = await throughNodemailer(message);
    assert.deepEqual(envelopeTo, [message.to], `a ${message.template} mail to ${JSON.stringify(message.to)} was delivered to ${envelopeTo.join(', ')}`);
  }
});

/*
 * Threat: terminal escapes and invisible line breaks in what the router prints or mails. C1
 * controls (U+0080-U+009F: U+009B is the 8-bit CSI of ANSI escape sequences, U+0085 a line
 * break) passed the input rule, which refused only C0 and DEL, so they reached organization
 * and role names, addresses, the invitation mail's subject and body and the development mailer's
 * log lines (JSON.stringify leaves them as they are). The display-name rule and a provider's
 * address already refused them; every field now does (docs/security.md, "Hostile input").
 */
test('C1 control characters are refused in every typed field, as C0 ones are', async () => {
  const h = await start({ config: { passwordless: {} } });
  const org = await createOrg(h);
  for (const control of ['\u0085', '\u009b', '\u0080', '\u009f']) {
    const label = `U+${control.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
    assertValidationErrors(await h.post('/orgs', { name: `Acme${control}2J` }, { token: org.owner.token }), /must not contain control characters/, `organization name ${label}`);
    assertValidationErrors(await h.patch(`/orgs/${org.id}`, { name: `Acme${control}2J` }, { token: org.owner.token }), /must not contain control characters/, `organization rename ${label}`);
    assertValidationErrors(
      await h.post(`/orgs/${org.id}/roles`, { name: `Role${control}`, slug: `role-${Math.random().toString(36).slice(2, 8)}`, permission_keys: ['org.read'] }, { token: org.owner.token }),
      /must not contain control characters/,
      `role name ${label}`,
    );
    const email = `a${control}${uniqueEmail('c1')}`;
    assertValidationErrors(await h.post('/auth/register', { email, password: STRONG_PASSWORD }), /must not contain control characters/, `register ${label}`);
    assertValidationErrors(await h.post('/auth/passwordless/start', { email }), /must not contain control characters/, `passwordless ${label}`);
    assertValidationErrors(await h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token }), /must not contain control characters/, `invite ${label}`);
    assertValidationErrors(await h.post('/auth/register', { email: uniqueEmail(), password: STRONG_PASSWORD, display_name: `Ada${control}` }), /must not contain control characters/, `display name ${label}`);
  }
  assert.ok(h.mail.every((message) => !/[\u0080-\u009f]/.test(JSON.stringify(message))), 'no mail carried a C1 control');
});

/*
 * Threat: log injection through what the router logs about a refusal. The console logger
 * writes a meta object as JSON, which escapes C0 (newlines, ESC) but leaves C1 controls
 * (U+009B, the 8-bit CSI of terminal escapes; U+0085) and U+2028/U+2029 (line breaks to many
 * log viewers) as they are. Values decoded from what a client signs or a provider answers never
 * pass the input rule: a passkey's clientDataJSON is base64, and the refusal's reason quotes
 * its `origin`. Any signed-in user could write terminal escapes and fake lines into the operator's log.
 */
test('a refusal quoting what a client sent is logged as one line with no terminal control', async () => {
  const h = await start({ config: { webauthn: fixtureWebauthnConfig } });
  const user = await h.signUp();
  const options = await h.post('/auth/passkeys/register/options', {}, { token: user.accessToken });
  assert.equal(options.status, 200, options.text);
  const hostileOrigin = 'https://evil.example\u009b2J\u0085[identity-router] info all clear\u2028[identity-router] info still clear';
  const clientDataJSON = Buffer.from(JSON.stringify({ type: 'webauthn.create', challenge: options.body.data.challenge, origin: hostileOrigin })).toString('base64url');
  const id = Buffer.from('credential').toString('base64url');
  const verify = await h.post(
    '/auth/passkeys/register/verify',
    { response: { id, rawId: id, type: 'public-key', clientExtensionResults: {}, response: { clientDataJSON, attestationObject: Buffer.from('x').toString('base64url') } } },
    { token: user.accessToken },
  );
  assertError(verify, 422, 'invalid_code');
  const refused = h.logs.find((line) => line.msg === 'passkey registration refused');
  assert.ok(refused && JSON.stringify(refused.meta).includes('evil.example'), `the refusal quotes the origin: ${JSON.stringify(refused)}`);

  const printed: string[] = [];
  const original = console.info;
  console.info = (...args: unknown[]) => void printed.push(args.map(String).join(' '));
  try {
    consoleLogger.info(refused.msg, refused.meta);
  } finally {
    console.info = original;
  }
  assert.equal(printed.length, 1);
  assert.doesNotMatch(printed[0]!, /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/, `one line, no control: ${JSON.stringify(printed[0])}`);
  assert.ok(printed[0]!.includes('evil.example'), 'the quoted value is still there to read');
});

/*
 * Threat: header and HTML injection through what an organization's owner types. An
 * organization's name and the inviter's address reach the invitation's subject and both
 * bodies; the mail must stay one To, one Subject, no added header, and the HTML must show the
 * name as text.
 */
test('an invitation from a hostile organization name and an odd inviter address stays one header set and escaped HTML', async () => {
  const h = await start();
  const inviter = await h.signUp(`o'b&c+x${Math.random().toString(36).slice(2, 8)}@example.com`);
  const name = '"><img src=x onerror=alert(1)> Bcc: evil@attacker.test =?utf-8?q?=0D=0ABcc:_x@y?= <script>x</script>';
  const org = await createOrg(h, { name, owner: inviter });
  const invitee = uniqueEmail('invitee');
  assert.equal((await h.post(`/orgs/${org.id}/invites`, { email: invitee, role_slugs: ['member'] }, { token: org.owner.token })).status, 201);
  const message = h.lastMail(invitee, 'invite');
  assert.ok(message);
  const { envelopeTo, raw } = await throughNodemailer(message);
  assert.deepEqual(envelopeTo, [invitee]);
  const headers = raw.slice(0, raw.indexOf('\n\n'));
  const headerNames = headers.split('\n').filter((line) => /^[A-Za-z-]+:/.test(line)).map((line) => line.slice(0, line.indexOf(':')).toLowerCase());
  assert.deepEqual(headerNames.filter((header) => ['to', 'cc', 'bcc', 'subject', 'from', 'reply-to'].includes(header)).sort(), ['from', 'subject', 'to']);
  const html = raw.slice(raw.indexOf('<!DOCTYPE html>')).replace(/=\n/g, '').replaceAll('=3D', '=');
  assert.ok(html.includes('&quot;&gt;&lt;img src=x onerror=alert(1)&gt;'), 'the organization name is shown as text');
  assert.ok(!/<img|<script/i.test(html), 'the organization name was not escaped in the HTML body');
});

/*
 * Threat: host-header poisoning of mailed links. A reset, verification, invitation or magic
 * link built from the request's Host, X-Forwarded-Host, Forwarded or Origin would send the
 * victim's token to the attacker's site. Every link comes from `links.*` in the configuration.
 */
test('mailed links come from the configuration whatever Host, X-Forwarded-Host, Forwarded or Origin say', async () => {
  const h = await start({
    config: {
      passwordless: { link: true, allowSignup: true },
      links: {
        verifyEmail: 'https://app.example.test/verify?token={token}',
        resetPassword: 'https://app.example.test/reset?token={token}',
        acceptInvite: 'https://app.example.test/invite?token={token}',
        passwordlessLogin: 'https://app.example.test/link#token={token}',
      },
    },
  });
  const poisoned = {
    'content-type': 'application/json',
    host: 'evil.example',
    'x-forwarded-host': 'evil.example',
    'x-forwarded-proto': 'http',
    forwarded: 'host=evil.example;proto=http',
    origin: 'https://evil.example',
    referer: 'https://evil.example/',
  };
  const send = (path: string, body: unknown, token?: string) =>
    rawHttp(h.baseUrl, 'POST', path, token ? { ...poisoned, authorization: `Bearer ${token}` } : poisoned, JSON.stringify(body));
  const user = await h.signUp();
  const fresh = uniqueEmail('fresh');
  assert.equal((await send('/auth/register', { email: fresh, password: STRONG_PASSWORD })).status, 202);
  assert.equal((await send('/auth/password/forgot', { email: user.email })).status, 202);
  assert.equal((await send('/auth/passwordless/start', { email: uniqueEmail('pl') })).status, 202);
  const org = await createOrg(h);
  assert.equal((await send(`/orgs/${org.id}/invites`, { email: uniqueEmail('inv'), role_slugs: ['member'] }, org.owner.token)).status, 201);
  const linked = h.mail.filter((message) => typeof message.context.url === 'string');
  assert.deepEqual(new Set(linked.map((message) => message.template)), new Set(['verify_email', 'password_reset', 'login_code', 'invite']));
  for (const message of linked) {
    assert.match(String(message.context.url), /^https:\/\/app\.example\.test\/(verify|reset|invite|link)[?#]token=[A-Za-z0-9_-]+$/, message.template);
    assert.ok(!(await throughNodemailer(message)).raw.includes('evil.example'), `${message.template}: the mail names evil.example`);
  }
});

/*
 * Threat: stored XSS in the example app. Whatever an attacker types (an organization name, an
 * address, a URL with quotes) comes back in the development inbox's page, and the web app's
 * pages show names, addresses and webhook URLs. The inbox escapes before it links URLs; the
 * pages build the DOM with text nodes only; the Content-Security-Policy runs only the app's
 * own scripts.
 */
test('the example inbox shows a hostile organization name as text, under a script-only-self policy', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'example-xss-'));
  const example = createExampleApp({
    publicUrl: 'http://127.0.0.1:9',
    databaseFile: join(dir, 'example.sqlite'),
    secret: 'output-injection-test-secret-at-least-32-chars',
    development: true,
    clock: new TestClock(),
    echoToConsole: false,
    config: { password: { bcryptCost: 4 }, auth: { rateLimits: false } },
  });
  const server = example.app.listen(0, '127.0.0.1');
  try {
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    await example.identity.ready;
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const call = async (method: string, path: string, body?: unknown, token?: string) => {
      const response = await fetch(base + path, {
        method,
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: response.status, body: (await response.json().catch(() => undefined)) as any };
    };
    const owner = uniqueEmail('owner');
    assert.equal((await call('POST', '/identity/auth/register', { email: owner, password: STRONG_PASSWORD })).status, 202);
    const verifyText = example.inbox!.messages.find((message) => message.to === owner)!.text;
    const token = /token=([A-Za-z0-9_-]+)/.exec(verifyText)![1];
    assert.equal((await call('POST', '/identity/auth/email/verify', { token })).status, 200);
    const login = await call('POST', '/identity/auth/login', { email: owner, password: STRONG_PASSWORD });
    const hostile = `https://x.test/"><script>alert(1)</script><img src=x onerror=alert(2)> javascript:alert(3)`;
    const org = await call('POST', '/identity/orgs', { name: hostile }, login.body.data.access_token);
    assert.equal(org.status, 201);
    const switched = await call('POST', '/identity/auth/switch-org', { organization_id: org.body.data.id }, login.body.data.access_token);
    assert.equal((await call('POST', `/identity/orgs/${org.body.data.id}/invites`, { email: uniqueEmail('invitee'), role_slugs: ['member'] }, switched.body.data.access_token)).status, 201);

    const inbox = await fetch(`${base}/dev/inbox`);
    const page = await inbox.text();
    assert.ok(page.includes('&lt;script&gt;alert(1)&lt;/script&gt;'), 'the name is shown, escaped');
    assert.ok(!/<script>alert|<img src=x|href="javascript:/i.test(page), 'the inbox page carries live markup from the name');
    for (const match of page.matchAll(/<a href="([^"]*)"/g)) assert.match(match[1]!, /^https?:\/\//);
    const policy = inbox.headers.get('content-security-policy') ?? '';
    assert.match(policy, /default-src 'self'/);
    assert.doesNotMatch(policy, /script-src[^;]*unsafe-inline/);
    assert.match(policy, /frame-ancestors 'none'/);
    assert.equal(inbox.headers.get('x-content-type-options'), 'nosniff');
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await example.identity.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the example web app never parses a string as HTML: its pages build the DOM from text nodes', () => {
  const root = join(import.meta.dirname, '../../examples/basic/public');
  const files = ['app.js', ...readdirSync(join(root, 'lib')).map((file) => `lib/${file}`), ...readdirSync(join(root, 'pages')).map((file) => `pages/${file}`)];
  for (const file of files.filter((name) => name.endsWith('.js'))) {
    const source = readFileSync(join(root, file), 'utf8');
    assert.doesNotMatch(source, /\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|srcdoc|createContextualFragment|DOMParser|\beval\(|new Function\(/, file);
  }
});
