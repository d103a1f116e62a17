// The shell: loads every page module the server lists, routes on location.pathname, draws the
// navigation, and restores the session from the refresh cookie on load.
//
// A page is one file in pages/ exporting default
//   { path, title, render(main, ctx), auth?: true (signed-in only),
//     nav?: 'public' | 'account' | 'org' (menu shown signed out / signed in), navLabel?, order? }
// (see pages/sessions.js for a small one). Nothing else needs to change to add one.
// A file may also (or only) export `signInOption(ctx, complete)`, an element the sign-in page shows under
// "Other ways to sign in" (a passkey or a "Sign in with …" button); it hands the token or MFA-gate
// answer it gets to complete(data).
// A file may also export `accountSection(ctx)`, a section the account page shows (linked sign-in accounts, say).
import { api, claims, refresh, signedIn } from './lib/api.js';
import { installStepUp } from './lib/step-up.js';
import { h } from './lib/ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const { pages: pageFiles, development } = await (await fetch('/app/pages.json')).json();
const modules = await Promise.all(pageFiles.map((file) => import(file)));
const pages = modules
  .map((module) => module.default)
  .filter(Boolean)
  .sort((a, b) => (a.order ?? 100) - (b.order ?? 100));
const signInOptions = modules.map((module) => module.signInOption).filter(Boolean);
const accountSections = modules.map((module) => module.accountSection).filter(Boolean);
let me = null;

const ctx = {
  development,
  signInOptions,
  accountSections,
  get me() {
    return me;
  },
  /** The active organization id, from the token (a hint; the server re-checks). */
  get activeOrgId() {
    return claims()?.org ?? null;
  },
  params: () => new URLSearchParams(location.search),
  navigate,
  /** Re-reads /auth/me (after sign-in, switch-org, profile changes) and redraws the navigation. */
  async reloadMe() {
    me = signedIn() ? (await api('GET', '/auth/me')).data : null;
    drawNav();
  },
};

function drawNav() {
  const groups = signedIn() ? ['account', 'org'] : ['public'];
  const links = pages.filter((page) => groups.includes(page.nav)).map((page) => ({ href: page.path, label: page.navLabel ?? page.title }));
  links.push({ href: '/api-docs', label: 'API docs' });
  if (development) links.push({ href: '/dev/inbox', label: 'Dev inbox' });
  nav.replaceChildren(
    ...links.map((link) => h('li', {}, h('a', { href: link.href, 'aria-current': link.href === location.pathname ? 'page' : null }, link.label))),
  );
}

async function render() {
  const page = pages.find((candidate) => candidate.path === location.pathname);
  drawNav();
  if (!page) {
    document.title = 'Not found · Identity Router Example';
    main.replaceChildren(h('h1', {}, 'Page not found'), h('p', {}, h('a', { href: '/' }, 'Back to the start')));
    return;
  }
  if (page.auth && !signedIn()) return navigate(`/login?return_to=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
  document.title = `${page.title} · Identity Router Example`;
  const content = h('div', {});
  await page.render(content, ctx);
  main.replaceChildren(h('h1', {}, page.title), content);
  main.focus();
}

function navigate(url, { replace = false } = {}) {
  history[replace ? 'replaceState' : 'pushState'](null, '', url);
  return render();
}

// Links to our own pages stay in the page (and keep the access token in memory).
document.addEventListener('click', (event) => {
  const link = event.target.closest('a[href]');
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || link.target) return;
  const url = new URL(link.href);
  if (url.origin !== location.origin || !pages.some((page) => page.path === url.pathname)) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', render);

installStepUp(document.getElementById('step-up'));
if (await refresh()) await ctx.reloadMe();
await render();
document.body.dataset.ready = 'true';
