import { identity } from '../lib/identity.js';
import { signInCompleter } from '../lib/sign-in.js';
import { field, form, h } from '../lib/ui.js';

export default {
  path: '/login',
  title: 'Sign in',
  order: 10,
  nav: 'public',
  render(main, ctx) {
    const passwordForm = form({
      submit: 'Sign in',
      fields: [
        field({ name: 'email', label: 'E-mail', type: 'email', autocomplete: 'username' }),
        field({ name: 'password', label: 'Password', type: 'password', autocomplete: 'current-password' }),
      ],
      onSubmit: async ({ email, password }) => complete(await identity.login({ email, password })),
    });
    /** A session signs in; the MFA gate (after any first factor) asks for the second one. */
    const gate = h('div', {});
    const complete = signInCompleter(ctx, { gate, returnTo: ctx.params().get('return_to'), onGate: () => passwordForm.remove() });
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
