import { acceptTokens, api } from '../lib/api.js';
import { secondFactorChooser } from '../lib/second-factor.js';
import { field, form, h } from '../lib/ui.js';

/** Only our own paths: an open redirect would send a fresh session anywhere. */
const safeReturnTo = (value) => (value && value.startsWith('/') && !value.startsWith('//') ? value : '/account');

export default {
  path: '/login',
  title: 'Sign in',
  order: 10,
  nav: 'public',
  render(main, ctx) {
    const finish = async (tokens) => {
      acceptTokens(tokens);
      await ctx.reloadMe();
      await ctx.navigate(safeReturnTo(ctx.params().get('return_to')));
    };
    const passwordForm = form({
      submit: 'Sign in',
      fields: [
        field({ name: 'email', label: 'E-mail', type: 'email', autocomplete: 'username' }),
        field({ name: 'password', label: 'Password', type: 'password', autocomplete: 'current-password' }),
      ],
      onSubmit: async ({ email, password }) => {
        const { data } = await api('POST', '/auth/login', { email, password });
        if (!data.mfa_required) return finish(data);
        // The MFA gate: the ticket is good only for challenge and verify, and only here.
        const ticket = { token: data.mfa_token };
        gate.className = 'card';
        gate.replaceChildren(
          h('h2', {}, 'Second step'),
          secondFactorChooser({
            factors: data.factors,
            challenge: async (factorId) => (await api('POST', '/auth/mfa/challenge', { factor_id: factorId }, ticket)).data,
            verify: async (body) => finish((await api('POST', '/auth/mfa/verify', body, ticket)).data),
          }),
        );
        passwordForm.remove();
        gate.querySelector('input').focus();
      },
    });
    const gate = h('div', {});
    main.append(
      passwordForm,
      gate,
      h('p', {}, h('a', { href: '/forgot-password' }, 'Forgot your password?'), ' · ', h('a', { href: '/register' }, 'Create an account')),
    );
  },
};
