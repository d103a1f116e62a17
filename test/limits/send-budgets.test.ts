/*
 * Issue 22 (docs/configuration.md `otp.sendBudget`): the per-destination send budget counts sends to a
 * destination that is not yet a confirmed factor (enrollment) per destination across all
 * accounts, and sends to a user's own confirmed factor (login, step-up) in a bucket of that
 * user and destination. The single-instance versions of test/platform/several-instances.test.ts.
 * Threats: SMS pumping (toll fraud paid by the host) through many accounts, each with a
 * budget of its own; another account's enrollments exhausting a victim's login codes.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Harness } from '../helpers/harness.js';
import { assertError } from '../helpers/account.js';
import { enrollSms, lastSmsCode, loginForTicket, uniquePhone } from '../helpers/mfa.js';

const PER_DESTINATION = 3;

let h: Harness;
before(async () => {
  h = await Harness.start({ config: { otp: { resendCooldown: 1, sendBudget: { perDestination: { limit: PER_DESTINATION, windowSec: 3600 }, perAccount: { limit: 10, windowSec: 3600 } } } } });
});
after(async () => {
  await h.close();
});

const sentTo = (phone: string) => h.sms.filter((message) => message.to === phone).length;

test('four accounts enrolling one number one after another: three sends and one 429', async () => {
  const phone = uniquePhone();
  const accounts = await Promise.all(Array.from({ length: 4 }, () => h.signUp()));
  const answers = [];
  for (const account of accounts) answers.push(await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: account.accessToken }));
  assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 429], answers.map((answer) => answer.text).join('\n'));
  assertError(answers[3]!, 429, 'rate_limited');
  assert.ok(Number(answers[3]!.headers.get('retry-after')) > 3000, `Retry-After ${answers[3]!.headers.get('retry-after')}`);
  assert.equal(sentTo(phone), PER_DESTINATION);
});

test("other accounts' enrollments never block the victim's login challenge to their confirmed number", async () => {
  const victim = await h.signUp();
  const phone = uniquePhone();
  const { factorId } = await enrollSms(h, victim.accessToken, phone);
  // Attackers enroll the victim's number until its budget is spent (the victim's enrollment was the first send).
  const attackers = await Promise.all(Array.from({ length: PER_DESTINATION }, () => h.signUp()));
  const answers = [];
  for (const attacker of attackers) answers.push((await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: attacker.accessToken })).status);
  assert.deepEqual(answers, [200, 200, 429]);
  // The victim's own confirmed factor counts in the victim's bucket: 3 login codes in the hour.
  for (let login = 0; login < PER_DESTINATION; login += 1) {
    h.clock.advance(2);
    const { ticket } = await loginForTicket(h, victim);
    const challenge = await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket });
    assert.equal(challenge.status, 200, challenge.text);
    const verified = await h.post('/auth/mfa/verify', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: ticket });
    assert.equal(verified.status, 200, verified.text);
  }
  // ... and that bucket is the victim's budget: a fourth is refused, yet attackers can still spend none.
  h.clock.advance(2);
  const { ticket } = await loginForTicket(h, victim);
  assertError(await h.post('/auth/mfa/challenge', { factor_id: factorId }, { token: ticket }), 429, 'rate_limited');
  assertError(await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: attackers[0]!.accessToken }), 429, 'rate_limited');
});
