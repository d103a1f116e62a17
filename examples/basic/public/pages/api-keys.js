// API keys (CONTRACT 10): create one for a script (shown once), list, revoke. The key then calls
// the host's own routes that opt in with requirePermission(key, {apiKeys: true}), like /invoices.
import { api, claims } from '../lib/identity.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, field, form, formatTime, h, section } from '../lib/ui.js';

const DAY = 24 * 3600;

export default {
  path: '/org/api-keys',
  title: 'API keys',
  order: 75,
  nav: 'developer',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    const reload = () => ctx.navigate('/org/api-keys', { replace: true });
    const [data, catalog] = await Promise.all([api('GET', `/orgs/${orgId}/api-keys`), api('GET', '/permissions')]);
    // Only keys the person holds here can go on a key (the server refuses the rest), never users.*.
    const scope = claims()?.scope ?? [];
    const held = new Set(Array.isArray(scope) ? scope : String(scope).split(' '));
    const offered = catalog.filter((permission) => held.has(permission.key) && !permission.key.startsWith('users.'));
    const shown = h('div', { 'aria-live': 'polite' });
    main.append(
      shown,
      section(
        'Keys',
        data.keys.length === 0
          ? h('p', {}, 'No API keys yet.')
          : h(
              'table',
              {},
              h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Starts with'), h('th', {}, 'Permissions'), h('th', {}, 'Expires'), h('th', {}, 'Last used'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
              h('tbody', {}, data.keys.map((key) => h('tr', {},
                h('td', {}, key.name),
                h('td', {}, h('code', {}, `irk_${key.start}…`)),
                h('td', {}, key.permission_keys.join(', ') || '—'),
                h('td', {}, formatTime(key.expires_at)),
                h('td', {}, formatTime(key.last_used_at)),
                h('td', {}, actionButton('Revoke', async () => { await api('DELETE', `/orgs/${orgId}/api-keys/${key.id}`); await reload(); }, { className: 'danger', ariaLabel: `Revoke API key ${key.name}` })),
              ))),
            ),
      ),
      section(
        'Create a key',
        h('p', {}, 'A key acts for you in this organization, with the permissions you tick (and only while you still hold them). It works on this app\'s own API routes that accept keys, such as ', h('code', {}, 'GET /invoices'), ', never on the identity routes.'),
        form({
          submit: 'Create key',
          fields: [
            field({ name: 'name', label: 'Key name', hint: 'What will use it, e.g. "Nightly export"' }),
            field({ name: 'expires_in', label: 'Expires after', value: String(90 * DAY), options: [30, 90, 365].map((days) => ({ value: String(days * DAY), label: `${days} days` })) }),
            h('fieldset', {}, h('legend', {}, 'Permissions'),
              offered.map((permission) => h('label', {}, h('input', { type: 'checkbox', name: 'permission', value: permission.key }), h('span', {}, h('code', {}, permission.key), ` ${permission.description}`)))),
          ],
          onSubmit: async ({ name, expires_in }, element) => {
            const permission_keys = new FormData(element).getAll('permission');
            const created = await api('POST', `/orgs/${orgId}/api-keys`, { name, permission_keys, expires_in: Number(expires_in) });
            await reload();
            // The key is in this answer only: the server keeps a hash of it.
            const copy = h('button', { type: 'button', class: 'secondary', onclick: () => navigator.clipboard?.writeText(created.key) }, 'Copy');
            document.querySelector('#main [aria-live]')?.replaceChildren(
              section(
                `New key: ${created.name}`,
                h('p', { role: 'status' }, 'Copy this key now. It will not be shown again.'),
                h('p', {}, h('code', { class: 'api-key' }, created.key), ' ', copy),
                h('pre', {}, `curl -H "x-api-key: ${created.key}" ${location.origin}/invoices`),
              ),
            );
          },
        }),
      ),
    );
  },
};
