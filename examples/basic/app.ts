/**
 * The example host app as a factory, so `server.ts` runs it and the browser tests start it
 * in-process on a free port with a temporary database and a test clock.
 *
 *   /identity/...   the router, as any API client (curl, a mobile app) uses it
 *   /api/...        the same router for the web app, refresh token in an httpOnly cookie
 *   /invoices       a host route guarded by a permission from the catalog
 *   /api-docs       docs/openapi.yaml in Swagger UI, served from node_modules
 *   /dev/inbox      the development inbox (development only)
 *   /dev/webhook-receiver  a webhook endpoint the Webhooks page delivers to (development only)
 *   /dev/dns        the TXT records the Single sign-on page publishes to verify a domain (development only)
 *   /dev/sso-demo.json  the demo provider's single sign-on client, to connect an organization (development only)
 *   /social-return  where social sign-in lands (the demo provider stands in for Google)
 *   /sso-return     where single sign-on lands (the demo provider plays the organization's IdP)
 *   /client/identity-client.js  identity-router/client, bundled from src/client when first asked for
 *   everything else the web app in public/ (one HTML shell, one ES module per page)
 */
import { readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, isIP } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import express, { type Express, type RequestHandler } from 'express';
import { createIdentityRouter, type Clock, type IdentityConfig, type IdentityEvent, type IdentityRouter } from '../../src/index.js';
import { startDemoProvider, type DemoProvider } from './demo-provider.js';
import { createDevDns } from './dev-dns.js';
import { createDevInbox, type DevInbox } from './dev-inbox.js';
import { refreshTokenCookie } from './refresh-token-cookie.js';
import { createWebhookReceiver } from './webhook-receiver.js';

const here = dirname(fileURLToPath(import.meta.url));
const repositoryRoot = resolve(here, '../..');
const publicDir = join(here, 'public');
const REFRESH_TTL_SECONDS = 30 * 24 * 3600;

export interface ExampleOptions {
  /** Where the browser reaches the app, e.g. `http://localhost:3000`: the mailed links start with it. */
  publicUrl: string;
  databaseFile: string;
  secret: string;
  /** Development mode mounts the inbox; production never does. */
  development: boolean;
  clock?: Clock;
  /** Echo mail and SMS to the console too (the inbox keeps them either way). */
  echoToConsole?: boolean;
  onEvent?: (event: IdentityEvent) => void;
  /** Merged over the example's configuration (tests lower bcrypt cost and turn off IP rate limits). */
  config?: Partial<IdentityConfig>;
  /** An OpenID provider offered as "Sign in with Demo" (startExampleServer starts one in development). */
  socialProvider?: { issuer: string; clientId: string; clientSecret: string };
  /** An OpenID provider client an organization can connect on the Single sign-on page (development only). */
  ssoProvider?: { issuer: string; clientId: string; clientSecret: string };
}

/** The demo provider's accounts are at this domain: the one an organization verifies to try single sign-on. */
export const DEMO_SSO_DOMAIN = 'demo.example.org';

/**
 * The example's limits in development: each rate-limit group allows about ten times its
 * production number within one minute (production: up to an hour), and one-time-code send
 * budgets are ten times larger, so a second pass through every flow is never blocked and a 429
 * is over within a minute. Production keeps the library's defaults (docs/configuration.md,
 * "Rate limits"). A host passes its own through `auth.rateLimits` and `otp.sendBudget`.
 */
export const DEVELOPMENT_LIMITS = {
  rateLimits: {
    login: { limit: 100, windowSec: 60 },
    register: { limit: 50, windowSec: 60 },
    password_forgot: { limit: 50, windowSec: 60 },
    token_refresh: { limit: 600, windowSec: 60 },
    token_consume: { limit: 100, windowSec: 60 },
    mfa_send: { limit: 50, windowSec: 60 },
    mfa_confirm: { limit: 100, windowSec: 60 },
    mfa_enroll: { limit: 50, windowSec: 60 },
    social: { limit: 200, windowSec: 60 },
    authenticated: { limit: 6000, windowSec: 60 },
  },
  sendBudget: {
    perDestination: { limit: 50, windowSec: 3600 },
    perAccount: { limit: 100, windowSec: 3600 },
  },
} satisfies { rateLimits: NonNullable<NonNullable<IdentityConfig['auth']>['rateLimits']>; sendBudget: NonNullable<NonNullable<IdentityConfig['otp']>['sendBudget']> };

/** The provider id in the router's paths: `/auth/social/demo/...`. */
export const DEMO_PROVIDER_ID = 'demo';

/** Where the provider sends the browser back: the router's callback under its `/identity` mount. */
export const socialRedirectUri = (publicUrl: string) => `${publicUrl}/identity/auth/social/${DEMO_PROVIDER_ID}/callback`;

export interface ExampleApp {
  app: Express;
  identity: IdentityRouter;
  /** Present in development only. */
  inbox: DevInbox | undefined;
}

