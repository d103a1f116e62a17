import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

// What this guards against: the suite runs the TypeScript sources under tsx, so a package
// that is broken for its consumers (a missing dist file, an exports map that sends `require`
// to ESM, types that do not resolve under NodeNext, a dependency that only the dev tree
// provides, a peer range that Express 4 does not meet) would still pass every other test.
// Here the packed tarball is installed into fresh CommonJS and ESM TypeScript projects, on
// Express 5 and on Express 4, and each one registers, verifies, logs in and reads /auth/me.

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const run = promisify(execFile);
const SKIP = process.env.IDENTITY_TEST_DB === 'pg' ? 'packaging does not depend on the database: it runs in the SQLite phase only' : false;

// better-sqlite3 compiles from source here (minutes); consumers link the copy already built for
// this repository instead. Everything else comes from the npm registry (or its cache).
const BETTER_SQLITE3 = join(ROOT, 'node_modules', 'better-sqlite3');
const NPM_INSTALL_FLAGS = ['--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'];
const EXPRESS_4 = 'express@4.21.2';

/** npm with the outer `npm test`'s npm_* variables removed, so an install cannot land in the repository. */
async function npm(args: string[], cwd: string): Promise<string> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
  try {
    const { stdout } = await run('npm', args, { cwd, env, maxBuffer: 64 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`npm ${args.join(' ')} failed in ${cwd}:\n${failure.stdout ?? ''}\n${failure.stderr ?? failure.message}`);
  }
}

async function node(args: string[], cwd: string): Promise<string> {
  try {
    const { stdout } = await run(process.execPath, args, { cwd, timeout: 60_000 });
    return stdout;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`node ${args.join(' ')} failed in ${cwd}:\n${failure.stdout ?? ''}\n${failure.stderr ?? failure.message}`);
  }
}

interface ConsumerReport {
  express: string;
  statuses: Record<string, number>;
  email: boolean;
  events?: boolean;
}

function assertConsumerWorked(output: string, expressMajor: string): void {
  const report = JSON.parse(output.trim().split('\n').pop()!) as ConsumerReport;
  assert.ok(report.express.startsWith(`${expressMajor}.`), `ran on Express ${report.express}, expected ${expressMajor}.x`);
  assert.deepEqual(report.statuses, { register: 202, verify: 200, login: 200, me: 200 });
  assert.equal(report.email, true, '/auth/me answers the registered address');
  if (report.events !== undefined) assert.equal(report.events, true, 'onEvent received user.logged_in');
}

/** The shared consumer flow, as plain JavaScript for the CommonJS project. */
const CJS_CONSUMER = `'use strict';
const { once } = require('node:events');
const path = require('node:path');
const express = require('express');
const { createIdentityRouter, noopSender } = require('identity-router');

async function main() {
  const mail = [];
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: path.join(__dirname, 'identity-' + Date.now() + '.sqlite') }, useNullAsDefault: true },
      secret: 'consumer-secret-that-is-at-least-32-characters',
      issuer: 'https://consumer.example',
      password: { bcryptCost: 4 },
    },
    { mailer: { send: async (message) => void mail.push(message) }, sms: noopSender, logger: { info() {}, warn() {}, error: console.error } },
  );
  const app = express();
  app.use('/identity', identity);
  await identity.ready;
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = 'http://127.0.0.1:' + server.address().port + '/identity';
  const call = async (method, route, body, token) => {
    const response = await fetch(base + route, {
      method,
      headers: { 'content-type': 'application/json', ...(token ? { authorization: 'Bearer ' + token } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  };
  const email = 'cjs-' + Date.now() + '@example.com';
  const password = 'correct horse battery staple';
  const statuses = {};
  statuses.register = (await call('POST', '/auth/register', { email, password })).status;
  const sent = mail.find((message) => message.template === 'verify_email' && message.to === email);
  statuses.verify = (await call('POST', '/auth/email/verify', { token: sent && sent.context.token })).status;
  const login = await call('POST', '/auth/login', { email, password });
  statuses.login = login.status;
  const me = await call('GET', '/auth/me', undefined, login.body.data && login.body.data.access_token);
  statuses.me = me.status;
  server.close();
  await identity.close();
  console.log(JSON.stringify({ express: require('express/package.json').version, statuses, email: Boolean(me.body.data && me.body.data.email === email) }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
`;

