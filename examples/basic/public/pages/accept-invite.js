import { acceptTokens, api, signedIn } from '../lib/api.js';
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
          const { data } = await api('POST', '/auth/invites/accept', { token });
          acceptTokens((await api('POST', '/auth/switch-org', { organization_id: data.organization_id })).data);
          await ctx.reloadMe();
          await ctx.navigate('/orgs');
        },
      }),
    );
  },
};
