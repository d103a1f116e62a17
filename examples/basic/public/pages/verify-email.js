import { api, identity } from '../lib/identity.js';
import { field, form, h, section } from '../lib/ui.js';

export default {
  path: '/verify-email',
  title: 'Verify your e-mail address',
  render(main, ctx) {
    const token = ctx.params().get('token');
    // A button rather than verifying on load: mail scanners open links, people click buttons.
    if (token) {
      main.append(
        form({
          submit: 'Verify my e-mail address',
          onSubmit: async () => {
            await identity.verifyEmail(token);
            main.append(h('p', {}, h('a', { href: ctx.me ? '/account' : '/login' }, ctx.me ? 'Go to your account' : 'Sign in')));
            if (ctx.me) await ctx.reloadMe();
            return 'Your e-mail address is verified.';
          },
        }),
      );
    }
    main.append(
      section(
        'Send the link again',
        form({
          submit: 'Resend verification e-mail',
          fields: [field({ name: 'email', label: 'E-mail', type: 'email', autocomplete: 'email' })],
          onSubmit: async ({ email }) => {
            await api('POST', '/auth/email/verify/resend', { email });
            return 'If the address needs verifying, a new link is on its way.';
          },
        }),
      ),
    );
  },
};
