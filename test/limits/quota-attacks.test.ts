/*
 * Quotas: what a signed-in caller can make the router store without bound. Rate limits bound how
 * fast a member creates API keys, custom roles and invitations; nothing bounded how many piled up,
 * so one member (or a script with a stolen session) could fill the database and make the unpaged
 * lists (`GET /orgs/{id}/api-keys`, `GET /orgs/{id}/roles`) as slow as it liked. Each test seeds
 * the rows up to one under the cap straight into the database (the routes are too slow for a
 * thousand), then drives the last creations over HTTP; the races run on PostgreSQL. Retired
 * recovery-code batches, kept for ever, are the last case. Frozen clock:
 *   node scripts/run-tests.mjs test/limits/quota-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { QUOTAS } from '../../src/services/limits/quotas.js';
import { ApiKeyRepository } from '../../src/store/api-key-repository.js';
import { OrgDomainRepository } from '../../src/store/sso-repository.js';
import { InviteRepository, MembershipRepository, RoleRepository } from '../../src/store/organization-repository.js';
import { Harness, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { loginForTicket, nextTotpCode, signUpWithTotp } from '../helpers/mfa.js';
import { type CreatedOrg, createOrg } from '../helpers/orgs.js';
import { fixtures, fixtureWebauthnConfig, registerRecorded } from '../helpers/passkeys.js';
import { StubDns, startSsoHarness, uniqueDomain } from '../helpers/sso.js';
import { tableOf } from '../helpers/users.js';

const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };
const DAY_MS = 24 * 3600 * 1000;

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

/** `count` API keys of `userId` in the organization, written straight to the table. */
async function seedApiKeys(org: CreatedOrg, userId: string, count: number, state: { revokedAt?: number; expiresAt?: number } = {}): Promise<void> {
  const now = h.clock.now();
  const rows = Array.from({ length: count }, () => ({
    id: randomUUID(),
    user_id: userId,
    organization_id: org.id,
    name: 'seeded',
    key_hash: randomBytes(32).toString('hex'),
    start: 'seeded00',
    permission_keys: JSON.stringify(['org.read']),
    created_at: now,
    expires_at: state.expiresAt ?? now + 90 * DAY_MS,
    revoked_at: state.revokedAt ?? null,
  }));
  await h.knex.batchInsert(tableOf(h, 'apiKeys'), rows, 200);
}

async function seedCustomRoles(org: CreatedOrg, count: number): Promise<void> {
  const now = h.clock.now();
  const rows = Array.from({ length: count }, (_, index) => ({
    id: randomUUID(),
    organization_id: org.id,
    slug: `seeded-${index}-${randomBytes(3).toString('hex')}`,
    name: `Seeded ${index}`,
    is_system: false,
    permission_keys: JSON.stringify(['org.read']),
    created_at: now,
    updated_at: now,
  }));
  await h.knex.batchInsert(tableOf(h, 'roles'), rows, 200);
}

async function seedInvites(org: CreatedOrg, count: number, state: { status?: string; expiresAt?: number } = {}): Promise<string[]> {
  const now = h.clock.now();
  const status = state.status ?? 'pending';
  const rows = Array.from({ length: count }, () => {
    const email = uniqueEmail('seeded');
    return {
      id: randomUUID(),
      organization_id: org.id,
      email,
      role_slugs: JSON.stringify(['member']),
      token_hash: randomBytes(32).toString('hex'),
      invited_by: org.owner.userId,
      status,
      pending_email: status === 'pending' ? email : null,
      created_at: now,
      updated_at: now,
      expires_at: state.expiresAt ?? now + 7 * DAY_MS,
    };
  });
  await h.knex.batchInsert(tableOf(h, 'invites'), rows, 200);
  return rows.map((row) => row.email);
}

function createKey(org: CreatedOrg, name = 'script') {
  return h.post(`/orgs/${org.id}/api-keys`, { name, permission_keys: ['org.read'] }, { token: org.owner.token });
}