/**
 * A CommonJS host with social login configured (docs/social-login.md): openid-client is ESM-only and is
 * loaded by a dynamic import on first use. The provider is a closed loopback port, so the
 * authorize call answers 502 provider_unavailable once openid-client loaded and tried discovery.
 */
const CJS_SOCIAL_CONSUMER = `'use strict';
const { once } = require('node:events');
const path = require('node:path');
const express = require('express');
const { createIdentityRouter, noopSender } = require('identity-router');

async function main() {
  const identity = createIdentityRouter(
    {
      database: { client: 'better-sqlite3', connection: { filename: path.join(__dirname, 'social-' + Date.now() + '.sqlite') }, useNullAsDefault: true },
      secret: 'consumer-secret-that-is-at-least-32-characters',
      issuer: 'https://consumer.example',
      social: { redirectBase: 'http://127.0.0.1/identity', returnUrls: ['http://127.0.0.1/app'], providers: { local: { issuer: 'http://127.0.0.1:9', clientId: 'c', clientSecret: 's' } } },
    },
    { mailer: noopSender, sms: noopSender, logger: { info() {}, warn() {}, error: console.error } },
  );
  const app = express();
  app.use('/identity', identity);
  await identity.ready;
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = 'http://127.0.0.1:' + server.address().port + '/identity';
  const providers = await fetch(base + '/auth/social/providers');
  const authorize = await fetch(base + '/auth/social/local/authorize', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ handoff_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', handoff_challenge_method: 'S256' }),
  });
  const body = await authorize.json();
  server.close();
  await identity.close();
  console.log(JSON.stringify({ providers: providers.status, authorize: authorize.status, error: body.error }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
`;

/** The same flow in strict TypeScript, type-checked against the published .d.ts. */
const ESM_CONSUMER = `import { once } from 'node:events';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import express from 'express';
import {
  createIdentityRouter,
  noopSender,
  IdentityError,
  type IdentityConfig,
  type IdentityEvent,
  type IdentityRouter,
  type MailMessage,
  type Mailer,
} from 'identity-router';

interface Envelope<T> {
  data?: T;
}

const mail: MailMessage[] = [];
const events: Array<IdentityEvent['type']> = [];
const captureMailer: Mailer = { send: async (message) => void mail.push(message) };

const config: IdentityConfig = {
  database: {
    client: 'better-sqlite3',
    connection: { filename: fileURLToPath(new URL(\`../identity-\${Date.now()}.sqlite\`, import.meta.url)) },
    useNullAsDefault: true,
  },
  secret: 'consumer-secret-that-is-at-least-32-characters',
  issuer: 'https://consumer.example',
  password: { bcryptCost: 4 },
};
const identity: IdentityRouter = createIdentityRouter(config, {
  mailer: captureMailer,
  sms: noopSender,
  onEvent: (event) => void events.push(event.type),
  logger: { info() {}, warn() {}, error: console.error },
});
if (typeof IdentityError !== 'function') throw new Error('IdentityError is not exported');

const app = express();
app.use('/identity', identity);
await identity.ready;
const server = app.listen(0, '127.0.0.1');
await once(server, 'listening');
const base = \`http://127.0.0.1:\${(server.address() as AddressInfo).port}/identity\`;

async function call<T>(method: string, route: string, body?: unknown, token?: string): Promise<{ status: number; body: Envelope<T> }> {
  const response = await fetch(base + route, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: \`Bearer \${token}\` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Envelope<T> };
}

const email = \`esm-\${Date.now()}@example.com\`;
const password = 'correct horse battery staple';
const statuses: Record<string, number> = {};
statuses.register = (await call('POST', '/auth/register', { email, password })).status;
const token = mail.find((message) => message.template === 'verify_email' && message.to === email)?.context.token;
statuses.verify = (await call('POST', '/auth/email/verify', { token })).status;
const login = await call<{ access_token: string }>('POST', '/auth/login', { email, password });
statuses.login = login.status;
const me = await call<{ email: string }>('GET', '/auth/me', undefined, login.body.data?.access_token);
statuses.me = me.status;
server.close();
await identity.close();
const expressVersion = (createRequire(import.meta.url)('express/package.json') as { version: string }).version;
console.log(JSON.stringify({ express: expressVersion, statuses, email: me.body.data?.email === email, events: events.includes('user.logged_in') }));
`;

