/**
 * A throwaway PostgreSQL 15 cluster for `npm run bench -- --database pg`, started the way
 * scripts/run-tests.mjs starts the tests' (initdb and pg_ctl as the postgres user through
 * runuser, a free port, a temporary directory removed afterwards), with one difference: the
 * tests run with `fsync=off` and `synchronous_commit=off` for speed, and a benchmark keeps
 * PostgreSQL's durable defaults, which is what the router runs on (it sets neither).
 */
import { spawnSync } from 'node:child_process';
import { accessSync, chownSync, constants, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

const SUPERUSER = 'postgres';
const isRoot = process.getuid?.() === 0;

export interface ThrowawayPostgres {
  version: string;
  /** A connection URL per database asked for, in order. */
  urls: string[];
  /** The cluster's data directory (its postmaster.pid names the server's process). */
  dataDirectory: string;
  stop(): void;
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

function findBinary(name: string, preferredDir?: string): string | undefined {
  const root = '/usr/lib/postgresql';
  const installed = existsSync(root)
    ? readdirSync(root)
        .sort((a, b) => Number(b) - Number(a))
        .map((version) => join(root, version, 'bin'))
    : [];
  const dirs = [...(preferredDir ? [preferredDir] : []), ...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...installed];
  return dirs.map((dir) => join(dir, name)).find(isExecutable);
}

function run(command: string, args: string[], options: { asPostgres?: boolean; cwd?: string } = {}): string {
  // PostgreSQL refuses to run as root: its server-side tools run as the postgres user.
  const runuser = ['/usr/sbin', '/sbin', ...(process.env.PATH ?? '').split(delimiter)].map((dir) => join(dir, 'runuser')).find(isExecutable) ?? 'runuser';
  const [file, fileArgs] = options.asPostgres && isRoot ? [runuser, ['-u', SUPERUSER, '--', command, ...args]] : [command, args];
  const result = spawnSync(file, fileArgs, { cwd: options.cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (result.error) throw new Error(`${command}: ${result.error.message}`);
  if (result.status !== 0) throw new Error(`${command} exited with ${result.status}\n${result.stdout}${result.stderr}`);
  return result.stdout;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export async function startThrowawayPostgres(databases: string[]): Promise<ThrowawayPostgres> {
  const initdb = findBinary('initdb');
  const pgCtl = findBinary('pg_ctl');
  if (!initdb || !pgCtl) throw new Error('initdb/pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin');
  const createdb = findBinary('createdb', dirname(realpathSync(initdb)));
  if (!createdb) throw new Error('createdb not found');
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-pg-'));
  const dataDir = join(dir, 'data');
  if (isRoot) {
    const id = (flag: string) => Number(run('id', [flag, SUPERUSER]).trim());
    chownSync(dir, id('-u'), id('-g'));
  }
  const asPostgres = { asPostgres: true, cwd: dir };
  let running = false;
  let removed = false;
  const stop = () => {
    if (removed) return;
    removed = true;
    if (running) {
      running = false;
      try {
        run(pgCtl, ['-D', dataDir, '-m', 'fast', 'stop'], asPostgres);
      } catch {
        // Already stopped.
      }
    }
    rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
  };
  try {
    run(initdb, ['-D', dataDir, '-U', SUPERUSER, '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C'], asPostgres);
    const port = await freePort();
    const options = [`-p ${port}`, `-k ${dir}`, '-c listen_addresses=127.0.0.1', '-c max_connections=200', '-c shared_buffers=256MB'].join(' ');
    running = true;
    run(pgCtl, ['-D', dataDir, '-l', join(dir, 'pg.log'), '-w', '-t', '60', '-o', options, 'start'], asPostgres);
    for (const database of databases) run(createdb, ['-h', '127.0.0.1', '-p', String(port), '-U', SUPERUSER, database]);
    const version = /(\d+)/.exec(run(pgCtl, ['--version']))?.[1] ?? '?';
    return { version, urls: databases.map((database) => `postgres://${SUPERUSER}@127.0.0.1:${port}/${database}`), dataDirectory: dataDir, stop };
  } catch (error) {
    stop();
    throw error;
  }
}
