/**
 * The scale bench's data (`npm run bench -- --scale`), written with bulk inserts into the
 * schema the router's migrations made, never through HTTP: `users` accounts, `users / 10`
 * organizations with one member each, and `users / 10` more members in the bench's own
 * organization (the one its member-page row reads). Every account shares one password hash,
 * so any of them could sign in; the bench signs in as the accounts it registered itself.
 */
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { tableNames } from '../src/store/table-names.js';

/**
 * Rows per INSERT: Knex writes SQLite's multi-row insert as a compound SELECT, which SQLite
 * caps at 500 terms; PostgreSQL's bound is 65,535 values, 2,000 of the widest row here.
 */
const chunkOf = (trx: Knex.Transaction) => (trx.client.config.client === 'pg' ? 2000 : 500);

export interface BulkSeedResult {
  users: number;
  organizations: number;
  membersAdded: number;
  seconds: number;
}

async function insertChunks(trx: Knex.Transaction, table: string, count: number, row: (i: number) => Record<string, unknown>): Promise<void> {
  const chunk = chunkOf(trx);
  for (let start = 0; start < count; start += chunk) {
    const rows: Record<string, unknown>[] = [];
    for (let i = start; i < Math.min(count, start + chunk); i += 1) rows.push(row(i));
    await trx(table).insert(rows);
  }
}

export async function bulkSeed(knex: Knex, options: { users: number; passwordHash: string; organizationId: string; memberRoleId: string; prefix?: string }): Promise<BulkSeedResult> {
  const started = performance.now();
  const table = tableNames(options.prefix ?? 'identity_');
  const now = Date.now();
  const organizations = Math.floor(options.users / 10);
  const membersAdded = Math.floor(options.users / 10);
  const userIds: string[] = Array.from({ length: options.users }, () => randomUUID());
  // One transaction per table keeps SQLite's commits (and PostgreSQL's WAL flushes) few.
  await knex.transaction((trx) =>
    insertChunks(trx, table.users, options.users, (i) => ({
      id: userIds[i],
      email: `scale${i}@bench.example`,
      email_verified: true,
      status: 'active',
      password_hash: options.passwordHash,
      created_at: now,
      updated_at: now,
    })),
  );
  const organizationIds = Array.from({ length: organizations }, () => randomUUID());
  const roleIds = Array.from({ length: organizations }, () => randomUUID());
  const membershipIds = Array.from({ length: organizations + membersAdded }, () => randomUUID());
  await knex.transaction(async (trx) => {
    await insertChunks(trx, table.organizations, organizations, (i) => ({ id: organizationIds[i], name: `Scale ${i}`, slug: `scale-${i}`, status: 'active', require_mfa: false, created_at: now, updated_at: now }));
    await insertChunks(trx, table.roles, organizations, (i) => ({
      id: roleIds[i],
      organization_id: organizationIds[i],
      slug: 'member',
      name: 'Member',
      is_system: true,
      permission_keys: JSON.stringify(['members.read']),
      created_at: now,
      updated_at: now,
    }));
    // Organization i's one member is user i; the bench's organization takes the next users / 10.
    await insertChunks(trx, table.memberships, organizations, (i) => ({ id: membershipIds[i], organization_id: organizationIds[i], user_id: userIds[i], status: 'active', created_at: now, updated_at: now }));
    await insertChunks(trx, table.memberships, membersAdded, (i) => ({
      id: membershipIds[organizations + i],
      organization_id: options.organizationId,
      user_id: userIds[organizations + i],
      status: 'active',
      created_at: now + i,
      updated_at: now,
    }));
    await insertChunks(trx, table.memberRoles, organizations + membersAdded, (i) => ({ membership_id: membershipIds[i], role_id: i < organizations ? roleIds[i] : options.memberRoleId }));
  });
  if (knex.client.config.client === 'pg') await knex.raw('ANALYZE');
  return { users: options.users, organizations, membersAdded, seconds: (performance.now() - started) / 1000 };
}
