import { api } from '../lib/identity.js';
import { field, form } from '../lib/ui.js';

export default {
  path: '/forgot-password',
  title: 'Forgot your password?',
  render(main, ctx) {
    main.append(
      form({
        submit: 'Send reset link',
        fields: [field({ name: 'email', label: 'E-mail', type: 'email', autocomplete: 'email' })],
        onSubmit: async ({ email }) => {
          await api('POST', '/auth/password/forgot', { email });
          return `If ${email} has an account, a reset link is on its way${ctx.development ? ' (see the development inbox)' : ''}.`;
        },
      }),
    );
  },
};
