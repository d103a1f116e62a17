import { acceptTokens, api } from '../lib/api.js';
import { secondFactorChooser } from '../lib/second-factor.js';
import { field, form, h } from '../lib/ui.js';

/** Only our own paths: an open redirect would send a fresh session anywhere. */
const safeReturnTo = (value) => (value?.startsWith('/') && !value.startsWith('//') ? value : '/account');

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
      onSubmit: async ({ email, password }) => complete((await api('POST', '/auth/login', { email, password })).data),
    });
    /** Tokens sign in; an MFA gate answer (from any first factor) asks for the second one. */
    const complete = async (data) => {
      if (!data.mfa_required) return finish(data);
      // The ticket is good only for challenge and verify, and only here.
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
    };
    const gate = h('div', {});
    // Other first factors (passkeys, social sign-in) come from modules exporting signInOption(ctx, complete).
    const others = ctx.signInOptions.map((option) => option(ctx, complete));
    main.append(
      passwordForm,
      gate,
      ...(others.length === 0 ? [] : [h('section', { 'aria-label': 'Other ways to sign in' }, h('h2', {}, 'Other ways to sign in'), h('div', { class: 'actions' }, others))]),
      h('p', {}, h('a', { href: '/forgot-password' }, 'Forgot your password?'), ' · ', h('a', { href: '/register' }, 'Create an account')),
    );
  },
};
