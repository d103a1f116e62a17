/**
 * Every route that names an organization or a user in its path declares what the caller
 * needs there, so the access policy decides it (docs/security.md, "One access policy"). A
 * route added without a requirement fails here before it can serve anyone's data.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { servicesOf } from '../../src/create-identity-router.js';
import { allRoutes } from '../../src/http/routes/index.js';
import type { RouteDefinition } from '../../src/http/route.js';
import { Harness } from '../helpers/harness.js';

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(() => h.close());

/** What the policy would check for a route, or why it checks nothing. */
function undeclared(routes: RouteDefinition[]): string[] {
  const missing: string[] = [];
  for (const route of routes) {
    const name = `${route.method.toUpperCase()} ${route.path}`;
    if (route.path.includes(':orgId') && route.permission === undefined && route.member !== true) missing.push(`${name}: names an organization but declares no permission or membership`);
    if (route.path.includes(':userId') && !route.path.includes(':orgId') && route.user === undefined) missing.push(`${name}: names a user but declares no self-or-permission rule`);
    if ((route.path.includes(':orgId') || route.path.includes(':userId')) && route.auth !== 'bearer') missing.push(`${name}: names an organization or a user on a ${route.auth} route`);
  }
  return missing;
}

test('every route with :orgId or :userId in its path declares a requirement', () => {
  const routes = allRoutes(servicesOf(h.identity));
  assert.ok(routes.some((route) => route.path.includes(':orgId')) && routes.some((route) => route.path.includes(':userId')));
  assert.deepEqual(undeclared(routes), []);
});

test('the check itself fails for a route that declares nothing', () => {
  const route = allRoutes(servicesOf(h.identity)).find((candidate) => candidate.path === '/orgs/:orgId/members')!;
  const { permission: _permission, ...bare } = route;
  assert.equal(undeclared([bare as RouteDefinition]).length, 1);
  const user = allRoutes(servicesOf(h.identity)).find((candidate) => candidate.path === '/users/:userId' && candidate.method === 'get')!;
  const { user: _user, ...bareUser } = user;
  assert.equal(undeclared([bareUser as RouteDefinition]).length, 1);
});
