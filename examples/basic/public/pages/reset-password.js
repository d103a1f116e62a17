import { api, endSession } from '../lib/identity.js';
import { field, form, h } from '../lib/ui.js';

export default {
  path: '/reset-password',
  title: 'Choose a new password',
  render(main, ctx) {
    const token = ctx.params().get('token');
    if (!token) {
      main.append(h('p', {}, 'This page opens from the link in a password-reset e-mail. ', h('a', { href: '/forgot-password' }, 'Ask for one'), '.'));
      return;
    }
    main.append(
      form({
        submit: 'Set new password',
        fields: [field({ name: 'new_password', label: 'New password', type: 'password', autocomplete: 'new-password' })],
        onSubmit: async ({ new_password }) => {
          await api('POST', '/auth/password/reset', { token, new_password });
          await endSession(); // a reset ends every session, this one included
          await ctx.reloadMe();
          main.append(h('p', {}, h('a', { href: '/login' }, 'Sign in with the new password')));
          return 'Your password is changed and every session is signed out.';
        },
      }),
    );
  },
};
