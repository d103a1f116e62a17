/*
 * Records the WebAuthn fixtures of test/mfa/passkeys-fixtures.test.ts from a REAL Chromium
 * ceremony: Chromium's virtual authenticator (DevTools protocol WebAuthn domain; CTAP2,
 * internal transport, resident keys, user verification) creates passkeys and signs
 * assertions on a tiny local page, exactly as it would for a host's pages.
 *
 * Challenges are random, so each fixture carries the challenge it was signed over and the
 * user handle it was created with. The tests call the real option routes (which store their
 * own random challenge, hashed) and then swap the stored hash for the recorded challenge's
 * hash (test/helpers/passkeys.ts), so every other check runs as in production.
 *
 * Re-record (needs Chromium; CHROMIUM_PATH overrides /usr/bin/chromium):
 *
 *   npx tsx scripts/record-webauthn-fixtures.ts
 *
 * then run `node scripts/run-tests.mjs test/mfa/passkeys-fixtures.test.ts` and commit
 * test/fixtures/webauthn-fixtures.json. The origin's port changes with every recording; the
 * tests read rpId and origin from the file.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { generateAuthenticationOptions, generateRegistrationOptions } from '@simplewebauthn/server';
import type { Browser, Page } from 'playwright-core';
import { addVirtualAuthenticator, authenticatorDataSummary, launchChromium, type VirtualAuthenticator } from '../test/helpers/virtual-authenticator.js';

/** The minimal page the ceremonies run from (the browser tests drive the example app instead). */
const CEREMONY_PAGE = readFileSync(new URL('./webauthn-ceremony-page.html', import.meta.url), 'utf8');

const OUTPUT = new URL('../test/fixtures/webauthn-fixtures.json', import.meta.url);

interface RecordedAssertion {
  challenge: string;
  userVerified: boolean;
  signCount: number;
  response: unknown;
}

interface RecordedAuthenticator {
  userHandle: string;
  registration: { challenge: string; response: unknown };
  assertions: RecordedAssertion[];
  assertionWithoutUserVerification?: RecordedAssertion;
}

async function servePage(): Promise<{ server: Server; port: number }> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    response.end(CEREMONY_PAGE);
  });
  await new Promise<void>((resolve) => server.listen(0, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

async function ceremony(page: Page, helper: 'createCredential' | 'getCredential', options: unknown): Promise<any> {
  const result = await page.evaluate(([name, input]) => (globalThis as any)[name](input), [helper, options] as const);
  if (result.error) throw new Error(`${helper} failed in Chromium: ${result.error}`);
  return result.credential;
}

async function assertion(page: Page, rpId: string, userVerification: 'required' | 'discouraged'): Promise<RecordedAssertion> {
  // Discoverable: no allowCredentials, so the response carries the user handle.
  const options = await generateAuthenticationOptions({ rpID: rpId, userVerification });
  const response = await ceremony(page, 'getCredential', options);
  const summary = authenticatorDataSummary(response.response.authenticatorData);
  return { challenge: options.challenge, userVerified: summary.userVerified, signCount: summary.signCount, response };
}

async function recordAuthenticator(
  browser: Browser,
  origin: string,
  rpId: string,
  plan: { userName: string; assertions: number; withoutUserVerification?: boolean },
): Promise<RecordedAuthenticator> {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${origin}/`);
    const authenticator: VirtualAuthenticator = await addVirtualAuthenticator(context, page);
    const userHandle = randomBytes(32).toString('base64url');
    const registrationOptions = await generateRegistrationOptions({
      rpName: 'identity-router fixtures',
      rpID: rpId,
      userName: plan.userName,
      userID: new Uint8Array(Buffer.from(userHandle, 'base64url')),
      attestationType: 'none',
      authenticatorSelection: { residentKey: 'required', userVerification: 'preferred' },
    });
    const registration = { challenge: registrationOptions.challenge, response: await ceremony(page, 'createCredential', registrationOptions) };
    const assertions: RecordedAssertion[] = [];
    for (let index = 0; index < plan.assertions; index += 1) assertions.push(await assertion(page, rpId, 'required'));
    const recorded: RecordedAuthenticator = { userHandle, registration, assertions };
    if (plan.withoutUserVerification) {
      await authenticator.setUserVerified(false);
      recorded.assertionWithoutUserVerification = await assertion(page, rpId, 'discouraged');
      if (recorded.assertionWithoutUserVerification.userVerified) throw new Error('the assertion without user verification still carries the UV flag');
    }
    for (const [index, recordedAssertion] of assertions.entries()) {
      if (!recordedAssertion.userVerified) throw new Error(`assertion ${index} lacks the UV flag`);
    }
    return recorded;
  } finally {
    await context.close();
  }
}

async function main(): Promise<void> {
  const { server, port } = await servePage();
  const browser = await launchChromium();
  try {
    const origin = `http://localhost:${port}`;
    // The passkey under test: registration, five UV assertions (counters rise), one without UV.
    const primary = await recordAuthenticator(browser, origin, 'localhost', { userName: 'primary@example.com', assertions: 5, withoutUserVerification: true });
    // Another person's authenticator: its credential is foreign to the primary user.
    const second = await recordAuthenticator(browser, origin, 'localhost', { userName: 'second@example.com', assertions: 2 });
    // A passkey of another RP id (a subdomain of localhost), for the wrong-RP-id checks.
    const otherRpId = 'passkeys.localhost';
    const otherOrigin = `http://${otherRpId}:${port}`;
    const otherRp = await recordAuthenticator(browser, otherOrigin, otherRpId, { userName: 'other-rp@example.com', assertions: 1 });
    const fixtures = {
      note: 'Recorded by scripts/record-webauthn-fixtures.ts from Chromium virtual authenticators; re-record with `npx tsx scripts/record-webauthn-fixtures.ts`.',
      browser: browser.version(),
      recordedAt: new Date().toISOString(),
      rpId: 'localhost',
      origin,
      primary,
      second,
      otherRp: { rpId: otherRpId, origin: otherOrigin, ...otherRp },
    };
    writeFileSync(OUTPUT, `${JSON.stringify(fixtures, null, 2)}\n`);
    console.log(`wrote ${OUTPUT.pathname}: primary counters ${primary.assertions.map((entry) => entry.signCount).join(',')}, without UV ${primary.assertionWithoutUserVerification?.signCount}`);
  } finally {
    await browser.close();
    server.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
