/**
 * Three identity-router instances on one PostgreSQL (and Redis when REDIS_URL is set) behind a
 * tiny round-robin proxy, as docs/multiple-instances.md describes:
 *
 *   DATABASE_URL=postgres://localhost/identity npm run example:cluster
 *
 * The proxy listens on PORT (default 4000); the instances on the three ports after it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';

if (!process.env.DATABASE_URL) {
  console.error('Set DATABASE_URL to a PostgreSQL database, e.g. DATABASE_URL=postgres://localhost/identity');
  process.exit(1);
}

const proxyPort = Number(process.env.PORT ?? 4000);
const secretFile = '.identity-cluster.secret';
/** One development secret for all three, kept so tokens and keys survive restarts. Production passes its own. */
const secret = process.env.IDENTITY_SECRET ?? (existsSync(secretFile) ? readFileSync(secretFile, 'utf8').trim() : (() => {
  const fresh = randomBytes(32).toString('base64url');
  writeFileSync(secretFile, fresh, { mode: 0o600 });
  return fresh;
})());

const instanceScript = fileURLToPath(new URL('./instance.ts', import.meta.url));
const targets = [1, 2, 3].map((offset) => ({ name: `instance-${offset}`, port: proxyPort + offset }));
const children: ChildProcess[] = targets.map(({ name, port }) =>
  // tsx resolved from this file, so the command works from any working directory.
  spawn(process.execPath, ['--import', import.meta.resolve('tsx'), instanceScript], {
    stdio: 'inherit',
    env: { ...process.env, INSTANCE_NAME: name, PORT: String(port), IDENTITY_SECRET: secret, PUBLIC_URL: `http://localhost:${proxyPort}` },
  }),
);

// Round robin: each request goes to the next instance; one that does not answer is skipped.
let next = 0;
const proxy = http.createServer((req, res) => {
  const forward = (attempt: number): void => {
    const target = targets[next++ % targets.length]!;
    const upstream = http.request(
      {
        host: '127.0.0.1',
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, 'x-forwarded-for': req.socket.remoteAddress ?? '' },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => {
      if (attempt < targets.length && !res.headersSent) forward(attempt + 1);
      else if (!res.headersSent) res.writeHead(502).end();
    });
    upstream.end(body);
  };
  const chunks: Buffer[] = [];
  let body = Buffer.alloc(0);
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    body = Buffer.concat(chunks);
    forward(1);
  });
});
proxy.listen(proxyPort, () => console.log(`round-robin proxy on http://localhost:${proxyPort} -> ${targets.map((target) => target.port).join(', ')} (rate limits in ${process.env.REDIS_URL ? 'Redis' : 'the database'})`));

const stop = () => {
  proxy.close();
  for (const child of children) child.kill('SIGTERM');
  setTimeout(() => process.exit(0), 2000).unref();
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
