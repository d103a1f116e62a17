import { acceptTokens, api } from '../lib/api.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

export default {
  path: '/orgs',
  title: 'Organizations',
  order: 50,
  nav: 'org',
  auth: true,
  async render(main, ctx) {
    const { data: orgs } = await api('GET', '/orgs');
    const switchTo = (org) => async () => {
      // The session is re-pointed too, so a refresh (or a reload) stays in this organization.
      acceptTokens((await api('POST', '/auth/switch-org', { organization_id: org.id })).data);
      await ctx.reloadMe();
      await ctx.navigate('/orgs', { replace: true });
    };
    main.append(
      section(
        'Your organizations',
        orgs.length === 0 ? h('p', {}, 'You are not in any organization yet.') : null,
        h(
          'ul',
          {},
          orgs.map((org) =>
            h(
              'li',
              {},
              h('strong', {}, org.name), ` (${org.slug}) `,
              org.id === ctx.activeOrgId
                ? h('span', { class: 'notice' }, 'active: ', h('a', { href: '/org/members' }, 'members'), ', ', h('a', { href: '/org/roles' }, 'roles'), ', ', h('a', { href: '/org/audit' }, 'audit log'))
                : actionButton(`Switch to ${org.name}`, switchTo(org), { className: 'secondary' }),
            ),
          ),
        ),
      ),
      section(
        'Create an organization',
        ctx.me.email_verified ? null : h('p', {}, 'Verify your e-mail address first.'),
        form({
          submit: 'Create organization',
          fields: [
            field({ name: 'name', label: 'Name', autocomplete: 'organization' }),
            field({ name: 'slug', label: 'Slug', required: false, hint: 'Lower-case letters, digits and dashes; derived from the name when empty' }),
          ],
          onSubmit: async ({ name, slug }) => {
            await api('POST', '/orgs', { name, ...(slug ? { slug } : {}) });
            await ctx.reloadMe();
            await ctx.navigate('/orgs', { replace: true });
          },
        }),
      ),
    );
  },
};
