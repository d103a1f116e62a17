/*
 * One mailbox, one account (docs/security.md "One mailbox, one account"). Addresses are stored as
 * typed (`normaliseEmail`), and `ada@bücher.example`, `ada@xn--bcher-kva.example`, `ada@BÜCHER.example`
 * and `ada@ｂücher.example` are one mailbox (`mailboxForm`): a mailer sends each to one inbox.
 * Each block names the threat. SQLite and PostgreSQL; the race block on PostgreSQL:
 *   node scripts/run-tests.mjs test/accounts/one-mailbox-one-account.test.ts
 */
import assert from 'node:assert/strict';
import { domainToUnicode } from 'node:url';
import { describe, test } from 'node:test';
import { countRows } from '../helpers/account.js';
import { harnessesClosedAfterFile, type Harness, STRONG_PASSWORD, TEST_DB, uniqueEmail } from '../helpers/harness.js';
import { withRequestInTheWindow } from '../helpers/interleaving.js';
import { newSubject, type TestOpenIdProvider } from '../helpers/oidc.js';
import { addVerifiedDomain, connect, ssoLogin, StubDns, withSsoHarness } from '../helpers/sso.js';
import { createOrg } from '../helpers/orgs.js';
import { UserRepository } from '../../src/store/user-repository.js';

const start = harnessesClosedAfterFile();
const PG_ONLY = { skip: TEST_DB !== 'pg' && "SQLite runs one write transaction at a time: no request can commit inside another's", timeout: 60_000 };

/** One mailbox's spellings: its domain as Unicode, as the IDNA A-label, upper-case, in full-width letters. */
function spellingsOf(prefix: string): { unicode: string; aLabel: string; upper: string; fullWidth: string } {
  const [local] = uniqueEmail(prefix).split('@') as [string];
  return { unicode: `${local}@bücher.example`, aLabel: `${local}@xn--bcher-kva.example`, upper: `${local}@BÜCHER.example`, fullWidth: `${local}@ｂücher.example` };
}

/** Rows of the users table at any of these addresses. */
async function accountsAt(h: Harness, addresses: string[]): Promise<number> {
  let total = 0;
  for (const email of new Set(addresses.map((address) => address.toLowerCase()))) total += await countRows(h, 'users', { email });
  return total;
}

/*
 * Fault: registration refused a taken address only in the spelling it was stored under. An
 * attacker registered `ada@bücher.example` beside the victim's `ada@xn--bcher-kva.example` (or
 * the reverse, or upper-case or full-width domain letters): a second account for the victim's
 * mailbox, its verification mail sent into the victim's inbox, which a careless click verified
 * for the attacker's password. A taken mailbox now answers as a taken address does (202, the
 * same text, no mail, no event, no row), whichever spelling was typed.
 */
test('registering another spelling of a taken mailbox answers as the taken address: 202, no account, no mail', async () => {
  const h = await start();
  for (const [registered, others] of [
    ['aLabel', ['unicode', 'upper', 'fullWidth']],
    ['unicode', ['aLabel', 'upper', 'fullWidth']],
  ] as const) {
    const spellings = spellingsOf(`one-${registered}`);
    const victim = await h.signUp(spellings[registered]);
    const taken = await h.post('/auth/register', { email: spellings[registered], password: 'another strong passphrase' });
    for (const other of others) {
      const mailsBefore = h.mail.length;
      const eventsBefore = h.eventsOfType('user.registered').length;
      const answer = await h.post('/auth/register', { email: spellings[other], password: 'another strong passphrase' });
      assert.equal(answer.status, 202, answer.text);
      assert.equal(answer.text, taken.text, `${registered} registered, ${other} typed`);
      assert.equal(h.mail.length, mailsBefore, `${registered} registered, ${other} typed: a verification mail went out`);
      assert.equal(h.eventsOfType('user.registered').length, eventsBefore, `${registered} registered, ${other} typed`);
    }
    assert.equal(await accountsAt(h, Object.values(spellings)), 1, `${registered} registered: one account for the mailbox`);
    assert.equal(await countRows(h, 'users', { email: victim.email }), 1);
  }
});

/*
 * Fault, with the one above: a sign-in by address read only the spelling typed. The owner of
 * `ada@bücher.example` who typed `ada@xn--bcher-kva.example` (as a mail client shows it) got 401
 * on login and no reset or verification mail, and the other spelling stayed free for a second
 * account. Login, forgot-password and resend-verification now find the mailbox's account; the
 * mail goes to the address the account is stored under.
 */
