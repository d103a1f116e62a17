#!/usr/bin/env node
// Lints the published shape of the package: publint (package.json fields, exports map,
// files that would be missing from the tarball) and Are The Types Wrong (the ESM and CJS
// entry points resolve, and their types match the module format, under node10, node16/nodenext
// and bundler resolution).
//
//   node scripts/check-package.mjs [path/to/identity-router-x.y.z.tgz]
//
// Without a tarball it packs the current build (dist/ must exist: `npm run build`) into a
// temp dir, skipping the prepack build. Exits non-zero when either tool reports an error.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BIN = path.join(ROOT, 'node_modules', '.bin');

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { cwd: ROOT, encoding: 'utf8', ...options });
  if (result.error) throw result.error;
  return result;
}

function packCurrentBuild() {
  for (const file of ['dist/index.js', 'dist/index.cjs', 'dist/index.d.ts', 'dist/index.d.cts']) {
    if (!fs.existsSync(path.join(ROOT, file))) {
      console.error(`check-package: ${file} is missing; run \`npm run build\` first (or pass a tarball).`);
      process.exit(1);
    }
  }
  const destination = fs.mkdtempSync(path.join(os.tmpdir(), 'identity-pack-'));
  const packed = run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', destination]);
  if (packed.status !== 0) {
    console.error(packed.stdout, packed.stderr);
    process.exit(1);
  }
  const [{ filename }] = JSON.parse(packed.stdout);
  return { tarball: path.join(destination, path.basename(filename)), cleanup: () => fs.rmSync(destination, { recursive: true, force: true }) };
}

async function runPublint(tarball) {
  const { publint } = await import('publint');
  const { formatMessage } = await import('publint/utils');
  const bytes = fs.readFileSync(tarball);
  const { messages, pkg } = await publint({
    // Inside an npm tarball the package lives under package/.
    pkgDir: 'package',
    // Warnings count: a published package should have none.
    strict: true,
    level: 'warning',
    pack: { tarball: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) },
  });
  for (const message of messages) console.log(`publint ${message.type}: ${formatMessage(message, pkg) ?? message.code}`);
  const failures = messages.filter((message) => message.type === 'error');
  console.log(failures.length === 0 ? 'publint: ok' : `publint: ${failures.length} error(s)`);
  return failures.length === 0;
}

function runAttw(tarball, label, args) {
  const result = run(path.join(BIN, 'attw'), [tarball, '--no-color', '--format', 'table-flipped', ...args], {
    env: { ...process.env, NO_COLOR: '1' },
  });
  process.stdout.write(result.stdout);
  process.stderr.write(result.stderr);
  console.log(result.status === 0 ? `attw ${label}: ok` : `attw ${label}: problems found (exit ${result.status})`);
  return result.status === 0;
}

/**
 * The server entry under the strict profile: node10 ("moduleResolution": "node", which ignores
 * "exports"), node16/nodenext from CJS and from ESM, and bundler resolution must all find the
 * right types. The browser client (`./client`) is ESM only by design (CONTRACT 14): the esm-only
 * profile, which leaves out node10 and require().
 */
function runAttwProfiles(tarball) {
  const server = runAttw(tarball, 'server entry', ['--exclude-entrypoints', './client']);
  const client = runAttw(tarball, 'client entry', ['--entrypoints', './client', '--profile', 'esm-only']);
  return server && client;
}

async function main() {
  const given = process.argv[2];
  const { tarball, cleanup } = given ? { tarball: path.resolve(given), cleanup: () => undefined } : packCurrentBuild();
  try {
    const publintOk = await runPublint(tarball);
    const attwOk = runAttwProfiles(tarball);
    return publintOk && attwOk ? 0 : 1;
  } finally {
    cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