export function createExampleApp(options: ExampleOptions): ExampleApp {
  const { publicUrl, development } = options;
  const now = () => options.clock?.now() ?? Date.now();
  const inbox = development ? createDevInbox({ now, echoToConsole: options.echoToConsole ?? true }) : undefined;
  // Single sign-on (docs/sso.md) in development: domains are verified against the in-memory TXT
  // table of /dev/dns instead of real DNS, and the demo provider may be reached on loopback http:.
  const devDns = development ? createDevDns() : undefined;
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: options.databaseFile }, useNullAsDefault: true },
      secret: options.secret,
      issuer: `${publicUrl}/identity`,
      appName: 'Identity Router Example',
      permissions: [{ key: 'invoices.read', description: 'Read invoices' }],
      // Every link the library mails opens a page of the web app below.
      links: {
        verifyEmail: `${publicUrl}/verify-email?token={token}`,
        resetPassword: `${publicUrl}/reset-password?token={token}`,
        acceptInvite: `${publicUrl}/accept-invite?token={token}`,
        // The token sits in the fragment: it never reaches a server, and the page POSTs it on a click.
        passwordlessLogin: `${publicUrl}/passwordless/link#token={token}`,
      },
      // Organization webhooks (docs/webhooks.md). In development they may deliver to this app's own
      // receiver on plain http and a loopback address; in production the guard refuses both.
      webhooks: { enabled: true, ...(development ? { allowHttp: true, allowPrivateNetworks: true } : {}) },
      // "E-mail me a code" on the sign-in page, with a link in the same mail (docs/passwordless.md).
      passwordless: { link: true },
      // Development limits (above) so a newcomer clicking through twice is not locked out for an hour.
      ...(development ? { auth: { rateLimits: DEVELOPMENT_LIMITS.rateLimits }, otp: { sendBudget: DEVELOPMENT_LIMITS.sendBudget } } : {}),
      // Passkeys are bound to the host name the browser shows (see docs/mfa.md, "Passkeys").
      webauthn: passkeySettings(publicUrl),
      // Social sign-in (CONTRACT 9): the callback answers on /identity, then the browser lands on
      // /social-return, whose page trades the one-time code for tokens through /api.
      ...(options.socialProvider
        ? {
            social: {
              redirectBase: `${publicUrl}/identity`,
              returnUrls: [`${publicUrl}/social-return`],
              providers: { [DEMO_PROVIDER_ID]: { ...options.socialProvider, name: 'Demo' } },
            },
          }
        : {}),
      ...(devDns
        ? {
            sso: {
              redirectBase: `${publicUrl}/identity`,
              returnUrls: [`${publicUrl}/sso-return`],
              // Exactly the demo provider's origin is exempt from the private-address guard (the router warns at start-up).
              allowPrivateNetworks: options.ssoProvider ? [new URL(options.ssoProvider.issuer).origin] : false,
            },
          }
        : {}),
      ...options.config,
    },
    {
      ...(inbox ? { mailer: inbox.mailer, sms: inbox.sms } : {}),
      ...(devDns ? { dns: devDns.adapter } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.onEvent ? { onEvent: options.onEvent } : {}),
    },
  );

  const app = express();
  app.disable('x-powered-by');
  app.use((_req, res, next) => {
    // The access token lives in page memory, so script injection is the threat that matters: only our own scripts run.
    res.set('Content-Security-Policy', "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'");
    res.set('X-Content-Type-Options', 'nosniff');
    res.set('Referrer-Policy', 'no-referrer');
    next();
  });
  if (development) app.use(servesThisMachineOnly(publicUrl));

  app.use('/identity', identity);
  app.use('/api', refreshTokenCookie({ mountPath: '/api', maxAgeSeconds: REFRESH_TTL_SECONDS, secure: !development }), identity);

  // A host route guarded by a permission from the catalog, resolved from the database. It
  // accepts an access token or an API key (the API keys page creates one).
  app.get('/invoices', identity.requirePermission('invoices.read', { apiKeys: true }), (_req, res) => {
    res.json({ data: [{ id: 'inv_1', total: 4200 }] });
  });

  if (inbox) app.use(inbox.router());
  if (development) app.use(createWebhookReceiver({ now }).router());
  if (devDns) app.use(devDns.router());
  if (development) {
    // What an administrator would copy from the IdP's console: the Single sign-on page fills its form with it.
    app.get('/dev/sso-demo.json', (_req, res) => {
      const demo = options.ssoProvider;
      res.json({ data: demo ? { issuer: demo.issuer, client_id: demo.clientId, client_secret: demo.clientSecret, domain: DEMO_SSO_DOMAIN } : null });
    });
  }

  // The web app runs on identity-router/client. A host's bundler imports it from the package; the
  // example serves the repository's source as one browser module, built once, when first asked for.
  let clientBundle: Promise<string> | undefined;
  app.get('/client/identity-client.js', async (_req, res) => {
    clientBundle ??= build({ entryPoints: [join(repositoryRoot, 'src/client/index.ts')], bundle: true, format: 'esm', platform: 'browser', target: 'es2020', write: false }).then(
      (built) => built.outputFiles[0]!.text,
    );
    res.type('text/javascript').set('Cache-Control', 'no-cache').send(await clientBundle);
  });

  app.get('/openapi.yaml', (_req, res) => res.type('application/yaml').sendFile(join(repositoryRoot, 'docs/openapi.yaml')));
  app.use('/vendor/swagger-ui', express.static(join(repositoryRoot, 'node_modules/swagger-ui-dist'), { index: false }));
  app.get('/api-docs', (_req, res) => res.sendFile(join(publicDir, 'api-docs.html')));

  // The web app finds its pages here, so adding a page is adding one file to public/pages/.
  app.get('/app/pages.json', (_req, res) => {
    const pages = readdirSync(join(publicDir, 'pages'))
      .filter((file) => file.endsWith('.js'))
      .sort()
      .map((file) => `/pages/${file}`);
    res.json({ pages, development, limits: development ? 'development' : 'production' });
  });
  app.use(express.static(publicDir, { index: false }));
  // Any other GET that wants HTML is a page of the single-page app: it routes on the path itself.
  app.get(/^\/(?!identity\/|api\/|dev\/|vendor\/).*/, (req, res, next) => {
    if (!req.accepts('html')) return next();
    res.sendFile(join(publicDir, 'index.html'));
  });

  return { app, identity, inbox };
}

