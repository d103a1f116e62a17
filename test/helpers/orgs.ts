import assert from 'node:assert/strict';
import { uniqueEmail, type Harness, type SignedUpUser } from './harness.js';

/** A user whose access token is scoped to one organization. */
export interface OrgMember extends SignedUpUser {
  /** Access token with `org` = the organization. */
  token: string;
}

export interface CreatedOrg {
  id: string;
  slug: string;
  owner: OrgMember;
}

export async function switchOrg(h: Harness, token: string, organizationId: string): Promise<string> {
  const switched = await h.post('/auth/switch-org', { organization_id: organizationId }, { token });
  assert.equal(switched.status, 200, switched.text);
  return switched.body.data.access_token as string;
}

/** Signs up an owner, creates an organization and scopes the owner's token to it. */
export async function createOrg(h: Harness, options: { name?: string; owner?: SignedUpUser } = {}): Promise<CreatedOrg> {
  const owner = options.owner ?? (await h.signUp(uniqueEmail('owner')));
  const response = await h.post('/orgs', { name: options.name ?? `Org ${Math.random().toString(36).slice(2, 8)}` }, { token: owner.accessToken });
  assert.equal(response.status, 201, response.text);
  const token = await switchOrg(h, owner.accessToken, response.body.data.id);
  return { id: response.body.data.id, slug: response.body.data.slug, owner: { ...owner, token } };
}

/** Invites a fresh account with `roleSlugs`, accepts, and scopes its token to the organization. */
export async function addMember(h: Harness, org: { id: string }, inviterToken: string, roleSlugs: string[] = ['member'], user?: SignedUpUser): Promise<OrgMember> {
  const member = user ?? (await h.signUp(uniqueEmail('member')));
  const invite = await h.post(`/orgs/${org.id}/invites`, { email: member.email, role_slugs: roleSlugs }, { token: inviterToken });
  assert.equal(invite.status, 201, invite.text);
  const accepted = await h.post('/auth/invites/accept', { token: h.tokenFromMail(member.email, 'invite') }, { token: member.accessToken });
  assert.equal(accepted.status, 200, accepted.text);
  const token = await switchOrg(h, member.accessToken, org.id);
  return { ...member, token };
}

/** A signed-up user holding the global superadmin role (granted through the service API). */
export async function superadmin(h: Harness): Promise<SignedUpUser> {
  const user = await h.signUp(uniqueEmail('root'));
  await h.identity.service.grantSuperadmin(user.userId);
  return user;
}

export async function memberOf(h: Harness, orgId: string, token: string, userId: string): Promise<any> {
  const list = await h.get(`/orgs/${orgId}/members?limit=100`, { token });
  assert.equal(list.status, 200, list.text);
  return (list.body.data as any[]).find((member) => member.user_id === userId);
}

export async function roleIdOf(h: Harness, orgId: string, token: string, slug: string): Promise<string> {
  const roles = await h.get(`/orgs/${orgId}/roles`, { token });
  assert.equal(roles.status, 200, roles.text);
  const role = (roles.body.data as any[]).find((entry) => entry.slug === slug);
  assert.ok(role, `no role ${slug}`);
  return role.id as string;
}

/** A webhook as `POST /orgs/{id}/webhooks` answers it, its secret included (shown once). */
export interface CreatedWebhook {
  id: string;
  url: string;
  events: string[];
  status: string;
  secret: string;
}

/** Creates a webhook of `org` as its owner (`events` default: every event). */
export async function createWebhook(h: Harness, org: CreatedOrg, url: string, events: string[] = ['*']): Promise<CreatedWebhook> {
  const response = await h.post(`/orgs/${org.id}/webhooks`, { url, events }, { token: org.owner.token });
  assert.equal(response.status, 201, response.text);
  return response.body.data;
}

/** Active members holding the organization's owner role, read from the tables, not through the API. */
export async function activeOwners(h: Harness, orgId: string): Promise<string[]> {
  const t = h.tablePrefix;
  return h
    .knex(`${t}memberships as m`)
    .join(`${t}member_roles as mr`, 'mr.membership_id', 'm.id')
    .join(`${t}roles as r`, 'r.id', 'mr.role_id')
    .where({ 'm.organization_id': orgId, 'm.status': 'active', 'r.slug': 'owner', 'r.is_system': true })
    .pluck('m.user_id');
}
