import { api } from '../lib/identity.js';
import { field, form } from '../lib/ui.js';

export default {
  path: '/password',
  title: 'Change your password',
  order: 30,
  nav: 'account',
  navLabel: 'Password',
  auth: true,
  render(main) {
    main.append(
      form({
        submit: 'Change password',
        fields: [
          field({ name: 'current_password', label: 'Current password', type: 'password', autocomplete: 'current-password' }),
          field({ name: 'new_password', label: 'New password', type: 'password', autocomplete: 'new-password' }),
        ],
        onSubmit: async (values, element) => {
          await api('POST', '/auth/password/change', values);
          element.reset();
          return 'Password changed. Your other sessions are signed out.';
        },
      }),
    );
  },
};
