/**
 * Browser tests of the example web app: the example server in-process on a free port with a
 * temporary SQLite file and a test clock, one headless Debian Chromium per test file
 * (playwright-core, which downloads no browser), a fresh browser context per flow.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import speakeasy from 'speakeasy';
import { startExampleServer, type RunningExample } from '../../examples/basic/app.js';
import { STRONG_PASSWORD, TEST_DB, TestClock } from '../helpers/harness.js';

export { STRONG_PASSWORD };

const require = createRequire(import.meta.url);
// jsqr is CommonJS whose types declare a `default` export only, and pngjs ships no types: require gives both plainly.
const jsQR = require('jsqr') as (data: Uint8ClampedArray, width: number, height: number) => { data: string } | null;
const { PNG } = require('pngjs') as { PNG: { sync: { read(buffer: Buffer): { width: number; height: number; data: Buffer } } } };
const RESULTS_DIR = resolve('test-results');
const SCREENSHOT_DIR = join(RESULTS_DIR, 'screenshots');

/** The launch flags: headless, no sandbox (containers), and nothing that phones home. */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** CHROMIUM_PATH, when set, is the only candidate (and lets a run pretend Chromium is missing). */
function findChromium(): string | undefined {
  const candidates = process.env.CHROMIUM_PATH ? [process.env.CHROMIUM_PATH] : ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
  return candidates.find((path) => existsSync(path));
}

/**
 * Why the browser tests cannot run here, or undefined when they can. Under CI=true a missing
 * Chromium is not a reason: the suite must fail there, not skip.
 */
export function browserSkipReason(): string | undefined {
  if (TEST_DB !== 'sqlite') return 'the example app runs on SQLite; its browser tests run in the SQLite phase';
  if (findChromium() || process.env.CI === 'true') return undefined;
  const reason = `Chromium not found (${process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'}): install it with "apt-get install chromium" to run the browser tests`;
  console.warn(`WARNING: ${reason}`);
  return reason;
}

/** Accessibility totals of one test file, by impact. */
const axeTotals: Record<string, number> = { minor: 0, moderate: 0, serious: 0, critical: 0 };
const axePages: Array<{ page: string; violations: Record<string, number>; rules: string[] }> = [];

export class BrowserSuite {
  readonly clock = new TestClock(Date.UTC(2030, 0, 1, 12, 0, 0));
  example!: RunningExample;
  browser!: Browser;
  private tempDir!: string;

  /**
   * `publicHost: 'localhost'` for passkeys: an IP address cannot be a WebAuthn RP id.
   * `developmentLimits: true` keeps the example's own development limits instead of none.
   */
  static async start(name: string, options: { publicHost?: string; developmentLimits?: boolean } = {}): Promise<BrowserSuite> {
    const suite = new BrowserSuite(name, options);
    await suite.boot();
    return suite;
  }

  private constructor(
    private readonly name: string,
    private readonly options: { publicHost?: string; developmentLimits?: boolean },
  ) {}

  private async boot(): Promise<void> {
    const executablePath = findChromium();
    assert.ok(executablePath, 'CI=true and Chromium is missing: install it with `apt-get install chromium` (.ci/run does)');
    this.tempDir = mkdtempSync(join(tmpdir(), 'identity-example-'));
    this.example = await startExampleServer({
      port: 0,
      ...(this.options.publicHost ? { publicHost: this.options.publicHost } : {}),
      databaseFile: join(this.tempDir, 'example.sqlite'),
      secret: 'browser-test-secret-that-is-at-least-32-characters',
      development: true,
      clock: this.clock,
      echoToConsole: false,
      // One IP drives every flow here, so the per-IP limits would trip; bcrypt cost 4 keeps it quick.
      config: { password: { bcryptCost: 4 }, ...(this.options.developmentLimits ? {} : { auth: { rateLimits: false } }) },
    });
    // playwright's launch() already runs Chromium on a fresh temporary --user-data-dir, removed on close.
    this.browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    mkdirSync(SCREENSHOT_DIR, { recursive: true });
  }

  get url(): string {
    return this.example.url;
  }

  /** A fresh context (no cookies, no storage) and a page in it; confirm() dialogs are accepted like a person clicking OK. */
  async newPage(): Promise<{ context: BrowserContext; page: Page }> {
    const context = await this.browser.newContext({ viewport: { width: 1100, height: 900 } });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    watchPage(page);
    return { context, page };
  }

  /** Opens a path of the app and waits until the shell has rendered it. */
  async open(page: Page, path: string): Promise<void> {
    await page.goto(this.url + path);
    await page.waitForSelector('body[data-ready="true"]');
  }

  /** TOTP code for a secret at the test clock's time (the server checks against the same clock). */
  totp(secret: string): string {
    return speakeasy.totp({ secret, encoding: 'base32', time: Math.floor(this.clock.now() / 1000) });
  }

