/**
 * Member-list paging cost versus organization size (docs/organizations.md "Scale").
 *
 *   npx tsx bench/org-members-page.ts
 *
 * Builds two organizations on SQLite (100 and 10,000 members, inserted in bulk through
 * Knex), then times one page of GET members through the service layer at many positions
 * (first page and pages deep in the list, reached by cursor). Keyset pagination on the
 * (organization_id, user_id) index should make the median page time independent of size:
 * the ratio printed at the end should be close to 1 (OFFSET paging would grow linearly).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import knexFactory, { type Knex } from 'knex';
import { createIdentityRouter } from '../src/index.js';
import type { Principal } from '../src/services/access/principal.js';
import type { AccessGrant } from '../src/services/access/access-policy.js';
import { CORE_PERMISSIONS } from '../src/services/access/permission-catalog.js';
import { encodeCursor } from '../src/services/shared/pagination.js';

const SIZES = [100, 10_000];
const PAGE_SIZE = 50;
const SAMPLES = 300;
const PREFIX = 'bench_';

async function seedOrganization(knex: Knex, members: number): Promise<{ organizationId: string; ownerId: string; userIds: string[] }> {
  const now = Date.now();
  const organizationId = randomUUID();
  await knex(`${PREFIX}organizations`).insert({ id: organizationId, name: `Org ${members}`, slug: `org-${members}`, status: 'active', require_mfa: false, created_at: now, updated_at: now });
  const memberRoleId = randomUUID();
  const ownerRoleId = randomUUID();
  await knex(`${PREFIX}roles`).insert([
    { id: ownerRoleId, organization_id: organizationId, slug: 'owner', name: 'Owner', is_system: true, permission_keys: JSON.stringify(['members.read', 'members.invite']), created_at: now, updated_at: now },
    { id: memberRoleId, organization_id: organizationId, slug: 'member', name: 'Member', is_system: true, permission_keys: JSON.stringify(['members.read']), created_at: now, updated_at: now },
  ]);
  const userIds: string[] = [];
  const users: Record<string, unknown>[] = [];
  const memberships: Record<string, unknown>[] = [];
  const memberRoles: Record<string, unknown>[] = [];
  for (let i = 0; i < members; i += 1) {
    const userId = randomUUID();
    const membershipId = randomUUID();
    userIds.push(userId);
    users.push({ id: userId, email: `m${i}-${organizationId.slice(0, 8)}@bench.test`, email_verified: true, status: 'active', created_at: now, updated_at: now });
    memberships.push({ id: membershipId, organization_id: organizationId, user_id: userId, status: i % 10 === 0 ? 'suspended' : 'active', created_at: now + i, updated_at: now });
    memberRoles.push({ membership_id: membershipId, role_id: i === 0 ? ownerRoleId : memberRoleId });
  }
  await knex.transaction(async (trx) => {
    await trx.batchInsert(`${PREFIX}users`, users, 500);
    await trx.batchInsert(`${PREFIX}memberships`, memberships, 500);
    await trx.batchInsert(`${PREFIX}member_roles`, memberRoles, 500);
  });
  return { organizationId, ownerId: userIds[0]!, userIds: [...userIds].sort() };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'identity-bench-'));
  const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: join(dir, 'bench.sqlite') }, useNullAsDefault: true });
  const identity = createIdentityRouter(
    { database: knex, tablePrefix: PREFIX, secret: 'bench-secret-that-is-at-least-32-characters', issuer: 'https://bench.test', auth: { rateLimits: false } } as never,
    { logger: { info: () => {}, warn: () => {}, error: () => {} } },
  );
  await identity.ready;
  try {
    const results: Array<{ size: number; medianMs: number; p90Ms: number }> = [];
    for (const size of SIZES) {
      const { organizationId, ownerId, userIds } = await seedOrganization(knex, size);
      const principal = { kind: 'session', userId: ownerId, organizationId } as Principal;
      // What the route's admission hands the service: an owner's authority, resolved once.
      const authority = { superadmin: false, member: true, roles: ['owner'], permissions: new Set(CORE_PERMISSIONS.map((entry) => entry.key)) };
      const grant: AccessGrant = { actor: principal, principal, requirement: { auth: 'bearer', permission: 'members.read' }, organizationId, authority, recheck: async () => authority };
      // Warm-up, then sample pages at random depths (the cursor is the last user id of the previous page).
      for (let i = 0; i < 20; i += 1) await identity.service.members.list(grant, { limit: PAGE_SIZE });
      const timings: number[] = [];
      for (let i = 0; i < SAMPLES; i += 1) {
        const depth = Math.floor(Math.random() * Math.max(1, userIds.length - PAGE_SIZE));
        const cursor = depth === 0 ? undefined : encodeCursor([userIds[depth - 1]!]);
        const started = performance.now();
        const page = await identity.service.members.list(grant, { limit: PAGE_SIZE, ...(cursor ? { cursor } : {}) });
        timings.push(performance.now() - started);
        if (page.members.length === 0) throw new Error('empty page');
      }
      const sorted = [...timings].sort((a, b) => a - b);
      results.push({ size, medianMs: median(timings), p90Ms: sorted[Math.floor(sorted.length * 0.9)]! });
    }
    console.log(`GET members, ${PAGE_SIZE} per page, ${SAMPLES} pages at random depths (SQLite, service layer)`);
    for (const { size, medianMs, p90Ms } of results) console.log(`  ${String(size).padStart(6)} members: median ${medianMs.toFixed(3)} ms, p90 ${p90Ms.toFixed(3)} ms`);
    const ratio = results[results.length - 1]!.medianMs / results[0]!.medianMs;
    console.log(`  ratio (${SIZES[SIZES.length - 1]} / ${SIZES[0]}): ${ratio.toFixed(2)}x`);
  } finally {
    await identity.close();
    await knex.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
