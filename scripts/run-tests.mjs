#!/usr/bin/env node
// Runs the test suite twice: once against SQLite, once against PostgreSQL.
//
//   node scripts/run-tests.mjs [--sqlite-only | --pg-only] [test files or globs...]
//
// The PostgreSQL run uses IDENTITY_TEST_PG_URL when set; otherwise it starts a
// throwaway PostgreSQL cluster in a temp dir and removes it afterwards. Likewise Redis
// (for the several-instances tests): IDENTITY_TEST_REDIS_URL, else a throwaway redis-server;
// without one those tests skip, except under CI=true where that is a failure.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const TEST_DIR = 'test';
const TEST_FILE_SUFFIX = '.test.ts';
const PG_DATABASE = 'identity_test';
const PG_SUPERUSER = 'postgres';

const isRoot = process.getuid?.() === 0;
const isCi = process.env.CI === 'true';

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const options = { sqlite: true, pg: true, patterns: [] };
  for (const arg of argv) {
    if (arg === '--sqlite-only') options.pg = false;
    else if (arg === '--pg-only') options.sqlite = false;
    else options.patterns.push(arg);
  }
  if (!options.sqlite && !options.pg) {
    fail('--sqlite-only and --pg-only cannot be combined');
  }
  return options;
}

function testConcurrency() {
  const raw = process.env.IDENTITY_TEST_CONCURRENCY ?? '1';
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) {
    fail(`IDENTITY_TEST_CONCURRENCY must be a positive integer, got "${raw}"`);
  }
  return value;
}

// ---------------------------------------------------------------- test files

function listFilesRecursively(dir) {
  if (!fs.existsSync(dir)) return [];
  const files = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') files.push(...listFilesRecursively(full));
    } else if (entry.isFile()) {
      files.push(full);
    }
  }
  return files;
}

const hasGlobChars = (pattern) => /[*?[]/.test(pattern);

function globToRegExp(pattern) {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i];
    if (char === '*' && pattern[i + 1] === '*') {
      // "**/" matches zero or more directories, a trailing "**" anything.
      if (pattern[i + 2] === '/') {
        source += '(?:.*/)?';
        i += 2;
      } else {
        source += '.*';
        i += 1;
      }
    } else if (char === '*') source += '[^/]*';
    else if (char === '?') source += '[^/]';
    else source += char.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

function expandGlob(pattern) {
  const normalized = path.normalize(pattern).split(path.sep).join('/');
  const segments = normalized.split('/');
  const firstGlobIndex = segments.findIndex(hasGlobChars);
  const baseDir = segments.slice(0, firstGlobIndex).join('/') || '.';
  const matcher = globToRegExp(normalized);
  return listFilesRecursively(baseDir)
    .map((file) => path.normalize(file).split(path.sep).join('/'))
    .filter((file) => matcher.test(file));
}

function resolveTestFiles(patterns) {
  if (patterns.length === 0) {
    return listFilesRecursively(TEST_DIR)
      .filter((file) => file.endsWith(TEST_FILE_SUFFIX))
      .sort();
  }
  const files = new Set();
  for (const pattern of patterns) {
    if (hasGlobChars(pattern)) {
      const matches = expandGlob(pattern);
      if (matches.length === 0) fail(`no test files match "${pattern}"`);
      matches.forEach((file) => files.add(file));
    } else {
      if (!fs.existsSync(pattern)) fail(`test file not found: ${pattern}`);
      files.add(pattern);
    }
  }
  return [...files].sort();
}

// ---------------------------------------------------------------- running tests

let activeTestProcess = null;

function runTestFiles(files, extraEnv) {
  const args = [
    '--import',
    'tsx',
    '--test',
    `--test-concurrency=${testConcurrency()}`,
    ...files,
  ];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      stdio: 'inherit',
      env: { ...process.env, ...extraEnv },
    });
    activeTestProcess = child;
    child.on('error', (error) => {
      console.error(`could not start the test run: ${error.message}`);
      resolve(1);
    });
    child.on('exit', (code, signal) => {
      activeTestProcess = null;
      resolve(code ?? 128 + (os.constants.signals[signal] ?? 0));
    });
  });
}

async function runPhase(name, heading, files, extraEnv) {
  console.log(`\n== ${heading} ==\n`);
  const startedAt = Date.now();
  const exitCode = await runTestFiles(files, extraEnv);
  return { name, exitCode, seconds: (Date.now() - startedAt) / 1000 };
}

// ---------------------------------------------------------------- PostgreSQL cluster

function findPgBinary(name, preferredDir) {
  const searchDirs = [
    ...(preferredDir ? [preferredDir] : []),
    ...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean),
    ...installedPgBinDirs(),
  ];
  for (const dir of searchDirs) {
    const candidate = path.join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return null;
}

