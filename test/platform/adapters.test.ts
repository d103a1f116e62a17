import { test } from 'node:test';
import assert from 'node:assert/strict';
import nodemailer from 'nodemailer';
import { createDevMailer } from '../../src/adapters/dev-mailer.js';
import { createDevSmsSender, noopSender } from '../../src/adapters/dev-sms.js';
import { createNodemailerMailer } from '../../src/adapters/nodemailer-mailer.js';
import { escapeHtml, renderMail, renderSms } from '../../src/adapters/templates.js';
import type { Logger } from '../../src/adapters/types.js';
import { COMMON_PASSWORDS, isCommonPassword } from '../../src/services/accounts/common-passwords.js';

interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  meta: object | undefined;
}

function createCaptureLogger(): Logger & { entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  return {
    entries,
    debug: (msg, meta) => entries.push({ level: 'debug', msg, meta }),
    info: (msg, meta) => entries.push({ level: 'info', msg, meta }),
    warn: (msg, meta) => entries.push({ level: 'warn', msg, meta }),
    error: (msg, meta) => entries.push({ level: 'error', msg, meta }),
  };
}

const APP = 'Acme Cloud';

test('renderMail verify_email with a link', () => {
  const url = 'https://acme.test/verify?token=tok_verify_123';
  const mail = renderMail('verify_email', { app_name: APP, token: 'tok_verify_123', url });
  assert.match(mail.subject, /Acme Cloud/);
  assert.ok(mail.text.includes(APP));
  assert.ok(mail.text.includes(url));
  assert.ok(mail.html.includes(`href="${escapeHtml(url)}"`));
});

test('renderMail verify_email without a link shows the token with paste instructions', () => {
  const mail = renderMail('verify_email', { app_name: APP, token: 'tok_verify_456' });
  assert.ok(mail.text.includes('tok_verify_456'));
  assert.match(mail.text, /paste it into Acme Cloud/);
  assert.ok(mail.html.includes('tok_verify_456'));
  assert.ok(!mail.html.includes('<a '));
});

test('renderMail password_reset', () => {
  const withToken = renderMail('password_reset', { app_name: APP, token: 'tok_reset_789' });
  assert.equal(withToken.subject, 'Reset your Acme Cloud password');
  assert.ok(withToken.text.includes('tok_reset_789'));
  const withUrl = renderMail('password_reset', {
    app_name: APP,
    token: 'tok_reset_789',
    url: 'https://acme.test/reset/tok_reset_789',
  });
  assert.ok(withUrl.text.includes('https://acme.test/reset/tok_reset_789'));
});

test('renderMail invite escapes interpolated values in HTML', () => {
  const mail = renderMail('invite', {
    app_name: APP,
    token: 'tok_invite_1',
    organization_name: '<script>alert("x")</script> Corp',
    inviter_email: 'boss@acme.test',
    expires_at: '2030-01-02T03:04:05.000Z',
  });
  assert.ok(mail.subject.includes(APP));
  assert.ok(mail.text.includes('boss@acme.test'));
  assert.ok(mail.text.includes('tok_invite_1'));
  assert.ok(mail.text.includes('2030-01-02 03:04 UTC'));
  assert.ok(!mail.html.includes('<script>'));
  assert.ok(mail.html.includes('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; Corp'));
});

test('renderMail otp_code states the code, purpose and expiry', () => {
  const expectations = {
    enroll: 'confirm your new sign-in method',
    login_mfa: 'finish signing in',
    step_up: "confirm it's you",
  } as const;
  for (const [purpose, words] of Object.entries(expectations)) {
    const mail = renderMail('otp_code', { app_name: APP, code: '493817', ttl: 300, purpose });
    assert.ok(mail.subject.includes(APP));
    assert.ok(mail.text.includes('493817'));
    assert.ok(mail.text.includes(words), `${purpose}: ${mail.text}`);
    assert.ok(mail.text.includes('expires in 5 minutes'));
    assert.ok(mail.html.includes('493817'));
    assert.ok(mail.html.includes(escapeHtml(words)));
  }
});

test('renderMail refuses a context without the token it delivers', () => {
  assert.throws(() => renderMail('password_reset', { app_name: APP }), TypeError);
  assert.throws(() => renderMail('otp_code', { app_name: APP, ttl: 300, purpose: 'step_up' }), TypeError);
});

test('renderSms', () => {
  assert.equal(renderSms('123456', APP, 300), '123456 is your Acme Cloud code. It expires in 5 minutes.');
  assert.equal(renderSms('123456', APP, 60), '123456 is your Acme Cloud code. It expires in 1 minute.');
});