function createRole(org: CreatedOrg, slug = `role-${randomBytes(4).toString('hex')}`) {
  return h.post(`/orgs/${org.id}/roles`, { name: 'Extra', slug, permission_keys: ['org.read'] }, { token: org.owner.token });
}

function invite(org: CreatedOrg, email = uniqueEmail('invitee')) {
  return h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token });
}

function assertQuotaRefusal(response: { status: number; body: any; text: string }, max: number, context: string): void {
  assert.equal(response.status, 409, `${context}: ${response.text}`);
  assert.equal(response.body.error, 'conflict', context);
  assert.match(response.body.message, new RegExp(`at most ${max} `), `${context}: the message names the limit`);
}

type Answer = { status: number; body: any; text: string };

/** Six creations at once at the last slot: exactly one passes the cap. */
async function oneOfSixAtTheLastSlot(create: (index: number) => Promise<Answer>): Promise<void> {
  const answers = await Promise.all(Array.from({ length: 6 }, (_, index) => create(index)));
  assert.deepEqual(answers.map((answer) => answer.status).sort(), [201, 409, 409, 409, 409, 409], answers.map((answer) => answer.text).join('\n'));
}

/** A creation run inside another one's count (PostgreSQL) waits for it to commit, then counts it and is refused. */
async function theSecondSeesTheFirst<P extends object>(harness: Harness, window: { prototype: P; method: any; when: (...args: any[]) => boolean }, create: () => Promise<Answer>, max: number): Promise<void> {
  const { outer, inner } = await withRequestInTheWindow(harness, window, create, create);
  assert.equal(outer.status, 201, outer.text);
  assert.ok(inner, 'the window was reached');
  assertQuotaRefusal(inner, max, 'the second creation, once the first committed');
}

