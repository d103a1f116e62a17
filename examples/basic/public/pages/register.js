import { identity } from '../lib/identity.js';
import { field, form, h } from '../lib/ui.js';

export default {
  path: '/register',
  title: 'Create an account',
  order: 20,
  nav: 'public',
  navLabel: 'Register',
  render(main, ctx) {
    main.append(
      form({
        submit: 'Create account',
        fields: [
          field({ name: 'email', label: 'E-mail', type: 'email', autocomplete: 'email' }),
          field({ name: 'password', label: 'Password', type: 'password', autocomplete: 'new-password', hint: 'At least 8 characters; a passphrase is best.' }),
          field({ name: 'display_name', label: 'Display name', autocomplete: 'name', required: false }),
        ],
        onSubmit: async ({ email, password, display_name }) => {
          await identity.register({ email, password, ...(display_name ? { display_name } : {}) });
          return `Check ${email} for a verification link${ctx.development ? ' (in the development inbox)' : ''}.`;
        },
      }),
      h('p', {}, 'Already registered? ', h('a', { href: '/login' }, 'Sign in'), '.'),
    );
  },
};
