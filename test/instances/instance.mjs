// One instance of the BUILT package (dist/), as a host would run it: the several-instances
// test starts three of these on one PostgreSQL (and one Redis) and spreads requests over them.
// Prints "LISTENING <port>" once `identity.ready` has resolved.
//
// Environment: IDENTITY_DATABASE_URL, IDENTITY_TABLE_PREFIX, IDENTITY_MAIL_FILE (mail and SMS
// are appended to it as JSON lines), IDENTITY_RATE_STORE (memory | database | redis),
// IDENTITY_REDIS_URL, IDENTITY_LOGIN_LIMIT.
import { appendFileSync } from 'node:fs';
import express from 'express';
import { createIdentityRouter } from '../../dist/index.js';

const env = process.env;
const mailFile = env.IDENTITY_MAIL_FILE;
const record = (kind, message) => {
  if (mailFile) appendFileSync(mailFile, `${JSON.stringify({ kind, ...message })}\n`);
};

let redis;
let rateLimitStore = env.IDENTITY_RATE_STORE === 'database' ? 'database' : 'memory';
if (env.IDENTITY_RATE_STORE === 'redis') {
  const { createClient } = await import('redis');
  const { RedisStore } = await import('rate-limit-redis');
  redis = createClient({ url: env.IDENTITY_REDIS_URL });
  redis.on('error', () => undefined);
  await redis.connect();
  rateLimitStore = (group) => new RedisStore({ prefix: `rl:${env.IDENTITY_TABLE_PREFIX}${group}:`, sendCommand: (...args) => redis.sendCommand(args) });
}

const generous = { limit: 100_000, windowSec: 60 };
const identity = createIdentityRouter(
  {
    database: { client: 'pg', connection: env.IDENTITY_DATABASE_URL, pool: { min: 0, max: 10 } },
    tablePrefix: env.IDENTITY_TABLE_PREFIX,
    secret: 'several-instances-secret-at-least-32-characters',
    issuer: 'https://id.cluster.test',
    password: { bcryptCost: 4 },
    auth: {
      rateLimitStore,
      rateLimits: {
        login: { limit: Number(env.IDENTITY_LOGIN_LIMIT ?? 100_000), windowSec: 60 },
        register: generous, password_forgot: generous, token_refresh: generous, token_consume: generous,
        mfa_send: generous, mfa_confirm: generous, mfa_enroll: generous, authenticated: generous,
      },
    },
    // A short cooldown and a small budget, so the test can cross both within seconds.
    otp: { resendCooldown: 1, sendBudget: { perDestination: { limit: 3, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } },
  },
  {
    mailer: { send: async (message) => record('mail', message) },
    sms: { send: async (message) => record('sms', message) },
    logger: { debug() {}, info() {}, warn: (msg) => console.error(`warn: ${msg}`), error: (msg, meta) => console.error(`error: ${msg} ${JSON.stringify(meta ?? {})}`) },
  },
);

const app = express();
// The test sets X-Forwarded-For to give each scenario its own per-IP budget.
app.set('trust proxy', 'loopback');
app.use('/identity', identity);
// Host routes of this test app: what an operator would run from a console.
app.post('/test/rotate', async (_req, res) => res.json(await identity.service.rotateSigningKey()));
app.post('/test/superadmin/:userId', async (req, res) => {
  await identity.service.grantSuperadmin(req.params.userId);
  res.json({ ok: true });
});

await identity.ready;
const server = app.listen(Number(env.PORT ?? 0), '127.0.0.1', () => console.log(`LISTENING ${server.address().port}`));

process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections?.();
  Promise.all([identity.close(), redis?.quit()]).finally(() => process.exit(0));
});
