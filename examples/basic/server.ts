/**
 * A host app: the identity router mounted at /identity on a SQLite file in the working
 * directory, with the development mailer and SMS sender (codes and links appear in this
 * console). Run it with `npm run example`.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import express from 'express';
import { createIdentityRouter } from '../../src/index.js';

const port = Number(process.env.PORT ?? 3000);
const databaseFile = resolve(process.env.IDENTITY_DB_FILE ?? 'identity-example.sqlite');

/** A development secret kept next to the database so tokens survive restarts. Production hosts pass their own. */
function developmentSecret(): string {
  if (process.env.IDENTITY_SECRET) return process.env.IDENTITY_SECRET;
  const secretFile = `${databaseFile}.secret`;
  if (!existsSync(secretFile)) writeFileSync(secretFile, randomBytes(32).toString('base64url'), { mode: 0o600 });
  return readFileSync(secretFile, 'utf8').trim();
}

const identity = createIdentityRouter(
  {
    database: { client: 'better-sqlite3', connection: { filename: databaseFile }, useNullAsDefault: true },
    secret: developmentSecret(),
    issuer: `http://localhost:${port}/identity`,
    appName: 'Identity Router Example',
    permissions: [{ key: 'invoices.read', description: 'Read invoices' }],
    links: {
      verifyEmail: `http://localhost:${port}/verify-email?token={token}`,
      resetPassword: `http://localhost:${port}/reset-password?token={token}`,
      acceptInvite: `http://localhost:${port}/accept-invite?token={token}`,
    },
  },
  {
    onEvent: (event) => console.log(`[event] ${event.type}`, JSON.stringify(event.data)),
  },
);

const app = express();
app.use('/identity', identity);

// A host route guarded by a permission from the catalog, resolved from the database.
app.get('/invoices', identity.requirePermission('invoices.read'), (_req, res) => {
  res.json({ data: [{ id: 'inv_1', total: 4200 }] });
});

app.get('/', (_req, res) => {
  res.type('text/plain').send(
    [
      'identity-router example',
      '',
      `POST /identity/auth/register        {"email": "...", "password": "..."}`,
      `POST /identity/auth/email/verify    {"token": "<from the console>"}`,
      `POST /identity/auth/login           {"email": "...", "password": "..."}`,
      `GET  /identity/auth/me              Authorization: Bearer <access_token>`,
      `POST /identity/auth/mfa/totp/enroll Authorization: Bearer <access_token>  (scan qr_svg, then /auth/mfa/totp/confirm)`,
      `GET  /identity/auth/.well-known/jwks.json`,
      '',
      'See docs/getting-started.md for a full walk-through.',
    ].join('\n'),
  );
});

identity.ready
  .then(() => {
    const server = app.listen(port, () => {
      console.log(`identity-router example listening on http://localhost:${port} (database ${databaseFile})`);
      console.log(`JWKS: http://localhost:${port}/identity/auth/.well-known/jwks.json`);
    });
    const shutdown = () => {
      server.close(() => void identity.close().then(() => process.exit(0)));
    };
    process.on('SIGINT', shutdown);
    process.on('SIGTERM', shutdown);
  })
  .catch((error: unknown) => {
    console.error('identity-router failed to start:', error);
    process.exit(1);
  });