function installedPgBinDirs() {
  const root = '/usr/lib/postgresql';
  if (!fs.existsSync(root)) return [];
  return fs
    .readdirSync(root)
    .sort((a, b) => Number(b) - Number(a)) // newest major version first
    .map((version) => path.join(root, version, 'bin'));
}

function isExecutable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function findRunuser() {
  // runuser lives in /usr/sbin, which is often missing from a non-login PATH.
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/sbin', '/sbin'];
  return dirs.map((dir) => path.join(dir, 'runuser')).find(isExecutable) ?? 'runuser';
}

function runCommand(command, args, { asPostgresUser = false, cwd } = {}) {
  // PostgreSQL refuses to run as root, so its server-side tools run as the postgres user.
  const [file, fileArgs] =
    asPostgresUser && isRoot
      ? [findRunuser(), ['-u', PG_SUPERUSER, '--', command, ...args]]
      : [command, args];
  const result = spawnSync(file, fileArgs, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (result.error) throw new Error(`${command}: ${result.error.message}`);
  if (result.status !== 0) {
    const output = `${result.stdout}${result.stderr}`.trim();
    throw new Error(`${path.basename(command)} exited with ${result.status}\n${output}`);
  }
  return result.stdout;
}

function postgresUserIds() {
  const id = (flag) => Number(runCommand('id', [flag, PG_SUPERUSER]).trim());
  return { uid: id('-u'), gid: id('-g') };
}

function findFreePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function pgMajorVersion(pgCtl) {
  const match = /(\d+)(?:\.\d+)?/.exec(runCommand(pgCtl, ['--version']));
  return match ? match[1] : '?';
}

let cluster = null;

async function startThrowawayCluster() {
  const initdb = findPgBinary('initdb');
  const pgCtl = findPgBinary('pg_ctl');
  if (!initdb || !pgCtl) throw new Error('initdb/pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin');
  // The createdb on PATH may be Debian's pg_wrapper; the one next to initdb is the real thing.
  const binDir = path.dirname(fs.realpathSync(initdb));
  const createdb = findPgBinary('createdb', binDir);
  if (!createdb) throw new Error('createdb not found');

  const startedAt = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'identity-pg-'));
  const dataDir = path.join(dir, 'data');
  cluster = { pgCtl, dir, dataDir, running: false };

  if (isRoot) {
    const { uid, gid } = postgresUserIds();
    fs.chownSync(dir, uid, gid);
  }
  // cwd = temp dir: the postgres user may not be allowed into the caller's cwd.
  const asPostgres = { asPostgresUser: true, cwd: dir };
  runCommand(initdb, ['-D', dataDir, '-U', PG_SUPERUSER, '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C'], asPostgres);

  const port = await findFreePort();
  const serverOptions = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=200',
  ].join(' ');
  cluster.running = true; // set before start so a half-started server is still stopped
  try {
    runCommand(pgCtl, ['-D', dataDir, '-l', path.join(dir, 'pg.log'), '-w', '-t', '60', '-o', serverOptions, 'start'], asPostgres);
  } catch (error) {
    error.message += `\n--- pg.log ---\n${readServerLog()}`;
    throw error;
  }
  runCommand(createdb, ['-h', '127.0.0.1', '-p', String(port), '-U', PG_SUPERUSER, PG_DATABASE]);

  return {
    port,
    version: pgMajorVersion(pgCtl),
    url: `postgres://${PG_SUPERUSER}@127.0.0.1:${port}/${PG_DATABASE}`,
    startupSeconds: (Date.now() - startedAt) / 1000,
  };
}

function readServerLog() {
  try {
    return fs.readFileSync(path.join(cluster.dir, 'pg.log'), 'utf8').trim().split('\n').slice(-20).join('\n');
  } catch {
    return '(no server log)';
  }
}

// Synchronous on purpose: it also runs from signal handlers and the exit hook.
function removeThrowawayCluster() {
  if (!cluster) return;
  const { pgCtl, dir, dataDir, running } = cluster;
  cluster = null;
  if (running) {
    try {
      runCommand(pgCtl, ['-D', dataDir, '-m', 'immediate', 'stop'], { asPostgresUser: true, cwd: dir });
    } catch {
      // Already stopped (or never started): nothing left to stop.
    }
  }
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
}

// ---------------------------------------------------------------- Redis

let redis = null;

