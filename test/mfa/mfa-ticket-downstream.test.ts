/*
 * Issue 9, attack 7: the MFA ticket passed as an access token downstream. A resource
 * server that follows docs/getting-started.md (RS256 from the JWKS, iss, aud) accepted a
 * ticket obtained with the password alone: MFA bypassed for every service behind the host.
 * Here two real verifiers, express-jwt + jwks-rsa and jose, are pointed at the router's
 * JWKS: both accept an access token and both refuse the ticket.
 *   node scripts/run-tests.mjs test/mfa/mfa-ticket-downstream.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { expressjwt } from 'express-jwt';
import jwksRsa from 'jwks-rsa';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { decodeJwtHeader, Harness } from '../helpers/harness.js';
import { loginForTicket, signUpWithTotp } from '../helpers/mfa.js';
import { listening } from '../helpers/host-app.js';

const ISSUER = 'https://id.example.test';
const AUDIENCE = 'https://api.example.test';

let h: Harness;
let resourceServer: { url: string; close: () => Promise<void> };

before(async () => {
  h = await Harness.start({ config: { audience: AUDIENCE } });
  const jwksUri = `${h.baseUrl}/auth/.well-known/jwks.json`;
  const app = express();
  // Exactly what docs/getting-started.md showed a resource server: RS256, the JWKS, iss and aud.
  app.get(
    '/api/data',
    expressjwt({
      secret: jwksRsa.expressJwtSecret({ jwksUri, cache: false }) as never,
      algorithms: ['RS256'],
      issuer: ISSUER,
      audience: AUDIENCE,
      // The test clock is in 2030; the verifier must judge expiry by it, not by the wall clock.
      clockTimestamp: Math.floor(h.clock.now() / 1000),
    } as never),
    (_req, res) => {
      res.json({ ok: true });
    },
  );
  app.use((error: Error & { status?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(error.status ?? 401).json({ error: error.name });
  });
  const { base, close } = await listening(app);
  resourceServer = { url: base, close };
});
after(async () => {
  await resourceServer.close();
  await h.close();
});

describe('the MFA ticket never passes as an access token downstream', () => {
  test('express-jwt + jwks-rsa accepts the access token and refuses the ticket', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const withAccess = await fetch(`${resourceServer.url}/api/data`, { headers: { authorization: `Bearer ${user.accessToken}` } });
    assert.equal(withAccess.status, 200, 'the verifier works: an access token passes');
    const withTicket = await fetch(`${resourceServer.url}/api/data`, { headers: { authorization: `Bearer ${ticket}` } });
    assert.equal(withTicket.status, 401, 'a ticket obtained with the password alone is refused');
  });

  test('jose with the remote JWKS accepts the access token and refuses the ticket', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const jwks = createRemoteJWKSet(new URL(`${h.baseUrl}/auth/.well-known/jwks.json`));
    const options = { issuer: ISSUER, audience: AUDIENCE, currentDate: new Date(h.clock.now()) };
    await jwtVerify(user.accessToken, jwks, options);
    await assert.rejects(jwtVerify(ticket, jwks, options));
    // Even a verifier that forgets to pin the algorithm finds no key for it.
    await assert.rejects(jwtVerify(ticket, jwks, { ...options, algorithms: ['RS256', 'HS256'] }));
  });

  test('the ticket is HS256 with typ mfa+jwt and no kid from the JWKS', async () => {
    const user = await signUpWithTotp(h);
    const { ticket } = await loginForTicket(h, user);
    const header = decodeJwtHeader(ticket);
    assert.equal(header.alg, 'HS256');
    assert.equal(header.typ, 'mfa+jwt');
    const jwks = (await (await fetch(`${h.baseUrl}/auth/.well-known/jwks.json`)).json()) as { keys: Array<{ kty: string }> };
    for (const key of jwks.keys) assert.notEqual(key.kty, 'oct', 'no symmetric key is ever published');
    // And the router itself still refuses a ticket as a bearer token.
    assert.equal((await h.get('/auth/me', { token: ticket })).status, 401);
  });
});
