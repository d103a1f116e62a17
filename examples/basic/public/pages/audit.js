import { api } from '../lib/identity.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, formatTime, h, section } from '../lib/ui.js';

/** Data fields that hold role slugs, shown by the roles' names. */
const ROLE_FIELDS = ['role_slugs', 'roles', 'from', 'to'];

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
    // People by e-mail and roles by name: the log itself holds ids and slugs.
    const [members, roles] = await Promise.all([api('GET', `/orgs/${orgId}/members?limit=100`), api('GET', `/orgs/${orgId}/roles`)]);
    const people = new Map(members.map((member) => [member.user_id, member.email ?? member.display_name]));
    if (ctx.me) people.set(ctx.me.id, ctx.me.email);
    const roleNames = new Map(roles.map((role) => [role.slug, role.name]));
    const person = (id) => (id ? (people.get(id) ?? 'a former member') : '—');
    const roleList = (value) => (Array.isArray(value) ? value.map((slug) => roleNames.get(slug) ?? slug).join(', ') || 'none' : String(value));
    const details = (event) => {
      const parts = [];
      if (event.user_id && event.user_id !== event.actor_id) parts.push(`member: ${person(event.user_id)}`);
      for (const field of ROLE_FIELDS) if (event.data?.[field] !== undefined) parts.push(`${field.replace('_slugs', 's')}: ${roleList(event.data[field])}`);
      if (event.type.startsWith('role.') && event.data?.slug) parts.push(`role: ${roleNames.get(event.data.slug) ?? event.data.slug}`);
      if (event.data?.name) parts.push(`name: ${event.data.name}`);
      return parts.join('; ');
    };
    const rows = h('tbody', {});
    const more = h('div', {});
    const load = async (cursor) => {
      const data = await api('GET', `/orgs/${orgId}/audit-log?limit=25${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      rows.append(...data.events.map((event) => h('tr', {}, h('td', {}, formatTime(event.occurred_at)), h('td', {}, h('code', {}, event.type)), h('td', {}, person(event.actor_id)), h('td', {}, details(event)))));
      more.replaceChildren(data.next_cursor ? actionButton('Load older events', () => load(data.next_cursor), { className: 'secondary' }) : h('p', {}, 'End of the log.'));
    };
    await load(null);
    main.append(section('Events, newest first', h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Event'), h('th', {}, 'Who'), h('th', {}, 'Details'))), rows), more));
  },
};
