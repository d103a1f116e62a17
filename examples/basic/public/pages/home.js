import { h } from '../lib/ui.js';

export default {
  path: '/',
  title: 'Identity Router Example',
  render(main, ctx) {
    main.append(
      h('p', {}, 'A small web app on top of identity-router: every page here talks to the router mounted at /api through its browser client, identity-router/client.'),
      ctx.me
        ? h('p', {}, 'Signed in as ', h('strong', {}, ctx.me.email), '. ', h('a', { href: '/account' }, 'Your account'))
        : h('p', {}, h('a', { href: '/register' }, 'Create an account'), ' or ', h('a', { href: '/login' }, 'sign in'), '.'),
      ...(ctx.development
        ? [
            h('p', {}, 'Mail and text messages go to the ', h('a', { href: '/dev/inbox' }, 'development inbox'), '.'),
            h('p', { class: 'meta' }, 'Development limits: rate limits and code budgets are relaxed so you can click through every flow again; production uses the library defaults (docs/configuration.md).'),
          ]
        : []),
    );
  },
};
