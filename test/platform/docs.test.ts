import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

// Docs that run as written. What this guards against: a guide whose code throws for
// a newcomer (an unset SMTP_URL, CommonJS where the code is ESM, a port the example holds, names
// the snippet never defines) while every other test passes, since none of them reads the docs.
// Every fenced block of README.md and docs/getting-started.md carries a marker comment saying
// how it runs; the runnable ones run unchanged in a new host project that installs the packed
// tarball, and the documented requests are made against it and compared with the documented
// answers. The only substitutions: `npm install identity-router` installs the tarball (and
// better-sqlite3 links this repository's compiled copy), and the servers get PORT. Fragments
// marked `typecheck`, and the TypeScript of the reference pages (TYPED_DOCS), compile under
// strict in that project against the package's own types, with the names they leave to the
// code around them declared (SURROUNDINGS).

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const run = promisify(execFile);
const SKIP = process.env.IDENTITY_TEST_DB === 'pg' ? 'the docs do not depend on the database: they run in the SQLite phase only' : false;
const DOCS = ['README.md', 'docs/getting-started.md'];
const MARKER = /^<!-- docs-test: (shell|start|requests|file \S+|typecheck \(.+\)|skip \(.+\)) -->$/;
/** Reference pages whose TypeScript compiles as it stands: every ```ts block unless marked `skip (why)`. */
const TYPED_DOCS = ['docs/configuration.md', 'docs/adapters.md', 'docs/database.md', 'docs/multiple-instances.md', 'docs/organizations.md', 'docs/api-keys.md'];

/**
 * The names the guides' TypeScript leaves to the code around it ("your config", the app of
 * server.js, your own services), declared with the package's own types, and the two packages a
 * snippet imports that no guide installs.
 */
const SURROUNDINGS = `import type { Express } from 'express';
import type { Knex } from 'knex';
import type { IdentityConfig, IdentityEvent, IdentityRouter, Logger, SmsSender } from 'identity-router';
declare global {
  const app: Express;
  const identity: IdentityRouter;
  const config: IdentityConfig;
  const database: IdentityConfig['database'];
  const secret: string;
  const issuer: string;
  const knex: Knex;
  const twilioSender: SmsSender;
  const pinoLogger: Logger;
  const auditStream: { write(event: IdentityEvent): void };
  const redis: { sendCommand(args: string[]): Promise<number> };
  const invoices: { list(organizationId: string): Promise<unknown[]> };
  const pager: { notify(message: string): Promise<void> };
  const analytics: { track(type: string, data: object): Promise<void> };
  function alreadyHandled(eventId: string): Promise<boolean>;
  function markHandled(eventId: string): Promise<void>;
}
export {};
`;
/** Ambient, so in a file of its own without imports. */
const UNINSTALLED_MODULES = `declare module 'cors' {
  export default function cors(options: { origin: string[]; allowedHeaders: string[]; exposedHeaders: string[]; maxAge: number; credentials?: boolean }): import('express').RequestHandler;
}
declare module 'pino' {
  type Log = (meta: object, message: string) => void;
  export default function pino(): { debug: Log; info: Log; warn: Log; error: Log };
}
`;

interface CodeBlock {
  doc: string;
  line: number;
  marker: string;
  code: string;
}

/** Fenced blocks with the marker on the line before each (a block without one is reported); `language` is the fence's. */
function codeBlocks(doc: string): { blocks: Array<CodeBlock & { language: string }>; unmarked: string[] } {
  const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
  const blocks: Array<CodeBlock & { language: string }> = [];
  const unmarked: string[] = [];
  for (let index = 0; index < lines.length; index += 1) {
    // A block inside a list item is indented; its lines lose that indent.
    const indent = /^( *)```/.exec(lines[index]!)?.[1]?.length;
    if (indent === undefined) continue;
    const end = lines.findIndex((line, at) => at > index && line.trimStart().startsWith('```'));
    assert.ok(end > index, `${doc}:${index + 1}: unclosed code block`);
    const marker = MARKER.exec(lines[index - 1]?.trim() ?? '')?.[1];
    const code = `${lines.slice(index + 1, end).map((line) => line.slice(indent)).join('\n')}\n`;
    if (marker === undefined) unmarked.push(`${doc}:${index + 1}`);
    blocks.push({ doc, line: index + 1, marker: marker ?? '', code, language: lines[index]!.trim().slice(3) });
    index = end;
  }
  return { blocks: blocks.filter((block) => block.marker !== '' || TYPED_DOCS.includes(doc)), unmarked };
}

