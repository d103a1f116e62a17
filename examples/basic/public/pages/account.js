import { api, endSession } from '../lib/identity.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

const ownedOrgs = (me) => me.orgs.filter((org) => org.roles.includes('owner'));

export default {
  path: '/account',
  title: 'Your account',
  order: 10,
  nav: 'account',
  navLabel: 'Account',
  auth: true,
  render(main, ctx) {
    const me = ctx.me;
    main.append(
      section(
        'Profile',
        h('p', {}, 'E-mail: ', h('strong', {}, me.email), me.email_verified ? ' (verified)' : ' (not verified yet: ', me.email_verified ? null : h('a', { href: '/verify-email' }, 'resend the link'), me.email_verified ? null : ')'),
        h('p', {}, `Recovery codes left: ${me.recovery_codes_remaining}`, me.recovery_codes_remaining <= 3 && me.recovery_codes_remaining > 0 ? ' (running low: make new ones on the Two-step sign-in page)' : ''),
        form({
          submit: 'Save profile',
          fields: [field({ name: 'display_name', label: 'Display name', value: me.display_name ?? '', autocomplete: 'name' })],
          onSubmit: async ({ display_name }) => {
            await api('PATCH', `/users/${me.id}`, { display_name });
            await ctx.reloadMe();
            return 'Saved.';
          },
        }),
      ),
      // Sections other modules add (pages/social.js: linked sign-in accounts).
      ...ctx.accountSections.map((accountSection) => accountSection(ctx)),
      section(
        'Delete your account',
        h('p', {}, 'Your profile is erased and every session ends. This cannot be undone.'),
        ...(ownedOrgs(me).length === 0
          ? []
          : [h('p', {}, `You own ${ownedOrgs(me).map((org) => org.name).join(', ')}: an organization keeps at least one owner, so first `, h('a', { href: '/orgs' }, 'transfer ownership or delete it'), ' (switch to it on the Organizations page).')]),
        actionButton(
          'Delete my account',
          async () => {
            if (!confirm('Delete your account for good?')) return;
            await api('DELETE', `/users/${me.id}`);
            await endSession();
            await ctx.reloadMe();
            await ctx.navigate('/');
            document.getElementById('main').append(h('p', { role: 'status', class: 'notice' }, 'Your account is deleted.'));
          },
          { className: 'danger' },
        ),
      ),
    );
  },
};