test('login, forgot-password and resend-verification typed in another spelling reach the one account', async () => {
  const h = await start();
  const spellings = spellingsOf('sign-in');
  const victim = await h.signUp(spellings.unicode);
  for (const typed of [spellings.aLabel, spellings.upper, spellings.fullWidth]) {
    const login = await h.post('/auth/login', { email: typed, password: STRONG_PASSWORD });
    assert.equal(login.status, 200, `${typed}: ${login.text}`);
    assert.equal(login.body.data.user.id, victim.userId, typed);
    const wrong = await h.post('/auth/login', { email: typed, password: 'not the password at all' });
    assert.equal(wrong.status, 401, wrong.text);
  }
  const mailsBefore = h.mail.length;
  assert.equal((await h.post('/auth/password/forgot', { email: spellings.aLabel })).status, 202);
  assert.equal(h.mail.length, mailsBefore + 1, 'one reset mail');
  const reset = h.lastMail(victim.email, 'password_reset');
  assert.ok(reset, 'the reset mail goes to the address the account is stored under');
  const changed = await h.post('/auth/password/reset', { token: String(reset.context.token), new_password: 'a brand new passphrase 42' });
  assert.equal(changed.status, 200, changed.text);
  const after = await h.post('/auth/login', { email: spellings.aLabel, password: 'a brand new passphrase 42' });
  assert.equal(after.body.data?.user?.id, victim.userId, after.text);

  // An unverified account gets its verification link again when another spelling asks.
  const unverified = spellingsOf('resend');
  await h.post('/auth/register', { email: unverified.aLabel, password: STRONG_PASSWORD });
  const before = h.mail.length;
  assert.equal((await h.post('/auth/email/verify/resend', { email: unverified.unicode })).status, 202);
  assert.equal(h.mail.length, before + 1, 'one verification mail');
  assert.ok(h.mail.at(-1)?.to === unverified.aLabel && h.mail.at(-1)?.template === 'verify_email');
});

/*
 * Fault: passwordless start looked the account up by the spelling typed, so the Unicode spelling
 * of an A-label account was an unknown address: with sign-up on, its code signed up a second
 * account for the mailbox (is_new_user true) beside the victim's. The code proves the mailbox,
 * so it now signs into the mailbox's one account, and no account is created.
 */
test('a passwordless start typed in another spelling signs into the one account; no second account', async () => {
  const h = await start({ config: { passwordless: { allowSignup: true } } });
  const spellings = spellingsOf('passwordless');
  const victim = await h.signUp(spellings.aLabel);
  for (const typed of [spellings.unicode, spellings.fullWidth]) {
    h.clock.advance(120);
    const started = await h.post('/auth/passwordless/start', { email: typed });
    assert.equal(started.status, 202, started.text);
    const mail = [...h.mail].reverse().find((message) => message.template === 'login_code');
    assert.equal(mail?.to, victim.email, `${typed}: the code goes to the stored address`);
    const verified = await h.post('/auth/passwordless/verify', { challenge_id: started.body.data.challenge_id, code: String(mail?.context.code) });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(verified.body.data.user.id, victim.userId, typed);
    assert.equal(verified.body.data.is_new_user, false, typed);
  }
  assert.equal(await accountsAt(h, Object.values(spellings)), 1);
});

/*
 * Fault: an SSO first sign-in whose IdP asserted the Unicode spelling of the organization's IDN
 * domain found no account at the A-label spelling, so JIT created a second account for the
 * mailbox (`is_new_user` true) beside the verified one. It now finds the mailbox's account and
 * links it by the domain rule (CONTRACT 12), as the same spelling would.
 */
describe('SSO JIT', () => {
  const dns = new StubDns();
  let op: TestOpenIdProvider;
  let h: Harness;
  withSsoHarness(dns, (started) => ({ op, h } = started));

  test('a first SSO sign-in asserting another spelling links the mailbox\'s account; JIT creates none', async () => {
    const org = await createOrg(h);
    const aLabelDomain = (await addVerifiedDomain(h, dns, org, `bücher${Math.random().toString(36).slice(2, 8)}.test`)).domain as string;
    assert.match(aLabelDomain, /^xn--/);
    await connect(h, op, org, { jit: true });
    const [local] = uniqueEmail('sso').split('@') as [string];
    const member = await h.signUp(`${local}@${aLabelDomain}`);
    const unicode = `${local}@${domainToUnicode(aLabelDomain)}`;
    const { exchanged } = await ssoLogin(h, op, { sub: newSubject(), email: unicode, email_verified: true }, { organization_slug: org.slug });
    assert.equal(exchanged?.status, 200, exchanged?.text);
    assert.equal(exchanged!.body.data.user.id, member.userId);
    assert.equal(exchanged!.body.data.is_new_user, false);
    assert.equal(await countRows(h, 'users', { email: unicode }), 0);
  });
});

/*
 * Race (PostgreSQL): two registrations of two spellings of one mailbox at once. Each looked for
 * the mailbox's account, found none, and inserted its own row (two addresses, so the unique
 * index let both in). Creation now takes a transaction-scoped advisory lock keyed by the mailbox
 * form before it looks: the second waits, then sees the first's account.
 */
test('two registrations of two spellings at once leave one account', PG_ONLY, async () => {
  const h = await start();
  const spellings = spellingsOf('race');
  const { outer, inner } = await withRequestInTheWindow(
    h,
    { prototype: UserRepository.prototype, method: 'mailboxTaken', when: (email) => email === spellings.aLabel },
    () => h.post('/auth/register', { email: spellings.unicode, password: STRONG_PASSWORD }),
    () => h.post('/auth/register', { email: spellings.aLabel, password: STRONG_PASSWORD }),
  );
  assert.equal(outer.status, 202, outer.text);
  assert.equal(inner?.status, 202, inner?.text);
  assert.equal(await accountsAt(h, [spellings.unicode, spellings.aLabel]), 1);
  assert.equal(h.mail.filter((message) => message.template === 'verify_email').length, 1);
});