describe('API keys per member of an organization', () => {
  const max = QUOTAS.apiKeysPerMember.max;

  test(`the ${max + 1}th live key is refused with 409 conflict, and nothing is written or emitted`, async () => {
    const org = await createOrg(h);
    await seedApiKeys(org, org.owner.userId, max - 1);
    const last = await createKey(org, 'last');
    assert.equal(last.status, 201, last.text);
    const before = h.events.filter((event) => event.type === 'api_key.created').length;
    const over = await createKey(org, 'one too many');
    assertQuotaRefusal(over, max, 'over the cap');
    assert.equal(h.events.filter((event) => event.type === 'api_key.created').length, before, 'no api_key.created for a refusal');
    const listed = await h.get(`/orgs/${org.id}/api-keys`, { token: org.owner.token });
    assert.equal(listed.body.data.keys.length, max, 'the list stops at the cap');
  });

  test('revoked and expired keys never count; revoking one frees a slot; another member has a cap of their own', async () => {
    const org = await createOrg(h);
    await seedApiKeys(org, org.owner.userId, 50, { revokedAt: h.clock.now() });
    await seedApiKeys(org, org.owner.userId, 50, { expiresAt: h.clock.now() });
    await seedApiKeys(org, org.owner.userId, max - 1);
    const last = await createKey(org, 'last');
    assert.equal(last.status, 201, 'revoked keys and keys expired at this instant leave their slots free');
    assertQuotaRefusal(await createKey(org), max, 'at the cap');
    assert.equal((await h.delete(`/orgs/${org.id}/api-keys/${last.body.data.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await createKey(org, 'after a revocation')).status, 201, 'a revoked key frees its slot');

    const other = await createOrg(h, { owner: org.owner });
    assert.equal((await createKey(other, 'elsewhere')).status, 201, "the cap is per organization: another organization's keys are not counted");
  });

  test('concurrent creations at the last slot: exactly one succeeds', async () => {
    const org = await createOrg(h);
    await seedApiKeys(org, org.owner.userId, max - 1);
    await oneOfSixAtTheLastSlot((index) => createKey(org, `parallel ${index}`));
    const live = await h.knex(tableOf(h, 'apiKeys')).where({ organization_id: org.id, user_id: org.owner.userId }).whereNull('revoked_at').count({ n: '*' }).first();
    assert.equal(Number(live?.n), max);
  });

  test('a creation committed inside another one\'s count waits for it, and then sees it', PG_ONLY, async () => {
    const org = await createOrg(h);
    await seedApiKeys(org, org.owner.userId, max - 1);
    await theSecondSeesTheFirst(h, { prototype: ApiKeyRepository.prototype, method: 'countLiveForMember', when: (orgId) => orgId === org.id }, () => createKey(org, 'raced'), max);
  });
});

describe('custom roles per organization', () => {
  const max = QUOTAS.customRolesPerOrganization.max;

  test(`the ${max + 1}th custom role is refused with 409; the system templates do not count; a deletion frees a slot`, async () => {
    const org = await createOrg(h);
    await seedCustomRoles(org, max - 1);
    const last = await createRole(org);
    assert.equal(last.status, 201, last.text);
    assertQuotaRefusal(await createRole(org), max, 'over the cap');
    const listed = await h.get(`/orgs/${org.id}/roles`, { token: org.owner.token });
    assert.equal(listed.body.data.filter((role: { is_system: boolean }) => !role.is_system).length, max);
    assert.equal((await h.delete(`/orgs/${org.id}/roles/${last.body.data.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await createRole(org)).status, 201, 'a deleted role frees its slot');
  });

  test('concurrent creations at the last slot: exactly one succeeds', async () => {
    const org = await createOrg(h);
    await seedCustomRoles(org, max - 1);
    await oneOfSixAtTheLastSlot(() => createRole(org));
  });

  test('a creation committed inside another one\'s count waits for it, and then sees it', PG_ONLY, async () => {
    const org = await createOrg(h);
    await seedCustomRoles(org, max - 1);
    await theSecondSeesTheFirst(h, { prototype: RoleRepository.prototype, method: 'countCustomInOrganization', when: (orgId) => orgId === org.id }, () => createRole(org), max);
  });
});

describe('pending invitations per organization', () => {
  const max = QUOTAS.pendingInvitesPerOrganization.max;

  test(`the ${max + 1}th pending invitation is refused with 409; accepted, revoked and expired ones do not count`, async () => {
    const org = await createOrg(h);
    await seedInvites(org, 20, { status: 'revoked' });
    await seedInvites(org, 20, { status: 'accepted' });
    const expired = await seedInvites(org, 20, { expiresAt: h.clock.now() });
    const live = await seedInvites(org, max - 1);
    const last = await invite(org);
    assert.equal(last.status, 201, last.text);
    const mailsBefore = h.mail.length;
    assertQuotaRefusal(await invite(org), max, 'a new address over the cap');
    assert.equal(h.mail.length, mailsBefore, 'no invitation mailed for a refusal');
    // Re-inviting a live invitation rotates its own row: no new slot, so the cap does not refuse it.
    assert.equal((await invite(org, live[0])).status, 201, 'a re-invite of a pending invitation at the cap');
    // An expired one revived by a re-invite takes a slot again, like a new one.
    assertQuotaRefusal(await invite(org, expired[0]), max, 'a re-invite of an expired invitation over the cap');
    assert.equal((await h.delete(`/orgs/${org.id}/invites/${last.body.data.id}`, { token: org.owner.token })).status, 200);
    assert.equal((await invite(org)).status, 201, 'a revoked invitation frees its slot');
  });

  test('concurrent invitations at the last slot: exactly one succeeds', async () => {
    const org = await createOrg(h);
    await seedInvites(org, max - 1);
    await oneOfSixAtTheLastSlot(() => invite(org));
  });

  test('an invitation committed inside another one\'s count waits for it, and then sees it', PG_ONLY, async () => {
    const org = await createOrg(h);
    await seedInvites(org, max - 1);
    await theSecondSeesTheFirst(h, { prototype: InviteRepository.prototype, method: 'countPendingInOrganization', when: (orgId) => orgId === org.id }, () => invite(org), max);
  });
});

describe('recovery-code batches', () => {
  // Threat: every regeneration retired the old batch by marking it, and kept its ten rows for
  // ever. One step-up, then the `authenticated` budget (600 a minute by default), wrote 6,000
  // dead rows a minute per account. Retired batches now go with the next regeneration.
  test('regenerating again and again keeps at most the live batch and the one it replaced', async () => {
    const user = await signUpWithTotp(h);
    let codes: string[] = user.recoveryCodes;
    for (let round = 0; round < 5; round += 1) {
      const regenerated = await h.post('/auth/mfa/recovery-codes/regenerate', undefined, { token: user.accessToken });
      assert.equal(regenerated.status, 200, regenerated.text);
      codes = regenerated.body.data.recovery_codes;
    }
    const rows = await h.knex(tableOf(h, 'recoveryCodes')).where({ user_id: user.userId }).count({ n: '*' }).first();
    assert.ok(Number(rows?.n) <= 20, `rows kept for one account after 5 regenerations: ${rows?.n}`);
    const me = await h.get('/auth/me', { token: user.accessToken });
    assert.equal(me.body.data.recovery_codes_remaining, 10, 'the live batch is whole');
    const { ticket } = await loginForTicket(h, user);
    assert.equal((await h.post('/auth/mfa/verify', { code: user.recoveryCodes[0] }, { token: ticket })).status, 422, 'a code of a deleted batch is refused');
    assert.equal((await h.post('/auth/mfa/verify', { code: codes[0] }, { token: ticket })).status, 200, 'a code of the live batch still works');
  });
});

/** `count` organizations owned by `userId`, written straight to the tables (status `deleted` for tombstones). */
async function seedOwnedOrganizations(userId: string, count: number, state: { status?: string; membershipStatus?: string; roleSlug?: string } = {}): Promise<void> {
  const now = h.clock.now();
  const organizations = [];
  const roles = [];
  const memberships = [];
  const memberRoles = [];
  for (let index = 0; index < count; index += 1) {
    const organizationId = randomUUID();
    const roleId = randomUUID();
    const membershipId = randomUUID();
    organizations.push({ id: organizationId, name: 'Seeded', slug: `seeded-${randomBytes(6).toString('hex')}`, status: state.status ?? 'active', require_mfa: false, created_at: now, updated_at: now });
    roles.push({ id: roleId, organization_id: organizationId, slug: state.roleSlug ?? 'owner', name: 'Owner', is_system: true, permission_keys: JSON.stringify(['org.read']), created_at: now, updated_at: now });
    memberships.push({ id: membershipId, organization_id: organizationId, user_id: userId, status: state.membershipStatus ?? 'active', created_at: now, updated_at: now });
    memberRoles.push({ membership_id: membershipId, role_id: roleId });
  }
  await h.knex.batchInsert(tableOf(h, 'organizations'), organizations, 200);
  await h.knex.batchInsert(tableOf(h, 'roles'), roles, 200);
  await h.knex.batchInsert(tableOf(h, 'memberships'), memberships, 200);
  await h.knex.batchInsert(tableOf(h, 'memberRoles'), memberRoles, 200);
}

describe('organizations owned per user', () => {
  const max = QUOTAS.organizationsOwnedPerUser.max;
  const createOrganization = (token: string) => h.post('/orgs', { name: `Org ${randomBytes(3).toString('hex')}` }, { token });

  test(`the ${max + 1}th owned organization is refused with 409; deleted ones, and those the user only belongs to, do not count`, async () => {
    const user = await h.signUp();
    await seedOwnedOrganizations(user.userId, 10, { status: 'suspended' });
    await seedOwnedOrganizations(user.userId, 10, { roleSlug: 'member' });
    await seedOwnedOrganizations(user.userId, 10, { membershipStatus: 'suspended' });
    await seedOwnedOrganizations(user.userId, max - 1);
    const last = await createOrganization(user.accessToken);
    assert.equal(last.status, 201, last.text);
    const before = h.events.filter((event) => event.type === 'org.created').length;
    assertQuotaRefusal(await createOrganization(user.accessToken), max, 'over the cap');
    assert.equal(h.events.filter((event) => event.type === 'org.created').length, before, 'no org.created for a refusal');
    const other = await h.signUp();
    assert.equal((await createOrganization(other.accessToken)).status, 201, 'the cap is per user');
  });

  test('concurrent creations at the last slot: exactly one succeeds', async () => {
    const user = await h.signUp();
    await seedOwnedOrganizations(user.userId, max - 1);
    await oneOfSixAtTheLastSlot(() => createOrganization(user.accessToken));
  });

  test("a creation committed inside another one's count waits for it, and then sees it", PG_ONLY, async () => {
    const user = await h.signUp();
    await seedOwnedOrganizations(user.userId, max - 1);
    await theSecondSeesTheFirst(h, { prototype: MembershipRepository.prototype, method: 'countActiveOwnedBy', when: (userId) => userId === user.userId }, () => createOrganization(user.accessToken), max);
  });
});

describe('second factors per account', () => {
  // Threat: with one step-up, a TOTP enrolled and confirmed by the holder of its secret (no code
  // to wait for) added a factor per request, within the `authenticated` budget, and each one
  // grew GET /auth/mfa/factors and the login gate's answer for ever.
  const max = QUOTAS.factorsPerUser.max;

  async function seedConfirmedFactors(userId: string, count: number): Promise<void> {
    const now = h.clock.now();
    const rows = Array.from({ length: count }, (_, index) => ({
      id: randomUUID(),
      user_id: userId,
      type: 'email',
      label: null,
      destination: `seeded-${index}-${randomBytes(3).toString('hex')}@example.com`,
      secret_sealed: null,
      is_default: false,
      confirmed_at: now,
      created_at: now,
    }));
    await h.knex.batchInsert(tableOf(h, 'mfaFactors'), rows, 200);
  }

  test(`the ${max + 1}th factor is refused with 409 on every enrollment route; a pending TOTP replaced by a new one takes no second slot`, async () => {
    const user = await signUpWithTotp(h);
    await seedConfirmedFactors(user.userId, max - 2);
    const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(enrolled.status, 200, `the ${max}th factor, pending: ${enrolled.text}`);
    const again = await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken });
    assert.equal(again.status, 200, `a new TOTP enrollment replaces the pending one: ${again.text}`);
    assertQuotaRefusal(await h.post('/auth/mfa/sms/enroll', { phone_e164: '+14155550142' }, { token: user.accessToken }), max, 'an SMS factor over the cap');
    assertQuotaRefusal(await h.post('/auth/mfa/email/enroll', { email: uniqueEmail('second') }, { token: user.accessToken }), max, 'an e-mail factor over the cap');
    assert.equal(h.mail.filter((message) => message.template !== 'invite' && message.to.startsWith('second')).length, 0, 'no code sent for a refusal');
    const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: again.body.data.factor_id, code: nextTotpCode(h, again.body.data.secret) }, { token: user.accessToken });
    assert.equal(confirmed.status, 200, confirmed.text);
    assertQuotaRefusal(await h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }), max, 'a TOTP factor over the cap');
    const factors = await h.get('/auth/mfa/factors', { token: user.accessToken });
    assert.equal(factors.body.data.factors.length, max);
    // Removing a factor frees its slot.
    const seeded = factors.body.data.factors.find((factor: { type: string; id: string; status?: string }) => factor.type === 'email');
    assert.equal((await h.delete(`/auth/mfa/factors/${seeded.id}`, { token: user.accessToken })).status, 200);
    assert.equal((await h.post('/auth/mfa/sms/enroll', { phone_e164: '+14155550143' }, { token: user.accessToken })).status, 200, 'a removed factor frees its slot');
  });

  test('a passkey counts as a factor: its registration over the cap is refused, and fits once a factor is removed', async () => {
    const withPasskeys = await Harness.start({ config: { webauthn: fixtureWebauthnConfig } });
    try {
      const user = await signUpWithTotp(withPasskeys);
      const now = withPasskeys.clock.now();
      const rows = Array.from({ length: max - 1 }, (_, index) => ({ id: randomUUID(), user_id: user.userId, type: 'email', label: null, destination: `seeded-${index}@example.com`, secret_sealed: null, is_default: false, confirmed_at: now, created_at: now }));
      await withPasskeys.knex.batchInsert(tableOf(withPasskeys, 'mfaFactors'), rows, 200);
      assertQuotaRefusal(await registerRecorded(withPasskeys, user.accessToken, fixtures.primary, 'Laptop'), max, 'a passkey over the cap');
      assert.equal((await withPasskeys.delete(`/auth/mfa/factors/${rows[0]!.id}`, { token: user.accessToken })).status, 200);
      const registered = await registerRecorded(withPasskeys, user.accessToken, fixtures.primary, 'Laptop');
      assert.equal(registered.status, 200, registered.text);
    } finally {
      await withPasskeys.close();
    }
  });

  test('concurrent enrollments at the last slot: exactly one succeeds', async () => {
    const user = await signUpWithTotp(h);
    await seedConfirmedFactors(user.userId, max - 2);
    const phones = Array.from({ length: 5 }, (_, index) => `+1415555017${index}`);
    const answers = await Promise.all(phones.map((phone) => h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken })));
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 409, 409, 409, 409], answers.map((answer) => answer.text).join('\n'));
  });
});

