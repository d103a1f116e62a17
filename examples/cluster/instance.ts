/**
 * One instance of the cluster example: the identity router on PostgreSQL, with its rate-limit
 * counters in Redis when REDIS_URL is set and in the database otherwise. cluster.ts starts
 * three of these behind a round-robin proxy.
 */
import express from 'express';
import { createIdentityRouter, type IdentityConfig } from '../../src/index.js';

const name = process.env.INSTANCE_NAME ?? 'instance';
const port = Number(process.env.PORT ?? 4001);
const publicUrl = process.env.PUBLIC_URL ?? 'http://localhost:4000';

async function rateLimitStore(): Promise<NonNullable<IdentityConfig['auth']>['rateLimitStore']> {
  if (!process.env.REDIS_URL) return 'database';
  // redis and rate-limit-redis are the host's dependencies, not the router's.
  const { createClient } = await import('redis');
  const { RedisStore } = await import('rate-limit-redis');
  const redis = createClient({ url: process.env.REDIS_URL });
  redis.on('error', (error: Error) => console.error(`[${name}] redis: ${error.message}`));
  await redis.connect();
  return (group) => new RedisStore({ prefix: `rl:identity:${group}:`, sendCommand: (...args: string[]) => redis.sendCommand(args) });
}

const log = (level: string) => (msg: string, meta?: object) => console.log(`[${name}] ${level}: ${msg}${meta ? ` ${JSON.stringify(meta)}` : ''}`);

const identity = createIdentityRouter(
  {
    database: { client: 'pg', connection: process.env.DATABASE_URL },
    // Every instance must share the secret: cluster.ts passes the same one to all three.
    secret: process.env.IDENTITY_SECRET!,
    issuer: `${publicUrl}/identity`,
    appName: 'Identity Router Cluster Example',
    auth: { rateLimitStore: await rateLimitStore() },
  },
  // The development mailer and SMS sender write codes and links to this console.
  { logger: { info: log('info'), warn: log('warn'), error: log('error') } },
);

const app = express();
// The proxy in front sets X-Forwarded-For; trust it only from this machine.
app.set('trust proxy', 'loopback');
app.use((_req, res, next) => {
  res.setHeader('X-Instance', name);
  next();
});
app.use('/identity', identity);
// A host route, to see which instance answered: curl localhost:4000/whoami
app.get('/whoami', (_req, res) => void res.json({ instance: name }));

await identity.ready;
const server = app.listen(port, '127.0.0.1', () => console.log(`[${name}] listening on http://127.0.0.1:${port}`));

process.on('SIGTERM', () => {
  server.close();
  void identity.close().finally(() => process.exit(0));
});