/**
 * DNS rebinding: a page of another site whose name its owner re-points at 127.0.0.1 reaches this
 * server with that name in `Host`, and is same-origin with itself, so it could read the development
 * inbox (every reset link), /dev/sso-demo.json's client secret and write /dev/dns records. In
 * development the app answers only the public URL's host, `localhost` (and `*.localhost`) and IP
 * addresses, which no other site's name can become.
 */
function servesThisMachineOnly(publicUrl: string): RequestHandler {
  const own = new URL(publicUrl).hostname;
  return (req, res, next) => {
    let hostname = '';
    try {
      hostname = new URL(`http://${req.headers.host ?? ''}`).hostname;
    } catch {
      // No host, or not one: refused below.
    }
    if (hostname !== '' && (hostname === own || hostname === 'localhost' || hostname.endsWith('.localhost') || isIP(hostname.replace(/^\[|\]$/g, '')) !== 0)) return next();
    res.status(403).type('text/plain').send('This development server answers its own host names only (DNS rebinding guard).');
  };
}

/**
 * The RP id is the host name of the app; an IP address cannot be one, so a loopback address
 * is served as localhost (which browsers treat as a secure context over plain http).
 */
function passkeySettings(publicUrl: string): NonNullable<IdentityConfig['webauthn']> {
  const url = new URL(publicUrl);
  if (['127.0.0.1', '[::1]'].includes(url.hostname)) url.hostname = 'localhost';
  return { rpId: url.hostname, origins: [url.origin] };
}

export interface RunningExample extends ExampleApp {
  url: string;
  /** The issuer of the demo OpenID provider, when one runs. */
  demoIssuer: string | undefined;
  server: Server;
  close(): Promise<void>;
}

/**
 * Listens first and builds the app second, so that with port 0 the mailed links still carry
 * the port the system picked.
 */
export async function startExampleServer(
  options: Omit<ExampleOptions, 'publicUrl'> & { port: number; host?: string; publicHost?: string; demoProvider?: boolean },
): Promise<RunningExample> {
  const server = createServer();
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolveListen());
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${options.publicHost ?? options.host ?? '127.0.0.1'}:${port}`;
  // In development a local OpenID provider stands in for Google, so "Sign in with Demo" works offline.
  let demo: DemoProvider | undefined;
  if (options.socialProvider === undefined && (options.demoProvider ?? options.development)) {
    demo = await startDemoProvider({
      redirectUri: socialRedirectUri(url),
      ...(options.development ? { ssoRedirectPrefix: `${url}/identity/auth/sso/` } : {}),
      // Beside the database: same database, same issuer and keys, so demo accounts keep signing in.
      stateFile: `${options.databaseFile}.demo-provider.json`,
      onIssuerChanged: (previous, current) =>
        console.warn(`demo OpenID provider: port ${new URL(previous).port} is taken, so its issuer moved to ${current}; accounts linked to the old issuer cannot use "Sign in with Demo"`),
    });
  }
  const example = createExampleApp({
    ...options,
    publicUrl: url,
    ...(demo ? { socialProvider: { issuer: demo.issuer, clientId: demo.clientId, clientSecret: demo.clientSecret } } : {}),
    ...(demo?.sso ? { ssoProvider: { issuer: demo.issuer, ...demo.sso } } : {}),
  });
  server.on('request', example.app);
  try {
    await example.identity.ready;
  } catch (error) {
    server.close();
    await demo?.close();
    throw error;
  }
  return {
    ...example,
    url,
    demoIssuer: demo?.issuer,
    server,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.closeAllConnections();
        server.close(() => void Promise.all([example.identity.close(), demo?.close()]).then(() => resolveClose()));
      }),
  };
}