test('dev mailer logs the rendered mail through the injected logger', async () => {
  const logger = createCaptureLogger();
  const mailer = createDevMailer({ logger });
  await mailer.send({ to: 'dev@acme.test', template: 'verify_email', context: { app_name: APP, token: 'tok_dev_1' } });
  assert.equal(logger.entries.length, 1);
  const [entry] = logger.entries;
  assert.equal(entry?.level, 'info');
  assert.ok(entry?.msg.startsWith('[dev mailer] to=dev@acme.test template=verify_email'));
  assert.ok(entry?.msg.includes('Confirm your email address for Acme Cloud'));
  assert.ok(entry?.msg.includes('tok_dev_1'));
});

test('dev mailer rejects, rather than throws, on an unusable context', async () => {
  const mailer = createDevMailer({ logger: createCaptureLogger() });
  await assert.rejects(mailer.send({ to: 'dev@acme.test', template: 'invite', context: {} }), TypeError);
});

test('dev SMS sender logs through the injected logger', async () => {
  const logger = createCaptureLogger();
  const sender = createDevSmsSender({ logger });
  await sender.send({ to: '+14155550123', message: renderSms('654321', APP, 300) });
  assert.equal(logger.entries.length, 1);
  assert.equal(logger.entries[0]?.level, 'info');
  assert.equal(
    logger.entries[0]?.msg,
    '[dev sms] to=+14155550123 654321 is your Acme Cloud code. It expires in 5 minutes.',
  );
});

test('noopSender resolves as a Mailer and as an SmsSender', async () => {
  await noopSender.send({ to: 'x@acme.test', template: 'otp_code', context: {} });
  await noopSender.send({ to: '+14155550123', message: 'hi' });
});

test('nodemailer mailer sends through a real jsonTransport transporter', async () => {
  const transporter = nodemailer.createTransport({ jsonTransport: true });
  const sentJson: string[] = [];
  const originalSendMail = transporter.sendMail.bind(transporter);
  // Wrap the real method only to observe what the transport produced.
  transporter.sendMail = (async (mail: Parameters<typeof originalSendMail>[0]) => {
    const info = await originalSendMail(mail);
    sentJson.push(info.message);
    return info;
  }) as typeof transporter.sendMail;

  const mailer = createNodemailerMailer(transporter, { from: 'Acme <no-reply@acme.test>', subjectPrefix: '[dev]' });
  await mailer.send({ to: 'user@acme.test', template: 'password_reset', context: { app_name: APP, token: 'tok_nm_1' } });

  assert.equal(sentJson.length, 1);
  const sent = JSON.parse(sentJson[0] ?? '') as {
    from: { address: string; name: string };
    to: Array<{ address: string }>;
    subject: string;
    text: string;
    html: string;
  };
  assert.deepEqual(sent.from, { address: 'no-reply@acme.test', name: 'Acme' });
  assert.equal(sent.to[0]?.address, 'user@acme.test');
  assert.equal(sent.subject, '[dev] Reset your Acme Cloud password');
  assert.ok(sent.text.includes('tok_nm_1'));
  assert.ok(sent.html.includes('tok_nm_1'));
});

test('nodemailer mailer accepts transport options and connection URLs', async () => {
  const mailer = createNodemailerMailer({ jsonTransport: true }, { from: 'no-reply@acme.test' });
  await mailer.send({
    to: 'user@acme.test',
    template: 'otp_code',
    context: { app_name: APP, code: '111222', ttl: 300, purpose: 'login_mfa' },
  });
  // Building an SMTP transporter does not connect, so this only checks the URL form is accepted.
  assert.ok(createNodemailerMailer('smtp://user:pass@localhost:2525', { from: 'no-reply@acme.test' }));
});

test('nodemailer mailer requires a from address', () => {
  assert.throws(() => createNodemailerMailer({ jsonTransport: true }, { from: '' }), TypeError);
  assert.throws(
    () => createNodemailerMailer({ jsonTransport: true }, {} as unknown as { from: string }),
    TypeError,
  );
});

test('isCommonPassword compares case-insensitively', () => {
  assert.equal(isCommonPassword('Password1'), true);
  assert.equal(isCommonPassword('QWERTYUIOP'), true);
  assert.equal(isCommonPassword('correct horse battery staple'), false);
});

test('every blocklist entry is lower-case and at least 8 characters', () => {
  assert.ok(COMMON_PASSWORDS.size >= 1000, `only ${COMMON_PASSWORDS.size} entries`);
  for (const entry of COMMON_PASSWORDS) {
    assert.equal(entry, entry.toLowerCase(), entry);
    assert.ok(entry.length >= 8, entry);
    assert.equal(entry, entry.trim(), entry);
  }
});
