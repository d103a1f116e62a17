import { api } from '../lib/identity.js';
import { activeOrgName, activeOrgOrHint } from '../lib/org.js';
import { actionButton, field, form, formatTime, h, section } from '../lib/ui.js';

export default {
  path: '/org/members',
  title: 'Members and invitations',
  order: 60,
  nav: 'org',
  navLabel: 'Members',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    const reload = () => ctx.navigate('/org/members', { replace: true });
    const [members, roles] = await Promise.all([api('GET', `/orgs/${orgId}/members`), api('GET', `/orgs/${orgId}/roles`)]);
    // Whether the caller may invite is the server's call (members.invite): ask, and hide the section on 403.
    const invites = await api('GET', `/orgs/${orgId}/invites`).catch((error) => {
      if (error.status === 403) return null;
      throw error;
    });
    const canInvite = invites !== null;
    const roleOptions = roles.map((role) => ({ value: role.slug, label: role.name }));
    const roleNames = (slugs) => slugs.map((slug) => roles.find((role) => role.slug === slug)?.name ?? slug).join(', ');

    const memberRow = (member) => {
      const who = member.email ?? member.display_name ?? member.user_id;
      const roleSelect = h('select', { 'aria-label': `Role of ${who}` }, roleOptions.map((option) => h('option', { value: option.value, selected: member.roles.includes(option.value) }, option.label)));
      return h(
        'tr',
        {},
        h('td', {}, who),
        h('td', {}, member.status),
        h('td', {}, roleNames(member.roles)),
        h(
          'td',
          {},
          member.status === 'invited' ? null : h('div', { class: 'actions' }, [
            roleSelect,
            actionButton('Set role', async () => { await api('PATCH', `/orgs/${orgId}/members/${member.user_id}/roles`, { role_slugs: [roleSelect.value] }); await reload(); }, { className: 'secondary', ariaLabel: `Set role of ${who}` }),
            actionButton(member.status === 'suspended' ? 'Reactivate' : 'Suspend', async () => {
              await api('PATCH', `/orgs/${orgId}/members/${member.user_id}`, { status: member.status === 'suspended' ? 'active' : 'suspended' });
              await reload();
            }, { className: 'secondary', ariaLabel: `${member.status === 'suspended' ? 'Reactivate' : 'Suspend'} ${who}` }),
            actionButton('Remove', async () => { await api('DELETE', `/orgs/${orgId}/members/${member.user_id}`); await reload(); }, { className: 'danger', ariaLabel: `Remove ${who}` }),
          ]),
        ),
      );
    };

    main.append(
      h('p', {}, 'Organization: ', h('strong', {}, activeOrgName(ctx))),
      section(
        'Members',
        h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Member'), h('th', {}, 'Status'), h('th', {}, 'Roles'), h('th', {}, 'Actions'))), h('tbody', {}, members.map(memberRow))),
      ),
      ...(!canInvite
        ? []
        : [section(
            'Invitations',
            form({
              submit: 'Send invitation',
              fields: [field({ name: 'email', label: 'E-mail', type: 'email' }), field({ name: 'role', label: 'Role', options: roleOptions, value: 'member' })],
              onSubmit: async ({ email, role }) => {
                await api('POST', `/orgs/${orgId}/invites`, { email, role_slugs: [role] });
                await reload();
              },
            }),
            invites.length === 0
              ? h('p', {}, 'No pending invitations.')
              : h(
                  'table',
                  {},
                  h('thead', {}, h('tr', {}, h('th', {}, 'E-mail'), h('th', {}, 'Roles'), h('th', {}, 'Expires'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
                  h('tbody', {}, invites.map((invite) => h('tr', {}, h('td', {}, invite.email), h('td', {}, roleNames(invite.role_slugs)), h('td', {}, formatTime(invite.expires_at)),
                    h('td', {}, actionButton('Revoke', async () => { await api('DELETE', `/orgs/${orgId}/invites/${invite.id}`); await reload(); }, { className: 'secondary', ariaLabel: `Revoke the invitation to ${invite.email}` }))))),
                ),
          )]),
    );
  },
};