const ESM_TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    noUncheckedIndexedAccess: true,
    verbatimModuleSyntax: true,
    // The published declaration file itself is checked, not only the consumer's code.
    skipLibCheck: false,
    types: ['node'],
    rootDir: 'src',
    outDir: 'dist',
  },
  include: ['src'],
};

/** A browser app's use of the client, type-checked against the published declarations. */
const BROWSER_CONSUMER = `import { createIdentityClient, IdentityClientError, type Session } from 'identity-router/client';

const client = createIdentityClient({ baseUrl: '/identity', storage: 'session' });
export async function signIn(email: string, password: string): Promise<Session | 'mfa'> {
  await client.ready;
  const result = await client.login({ email, password });
  if (result.mfa) return 'mfa';
  return result.session;
}
export async function factorCount(): Promise<number> {
  const { factors } = await client.request('GET', '/auth/mfa/factors');
  return factors.length;
}
export const isRefusal = (error: unknown) => error instanceof IdentityClientError && error.code === 'invalid_credentials';
`;

const BROWSER_TSCONFIG = {
  compilerOptions: { target: 'ES2022', module: 'ESNext', moduleResolution: 'Bundler', lib: ['ES2022', 'DOM'], types: [], strict: true, noEmit: true, skipLibCheck: false },
  include: ['app.ts'],
};

