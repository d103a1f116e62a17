/**
 * `npm run example`: the example web app and the identity router on a SQLite file in the
 * working directory. Open http://localhost:3000 (PORT to change it). In development (any
 * NODE_ENV but `production`) mail and SMS go to the inbox at /dev/inbox and to this console.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { DEVELOPMENT_LIMITS, startExampleServer } from './app.js';

const port = Number(process.env.PORT ?? 3000);
const databaseFile = resolve(process.env.IDENTITY_DB_FILE ?? 'identity-example.sqlite');
const development = process.env.NODE_ENV !== 'production';

/** A development secret kept next to the database so tokens survive restarts. Production hosts pass their own. */
function developmentSecret(): string {
  if (process.env.IDENTITY_SECRET) return process.env.IDENTITY_SECRET;
  const secretFile = `${databaseFile}.secret`;
  if (!existsSync(secretFile)) writeFileSync(secretFile, randomBytes(32).toString('base64url'), { mode: 0o600 });
  return readFileSync(secretFile, 'utf8').trim();
}

startExampleServer({
  port,
  host: process.env.HOST ?? 'localhost',
  databaseFile,
  secret: developmentSecret(),
  development,
  onEvent: (event) => console.log(`[event] ${event.type}`, JSON.stringify(event.data)),
})
  .then((example) => {
    console.log(`identity-router example: open ${example.url} (database ${databaseFile})`);
    if (development) {
      console.log(`development inbox: ${example.url}/dev/inbox`);
      const limits = Object.entries(DEVELOPMENT_LIMITS.rateLimits).map(([group, rule]) => `${group} ${rule.limit}/${rule.windowSec}s`).join(', ');
      console.log(`development limits (NODE_ENV=production uses the library's defaults, docs/configuration.md): ${limits}`);
    }
    if (example.demoIssuer) console.log(`demo OpenID provider ("Sign in with Demo", a stand-in for Google): ${example.demoIssuer}`);
    console.log(`API docs: ${example.url}/api-docs · JWKS: ${example.url}/identity/auth/.well-known/jwks.json`);
    const shutdown = () => void example.close().then(() => process.exit(0));
    process.on('SIGINT', shutdown);
    process.on('SIGTERM', shutdown);
  })
  .catch((error: unknown) => {
    console.error('identity-router example failed to start:', error);
    process.exit(1);
  });
