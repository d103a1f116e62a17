/*
 * The example's backend-for-frontend (examples/basic/refresh-token-cookie.ts), over HTTP in front
 * of a real router: the refresh token lives in an httpOnly cookie, and the cookie must outlive
 * what does not end the session. Threats to the user, not by an attacker: a refresh answered 429
 * (others behind the same address spent the budget) or 5xx signed cookie-mode users out; a logout
 * the router refused (its access token expired, the session already gone) left the cookie, so a
 * reload signed the user in again after they had asked to leave.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import express from 'express';
import { REFRESH_COOKIE, refreshTokenCookie } from '../../examples/basic/refresh-token-cookie.js';
import { Harness } from '../helpers/harness.js';
import { type ListeningApp, listening } from '../helpers/host-app.js';

const REFRESHES_PER_WINDOW = 2;
let h: Harness;
let server: ListeningApp;
let api: string;

before(async () => {
  h = await Harness.start({ rateLimits: true, config: { auth: { rateLimits: { token_refresh: { limit: REFRESHES_PER_WINDOW, windowSec: 600 } } } } });
  const app = express();
  app.use('/api', refreshTokenCookie({ mountPath: '/api', maxAgeSeconds: 3600, secure: false }), h.identity);
  server = await listening(app);
  api = `${server.base}/api`;
});
after(async () => {
  await server.close();
  await h.close();
});

interface CookieAnswer {
  status: number;
  body: any;
  /** The refresh cookie the answer sets: a token, '' when it clears it, undefined when it leaves it alone. */
  refreshCookie: string | undefined;
}

async function post(path: string, options: { cookie?: string; cookieHeader?: string; token?: string; body?: unknown } = {}): Promise<CookieAnswer> {
  const response = await fetch(`${api}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(options.cookie !== undefined ? { cookie: options.cookieHeader ?? `${REFRESH_COOKIE}=${encodeURIComponent(options.cookie)}` } : {}),
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
    },
    body: JSON.stringify(options.body ?? {}),
  });
  const set = response.headers.getSetCookie().find((line) => line.startsWith(`${REFRESH_COOKIE}=`));
  return { status: response.status, body: await response.json(), refreshCookie: set === undefined ? undefined : decodeURIComponent(set.slice(REFRESH_COOKIE.length + 1).split(';')[0]!) };
}

async function signedIn(): Promise<{ cookie: string; accessToken: string }> {
  const user = await h.signUp();
  const login = await post('/auth/login', { body: { email: user.email, password: user.password } });
  assert.equal(login.status, 200, JSON.stringify(login.body));
  assert.equal(login.body.data.refresh_token, undefined, 'the page never sees the refresh token');
  assert.ok(login.refreshCookie, 'the login hands the refresh token to the cookie');
  return { cookie: login.refreshCookie, accessToken: login.body.data.access_token };
}

test('a refresh refused for its rate limit keeps the cookie; one refused as invalid clears it', async () => {
  const { cookie } = await signedIn();
  const refused = await post('/auth/token/refresh', { cookie: 'not-a-refresh-token' });
  assert.equal(refused.status, 401, JSON.stringify(refused.body));
  assert.equal(refused.refreshCookie, '', 'a refused token is cleared');

  let current = cookie;
  for (let spent = 1; spent < REFRESHES_PER_WINDOW; spent++) {
    const refreshed = await post('/auth/token/refresh', { cookie: current });
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    assert.ok(refreshed.refreshCookie, 'the rotated token goes to the cookie');
    current = refreshed.refreshCookie;
  }
  const limited = await post('/auth/token/refresh', { cookie: current });
  assert.equal(limited.status, 429, JSON.stringify(limited.body));
  assert.equal(limited.refreshCookie, undefined, 'a 429 leaves the cookie, whose session lives');
});

test('a logout clears the cookie whatever the router answers', async () => {
  const first = await signedIn();
  const refusedLogout = await post('/auth/logout', { cookie: first.cookie });
  assert.equal(refusedLogout.status, 401, 'no bearer: the router refuses the logout');
  assert.equal(refusedLogout.refreshCookie, '', 'the user asked to leave: the browser keeps no token');

  const second = await signedIn();
  const logout = await post('/auth/logout', { cookie: second.cookie, token: second.accessToken });
  assert.equal(logout.status, 200, JSON.stringify(logout.body));
  assert.equal(logout.refreshCookie, '');
});

test('a Cookie header holding the refresh cookie twice (one tossed beside ours) refreshes nothing and clears ours', async () => {
  const victim = await signedIn();
  const attacker = await signedIn();
  // The browser sends the cookie of the longer path first: the attacker's, set on /api/auth/token.
  const cookieHeader = `${REFRESH_COOKIE}=${encodeURIComponent(attacker.cookie)}; ${REFRESH_COOKIE}=${encodeURIComponent(victim.cookie)}`;
  const tossed = await post('/auth/token/refresh', { cookie: '', cookieHeader });
  assert.equal(tossed.status, 401, JSON.stringify(tossed.body));
  assert.equal(tossed.body.data, undefined, 'no session is handed to the page');
  assert.equal(tossed.refreshCookie, '');
  const malformed = await post('/auth/token/refresh', { cookie: '', cookieHeader: `${REFRESH_COOKIE}=%E0%A4%A` });
  assert.equal(malformed.status, 401, 'an undecodable cookie is no cookie');
});
