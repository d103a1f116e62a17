import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type CDPSession, type Page } from 'playwright-core';

/** Where Chromium is looked for; CHROMIUM_PATH overrides. */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  return candidates.find((candidate): candidate is string => typeof candidate === 'string' && candidate !== '' && existsSync(candidate));
}

export async function launchChromium(): Promise<Browser> {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error('Chromium not found (set CHROMIUM_PATH)');
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

export interface VirtualAuthenticator {
  cdp: CDPSession;
  authenticatorId: string;
  setUserVerified(verified: boolean): Promise<void>;
  credentialCount(): Promise<number>;
}

/**
 * A platform authenticator as docs/mfa.md's tests require it: CTAP2, internal transport,
 * resident keys and user verification, the user always verified and present. It belongs to
 * the page's tab, so another context with its own authenticator holds other credentials.
 */
export async function addVirtualAuthenticator(context: BrowserContext, page: Page): Promise<VirtualAuthenticator> {
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable', { enableUI: false });
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return {
    cdp,
    authenticatorId,
    setUserVerified: async (verified) => void (await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: verified })),
    credentialCount: async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials.length,
  };
}

/** Flags and signature counter of an assertion's authenticatorData (WebAuthn 6.1). */
export function authenticatorDataSummary(authenticatorData: string): { userPresent: boolean; userVerified: boolean; signCount: number } {
  const bytes = Buffer.from(authenticatorData, 'base64url');
  const flags = bytes[32] ?? 0;
  return { userPresent: (flags & 0x01) !== 0, userVerified: (flags & 0x04) !== 0, signCount: bytes.readUInt32BE(33) };
}