describe('the packed tarball', { skip: SKIP, timeout: 240_000 }, () => {
  let workDir: string;
  let tarball: string;

  before(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'identity-packaging-'));
    await npm(['run', 'build'], ROOT);
    for (const file of ['dist/index.js', 'dist/index.cjs', 'dist/index.d.ts', 'dist/index.d.cts']) {
      assert.ok(existsSync(join(ROOT, file)), `npm run build produces ${file}`);
    }
    const packDir = join(workDir, 'pack');
    mkdirSync(packDir);
    // The build just ran; --ignore-scripts skips the prepack build a second time.
    const [packed] = JSON.parse(await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', packDir], ROOT)) as Array<{ filename: string; files: Array<{ path: string }> }>;
    tarball = join(packDir, packed!.filename.split('/').pop()!);
    const files = packed!.files.map((file) => file.path);
    for (const file of ['package.json', 'dist/index.js', 'dist/index.cjs', 'dist/index.d.ts', 'dist/index.d.cts', 'dist/client/index.js', 'dist/client/index.d.ts', 'LICENSE', 'docs/openapi.yaml']) {
      assert.ok(files.includes(file), `the tarball holds ${file}`);
    }
    const strays = files.filter((file) => /^(src|test|scripts|bench|examples|node_modules|\.tmp)\//.test(file) || file.endsWith('.sqlite'));
    assert.deepEqual(strays, [], 'the tarball holds no sources, tests or local data');
    // Package hygiene (CHANGELOG): no source maps (dist/ is not minified; maps would name
    // src/ files the package does not ship), and bundlers may drop the package when nothing is used.
    assert.deepEqual(files.filter((file) => file.endsWith('.map')), [], 'the tarball ships no source maps');
    const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { sideEffects?: unknown };
    assert.equal(manifest.sideEffects, false, 'package.json declares "sideEffects": false');
  });

  after(() => {
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  test('publint and Are The Types Wrong find no problem', async () => {
    await node([join(ROOT, 'scripts', 'check-package.mjs'), tarball], ROOT);
  });

  test('a CommonJS project requires it and serves on Express 5 and Express 4', async () => {
    const dir = join(workDir, 'consumer-cjs');
    mkdirSync(dir);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer-cjs', private: true, type: 'commonjs' }));
    writeFileSync(join(dir, 'consumer.js'), CJS_CONSUMER);
    await npm(['install', tarball, 'express@5', BETTER_SQLITE3, ...NPM_INSTALL_FLAGS], dir);
    assertConsumerWorked(await node(['consumer.js'], dir), '5');

    // A host without `social` never loads openid-client: it serves with the package gone.
    const openIdClient = join(dir, 'node_modules', 'openid-client');
    const hidden = join(dir, 'node_modules', '.openid-client-hidden');
    assert.ok(existsSync(openIdClient), 'openid-client is installed as a dependency');
    renameSync(openIdClient, hidden);
    try {
      assertConsumerWorked(await node(['consumer.js'], dir), '5');
    } finally {
      renameSync(hidden, openIdClient);
    }
    // With `social`, the CommonJS build loads the ESM-only openid-client by import() on first use.
    writeFileSync(join(dir, 'social.js'), CJS_SOCIAL_CONSUMER);
    const social = JSON.parse((await node(['social.js'], dir)).trim().split('\n').pop()!) as { providers: number; authorize: number; error: string };
    assert.deepEqual(social, { providers: 200, authorize: 502, error: 'provider_unavailable' });

    await npm(['install', EXPRESS_4, ...NPM_INSTALL_FLAGS], dir);
    assertConsumerWorked(await node(['consumer.js'], dir), '4');
  });

  test('an ESM TypeScript project (NodeNext, strict) type-checks against it and serves on Express 5 and Express 4; a browser app type-checks against identity-router/client', async () => {
    const dir = join(workDir, 'consumer-esm');
    mkdirSync(join(dir, 'src'), { recursive: true });
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer-esm', private: true, type: 'module' }));
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(ESM_TSCONFIG, null, 2));
    writeFileSync(join(dir, 'src', 'consumer.ts'), ESM_CONSUMER);
    await npm(['install', tarball, 'express@5', BETTER_SQLITE3, 'typescript@5', '@types/express@5', '@types/node@20', ...NPM_INSTALL_FLAGS], dir);
    // Node 20 cannot run TypeScript: tsc checks and emits, node runs the output.
    try {
      await run(process.execPath, [join(dir, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { cwd: dir });
    } catch (error) {
      const failure = error as { stdout?: string; stderr?: string };
      assert.fail(`tsc rejected the consumer against the published types:\n${failure.stdout ?? ''}${failure.stderr ?? ''}`);
    }
    assertConsumerWorked(await node(['dist/consumer.js'], dir), '5');

    // The browser client from the same install: its types check under bundler resolution with the
    // DOM library, and its file loads in a browser as shipped (relative imports only, none at all here).
    mkdirSync(join(dir, 'web'));
    writeFileSync(join(dir, 'web', 'tsconfig.json'), JSON.stringify(BROWSER_TSCONFIG, null, 2));
    writeFileSync(join(dir, 'web', 'app.ts'), BROWSER_CONSUMER);
    try {
      await run(process.execPath, [join(dir, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(dir, 'web')], { cwd: dir });
    } catch (error) {
      const failure = error as { stdout?: string; stderr?: string };
      assert.fail(`tsc rejected a browser consumer of identity-router/client:\n${failure.stdout ?? ''}${failure.stderr ?? ''}`);
    }
    const clientFile = readFileSync(join(dir, 'node_modules', 'identity-router', 'dist', 'client', 'index.js'), 'utf8');
    assert.deepEqual([...clientFile.matchAll(/^\s*(?:import|export)[^;]*from\s*['"]([^'"]+)['"]/gm)].map((match) => match[1]), [], 'the client file imports nothing');
    assert.doesNotMatch(clientFile, /\bnode:|require\(/, 'the client file uses no Node built-in');

    await npm(['install', EXPRESS_4, ...NPM_INSTALL_FLAGS], dir);
    assertConsumerWorked(await node(['dist/consumer.js'], dir), '4');
  });
});
