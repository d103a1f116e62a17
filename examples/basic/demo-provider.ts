/**
 * A stand-in for Google while the example runs: node-oidc-provider (a certified OpenID
 * Provider) in-process on 127.0.0.1 with a free port, one static client whose only redirect
 * URI is the router's callback, PKCE required, and a one-page login that offers demo accounts
 * (each with `email_verified: true`). Development only.
 *
 * Its port, signing key, cookie key and client secret are kept in a state file beside the
 * example's database, so the issuer and keys survive a restart: the router links a social
 * account to the issuer, and a new one would refuse earlier demo accounts (account_link_required).
 * Grants and sign-in sessions stay in memory: losing them at a restart only means signing in again.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
// oidc-provider ships no types; the example uses the small surface below.
// @ts-expect-error
import Provider from 'oidc-provider';
// @ts-expect-error
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';

/**
 * The library's own in-memory storage, under a name of our own: oidc-provider warns ("you MUST
 * change it") only when handed its default, and in-memory grants are the intent here.
 */
class DemoStorage extends MemoryAdapter {}

interface DemoState {
  port: number;
  clientSecret: string;
  /** The single sign-on client's secret (absent from state files written before it existed). */
  ssoClientSecret?: string;
  cookieKey: string;
  signingKey: Record<string, unknown>;
}

function loadOrCreateState(stateFile: string | undefined): DemoState {
  if (stateFile && existsSync(stateFile)) return JSON.parse(readFileSync(stateFile, 'utf8')) as DemoState;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    port: 0,
    clientSecret: randomBytes(32).toString('base64url'),
    ssoClientSecret: randomBytes(32).toString('base64url'),
    cookieKey: randomBytes(32).toString('hex'),
    signingKey: { ...privateKey.export({ format: 'jwk' }), kid: `demo-${randomBytes(6).toString('hex')}`, use: 'sig', alg: 'RS256' },
  };
}

/** Listens on the remembered port; when another process holds it, on a new one (the caller says so). */
async function listen(server: ReturnType<typeof createServer>, port: number): Promise<number> {
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
  } catch (error) {
    if (port === 0 || (error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error;
    return listen(server, 0);
  }
  return (server.address() as AddressInfo).port;
}

export interface DemoAccount {
  sub: string;
  name: string;
  email: string;
}

export const DEMO_ACCOUNTS: DemoAccount[] = [
  { sub: 'demo-ada', name: 'Ada Lovelace', email: 'ada.lovelace@demo.example.org' },
  { sub: 'demo-grace', name: 'Grace Hopper', email: 'grace.hopper@demo.example.org' },
  { sub: 'demo-alan', name: 'Alan Turing', email: 'alan.turing@demo.example.org' },
];

export interface DemoProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** A second client, for an organization's single sign-on connection (present with `ssoRedirectPrefix`). */
  sso: { clientId: string; clientSecret: string } | undefined;
  close(): Promise<void>;
}

const escapeHtml = (value: string) => value.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);

