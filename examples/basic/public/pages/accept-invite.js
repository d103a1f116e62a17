import { api, identity, signedIn } from '../lib/identity.js';
import { form, h } from '../lib/ui.js';

export default {
  path: '/accept-invite',
  title: 'Join an organization',
  render(main, ctx) {
    const token = ctx.params().get('token');
    if (!token) {
      main.append(h('p', {}, 'This page opens from the link in an invitation e-mail.'));
      return;
    }
    if (!signedIn()) {
      const here = encodeURIComponent(location.pathname + location.search);
      main.append(h('p', {}, 'Sign in with the invited address to accept. ', h('a', { href: `/login?return_to=${here}` }, 'Sign in'), ' or ', h('a', { href: '/register' }, 'create an account'), ' first.'));
      return;
    }
    main.append(
      form({
        submit: 'Accept invitation',
        onSubmit: async () => {
          const accepted = await api('POST', '/auth/invites/accept', { token });
          await identity.switchOrg(accepted.organization_id);
          await ctx.reloadMe();
          await ctx.navigate('/orgs');
        },
      }),
    );
  },
};
