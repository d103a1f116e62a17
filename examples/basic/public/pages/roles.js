import { api } from '../lib/identity.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

export default {
  path: '/org/roles',
  title: 'Roles and permissions',
  order: 70,
  nav: 'org',
  navLabel: 'Roles',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    const reload = () => ctx.navigate('/org/roles', { replace: true });
    const [roles, catalog] = await Promise.all([api('GET', `/orgs/${orgId}/roles`), api('GET', '/permissions')]);
    main.append(
      section(
        'Roles',
        h(
          'table',
          {},
          h('thead', {}, h('tr', {}, h('th', {}, 'Role'), h('th', {}, 'Permissions'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
          h('tbody', {}, roles.map((role) => h('tr', {},
            h('td', {}, h('strong', {}, role.name), ` (${role.slug})`, role.is_system ? ' · system' : ''),
            h('td', {}, role.permission_keys.join(', ')),
            h('td', {}, role.is_system ? null : actionButton('Delete', async () => { await api('DELETE', `/orgs/${orgId}/roles/${role.id}`); await reload(); }, { className: 'danger', ariaLabel: `Delete role ${role.name}` })),
          ))),
        ),
      ),
      section(
        'Create a role',
        form({
          submit: 'Create role',
          fields: [
            field({ name: 'name', label: 'Name' }),
            field({ name: 'slug', label: 'Slug', hint: 'Lower-case letters, digits and dashes' }),
            field({ name: 'description', label: 'Description', required: false }),
            h('fieldset', {}, h('legend', {}, 'Permissions (from the catalog)'),
              catalog.map((permission) => h('label', {}, h('input', { type: 'checkbox', name: 'permission', value: permission.key }), h('span', {}, h('code', {}, permission.key), ` ${permission.description}`)))),
          ],
          onSubmit: async ({ name, slug, description }, element) => {
            const permission_keys = new FormData(element).getAll('permission');
            await api('POST', `/orgs/${orgId}/roles`, { name, slug, permission_keys, ...(description ? { description } : {}) });
            await reload();
          },
        }),
      ),
    );
  },
};
