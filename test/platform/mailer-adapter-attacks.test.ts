/*
 * createNodemailerMailer under hostile recipients: the adapter's own rule, whatever validated the
 * address before it (docs/adapters.md). nodemailer reads a `to` string as an address list (display
 * names, commas, groups, quotes, angle brackets); the adapter hands it one address object that it
 * does not parse, so one message goes to one mailbox, at the domain the router reads.
 *
 *   node scripts/run-tests.mjs test/platform/mailer-adapter-attacks.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { createNodemailerMailer } from '../../src/adapters/nodemailer-mailer.js';
import { addressDomain } from '../../src/services/shared/identity-rules.js';

const APP = 'Acme Cloud';

/** A real nodemailer transporter (streamTransport: nothing leaves the process) that records each message's envelope and raw text. */
function recordingTransport(): { transporter: ReturnType<typeof nodemailer.createTransport>; sent: Array<{ envelopeTo: string[]; raw: string }> } {
  const transporter = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  const sent: Array<{ envelopeTo: string[]; raw: string }> = [];
  // A nodemailer plugin at the 'stream' step sees the envelope nodemailer computed for the message.
  transporter.use('stream', (mail, done) => {
    const envelope = mail.message.getEnvelope() as { to: string[] };
    mail.message.build((error: Error | null, raw: Buffer) => {
      if (!error) sent.push({ envelopeTo: envelope.to, raw: raw.toString('utf8') });
      done(error);
    });
  });
  return { transporter, sent };
}

/*
 * Threat: one mail to another domain's mailbox. The adapter passed `to` as a string, which
 * nodemailer parses as an address list: `attacker@evil.test, x@corp.test` is two recipients, a
 * group `team: attacker@evil.test;, x@corp.test` all its members, `<attacker@evil.test> x@corp.test`
 * the bracketed one. The router reads an address's domain as what follows its last `@`
 * (`addressDomain`: verified domains, SSO routing and enforcement), so a mail it sends to prove a
 * corp.test address (a verification link, an invitation, a sign-in code) reached a mailbox at
 * evil.test whenever such an address reached the mailer unvalidated (a host's own call, a custom
 * route, a future rule that lets one through). The adapter now hands nodemailer one address
 * object, which it does not parse: one recipient, at the domain the router read.
 */
test('a recipient that nodemailer would read as an address list, a group or a display name reaches one mailbox, at the domain the router reads', async () => {
  const hostile = [
    'attacker@evil.test, x@corp.test',
    'attacker@evil.test;x@corp.test',
    'team: attacker@evil.test;, x@corp.test',
    '<attacker@evil.test> x@corp.test',
    'attacker@evil.test x@corp.test',
    '"x" <attacker@evil.test>, y@corp.test',
    'attacker@evil.test\r\nBcc: x@corp.test',
  ];
  for (const to of hostile) {
    assert.equal(addressDomain(to), 'corp.test', `the router reads ${JSON.stringify(to)} as an address at corp.test`);
    const { transporter, sent } = recordingTransport();
    const mailer = createNodemailerMailer(transporter, { from: 'Acme <no-reply@acme.test>' });
    const outcome = await mailer.send({ to, template: 'password_reset', context: { app_name: APP, token: 'tok_attack' } }).then(
      () => 'sent',
      (error: Error) => `refused: ${error.message}`,
    );
    if (outcome !== 'sent') continue; // refused outright: nothing reached anyone
    assert.equal(sent.length, 1, JSON.stringify(to));
    const { envelopeTo, raw } = sent[0]!;
    assert.equal(envelopeTo.length, 1, `${JSON.stringify(to)} became the recipients ${JSON.stringify(envelopeTo)}`);
    assert.equal(addressDomain(envelopeTo[0]!), 'corp.test', `${JSON.stringify(to)} was delivered to ${envelopeTo[0]}`);
    const headers = raw.slice(0, raw.indexOf('\n\n'));
    assert.ok(!/^bcc:/im.test(headers), `${JSON.stringify(to)} put a Bcc header in the message:\n${headers}`);
    assert.equal(headers.match(/^to:/gim)?.length, 1, `${JSON.stringify(to)}: one To header`);
  }
});

test('an ordinary address is still sent to itself, with no display name', async () => {
  const { transporter, sent } = recordingTransport();
  const mailer = createNodemailerMailer(transporter, { from: 'Acme <no-reply@acme.test>' });
  await mailer.send({ to: 'user@acme.test', template: 'verify_email', context: { app_name: APP, token: 'tok_plain' } });
  assert.deepEqual(sent[0]?.envelopeTo, ['user@acme.test']);
  assert.match(sent[0]!.raw, /^To: user@acme\.test$/m);
});