async function startThrowawayRedis() {
  const server = findPgBinary('redis-server', '/usr/bin');
  if (!server) throw new Error('redis-server not found (install it: apt-get install redis-server)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'identity-redis-'));
  const port = await findFreePort();
  const child = spawn(server, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  redis = { child, dir };
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start within 10 s\n${output}`)), 10_000);
    const poll = setInterval(() => {
      if (/Ready to accept connections/.test(output)) {
        clearInterval(poll);
        clearTimeout(timer);
        resolve();
      }
    }, 50);
    child.on('exit', (code) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`redis-server exited with ${code}\n${output}`));
    });
  });
  return { url: `redis://127.0.0.1:${port}`, port };
}

function removeThrowawayRedis() {
  if (!redis) return;
  const { child, dir } = redis;
  redis = null;
  child.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
}

/** Environment for the PostgreSQL phase: a Redis URL, or the reason the Redis tests skip. */
async function acquireRedisEnv() {
  if (process.env.IDENTITY_TEST_REDIS_URL) return { IDENTITY_TEST_REDIS_URL: process.env.IDENTITY_TEST_REDIS_URL };
  try {
    const started = await startThrowawayRedis();
    console.log(`started throwaway redis-server on port ${started.port}`);
    return { IDENTITY_TEST_REDIS_URL: started.url };
  } catch (error) {
    removeThrowawayRedis();
    if (isCi) throw new Error(`Redis unavailable under CI=true: ${error.message}`);
    const reason = `no redis-server: install it (apt-get install redis-server) or set IDENTITY_TEST_REDIS_URL`;
    console.warn(`\nrun-tests: WARNING: ${reason}; the tests that need Redis skip\n${error.message}`);
    return { IDENTITY_TEST_REDIS_SKIP: reason };
  }
}

function installCleanupHandlers() {
  process.on('exit', removeThrowawayCluster);
  process.on('exit', removeThrowawayRedis);
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
      activeTestProcess?.kill(signal);
      removeThrowawayRedis();
      removeThrowawayCluster();
      process.exit(128 + os.constants.signals[signal]);
    });
  }
}

// ---------------------------------------------------------------- main

function fail(message) {
  console.error(`run-tests: ${message}`);
  process.exit(1);
}

function printSummary(results) {
  const parts = results.map(({ name, exitCode, seconds }) =>
    exitCode === null ? `${name}: skipped` : `${name}: exit ${exitCode} (${seconds.toFixed(1)} s)`,
  );
  console.log(`\n== summary: ${parts.join(', ')} ==`);
}

async function acquirePostgresUrl() {
  if (process.env.IDENTITY_TEST_PG_URL) {
    return { url: process.env.IDENTITY_TEST_PG_URL, description: 'PostgreSQL (IDENTITY_TEST_PG_URL)' };
  }
  const started = await startThrowawayCluster();
  console.log(`\nstarted throwaway PostgreSQL ${started.version} on port ${started.port} in ${started.startupSeconds.toFixed(1)} s`);
  return { url: started.url, description: `PostgreSQL ${started.version} (port ${started.port})` };
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const files = resolveTestFiles(options.patterns);
  if (files.length === 0) fail(`no ${TEST_DIR}/**/*${TEST_FILE_SUFFIX} files found`);
  installCleanupHandlers();

  const results = [];
  if (options.sqlite) {
    results.push(await runPhase('SQLite', 'identity-router tests on SQLite', files, { IDENTITY_TEST_DB: 'sqlite' }));
  }

  if (options.pg) {
    let postgres;
    try {
      postgres = await acquirePostgresUrl();
    } catch (error) {
      removeThrowawayCluster();
      if (isCi || !options.sqlite) {
        console.error(`\nrun-tests: ERROR: PostgreSQL unavailable, cannot run the PostgreSQL tests:\n${error.message}`);
        results.push({ name: 'PostgreSQL', exitCode: 1, seconds: 0 });
        printSummary(results);
        return 1;
      }
      console.warn(
        `\nrun-tests: WARNING: PostgreSQL unavailable: skipping the PostgreSQL run ` +
          `(set IDENTITY_TEST_PG_URL or install PostgreSQL to run it)\n${error.message}`,
      );
      results.push({ name: 'PostgreSQL', exitCode: null, seconds: 0 });
      printSummary(results);
      return results[0].exitCode;
    }
    try {
      const redisEnv = await acquireRedisEnv();
      results.push(
        await runPhase('PostgreSQL', `identity-router tests on ${postgres.description}`, files, {
          IDENTITY_TEST_DB: 'pg',
          IDENTITY_TEST_PG_URL: postgres.url,
          ...redisEnv,
        }),
      );
    } catch (error) {
      console.error(`\nrun-tests: ERROR: ${error.message}`);
      results.push({ name: 'PostgreSQL', exitCode: 1, seconds: 0 });
    } finally {
      removeThrowawayRedis();
      removeThrowawayCluster();
    }
  }

  printSummary(results);
  return results.some(({ exitCode }) => exitCode !== 0) ? 1 : 0;
}

main().then(
  (exitCode) => process.exit(exitCode),
  (error) => {
    console.error(error);
    removeThrowawayRedis();
    removeThrowawayCluster();
    process.exit(1);
  },
);
