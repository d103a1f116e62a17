import { api } from '../lib/api.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, formatTime, h, section } from '../lib/ui.js';

export default {
  path: '/org/audit',
  title: 'Audit log',
  order: 80,
  nav: 'org',
  navLabel: 'Audit log',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    const rows = h('tbody', {});
    const more = h('div', {});
    const load = async (cursor) => {
      const { data } = await api('GET', `/orgs/${orgId}/audit-log?limit=25${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      rows.append(...data.events.map((event) => h('tr', {}, h('td', {}, formatTime(event.occurred_at)), h('td', {}, h('code', {}, event.type)), h('td', {}, event.actor_id ?? '—'))));
      more.replaceChildren(data.next_cursor ? actionButton('Load older events', () => load(data.next_cursor), { className: 'secondary' }) : h('p', {}, 'End of the log.'));
    };
    await load(null);
    main.append(section('Events, newest first', h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Event'), h('th', {}, 'Actor'))), rows), more));
  },
};
