// The shell: loads every page module the server lists, routes on location.pathname, draws the
// navigation, and starts once the client is ready (the session taken from an open tab, or
// recovered from the refresh cookie after a reload; lib/identity.js).
//
// A page is one file in pages/ exporting default
//   { path, title, render(main, ctx), auth?: true (signed-in only),
//     nav?: 'public' | 'account' | 'org' | 'developer' (menu group: signed out / signed in), navLabel?, order? }
// (see pages/sessions.js for a small one). Nothing else needs to change to add one.
// A file may also (or only) export `signInOption(ctx, complete)`, an element the sign-in page shows under
// "Other ways to sign in" (a passkey or a "Sign in with …" button); it hands the client's sign-in
// answer ({session} or {mfa}) to complete(result).
// A file may also export `accountSection(ctx)`, a section the account page shows (linked sign-in accounts, say).
import { api, claims, identity, signedIn } from './lib/identity.js';
import { describeError, h } from './lib/ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const accountBar = document.getElementById('account-bar');
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
    me = signedIn() ? await api('GET', '/auth/me') : null;
    drawNav();
  },
};

/** Signed in, the menu has three labelled groups; "Log out" sits in the header on every page. */
const NAV_GROUPS = [
  { id: 'account', label: 'Account' },
  { id: 'org', label: 'Organization' },
  { id: 'developer', label: 'Developer' },
];

function drawNav() {
  const link = (href, label) => h('li', {}, h('a', { href, 'aria-current': href === location.pathname ? 'page' : null }, label));
  const pageLinks = (group) => pages.filter((page) => page.nav === group && (signedIn() || !page.auth)).map((page) => link(page.path, page.navLabel ?? page.title));
  const developerLinks = [...pageLinks('developer'), link('/api-docs', 'API docs'), ...(development ? [link('/dev/inbox', 'Dev inbox')] : [])];
  if (!signedIn()) {
    nav.replaceChildren(h('ul', { class: 'nav-group' }, ...pageLinks('public'), ...developerLinks));
    accountBar.replaceChildren();
    return;
  }
  nav.replaceChildren(
    ...NAV_GROUPS.map(({ id, label }) => {
      const headingId = `nav-${id}`;
      return h('div', { class: 'nav-group' }, h('span', { class: 'nav-label', id: headingId }, label), h('ul', { 'aria-labelledby': headingId }, ...(id === 'developer' ? developerLinks : pageLinks(id))));
    }),
  );
  accountBar.replaceChildren(
    h('span', { class: 'who' }, me?.email ?? ''),
    h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Log out'),
  );
}

async function signOut() {
  await identity.logout().catch(() => undefined);
  me = null;
  await navigate('/login');
}

/** Counts renders, so a page drawn after a newer navigation began is dropped: the last navigation wins. */
let renders = 0;

async function render() {
  const ticket = ++renders;
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
  try {
    await page.render(content, ctx);
  } catch (error) {
    // A page whose first request fails (a 429, the server gone) still says what happened.
    content.replaceChildren(h('p', { role: 'alert', class: 'error' }, describeError(error)));
  }
  if (ticket !== renders) return;
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

// Signed out in another tab, or ended by the router: this tab leaves its signed-in pages too.
identity.onSessionEnded(() => {
  me = null;
  const page = pages.find((candidate) => candidate.path === location.pathname);
  if (page?.auth) void navigate(`/login?return_to=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
  else drawNav();
});

await identity.ready;
// ready waits 500 ms at most (docs/client.md): a recovery through the cookie still on the
// network is waited for here, so a reload never shows a signed-in visitor the signed-out pages.
await identity.getAccessToken().catch(() => null);
if (signedIn()) await ctx.reloadMe().catch(() => undefined);
await render();
document.body.dataset.ready = 'true';
