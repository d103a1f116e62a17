/**
 * identity-router/client as shipped (docs/client.md): small (< 12 kB minified and gzipped), browser
 * ESM with relative imports only and nothing of the server entry, and typed from the OpenAPI
 * document it was generated from. Its behaviour is tested in Chromium: test/browser/client.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import type { Answer, IdentityClient, RequestBody } from '../../src/client/index.js';

const SKIP = process.env.IDENTITY_TEST_DB === 'pg' ? 'the client does not depend on the database: it runs in the SQLite phase only' : false;
const LIMIT_BYTES = 12 * 1024;
const CLIENT_DIR = 'src/client';

describe('identity-router/client as shipped', { skip: SKIP }, () => {
  test('the client is under 12 kB minified and gzipped', async () => {
    const built = await build({ entryPoints: [join(CLIENT_DIR, 'index.ts')], bundle: true, minify: true, format: 'esm', platform: 'browser', target: 'es2020', write: false });
    const code = built.outputFiles[0]!.contents;
    const gzipped = gzipSync(code, { level: 9 }).length;
    console.log(`identity-router/client: ${code.length} bytes minified, ${gzipped} bytes minified and gzipped (limit ${LIMIT_BYTES})`);
    assert.ok(gzipped < LIMIT_BYTES, `${gzipped} bytes gzipped`);
  });

  test('its sources import only each other: no bare specifier, no Node built-in, nothing of the server', () => {
    for (const file of readdirSync(CLIENT_DIR).filter((name) => name.endsWith('.ts'))) {
      const source = readFileSync(join(CLIENT_DIR, file), 'utf8');
      for (const [, specifier] of source.matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)) {
        assert.match(specifier!, /^\.\/[\w.-]+\.js$/, `${file} imports ${specifier}`);
      }
    }
  });

  test('src/client/openapi.d.ts is what openapi-typescript generates from docs/openapi.yaml today', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'client-types-'));
    try {
      const out = join(dir, 'openapi.d.ts');
      await promisify(execFile)(process.execPath, ['node_modules/openapi-typescript/bin/cli.js', 'docs/openapi.yaml', '-o', out]);
      assert.equal(readFileSync(join(CLIENT_DIR, 'openapi.d.ts'), 'utf8'), readFileSync(out, 'utf8'), 'run `npm run generate:client-types` and commit the result');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("docs/client.md's TypeScript compiles against the client's types", async () => {
    // What this guards against: a guide that calls a member the client does not have, or with the wrong shape.
    const blocks = [...readFileSync('docs/client.md', 'utf8').matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((match) => match[1]!);
    // The one block that mixes server and browser code (the cookie route beside the client) is left out.
    const browserBlocks = blocks.filter((block) => !block.includes('refreshTokenCookie('));
    assert.ok(browserBlocks.length >= 8, `${browserBlocks.length} blocks`);
    const dir = mkdtempSync(join(tmpdir(), 'client-docs-'));
    try {
      // The names the snippets leave to the page around them.
      const page = `declare function showAccount(session: Session): void;
declare function showError(message: string): void;
declare function promptForCode(factor: unknown): Promise<string>;
declare function promptForCode(factor: unknown, message: string | undefined): Promise<string | null>;
declare function render(value: unknown): void;
declare function askForSecondFactor(gate: MfaGate): void;
declare const router: { navigate(path: string): void };
declare const email: string;
declare const code: string;
`;
      const files = browserBlocks.map((block, index) => {
        const file = join(dir, `block-${index + 1}.ts`);
        const imports = block.includes('import ')
          ? "import type { IdentityClient, MfaGate, Session } from 'identity-router/client';\n"
          : "import { createIdentityClient, IdentityClientError, type IdentityClient, type MfaGate, type Session } from 'identity-router/client';\n";
        const client = /const identity\b/.test(block) ? '' : 'declare const identity: IdentityClient;\n';
        const unused = block.includes('import ') ? '' : 'void IdentityClientError;\nvoid createIdentityClient;\n';
        writeFileSync(file, `${block.includes('import ') ? '' : imports}${block.includes('import ') ? block.replace(/^(import .*\n)/, `$1${imports}`) : block}\n${page}${client}${unused}export {};\n`);
        return file;
      });
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', lib: ['ES2022', 'DOM', 'DOM.Iterable'], strict: true, noUncheckedIndexedAccess: true, noEmit: true, skipLibCheck: true,
            paths: { 'identity-router/client': [resolve(CLIENT_DIR, 'index.ts')] },
          },
          files,
        }),
      );
      const tsc = await promisify(execFile)(process.execPath, ['node_modules/typescript/bin/tsc', '-p', join(dir, 'tsconfig.json')]).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? String(error) }));
      assert.equal(tsc.stdout.trim(), '', 'tsc finds no error in the docs');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('request and answer types come from the document (checked by tsc)', () => {
    // These lines are the test: tsc --noEmit rejects the file when a type stops matching the document.
    const factors: Answer<'/auth/mfa/factors', 'GET'> = { factors: [{ id: 'f', type: 'totp', default: true, confirmed: true }] };
    const roles: RequestBody<'/orgs/org_1/members/usr_1/roles', 'PATCH'> = { role_slugs: ['admin'] };
    // @ts-expect-error the member route (one segment shorter) takes a status, not role_slugs
    const status: RequestBody<'/orgs/org_1/members/usr_1', 'PATCH'> = { role_slugs: ['admin'] };
    // @ts-expect-error register needs a password
    const missing: RequestBody<'/auth/register', 'POST'> = { email: 'a@example.com' };
    type Login = Parameters<IdentityClient['login']>[0];
    const login: Login = { email: 'a@example.com', password: 'x' };
    assert.ok(factors && login && missing && roles && status);
  });
});
