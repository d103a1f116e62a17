/**
 * A blank page that loads identity-router/client (bundled from src/client with esbuild) on the
 * example's origin, for the client's tests in Chromium (client.test.ts, client-attacks.test.ts):
 * the page and its loader, a browser context that serves them, a tab, the client started in it,
 * code run in it, and the router as node reaches it.
 */
import assert from 'node:assert/strict';
import { build } from 'esbuild';
import type { BrowserContext, Frame, Page } from 'playwright-core';
import { BrowserSuite, STRONG_PASSWORD, uniqueEmail } from './browser-harness.js';

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>client test page</title></head>
<body><main><h1>client test page</h1></main>
<script type="module" src="/app.js"></script></body></html>`;

const LOADER = `import * as identity from '/__client/identity-client.js';
globalThis.identity = identity;
document.body.dataset.ready = 'true';`;

export type Json = Record<string, any>;
/** A tab, or a frame in one. */
export type Scope = Page | Frame;

export class ClientPages {
  private constructor(
    readonly suite: BrowserSuite,
    private readonly bundle: string,
    /** The router as node reaches it (the browser uses localhost, which passkeys need). */
    readonly api: string,
  ) {}

  static async start(name: string): Promise<ClientPages> {
    const suite = await BrowserSuite.start(name, { publicHost: 'localhost' });
    const built = await build({ entryPoints: ['src/client/index.ts'], bundle: true, format: 'esm', platform: 'browser', target: 'es2020', write: false });
    return new ClientPages(suite, built.outputFiles[0]!.text, `${suite.url.replace('//localhost:', '//127.0.0.1:')}/identity`);
  }

  close(): Promise<void> {
    return this.suite.close();
  }

  /**
   * A context whose /__client/ paths (on any host) serve the test page and the client, and whose
   * `/app.js` is the loader: the example's own shell script is replaced too, so on the app's
   * pages (the social return page, which a redirect reaches and a route cannot replace) only the
   * client runs. `pages` serves other paths under /__client/ (a page of another site). CSP is
   * bypassed for the tests' `new Function` in the page, not for the client.
   */
  async newContext(options: { init?: string; pages?: Record<string, string> } = {}): Promise<BrowserContext> {
    const context = await this.suite.browser.newContext({ bypassCSP: true });
    context.setDefaultTimeout(10_000);
    if (options.init) await context.addInitScript(options.init);
    await context.route(
      (url) => url.pathname.startsWith('/__client/') || url.pathname === '/app.js',
      (route) => {
        const path = new URL(route.request().url()).pathname;
        if (path === '/__client/identity-client.js') return route.fulfill({ status: 200, contentType: 'text/javascript', body: this.bundle });
        if (path === '/app.js') return route.fulfill({ status: 200, contentType: 'text/javascript', body: LOADER });
        const page = options.pages?.[path];
        return route.fulfill({ status: 200, contentType: 'text/html', body: page ?? PAGE });
      },
    );
    return context;
  }

  async openTab(context: BrowserContext, path = '/__client/page'): Promise<Page> {
    const page = await context.newPage();
    page.on('dialog', (dialog) => void dialog.accept());
    await page.goto(this.suite.url + path);
    await page.waitForSelector('body[data-ready="true"]');
    return page;
  }

  /** A call to the router from node, outside any browser. */
  async call(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: Json }> {
    const response = await fetch(this.api + path, {
      method,
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Json };
  }

  /** A registered, verified account (through the development inbox's mail). */
  async verifiedAccount(name: string): Promise<string> {
    const email = uniqueEmail(name);
    assert.equal((await this.call('POST', '/auth/register', { email, password: STRONG_PASSWORD })).status, 202);
    const mail = this.suite.example.inbox!.messages.find((message) => message.to === email && /token=/.test(message.text));
    const token = decodeURIComponent(/token=([^\s&"<>]+)/.exec(mail!.text)![1]!);
    assert.equal((await this.call('POST', '/auth/email/verify', { token })).status, 200);
    return email;
  }
}

/**
 * Creates `globalThis.client` in the page and waits for `ready`; records ended sessions in
 * `globalThis.ended`. Answers how long `ready` took, in ms of the page's clock. A string
 * `options` is a script expression, for options JSON cannot carry (a function, the page's origin).
 */
export function startClient(scope: Scope, options: Json | string = { baseUrl: '/identity' }): Promise<number> {
  const expression = typeof options === 'string' ? options : JSON.stringify(options);
  return scope.evaluate(`(async () => {
    globalThis.ended = [];
    const started = performance.now();
    globalThis.client = globalThis.identity.createIdentityClient(${expression});
    globalThis.client.onSessionEnded((event) => globalThis.ended.push(event.reason));
    await globalThis.client.ready;
    return performance.now() - started;
  })()`) as Promise<number>;
}

/** Runs `body` (an async function's text taking `client`) in the page; a rejection comes back as `{error}`. */
export function inPage<T = any>(scope: Scope, body: string, arg?: unknown): Promise<T> {
  return scope.evaluate(
    async ({ body, arg }) => {
      const global = globalThis as any;
      try {
        return await new Function('client', 'arg', `return (${body})(client, arg);`)(global.client, arg);
      } catch (error: any) {
        return { error: { name: error.name, code: error.code, status: error.status } };
      }
    },
    { body, arg },
  ) as Promise<T>;
}
