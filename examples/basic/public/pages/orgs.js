import { api, endSession, identity } from '../lib/identity.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

export default {
  path: '/orgs',
  title: 'Organizations',
  order: 50,
  nav: 'org',
  auth: true,
  async render(main, ctx) {
    const orgs = await api('GET', '/orgs');
    const switchTo = (org) => async () => {
      // The session is re-pointed too, so a refresh (or a reload) stays in this organization.
      await identity.switchOrg(org.id);
      await ctx.reloadMe();
      await ctx.navigate('/orgs', { replace: true });
    };
    const active = ctx.me.orgs.find((org) => org.id === ctx.activeOrgId);
    const ownsActive = active?.roles.includes('owner') ?? false;
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
      ...(ownsActive ? [await ownerSection(ctx, active)] : []),
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

/**
 * An owner hands the organization over (the new owner first, then the old one steps down to
 * admin, so there is always an owner) or deletes it. Either way the account stops being its last
 * owner, which is what deleting the account needs. Both ask for a second factor (step-up) when
 * the account has one.
 */
async function ownerSection(ctx, org) {
  const members = await api('GET', `/orgs/${org.id}/members?limit=100`);
  const candidates = members.filter((member) => member.status === 'active' && member.user_id !== ctx.me.id);
  const afterChange = async (message) => {
    await ctx.reloadMe();
    await ctx.navigate('/orgs', { replace: true });
    document.querySelector('#main > div').prepend(h('p', { role: 'status', class: 'notice' }, message));
  };
  return section(
    `Hand over or delete ${org.name}`,
    candidates.length === 0
      ? h('p', {}, 'To hand it over, first invite someone (Members); you can delete it at any time.')
      : form({
          name: 'Transfer ownership',
          submit: 'Transfer ownership',
          fields: [field({ name: 'user_id', label: 'New owner', options: candidates.map((member) => ({ value: member.user_id, label: member.email ?? member.display_name ?? member.user_id })) })],
          onSubmit: async ({ user_id }) => {
            await api('PATCH', `/orgs/${org.id}/members/${user_id}/roles`, { role_slugs: ['owner'] });
            await api('PATCH', `/orgs/${org.id}/members/${ctx.me.id}/roles`, { role_slugs: ['admin'] });
            await afterChange(`Ownership of ${org.name} transferred; you are an admin now.`);
          },
        }),
    h('p', {}, 'Deleting the organization removes its members, roles and invitations. This cannot be undone.'),
    actionButton(
      `Delete ${org.name}`,
      async () => {
        if (!confirm(`Delete ${org.name} for good?`)) return;
        await api('DELETE', `/orgs/${org.id}`);
        // Sessions whose active organization is deleted end with it (docs/organizations.md), this one included.
        await endSession();
        await ctx.reloadMe();
        await ctx.navigate('/login');
        document.querySelector('#main > div').prepend(h('p', { role: 'status', class: 'notice' }, `${org.name} is deleted. Your session was in it, so it ended: sign in again.`));
      },
      { className: 'danger' },
    ),
  );
}
