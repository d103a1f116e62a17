import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { Harness, TEST_DB, type TestResponse } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { enrollSms, enrollTotp, lastSmsCode, loginForTicket, uniquePhone } from '../helpers/mfa.js';
import { addMember, createOrg } from '../helpers/orgs.js';
import { MfaFactorRepository } from '../../src/store/mfa-repository.js';
import { UserRepository } from '../../src/store/user-repository.js';
import { RoleRepository } from '../../src/store/organization-repository.js';

/*
 * Interleavings on PostgreSQL (READ COMMITTED): a second request starts between two reads of
 * one MFA or account write path, and commits there unless a lock makes it wait. Each test makes
 * the interleaving certain by starting the second request from inside a wrapped repository
 * method, then asks for an answer some serial order of the two requests would give.
 */
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's" };

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { auth: { lockout: { threshold: 1000 } }, otp: { verifyBudget: { limit: 1000, windowSec: 900 } } } });
});
after(async () => {
  await h.close();
});

describe(`MFA interleavings on ${TEST_DB}`, () => {
  test('an SMS factor removed between the login challenge\'s lookup and its send: 404, and no code goes out', PG_ONLY, async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const { ticket } = await loginForTicket(h, user);
    const smsBefore = h.sms.filter((message) => message.to === phone).length;
    const { inner: removed, outer: challenge } = await withRequestInTheWindow(
      h,
      { prototype: MfaFactorRepository.prototype, method: 'findOwned', when: (id) => id === sms.factorId },
      () => h.delete(`/auth/mfa/factors/${sms.factorId}`, { token: user.accessToken }),
      () => h.post('/auth/mfa/challenge', { factor_id: sms.factorId }, { token: ticket }),
    );
    assert.equal(removed?.status, 200, removed?.text);
    assert.equal(challenge.status, 404, `${challenge.text} ${JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1)?.meta ?? {})}`);
    assert.equal(h.sms.filter((message) => message.to === phone).length, smsBefore);
  });

  test('an SMS factor removed between the step-up challenge\'s lookup and its send: 404, and no code goes out', PG_ONLY, async () => {
    const user = await h.signUp();
    await enrollTotp(h, user.accessToken);
    const phone = uniquePhone();
    const sms = await enrollSms(h, user.accessToken, phone);
    h.clock.advance(31);
    const smsBefore = h.sms.filter((message) => message.to === phone).length;
    const { inner: removed, outer: challenge } = await withRequestInTheWindow(
      h,
      { prototype: MfaFactorRepository.prototype, method: 'findOwned', when: (id) => id === sms.factorId },
      () => h.delete(`/auth/mfa/factors/${sms.factorId}`, { token: user.accessToken }),
      () => h.post('/auth/mfa/step-up/challenge', { factor_id: sms.factorId }, { token: user.accessToken }),
    );
    assert.equal(removed?.status, 200, removed?.text);
    assert.equal(challenge.status, 404, `${challenge.text} ${JSON.stringify(h.logs.filter((line) => line.level === 'error').at(-1)?.meta ?? {})}`);
    assert.equal(h.sms.filter((message) => message.to === phone).length, smsBefore);
  });

  test('two enrollments of one new SMS destination at once leave one pending factor', PG_ONLY, async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const { outer: second, inner: first } = await withRequestInTheWindow(
      h,
      { prototype: MfaFactorRepository.prototype, method: 'findByDestination', when: (_userId, _type, destination) => destination === phone },
      () => h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken }),
      () => h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken }),
    );
    // docs/mfa.md: enrolling the same destination again resends to the same pending factor,
    // under its cooldown: whichever comes second answers 429.
    assert.equal(await countRows(h, 'mfa_factors', { user_id: user.userId, destination: phone }), 1);
    assert.deepEqual([first?.status, second.status].sort(), [200, 429], `${first?.text} | ${second.text}`);
  });

  test('two TOTP enrollments at once leave one pending TOTP factor: the one answered last', PG_ONLY, async () => {
    const user = await h.signUp();
    const { outer: first, inner: second } = await withRequestInTheWindow(
      h,
      { prototype: MfaFactorRepository.prototype, method: 'deleteUnconfirmed', when: (userId, type) => userId === user.userId && type === 'totp' },
      () => h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }),
      () => h.post('/auth/mfa/totp/enroll', undefined, { token: user.accessToken }),
    );
    assert.equal(first.status, 200, first.text);
    assert.equal(second?.status, 200, second?.text);
    // The second waited for the first's lock on the account, then replaced its pending factor.
    const pending = await h.knex(`${h.tablePrefix}mfa_factors`).where({ user_id: user.userId, type: 'totp' }).whereNull('confirmed_at').select('id');
    assert.deepEqual(
      pending.map((row: { id: string }) => row.id),
      [second?.body.data.factor_id],
    );
  });

  test('an enrollment of a destination whose pending factor is confirmed meanwhile: 409, or the confirm fails; no code to a confirmed factor', PG_ONLY, async () => {
    const user = await h.signUp();
    const phone = uniquePhone();
    const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken });
    assert.equal(enrolled.status, 200, enrolled.text);
    const factorId = enrolled.body.data.factor_id;
    const code = lastSmsCode(h, phone);
    h.clock.advance(31); // past the enrollment's resend cooldown, within the code's lifetime
    const smsBefore = h.sms.filter((message) => message.to === phone).length;
    const { outer: again, inner: confirmed } = await withRequestInTheWindow(
      h,
      { prototype: MfaFactorRepository.prototype, method: 'findByDestination', when: (_userId, _type, destination) => destination === phone },
      () => h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code }, { token: user.accessToken }),
      () => h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken }),
    );
    // Either serial order: the enrollment first (its resend expires the code: the confirm fails),
    // or the confirmation first (the enrollment answers 409). Never both, never a code to a confirmed factor.
    if (confirmed?.status === 200) {
      assert.equal(again.status, 409, again.text);
      assert.equal(h.sms.filter((message) => message.to === phone).length, smsBefore);
    } else {
      assert.equal(again.status, 200, again.text);
      assert.equal(confirmed?.status, 422, confirmed?.text);
    }
  });

  test('a member made the only owner while an account deletion runs: the organization keeps an owner', PG_ONLY, async () => {
    const org = await createOrg(h);
    const member = await addMember(h, org, org.owner.token, ['member']);
    const inner: TestResponse[] = [];
    const { outer: deleted } = await withRequestInTheWindow(
      h,
      { prototype: UserRepository.prototype, method: 'anonymize', when: (id) => id === member.userId, at: 'before' },
      // The owner hands the organization over: the member becomes an owner, then the owner steps down.
      async () => {
        inner.push(await h.patch(`/orgs/${org.id}/members/${member.userId}/roles`, { role_slugs: ['owner'] }, { token: org.owner.token }));
        inner.push(await h.patch(`/orgs/${org.id}/members/${org.owner.userId}/roles`, { role_slugs: ['member'] }, { token: org.owner.token }));
      },
      () => h.delete(`/users/${member.userId}`, { token: member.accessToken }),
    );
    // Either serial order: the deletion first (the member is gone, and the owner may not step
    // down), or the handover first (the member is the last owner: the deletion answers 409).
    if (deleted.status === 200) assert.deepEqual(inner.map((response) => response.status), [404, 409], inner.map((response) => response.text).join(' | '));
    else assert.deepEqual(inner.map((response) => response.status), [200, 200], inner.map((response) => response.text).join(' | '));
    const owners = await h
      .knex(`${h.tablePrefix}memberships as m`)
      .join(`${h.tablePrefix}member_roles as mr`, 'mr.membership_id', 'm.id')
      .join(`${h.tablePrefix}roles as r`, 'r.id', 'mr.role_id')
      .where({ 'm.organization_id': org.id, 'm.status': 'active', 'r.slug': 'owner' })
      .count({ count: '*' })
      .first();
    assert.equal(Number(owners?.count ?? 0), 1, 'docs/organizations.md invariant 3: an organization keeps an active owner');
    assert.ok([200, 409].includes(deleted.status), deleted.text);
  });

  test('an account deleted while grantSuperadmin runs: the tombstone holds no role', PG_ONLY, async () => {
    const user = await h.signUp();
    const { outer: outcome, inner: deleted } = await withRequestInTheWindow(
      h,
      { prototype: RoleRepository.prototype, method: 'grantSuperadmin', when: (userId) => userId === user.userId, at: 'before' },
      () => h.delete(`/users/${user.userId}`, { token: user.accessToken }),
      () => h.identity.service.grantSuperadmin(user.userId).then(() => 'granted', (error: any) => `${error?.status} ${error?.code}`),
    );
    assert.equal(deleted?.status, 200, deleted?.text);
    const grants = await countRows(h, 'global_role_grants', { user_id: user.userId });
    assert.equal(grants, 0, `a deleted account holds no global role (grantSuperadmin answered ${String(outcome)})`);
  });
});