const allBlocks = () => DOCS.flatMap((doc) => codeBlocks(doc).blocks);
const blocksOf = (doc: string, marker: string) => codeBlocks(doc).blocks.filter((block) => block.marker === marker);

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolvePort(port));
    });
  });
}

/** The environment of a shell a newcomer opens: no npm_* variables of the outer `npm test`. */
function shellEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
  return { ...inherited, NODE_ENV: 'development', ...extra };
}

async function bash(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<string> {
  try {
    const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script], { cwd, env, maxBuffer: 64 * 1024 * 1024, timeout: 180_000 });
    return stdout;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`bash failed in ${cwd}:\n${script}\n${failure.stdout ?? ''}\n${failure.stderr ?? failure.message}`);
  }
}

interface RunningServer {
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/** Starts a documented command in the background and waits until the router answers on `port`. */
async function startServer(script: string, cwd: string, env: NodeJS.ProcessEnv, port: number): Promise<RunningServer> {
  const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  const stop = async () => {
    if (exited) return;
    const gone = new Promise((resolveExit) => child.once('exit', resolveExit));
    process.kill(-child.pid!, 'SIGTERM');
    await gone;
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`the server exited before answering:\n${script}\n${output}`);
    try {
      const response = await fetch(`http://127.0.0.1:${port}/identity/auth/.well-known/jwks.json`);
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`the server did not answer within 30 s:\n${output}`);
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, 100));
  }
  return { child, output: () => output, stop };
}

const ANY = '\u0000any';

/** The documented answer as a pattern: `"..."`, `"eyJ..."` and `"<placeholder>"` stand for any string. */
function documentedAnswer(comment: string): unknown {
  const text = comment.replace(/"(?:\.\.\.|eyJ\.\.\.|<[^>"]+>)"/g, JSON.stringify(ANY));
  return JSON.parse(text);
}

function assertMatches(actual: unknown, expected: unknown, path: string): void {
  if (expected === ANY) {
    assert.equal(typeof actual, 'string', `${path} is a string`);
  } else if (Array.isArray(expected)) {
    assert.ok(Array.isArray(actual), `${path} is an array`);
    assert.equal(actual.length, expected.length, `${path} has ${expected.length} entries`);
    expected.forEach((entry, index) => assertMatches(actual[index], entry, `${path}[${index}]`));
  } else if (expected !== null && typeof expected === 'object') {
    assert.ok(actual !== null && typeof actual === 'object', `${path} is an object`);
    for (const [key, value] of Object.entries(expected)) assertMatches((actual as Record<string, unknown>)[key], value, `${path}.${key}`);
  } else {
    assert.equal(actual, expected, path);
  }
}

/**
 * Runs the curl commands of a "requests" block one by one in bash, as a reader pastes them:
 * `<token>` is the verification token the development mailer printed, `<org id>` the id the
 * previous answer gave, `ACCESS=<access_token>; REFRESH=<refresh_token>` the login's tokens.
 * Each answer must be 2xx and match the `# {...}` comment that follows it.
 */
