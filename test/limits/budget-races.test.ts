import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness, uniqueEmail } from '../helpers/harness.js';
import { enrollSms, loginForTicket, signUpWithTotp } from '../helpers/mfa.js';
import { createOrg } from '../helpers/orgs.js';

// The invite and OTP send budgets (docs/configuration.md `invites.sendBudget`, `otp.sendBudget`) are a
// count and an insert: two transactions that count at once must not both fit under the limit. On PostgreSQL each
// bucket is locked for the transaction before it is counted; SQLite serialises writers.

let h: Harness;
before(async () => {
  h = await Harness.start({
    config: {
      invites: { sendBudget: { perOrganization: { limit: 5, windowSec: 3600 }, perAddress: { limit: 2, windowSec: 86400 } } },
    },
  });
});
after(async () => {
  await h.close();
});

const statuses = (responses: Array<{ status: number }>) => responses.map((response) => response.status).sort();

test('twenty concurrent invites against an organization budget of five: exactly five are sent', async () => {
  const org = await createOrg(h);
  const responses = await Promise.all(
    Array.from({ length: 20 }, () => h.post(`/orgs/${org.id}/invites`, { email: uniqueEmail('race'), role_slugs: ['member'] }, { token: org.owner.token })),
  );
  assert.deepEqual(statuses(responses), [...Array(5).fill(201), ...Array(15).fill(429)], responses.map((response) => response.text).join('\n'));
  assert.equal(h.mail.filter((message) => message.template === 'invite' && message.to.startsWith('race')).length >= 5, true);
});

test('six organizations inviting one address at once against an address budget of two: exactly two are sent', async () => {
  const orgs = await Promise.all(Array.from({ length: 6 }, () => createOrg(h)));
  const email = uniqueEmail('popular');
  const responses = await Promise.all(orgs.map((org) => h.post(`/orgs/${org.id}/invites`, { email, role_slugs: ['member'] }, { token: org.owner.token })));
  assert.deepEqual(statuses(responses), [201, 201, 429, 429, 429, 429], responses.map((response) => response.text).join('\n'));
  assert.equal(h.mail.filter((message) => message.to === email).length, 2);
});

test('five accounts enrolling one phone at once, against a destination budget of two: exactly two are sent', async () => {
  // Issue 22: an enrollment send counts per destination across accounts, so the lock must
  // serialise sends of different accounts to one number.
  const otp = await Harness.start({ config: { otp: { sendBudget: { perDestination: { limit: 2, windowSec: 3600 }, perAccount: { limit: 50, windowSec: 3600 } } } } });
  try {
    const phone = '+15555550123';
    const users = await Promise.all(Array.from({ length: 5 }, () => otp.signUp()));
    const responses = await Promise.all(users.map((user) => otp.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: user.accessToken })));
    assert.deepEqual(statuses(responses), [200, 200, 429, 429, 429], responses.map((response) => response.text).join('\n'));
    assert.equal(otp.sms.filter((message) => message.to === phone).length, 2);
  } finally {
    await otp.close();
  }
});

test('one account asking for login codes on six factors at once, against an account budget of two: exactly two are sent', async () => {
  const windowSec = 3600;
  // The factors are enrolled through an instance with the default budgets (enrollment codes
  // count against the account too); the race runs on one with an account budget of two.
  const enrolling = await Harness.start();
  const otp = await Harness.start({ shareDatabaseWith: enrolling, config: { otp: { sendBudget: { perDestination: { limit: 50, windowSec }, perAccount: { limit: 2, windowSec } } } } });
  try {
    const user = await signUpWithTotp(enrolling);
    const factors: string[] = [];
    for (const phone of ['+15555550131', '+15555550132', '+15555550133', '+15555550134', '+15555550135', '+15555550136']) factors.push((await enrollSms(enrolling, user.accessToken, phone)).factorId);
    enrolling.clock.advance(windowSec + 1);
    const { ticket } = await loginForTicket(otp, user);
    const sentBefore = otp.sms.length;
    const responses = await Promise.all(factors.map((factorId) => otp.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket })));
    assert.deepEqual(statuses(responses), [200, 200, 429, 429, 429, 429], responses.map((response) => response.text).join('\n'));
    assert.equal(otp.sms.length - sentBefore, 2);
  } finally {
    await otp.close();
    await enrolling.close();
  }
});
