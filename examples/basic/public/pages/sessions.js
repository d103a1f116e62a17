import { api, identity } from '../lib/identity.js';
import { actionButton, describeDevice, formatTime, h, section } from '../lib/ui.js';

export default {
  path: '/sessions',
  title: 'Sessions',
  order: 40,
  nav: 'account',
  auth: true,
  async render(main, ctx) {
    const data = await api('GET', '/auth/sessions');
    const signOut = (everywhere) => async () => {
      await (everywhere ? identity.logoutAll() : identity.logout());
      await ctx.reloadMe();
      await ctx.navigate('/login');
    };
    main.append(
      section(
        'Where you are signed in',
        h(
          'table',
          {},
          h('thead', {}, h('tr', {}, h('th', {}, 'Device'), h('th', {}, 'IP'), h('th', {}, 'Signed in'), h('th', {}, 'Last used'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
          h(
            'tbody',
            {},
            data.sessions.map((session) =>
              h(
                'tr',
                {},
                h('td', { title: session.user_agent ?? null }, describeDevice(session.user_agent), session.current ? h('strong', {}, ' (this session)') : null),
                h('td', {}, session.ip ?? '—'),
                h('td', {}, formatTime(session.created_at)),
                h('td', {}, formatTime(session.last_used_at)),
                h('td', {}, session.current ? null : actionButton('Revoke', async () => {
                  await api('DELETE', `/auth/sessions/${session.id}`);
                  await ctx.navigate('/sessions', { replace: true });
                }, { className: 'secondary', ariaLabel: `Revoke the session from ${formatTime(session.created_at)}` })),
              ),
            ),
          ),
        ),
      ),
      // "Log out" (this session) is in the header on every page.
      section('Sign out everywhere', h('p', {}, 'Ends every session of the account, this one included.'), h('div', { class: 'actions' }, actionButton('Log out everywhere', signOut(true), { className: 'danger' }))),
    );
  },
};
