import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import jwt from 'jsonwebtoken';
import { createIdentityRouter, IdentityConfigError, type IdentityConfig } from '../../src/index.js';
import { deriveKeys } from '../../src/crypto/derived-keys.js';
import { Harness, TEST_DB } from '../helpers/harness.js';
import { enrollTotp, loginForTicket, nextTotpCode, totpCodeAt } from '../helpers/mfa.js';

// docs/security.md "The secret", "Access tokens and signing keys", "What is hashed, what is
// encrypted": keys derived from `config.secret`, one per purpose; the signing keys sealed under
// one of them; what a process with another secret can and cannot do to the shared key table.

const HARNESS_SECRET = 'test-secret-that-is-at-least-32-characters-long';
const OTHER_SECRET = 'another-secret-that-is-at-least-32-characters-long';

interface LogLine {
  level: string;
  msg: string;
  meta?: unknown;
}

/** A router on the harness's database with another `config.secret`, its log kept. */
function routerWithOtherSecret(h: Harness, secret = OTHER_SECRET) {
  const logs: LogLine[] = [];
  const push = (level: string) => (msg: string, meta?: unknown) => void logs.push({ level, msg, ...(meta ? { meta } : {}) });
  const identity = createIdentityRouter(
    { database: h.knex, tablePrefix: h.tablePrefix, secret, issuer: 'https://id.example.test', password: { bcryptCost: 4 }, auth: { rateLimits: false } } as IdentityConfig,
    { clock: h.clock, logger: { debug: push('debug'), info: push('info'), warn: push('warn'), error: push('error') }, mailer: { send: async () => undefined }, sms: { send: async () => undefined } },
  );
  return { identity, logs };
}

async function keyTable(h: Harness): Promise<Array<{ kid: string; sealed: string; active: unknown; next: unknown }>> {
  const rows = await h.knex(`${h.tablePrefix}signing_keys`).select('kid', 'private_key_sealed', 'active_slot', 'next_slot').orderBy('kid');
  return rows.map((row: Record<string, unknown>) => ({ kid: String(row.kid), sealed: String(row.private_key_sealed), active: row.active_slot ?? null, next: row.next_slot ?? null }));
}