async function makeDocumentedRequests(block: CodeBlock, server: RunningServer, port: number, cwd: string): Promise<string[]> {
  const commands: Array<{ text: string; answer?: string }> = [];
  const variables: Record<string, string> = {};
  let current: { text: string; answer?: string } | undefined;
  for (const line of block.code.replace(/\\\n/g, ' ').split('\n')) {
    if (line.startsWith('curl ')) {
      current = { text: line };
      commands.push(current);
    }
    else if (current && (line.startsWith('# {') || (current.answer !== undefined && /^#\s{2,}/.test(line)))) current.answer = `${current.answer ?? ''}${line.slice(1).trim()}`;
    else if (line.startsWith('#') || line.trim() === '') current = undefined;
    else if (line.startsWith('BASE=')) variables.BASE = line.slice('BASE='.length).replace('localhost:3001', `localhost:${port}`);
    else if (!line.startsWith('ACCESS=<access_token>')) assert.fail(`${block.doc}:${block.line}: a line the docs test does not know how to run: ${line}`);
  }
  assert.ok(variables.BASE?.includes(`:${port}/`), `${block.doc}:${block.line}: BASE points at localhost:3001`);
  const ran: string[] = [];
  let previous: any;
  for (const command of commands) {
    let text = command.text;
    if (text.includes('<token>')) {
      const token = /template=verify_email[\s\S]*?paste it into [^\n]*\n+\s*([A-Za-z0-9_-]{20,})/.exec(server.output())?.[1];
      assert.ok(token, `the development mailer printed a verification token:\n${server.output()}`);
      text = text.replace('<token>', token);
    }
    if (text.includes('<org id>')) text = text.replace('<org id>', previous.data.id);
    const output = await bash(`${text} -w '\\n%{http_code}'`, cwd, shellEnv(variables));
    const status = Number(output.slice(output.lastIndexOf('\n') + 1));
    const body = output.slice(0, output.lastIndexOf('\n'));
    assert.ok(status >= 200 && status < 300, `${command.text}\nanswered ${status}: ${body}`);
    previous = JSON.parse(body);
    if (command.answer !== undefined) assertMatches(previous, documentedAnswer(command.answer), command.text.slice(0, 60));
    if (text.includes('/auth/login')) {
      variables.ACCESS = previous.data.access_token;
      variables.REFRESH = previous.data.refresh_token;
    }
    if (text.includes('/auth/switch-org')) variables.ACCESS = previous.data.access_token;
    ran.push(`${status} ${text.slice(0, 80)}`);
  }
  return ran;
}

describe('the docs run as written', { skip: SKIP, timeout: 300_000 }, () => {
  let workDir: string;
  let project: string;
  let shellPath: string;
  const servers: RunningServer[] = [];

  before(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'identity-docs-'));
    await run('npm', ['run', 'build'], { cwd: ROOT, env: shellEnv({}) });
    const [packed] = JSON.parse((await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', workDir], { cwd: ROOT, env: shellEnv({}) })).stdout) as Array<{ filename: string }>;
    const tarball = join(workDir, packed!.filename.split('/').pop()!);
    // `npm install identity-router` means the packed tarball here; better-sqlite3 links this
    // repository's compiled copy (it compiles from source otherwise); the rest comes from the
    // registry, the local cache first.
    const realNpm = (await run('bash', ['-c', 'command -v npm'])).stdout.trim();
    const bin = join(workDir, 'bin');
    mkdirSync(bin);
    writeFileSync(
      join(bin, 'npm'),
      `#!${process.execPath}
const { spawnSync } = require('node:child_process');
const replacements = { 'identity-router': ${JSON.stringify(tarball)}, 'better-sqlite3': ${JSON.stringify(join(ROOT, 'node_modules', 'better-sqlite3'))} };
let args = process.argv.slice(2);
if (args[0] === 'install' || args[0] === 'i') args = [...args.map((arg) => replacements[arg] ?? arg), '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'];
const result = spawnSync(${JSON.stringify(realNpm)}, args, { stdio: 'inherit' });
process.exit(result.status ?? 1);
`,
    );
    chmodSync(join(bin, 'npm'), 0o755);
    shellPath = `${bin}:${process.env.PATH}`;
    project = join(workDir, 'my-app');
    mkdirSync(project);
  });

  after(async () => {
    for (const server of servers) await server.stop().catch(() => undefined);
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  test('every code block says whether and how it runs', () => {
    const unmarked = DOCS.flatMap((doc) => codeBlocks(doc).unmarked);
    assert.deepEqual(unmarked, [], 'each fenced block is preceded by <!-- docs-test: shell|start|requests|file NAME|skip (why) -->');
    assert.ok(allBlocks().filter((block) => !block.marker.startsWith('skip')).length >= 6);
  });

  test('getting-started: install, server.js, first requests, and the CommonJS server.cjs, from an empty folder', async (t) => {
    const startedAt = Date.now();
    for (const block of blocksOf('docs/getting-started.md', 'shell')) await bash(block.code, project, shellEnv({ PATH: shellPath }));
    const installSeconds = (Date.now() - startedAt) / 1000;
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { type?: string; dependencies?: Record<string, string> };
    assert.equal(manifest.type, 'module');
    assert.ok(manifest.dependencies?.['identity-router'] && manifest.dependencies.express, 'the install block installed identity-router and express');

    for (const block of codeBlocks('docs/getting-started.md').blocks.filter((entry) => entry.marker.startsWith('file '))) {
      const file = join(project, block.marker.slice('file '.length));
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, block.code);
    }
    const [start] = blocksOf('docs/getting-started.md', 'start');
    const [requests] = blocksOf('docs/getting-started.md', 'requests');
    assert.ok(start && requests, 'getting-started has a start block and a requests block');

    // No SMTP_URL and no IDENTITY_SECRET: the start block makes the secret, the dev mailer prints the mail.
    const port = await freePort();
    const env = shellEnv({ PORT: String(port) });
    delete env.SMTP_URL;
    delete env.IDENTITY_SECRET;
    const server = await startServer(start.code, project, env, port);
    servers.push(server);
    const answeredAfter = (Date.now() - startedAt) / 1000;
    const ran = await makeDocumentedRequests(requests, server, port, project);
    assert.equal(ran.length, 8, ran.join('\n'));
    await server.stop();
    t.diagnostic(`npm install ${installSeconds.toFixed(1)} s; empty folder to the first answer ${answeredAfter.toFixed(1)} s`);

    // Started again, the server keeps its secret (and so its keys and sessions).
    const again = await startServer(start.code, project, env, port);
    servers.push(again);
    await again.stop();

    // The CommonJS variant (server.cjs) serves too, the way the guide starts it.
    const cjsPort = await freePort();
    const cjs = await startServer('node --env-file=.env server.cjs', project, shellEnv({ PORT: String(cjsPort) }), cjsPort);
    servers.push(cjs);
    const register = await fetch(`http://127.0.0.1:${cjsPort}/identity/auth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'grace@example.com', password: 'correct horse battery staple' }),
    });
    assert.equal(register.status, 202);
    await cjs.stop();
  });

  test('the TypeScript of the guides compiles under strict against the installed package', async () => {
    // What a TypeScript project adds, as getting-started says (@types/express and @types/node), and
    // the Redis store multiple-instances.md installs; tsc is this repository's.
    await bash('npm install -D @types/express @types/node redis rate-limit-redis', project, shellEnv({ PATH: shellPath }));
    const dir = join(project, 'typecheck');
    mkdirSync(dir, { recursive: true });
    const typed = [
      ...DOCS.flatMap((doc) => codeBlocks(doc).blocks.filter((block) => block.marker.startsWith('typecheck'))),
      ...TYPED_DOCS.flatMap((doc) => codeBlocks(doc).blocks.filter((block) => block.language === 'ts' && !block.marker.startsWith('skip'))),
    ];
    assert.ok(typed.length >= 15, `${typed.length} blocks`);
    const files = typed.map((block) => {
      const file = `${block.doc.split('/').pop()}-${block.line}.ts`; // README.md-6.ts: the page and the block's line
      // A fragment that calls createIdentityRouter without its import gets it; each block is a module of its own.
      const imports = /createIdentityRouter\(/.test(block.code) && !/import \{[^}]*createIdentityRouter/.test(block.code) ? "import { createIdentityRouter } from 'identity-router';\n" : '';
      writeFileSync(join(dir, file), `${imports}${block.code}export {};\n`);
      return file;
    });
    writeFileSync(join(dir, 'surroundings.d.ts'), SURROUNDINGS);
    writeFileSync(join(dir, 'uninstalled-modules.d.ts'), UNINSTALLED_MODULES);
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022', 'DOM'], types: ['node'], strict: true, noEmit: true, skipLibCheck: true },
        files: ['surroundings.d.ts', 'uninstalled-modules.d.ts', ...files],
      }),
    );
    const tsc = await run(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', dir]).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? String(error) }));
    assert.equal(tsc.stdout.trim(), '', 'tsc finds no error in the guides');
  });

  test("README's opening example serves, and its guarded route asks for a token", async () => {
    const [readme] = blocksOf('README.md', 'file server.js');
    assert.ok(readme, 'README.md has a runnable server.js');
    // Beside the getting-started project, sharing its node_modules one folder up.
    const dir = join(project, 'readme');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'readme', private: true, type: 'module' }));
    writeFileSync(join(dir, 'server.js'), readme.code);
    const port = await freePort();
    const server = await startServer('node server.js', dir, shellEnv({ PORT: String(port), IDENTITY_SECRET: 'docs-test-secret-that-is-at-least-32-characters' }), port);
    servers.push(server);
    const invoices = await fetch(`http://127.0.0.1:${port}/invoices`);
    assert.equal(invoices.status, 401);
    assert.match(invoices.headers.get('www-authenticate') ?? '', /^Bearer/);
    const register = await fetch(`http://127.0.0.1:${port}/identity/auth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'ada@example.com', password: 'correct horse battery staple' }),
    });
    assert.equal(register.status, 202);
    await server.stop();
    assert.match(server.output(), /identity event user\.registered/, 'onEvent logged the registration');
  });
});

// The reference pages a newcomer configures from. What this guards against: an option whose
// documented default is not the one the router applies, a documented option the router refuses
// as unknown, or a mail template a host's own mailer never hears of.
describe('the reference docs match the code', { skip: SKIP }, () => {
  const valid = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 's'.repeat(32), issuer: 'https://id.example.test' };

  /** `a.b.c` set to `value` in a copy of `config`. */
  function withOption(config: Record<string, any>, path: string, value: unknown): Record<string, any> {
    const [head, ...rest] = path.split('.');
    return { ...config, [head!]: rest.length === 0 ? value : withOption(config[head!] ?? {}, rest.join('.'), value) };
  }

  /** configuration.md's option table: each option path with the literal of its documented default (`undefined` for "none"). */
  function documentedOptions(): Array<{ path: string; literal: string | undefined; cell: string }> {
    const text = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8');
    const table = text.slice(text.indexOf('## Everything else'), text.indexOf('### Rate-limit groups'));
    const options: Array<{ path: string; literal: string | undefined; cell: string }> = [];
    for (const row of table.split('\n').filter((line) => line.startsWith('| `'))) {
      const [names = '', defaults = ''] = row.split(' | ').map((cell) => cell.replace(/^\| /, ''));
      const paths = names.replace(/\(.*?\)/g, '').split(' / ').map((name) => name.trim().replace(/`/g, ''));
      const pieces = defaults.split(' / ');
      paths.forEach((name, index) => {
        const path = name.includes('.') || index === 0 ? name : `${paths[0]!.slice(0, paths[0]!.lastIndexOf('.') + 1)}${name}`;
        const cell = (pieces.length === paths.length ? pieces[index] : pieces[0])!.trim();
        options.push({ path, literal: /^`([^`]+)`/.exec(cell)?.[1], cell });
      });
    }
    return options;
  }

  test('configuration.md: every option it lists is one the router takes, with the default it applies', async () => {
    const { resolveConfig, IdentityConfigError } = await import('../../src/config/schema.js');
    const resolved = resolveConfig(valid as never) as unknown as Record<string, any>;
    const options = documentedOptions();
    assert.ok(options.length >= 50, `${options.length} options read from the table`);
    const checked: string[] = [];
    for (const { path, literal, cell } of options) {
      // Known: a value no option takes (a negative fraction) is refused for its type or range, never as an unknown option.
      try {
        resolveConfig(withOption(valid, path, -1.5) as never);
        assert.fail(`${path}: -1.5 was accepted`);
      } catch (error) {
        assert.ok(error instanceof IdentityConfigError, `${path}: ${String(error)}`);
        assert.ok(!error.problems.some((problem) => problem.includes('is not allowed')), `${path} is documented but unknown: ${error.problems.join('; ')}`);
      }
      const actual = path.split('.').reduce<any>((value, key) => value?.[key], resolved);
      if (cell === 'none') {
        assert.equal(actual, undefined, `${path}: documented as none`);
        continue;
      }
      let documented: unknown;
      try {
        documented = literal === undefined ? undefined : new Function(`return (${literal});`)();
      } catch {
        continue; // a default described in words (`issuer`, `appName`, else ...), checked by config.test.ts
      }
      if (documented === undefined) continue;
      assert.deepEqual(actual, documented, `${path}: configuration.md says ${cell}`);
      checked.push(path);
    }
    assert.ok(checked.length >= 40, `${checked.length} defaults compared`);
  });

  test('adapters.md: the mail template table names every template the router sends', () => {
    const source = readFileSync(join(ROOT, 'src/adapters/types.ts'), 'utf8');
    const templates = [...(/export type TemplateName = ([^;]+);/.exec(source)?.[1] ?? '').matchAll(/'([a-z_]+)'/g)].map((match) => match[1]);
    assert.ok(templates.length >= 5, templates.join(', '));
    const adapters = readFileSync(join(ROOT, 'docs/adapters.md'), 'utf8');
    const documented = [...adapters.matchAll(/^\| `([a-z_]+)` \|/gm)].map((match) => match[1]);
    for (const template of templates) assert.ok(documented.includes(template), `docs/adapters.md has no row for the template ${template}`);
  });
});
