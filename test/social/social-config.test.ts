import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdentityConfigError } from '../../src/config/schema.js';
import { matchesReturnUrl } from '../../src/config/social.js';
import { createIdentityRouter, type IdentityConfig } from '../../src/index.js';

// docs/social-login.md: the social config is validated at construction with every problem listed.

const base = {
  database: { client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true },
  secret: 'test-secret-that-is-at-least-32-characters-long',
  issuer: 'https://id.example.test',
};
const quiet = { logger: { info() {}, warn() {}, error() {} } };

function problemsOf(social: unknown): string[] {
  try {
    createIdentityRouter({ ...base, social } as unknown as IdentityConfig, quiet);
  } catch (error) {
    assert.ok(error instanceof IdentityConfigError, String(error));
    return error.problems;
  }
  return [];
}

const provider = { issuer: 'https://accounts.example.com', clientId: 'id', clientSecret: 'secret' };
const valid = { redirectBase: 'https://api.example.com/identity', returnUrls: ['https://app.example.com/auth/social'], providers: { google: provider } };

test('a valid social config builds', async () => {
  const router = createIdentityRouter({ ...base, social: valid } as IdentityConfig, quiet);
  await router.ready;
  assert.deepEqual(router.service.social?.listProviders(), [{ id: 'google', name: 'google' }]);
  await router.close();
});

test('every problem is listed at once', () => {
  const problems = problemsOf({
    redirectBase: 'http://api.example.com/identity',
    returnUrls: ['https://app.example.com/auth/social?x=1', 'ftp://app.example.com/x', 'https://app.example.com/other#frag'],
    errorUrl: 'https://evil.example/error',
    unknownKey: true,
    providers: {
      google: { issuer: 'https://accounts.example.com', clientId: 'id' },
      entra: { ...provider, scopes: ['email', 'profile'] },
      keycloak: { ...provider, scopes: ['openid'], authorizationParams: { redirect_uri: 'https://evil.example' } },
      'Bad_Id': provider,
      plain: { ...provider, issuer: 'http://idp.example.com' },
    },
  });
  const expected = [
    /unknownKey.*not allowed/,
    /providers\.google\.clientSecret.*required/,
    /Bad_Id.*not allowed/,
    /redirectBase.*https/,
    /returnUrls\[0\].*query or fragment/,
    /returnUrls\[1\].*https/,
    /returnUrls\[2\].*query or fragment/,
    /errorUrl.*covered by/,
    /providers\.entra\.scopes.*openid/,
    /providers\.keycloak\.scopes.*email/,
    /authorizationParams\.redirect_uri.*cannot be overridden/,
    /providers\.plain\.issuer.*https/,
  ];
  for (const pattern of expected) assert.ok(problems.some((problem) => pattern.test(problem)), `${pattern} not in:\n${problems.join('\n')}`);
});

test('http: is accepted for loopback hosts only, with one warning at start-up', async () => {
  const warnings: string[] = [];
  const router = createIdentityRouter(
    { ...base, social: { redirectBase: 'http://localhost:3000/identity', returnUrls: ['http://127.0.0.1:5173/app'], providers: { local: { ...provider, issuer: 'http://[::1]:4000' } } } } as IdentityConfig,
    { logger: { info() {}, warn: (message: string) => void warnings.push(message), error() {} } },
  );
  await router.ready;
  await router.close();
  assert.equal(warnings.filter((message) => message.startsWith('social:')).length, 1);
});

test('the return_to rule', () => {
  const allowed = ['https://app.example.com/auth/social'];
  assert.ok(matchesReturnUrl('https://app.example.com/auth/social', allowed));
  assert.ok(matchesReturnUrl('https://app.example.com/auth/social/x?y=1', allowed));
  for (const candidate of ['https://app.example.com/auth/socialite', 'https://app.example.com:444/auth/social', 'https://app.example.com/auth/social/..', 'https://a@app.example.com/auth/social']) {
    assert.ok(!matchesReturnUrl(candidate, allowed), candidate);
  }
});