  async close(): Promise<void> {
    await this.browser?.close();
    await this.example?.close();
    rmSync(this.tempDir, { recursive: true, force: true });
    const line = Object.entries(axeTotals).map(([impact, count]) => `${impact} ${count}`).join(', ');
    console.log(`axe-core on ${axePages.length} pages of ${this.name}: violations ${line}`);
    mkdirSync(join(RESULTS_DIR, 'axe'), { recursive: true });
    writeFileSync(join(RESULTS_DIR, 'axe', `${this.name}.json`), JSON.stringify({ totals: axeTotals, pages: axePages }, null, 2));
  }
}

/** Script errors of every page, checked at the end of each flow: a broken module would otherwise look like a slow page. */
const pageErrors: string[] = [];

function watchPage(page: Page): void {
  page.on('dialog', (dialog) => void dialog.accept());
  page.on('pageerror', (error) => void pageErrors.push(`${page.url()}: ${error.message}`));
}

/** The end of a flow: a screenshot, an accessibility check of the page as it stands, and no script errors. */
export async function finishFlow(page: Page, name: string, options: { ownPage?: boolean } = {}): Promise<void> {
  await screenshot(page, name);
  await checkAccessibility(page, name, options);
  assert.deepEqual(pageErrors.splice(0), [], 'script errors in the pages');
}

/** Waits for the page heading, the sign that a client-side navigation finished. */
export async function expectHeading(page: Page, text: string): Promise<void> {
  await page.getByRole('heading', { level: 1, name: text }).waitFor();
}

export async function screenshot(page: Page, name: string): Promise<string> {
  const file = join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/**
 * Runs axe-core on the page as it is now; fails on any violation of moderate impact or above.
 * Pages the example does not draw itself (Swagger UI's API reference) pass `{ ownPage: false }`
 * and fail only on serious or critical ones.
 */
export async function checkAccessibility(page: Page, label: string, { ownPage = true }: { ownPage?: boolean } = {}): Promise<void> {
  await page.addScriptTag({ content: axeSource }).catch(async () => {
    // A page whose CSP refuses inline scripts still lets the test inject through evaluate.
    await page.evaluate(axeSource);
  });
  // A string, evaluated in the page: this project compiles without the DOM library.
  const violations = (await page.evaluate(`axe.run(document, { resultTypes: ['violations'] }).then((result) =>
    result.violations.map((violation) => ({ id: violation.id, impact: violation.impact, help: violation.help, targets: violation.nodes.map((node) => node.target.join(' ')) })))`)) as Array<{
    id: string;
    impact: string;
    help: string;
    targets: string[];
  }>;
  const counts: Record<string, number> = {};
  for (const violation of violations) {
    counts[violation.impact] = (counts[violation.impact] ?? 0) + 1;
    axeTotals[violation.impact] = (axeTotals[violation.impact] ?? 0) + 1;
  }
  axePages.push({ page: label, violations: counts, rules: violations.map((violation) => `${violation.impact} ${violation.id}: ${violation.targets.slice(0, 5).join(' | ')}`) });
  const blockingImpacts = ownPage ? ['moderate', 'serious', 'critical'] : ['serious', 'critical'];
  const blocking = violations.filter((violation) => blockingImpacts.includes(violation.impact));
  assert.deepEqual(blocking, [], `axe-core found violations of ${blockingImpacts.join(', ')} impact on ${label}`);
}

/** Reads a QR code off a screenshot of the element, the way a phone camera would. */
export async function scanQrCode(element: Locator): Promise<string> {
  const png = PNG.sync.read(await element.screenshot());
  const decoded = jsQR(new Uint8ClampedArray(png.data), png.width, png.height);
  assert.ok(decoded, 'no QR code found in the screenshot');
  return decoded.data;
}

/** Opens the development inbox in a new tab (the app tab keeps its in-memory session). */
export async function openInbox(context: BrowserContext, suite: BrowserSuite): Promise<Page> {
  const inbox = await context.newPage();
  watchPage(inbox);
  await inbox.goto(`${suite.url}/dev/inbox`);
  return inbox;
}

/** The newest inbox message to an address whose subject matches. */
export function inboxMessage(inbox: Page, to: string, subject: RegExp): Locator {
  return inbox.locator('article.message').filter({ has: inbox.locator('.to', { hasText: to }) }).filter({ has: inbox.getByRole('heading', { name: subject }) }).first();
}

/** The six-digit code in the newest matching message (e-mail or SMS). */
export async function codeFromInbox(context: BrowserContext, suite: BrowserSuite, to: string, subject: RegExp): Promise<string> {
  const inbox = await openInbox(context, suite);
  const body = await inboxMessage(inbox, to, subject).locator('.body').innerText();
  await inbox.close();
  const code = /\b(\d{6})\b/.exec(body)?.[1];
  assert.ok(code, `no code in the message: ${body}`);
  return code;
}

let counter = 0;
export const uniqueEmail = (name: string) => `${name}.${process.pid}.${++counter}@example.com`;

/** A link of the main navigation. */
export const navLink = (page: Page, name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