function loginPage(uid: string, clientName: string): string {
  const choices = DEMO_ACCOUNTS.map(
    (account) =>
      `<li><button type="submit" name="account" value="${escapeHtml(account.sub)}">Continue as ${escapeHtml(account.name)}<span class="email">${escapeHtml(account.email)}</span></button></li>`,
  ).join('');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · Demo identity provider</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; color: #1b1b1b; }
  ul { list-style: none; padding: 0; }
  li { margin: 0.5rem 0; }
  button { width: 100%; text-align: left; padding: 0.75rem 1rem; font-size: 1rem; border: 1px solid #444; border-radius: 6px; background: #fff; color: #1b1b1b; cursor: pointer; }
  button:focus-visible { outline: 3px solid #0b57d0; outline-offset: 2px; }
  .email { display: block; font-size: 0.875rem; color: #444; }
  .cancel { width: auto; margin-top: 1rem; }
</style>
</head>
<body>
<main>
<h1>Demo identity provider</h1>
<p>${escapeHtml(clientName)} asks who you are. This stand-in for Google runs inside the example; pick a demo account (its e-mail counts as verified). It also plays an organization's own identity provider on the Single sign-on page.</p>
<form method="post" action="/interaction/${escapeHtml(uid)}/login" aria-label="Choose a demo account">
<ul>${choices}</ul>
</form>
<form method="post" action="/interaction/${escapeHtml(uid)}/abort" aria-label="Cancel">
<button type="submit" class="cancel">Cancel and go back</button>
</form>
</main>
</body>
</html>`;
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  let body = '';
  for await (const chunk of req) {
    body += String(chunk);
    if (body.length > 4096) break;
  }
  return new URLSearchParams(body);
}

/**
 * `ssoRedirectPrefix` (the router's `{redirectBase}/auth/sso/`) adds a second client for the
 * "Single sign-on" page: a connection's callback carries the connection's id, known only once
 * an organization connects, so that client accepts any redirect URI under the prefix.
 */
export async function startDemoProvider(options: { redirectUri: string; ssoRedirectPrefix?: string; stateFile?: string; onIssuerChanged?: (previous: string, current: string) => void }): Promise<DemoProvider> {
  const clientId = 'identity-router-example';
  const ssoClientId = 'identity-router-example-sso';
  const loaded = loadOrCreateState(options.stateFile);
  const state = { ...loaded, ssoClientSecret: loaded.ssoClientSecret ?? randomBytes(32).toString('base64url') };
  const server = createServer();
  const port = await listen(server, state.port);
  if (state.port !== 0 && port !== state.port) options.onIssuerChanged?.(`http://127.0.0.1:${state.port}`, `http://127.0.0.1:${port}`);
  if (options.stateFile && (port !== state.port || loaded.ssoClientSecret === undefined)) writeFileSync(options.stateFile, JSON.stringify({ ...state, port }), { mode: 0o600 });
  const { clientSecret, ssoClientSecret } = state;
  const issuer = `http://127.0.0.1:${port}`;
  const ssoPrefix = options.ssoRedirectPrefix;
  const provider = new Provider(issuer, {
    adapter: DemoStorage,
    jwks: { keys: [state.signingKey] },
    clients: [
      { client_id: clientId, client_secret: clientSecret, client_name: 'Identity Router Example', redirect_uris: [options.redirectUri], grant_types: ['authorization_code'], response_types: ['code'] },
      ...(ssoPrefix
        ? [{ client_id: ssoClientId, client_secret: ssoClientSecret, client_name: 'Identity Router Example (single sign-on)', redirect_uris: [`${ssoPrefix}connection`], grant_types: ['authorization_code'], response_types: ['code'] }]
        : []),
    ],
    pkce: { required: () => true, methods: ['S256'] },
    features: { devInteractions: { enabled: false } },
    cookies: { keys: [state.cookieKey] },
    // Explicit lifetimes (seconds): the defaults work, but each logs a notice the first time it is used.
    ttl: { Interaction: 600, Session: 14 * 24 * 3600, Grant: 14 * 24 * 3600, AuthorizationCode: 60, AccessToken: 600, IdToken: 600 },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    findAccount: (_ctx: unknown, sub: string) => {
      const account = DEMO_ACCOUNTS.find((candidate) => candidate.sub === sub);
      if (!account) return undefined;
      return { accountId: sub, claims: () => ({ sub, email: account.email, email_verified: true, name: account.name }) };
    },
    interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
  });

  if (ssoPrefix) {
    // Only the single sign-on client, and only under the router's SSO callback path.
    const original = provider.Client.prototype.redirectUriAllowed;
    provider.Client.prototype.redirectUriAllowed = function (this: { clientId: string }, value: unknown) {
      return (this.clientId === ssoClientId && typeof value === 'string' && value.startsWith(ssoPrefix) && !value.slice(ssoPrefix.length).includes('?')) || original.call(this, value);
    };
  }

  const interaction = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    const [, , uid, action] = path.split('/');
    const details = await provider.interactionDetails(req, res);
    if (details.uid !== uid) throw new Error('interaction mismatch');
    if (req.method === 'GET' && action === undefined) {
      // No form-action: Chromium applies it to the redirects after the POST too (back to the app's callback).
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'" });
      res.end(loginPage(uid ?? '', 'Identity Router Example'));
      return;
    }
    if (req.method === 'POST' && action === 'abort') {
      await provider.interactionFinished(req, res, { error: 'access_denied', error_description: 'The person cancelled.' }, { mergeWithLastSubmission: false });
      return;
    }
    if (req.method === 'POST' && action === 'login') {
      const chosen = (await readForm(req)).get('account') ?? '';
      const account = DEMO_ACCOUNTS.find((candidate) => candidate.sub === chosen);
      if (!account) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end('Choose one of the demo accounts.');
        return;
      }
      const grant = new provider.Grant({ accountId: account.sub, clientId: details.params.client_id });
      grant.addOIDCScope(String(details.params.scope));
      const grantId = await grant.save();
      await provider.interactionFinished(req, res, { login: { accountId: account.sub }, consent: { grantId } }, { mergeWithLastSubmission: false });
      return;
    }
    res.writeHead(404).end();
  };

  const callback = provider.callback();
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (!path.startsWith('/interaction/')) return void callback(req, res);
    interaction(req, res, path).catch(() => {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end('This sign-in has expired; go back to the app and start again.');
    });
  });

  return {
    issuer,
    clientId,
    clientSecret,
    sso: ssoPrefix ? { clientId: ssoClientId, clientSecret: ssoClientSecret } : undefined,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
