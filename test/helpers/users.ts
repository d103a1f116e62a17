import { randomBytes, randomUUID } from 'node:crypto';
import { CORE_PERMISSIONS } from '../../src/services/access/permission-catalog.js';
import { decodeJwt, type Harness, type SignedUpUser } from './harness.js';

/** Physical table name under the harness's prefix (`mfaFactors` → `t1234_mfa_factors`). */
export function tableOf(h: Harness, key: string): string {
  return h.tablePrefix + key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/**
 * Makes `userId` a superadmin: through `identity.service.grantSuperadmin` once it exists,
 * otherwise by writing the global role (organization NULL, slug superadmin) and the grant.
 */
export async function grantSuperadmin(h: Harness, userId: string): Promise<void> {
  const service = h.identity.service as unknown as { grantSuperadmin?: (id: string) => Promise<void> };
  if (typeof service.grantSuperadmin === 'function') {
    await service.grantSuperadmin(userId);
    return;
  }
  const roles = tableOf(h, 'roles');
  const now = h.clock.now();
  let role = await h.knex(roles).whereNull('organization_id').andWhere({ slug: 'superadmin' }).first('id');
  if (!role) {
    role = { id: randomUUID() };
    await h.knex(roles).insert({
      id: role.id,
      organization_id: null,
      slug: 'superadmin',
      name: 'Superadmin',
      description: 'Every permission in every organization',
      is_system: true,
      permission_keys: JSON.stringify(CORE_PERMISSIONS.map((entry) => entry.key)),
      created_at: now,
      updated_at: now,
    });
  }
  await h.knex(tableOf(h, 'globalRoleGrants')).insert({ user_id: userId, role_id: role.id, created_at: now });
}

/** A signed-up, verified, logged-in superadmin. */
export async function signUpSuperadmin(h: Harness): Promise<SignedUpUser> {
  const admin = await h.signUp();
  await grantSuperadmin(h, admin.userId);
  return admin;
}

/**
 * An organization whose owners are `owners` (the first one creates it). Uses POST /orgs when
 * the organizations routes answer; otherwise writes the organization, its owner role and
 * the memberships directly, as the organizations work will.
 */
export async function createOrganizationOwnedBy(h: Harness, owners: SignedUpUser[]): Promise<{ organizationId: string; ownerRoleId: string }> {
  const [first, ...others] = owners;
  if (!first) throw new Error('an organization needs an owner');
  const now = h.clock.now();
  let organizationId: string;
  const viaHttp = await h.post('/orgs', { name: `Acme ${randomBytes(3).toString('hex')}` }, { token: first.accessToken });
  if (viaHttp.status === 201) {
    organizationId = viaHttp.body.data.id;
  } else {
    organizationId = randomUUID();
    await h.knex(tableOf(h, 'organizations')).insert({
      id: organizationId,
      name: 'Acme',
      slug: `acme-${randomBytes(4).toString('hex')}`,
      status: 'active',
      require_mfa: false,
      created_at: now,
      updated_at: now,
    });
    const ownerKeys = CORE_PERMISSIONS.map((entry) => entry.key).filter((key) => !key.startsWith('users.'));
    await h.knex(tableOf(h, 'roles')).insert([
      { id: randomUUID(), organization_id: organizationId, slug: 'owner', name: 'Owner', description: null, is_system: true, permission_keys: JSON.stringify(ownerKeys), created_at: now, updated_at: now },
      { id: randomUUID(), organization_id: organizationId, slug: 'member', name: 'Member', description: null, is_system: true, permission_keys: JSON.stringify(['org.read', 'members.read', 'roles.read']), created_at: now, updated_at: now },
    ]);
    await addMember(h, organizationId, first.userId, 'owner');
  }
  const ownerRole = await h.knex(tableOf(h, 'roles')).where({ organization_id: organizationId, slug: 'owner' }).first('id');
  for (const owner of others) await addMember(h, organizationId, owner.userId, 'owner');
  return { organizationId, ownerRoleId: String(ownerRole.id) };
}

/** An active (or other status) membership holding the organization's role `roleSlug`. */
export async function addMember(h: Harness, organizationId: string, userId: string, roleSlug: string, status = 'active'): Promise<void> {
  const now = h.clock.now();
  const role = await h.knex(tableOf(h, 'roles')).where({ organization_id: organizationId, slug: roleSlug }).first('id');
  if (!role) throw new Error(`no role ${roleSlug} in ${organizationId}`);
  const membershipId = randomUUID();
  await h.knex(tableOf(h, 'memberships')).insert({ id: membershipId, organization_id: organizationId, user_id: userId, status, created_at: now, updated_at: now });
  await h.knex(tableOf(h, 'memberRoles')).insert({ membership_id: membershipId, role_id: role.id });
}

/** A pending invitation row addressed to `email` (the invite routes belong to another area). */
export async function insertPendingInvite(h: Harness, organizationId: string, email: string): Promise<string> {
  const now = h.clock.now();
  const id = randomUUID();
  await h.knex(tableOf(h, 'invites')).insert({
    id,
    organization_id: organizationId,
    email,
    role_slugs: JSON.stringify(['owner']),
    token_hash: randomBytes(32).toString('hex'),
    invited_by: null,
    status: 'pending',
    pending_email: email,
    created_at: now,
    updated_at: now,
    expires_at: now + 7 * 24 * 3600 * 1000,
  });
  return id;
}

/** A confirmed TOTP factor written directly (the MFA work enrolls them through HTTP). */
export async function insertConfirmedTotpFactor(h: Harness, userId: string): Promise<string> {
  const now = h.clock.now();
  const id = randomUUID();
  await h.knex(tableOf(h, 'mfaFactors')).insert({
    id,
    user_id: userId,
    type: 'totp',
    label: null,
    destination: null,
    secret_sealed: 'sealed-placeholder',
    is_default: true,
    confirmed_at: now,
    created_at: now,
  });
  return id;
}

/** Every second-factor row a user can have: an e-mail factor with a challenge, a login ticket, recovery codes. */
export async function insertSecondFactorData(h: Harness, userId: string): Promise<void> {
  const now = h.clock.now();
  const factorId = randomUUID();
  await h.knex(tableOf(h, 'mfaFactors')).insert({ id: factorId, user_id: userId, type: 'email', destination: 'second@example.com', is_default: false, created_at: now });
  await h.knex(tableOf(h, 'otpChallenges')).insert({
    id: randomUUID(),
    user_id: userId,
    factor_id: factorId,
    purpose: 'enroll',
    channel: 'email',
    code_hash: randomBytes(32).toString('hex'),
    attempts: 0,
    created_at: now,
    expires_at: now + 300_000,
  });
  await h.knex(tableOf(h, 'mfaTickets')).insert({ id: randomUUID(), user_id: userId, failed_attempts: 0, created_at: now, expires_at: now + 300_000 });
  await h.knex(tableOf(h, 'recoveryCodes')).insert({ id: randomUUID(), user_id: userId, batch_id: randomUUID(), code_hash: randomBytes(32).toString('hex'), created_at: now });
}

/** How many rows of `key` belong to `userId`. */
export async function countRowsOf(h: Harness, key: string, userId: string): Promise<number> {
  const row = await h.knex(tableOf(h, key)).where({ user_id: userId }).count({ count: '*' }).first();
  return Number(row?.count ?? 0);
}

/** The session id behind an access token. */
export function sessionIdOf(accessToken: string): string {
  return String(decodeJwt(accessToken).sid);
}