describe(`config.secret and the keys derived from it (${TEST_DB})`, () => {
  let h: Harness;
  before(async () => {
    h = await Harness.start();
  });
  after(async () => {
    await h.close();
  });

  test('a secret of lone surrogates is refused: it has 32 characters but every one is the same replacement byte sequence to HKDF', () => {
    const loneHigh = '\uD800'.repeat(32);
    const loneLow = '\uDFFF'.repeat(32);
    // Why: two different configured secrets derive the very same keys.
    assert.deepEqual(deriveKeys(loneHigh).mfaTicketSigning, deriveKeys(loneLow).mfaTicketSigning);
    for (const secret of [loneHigh, `${'k'.repeat(31)}\uD800`, `\uDC00${'k'.repeat(40)}`]) {
      assert.throws(
        () => createIdentityRouter({ database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret, issuer: 'https://id.example.test' } as IdentityConfig, { logger: { info() {}, warn() {}, error() {} } }),
        (error: unknown) => error instanceof IdentityConfigError && error.problems.some((problem) => /"secret"/.test(problem)) && !error.message.includes(secret),
        `${JSON.stringify(secret)} accepted as a secret`,
      );
    }
  });

  test('every purpose has its own key: the sixteen derived keys are distinct, and none is the secret', () => {
    const keys = Object.entries(deriveKeys(HARNESS_SECRET));
    assert.equal(new Set(keys.map(([, key]) => key.toString('hex'))).size, keys.length);
    for (const [name, key] of keys) assert.ok(!key.equals(Buffer.from(HARNESS_SECRET).subarray(0, 32)), `${name} is the secret`);
  });

  test('an MFA ticket opens only under its own key: the same claims signed with any other derived key, or with the secret, are refused', async () => {
    const user = await h.signUp();
    const totp = await enrollTotp(h, user.accessToken);
    const { ticket } = await loginForTicket(h, user);
    const { header, payload } = jwt.decode(ticket, { complete: true }) as { header: jwt.JwtHeader; payload: jwt.JwtPayload };
    const keys = deriveKeys(HARNESS_SECRET);
    const forge = (key: Buffer | string) => jwt.sign(payload, key, { algorithm: 'HS256', header: { ...header, alg: 'HS256' } });
    // The forger is right: with the ticket key the same claims make a ticket that works.
    assert.equal(forge(keys.mfaTicketSigning), ticket);
    const others: Array<[string, Buffer | string]> = [
      ...Object.entries(keys).filter(([name]) => name !== 'mfaTicketSigning'),
      ['the secret itself', HARNESS_SECRET],
      ['the secret as bytes', Buffer.from(HARNESS_SECRET)],
    ];
    for (const [name, key] of others) {
      const answer = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: totpCodeAt(h, totp.secret) }, { token: forge(key) });
      assert.equal(answer.status, 401, `a ticket signed with ${name}: ${answer.text}`);
    }
    const real = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
    assert.equal(real.status, 200, real.text);
  });

  test("a TOTP secret's sealed copy on another account's factor does not open there: the first account's codes never pass the second's gate", async () => {
    const alice = await h.signUp();
    const aliceTotp = await enrollTotp(h, alice.accessToken);
    const bob = await h.signUp();
    const bobTotp = await enrollTotp(h, bob.accessToken);
    const factors = `${h.tablePrefix}mfa_factors`;
    const aliceSealed = (await h.knex(factors).where({ id: aliceTotp.factorId }).first()).secret_sealed;
    await h.knex(factors).where({ id: bobTotp.factorId }).update({ secret_sealed: aliceSealed });
    const { ticket } = await loginForTicket(h, bob);
    const answer = await h.post('/auth/mfa/verify', { factor_id: bobTotp.factorId, code: nextTotpCode(h, aliceTotp.secret) }, { token: ticket });
    assert.notEqual(answer.status, 200, answer.text);
    assert.equal(answer.body?.data?.access_token, undefined);
  });

  test('a process with another secret cannot rotate the shared signing keys: the table is left as it was and every instance keeps signing', async () => {
    const user = await h.signUp();
    const before = await keyTable(h);
    const stranger = routerWithOtherSecret(h);
    await assert.rejects(stranger.identity.ready);
    try {
      // A scheduled job with a mis-set secret calls the documented rotation.
      const refusal = await stranger.identity.service.rotateSigningKey().then(() => undefined, (error: unknown) => error);
      assert.deepEqual(await keyTable(h), before, 'the rotation of a process with another secret changed the key table');
      assert.match(String(refusal), /config\.secret/, 'the refusal names its cause');
    } finally {
      await stranger.identity.close();
    }
    // The cluster's own rotation afterwards: it signs with a key it can open.
    const { kid } = await h.identity.service.rotateSigningKey();
    const login = await h.post('/auth/login', { email: user.email, password: user.password });
    assert.equal(login.status, 200, login.text);
    assert.equal(jwt.decode(login.body.data.access_token, { complete: true })?.header.kid, kid);
    assert.equal((await h.get('/auth/me', { token: login.body.data.access_token })).status, 200);
  });

  test('a changed secret: start-up fails naming config.secret, every request answers 503 (old tokens included), and no log line carries key material', async () => {
    const user = await h.signUp();
    const stranger = routerWithOtherSecret(h);
    const app = express();
    app.use('/identity', stranger.identity);
    const server: Server = await new Promise((resolve) => {
      const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
    });
    try {
      await assert.rejects(stranger.identity.ready, (error: unknown) => error instanceof Error && /config\.secret/.test(error.message));
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/identity`;
      const answers = [
        await fetch(`${base}/auth/me`, { headers: { authorization: `Bearer ${user.accessToken}` } }),
        await fetch(`${base}/auth/token/refresh`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: user.refreshToken }) }),
        await fetch(`${base}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: user.email, password: user.password }) }),
        await fetch(`${base}/auth/.well-known/jwks.json`),
      ];
      for (const answer of answers) assert.equal(answer.status, 503, `${answer.url}: ${await answer.text()}`);
      const logged = JSON.stringify(stranger.logs);
      assert.match(logged, /config\.secret/, 'the start-up failure names its cause');
      for (const secret of [HARNESS_SECRET, OTHER_SECRET]) assert.ok(!logged.includes(secret), 'a secret in the log');
      assert.doesNotMatch(logged, /PRIVATE KEY|"v1\.[A-Za-z0-9_-]+\./, 'key material in the log');
      const sealed = (await keyTable(h)).map((row) => row.sealed.split('.')[2]!.slice(0, 24));
      for (const piece of sealed) assert.ok(!logged.includes(piece), 'a sealed key in the log');
    } finally {
      await new Promise((resolve) => server.close(resolve));
      await stranger.identity.close();
    }
    // The instance with the right secret is untouched.
    assert.equal((await h.get('/auth/me', { token: user.accessToken })).status, 200);
  });
});
