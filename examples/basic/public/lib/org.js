import { h } from './ui.js';

/** Organization pages act on the session's active organization; without one they say where to pick it. */
export function activeOrgOrHint(main, ctx) {
  const orgId = ctx.activeOrgId;
  if (!orgId) main.append(h('p', {}, 'No active organization. ', h('a', { href: '/orgs' }, 'Create or switch to one'), ' first.'));
  return orgId;
}

export const activeOrgName = (ctx) => ctx.me?.orgs.find((org) => org.id === ctx.activeOrgId)?.name ?? '';