describe('domains per organization', () => {
  // Threat: an sso.manage holder added pending domains without end (each with a TXT value kept
  // for ever, all listed unpaged by GET /orgs/{id}/domains).
  const max = QUOTAS.domainsPerOrganization.max;

  test(`the ${max + 1}th domain is refused with 409; removing one frees its slot`, async () => {
    const withSso = await startSsoHarness(undefined, new StubDns());
    try {
      const org = await createOrg(withSso);
      const now = withSso.clock.now();
      const rows = Array.from({ length: max - 1 }, () => ({
        id: randomUUID(),
        organization_id: org.id,
        domain: `seeded-${randomBytes(6).toString('hex')}.test`,
        status: 'pending',
        txt_value: `seeded-${randomBytes(16).toString('hex')}`,
        verified_domain: null,
        verified_at: null,
        created_at: now,
      }));
      await withSso.knex.batchInsert(tableOf(withSso, 'orgDomains'), rows, 200);
      const add = () => withSso.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
      const last = await add();
      assert.equal(last.status, 201, last.text);
      assertQuotaRefusal(await add(), max, 'over the cap');
      assert.equal((await withSso.delete(`/orgs/${org.id}/domains/${rows[0]!.id}`, { token: org.owner.token })).status, 200);
      assert.equal((await add()).status, 201, 'a removed domain frees its slot');
      const answers = await Promise.all(Array.from({ length: 4 }, add));
      assert.deepEqual(answers.map((answer) => answer.status).sort(), [409, 409, 409, 409], 'at the cap, concurrent additions are all refused');
    } finally {
      await withSso.close();
    }
  });

  test("an addition committed inside another one's count waits for it, and then sees it", PG_ONLY, async () => {
    const withSso = await startSsoHarness(undefined, new StubDns());
    try {
      const org = await createOrg(withSso);
      const now = withSso.clock.now();
      const rows = Array.from({ length: max - 1 }, () => ({
        id: randomUUID(),
        organization_id: org.id,
        domain: `seeded-${randomBytes(6).toString('hex')}.test`,
        status: 'pending',
        txt_value: `seeded-${randomBytes(16).toString('hex')}`,
        created_at: now,
      }));
      await withSso.knex.batchInsert(tableOf(withSso, 'orgDomains'), rows, 200);
      const add = () => withSso.post(`/orgs/${org.id}/domains`, { domain: uniqueDomain() }, { token: org.owner.token });
      await theSecondSeesTheFirst(withSso, { prototype: OrgDomainRepository.prototype, method: 'countForOrganization', when: (orgId) => orgId === org.id }, add, max);
    } finally {
      await withSso.close();
    }
  });
});
