/**
 * The development inbox: a mailer and an SMS sender that keep what they "send" in memory, and a
 * page that shows it with clickable links. It lets a newcomer finish every flow without an SMTP
 * server or reading the console. It lives in the example only, and the app mounts it only in
 * development: in production an inbox that shows other people's reset links would be a takeover.
 */
import express, { type Router } from 'express';
import { createDevMailer, createDevSmsSender, renderMail, type Mailer, type SmsSender } from '../../src/index.js';

export interface InboxMessage {
  id: number;
  receivedAt: string;
  channel: 'e-mail' | 'SMS';
  to: string;
  subject: string;
  text: string;
}

export interface DevInbox {
  readonly messages: readonly InboxMessage[];
  mailer: Mailer;
  sms: SmsSender;
  router(): Router;
}

const KEEP_NEWEST = 200;

export function createDevInbox(options: { now: () => number; echoToConsole: boolean }): DevInbox {
  const messages: InboxMessage[] = [];
  let nextId = 1;
  const consoleMailer = createDevMailer();
  const consoleSms = createDevSmsSender();
  const keep = (message: Omit<InboxMessage, 'id' | 'receivedAt'>) => {
    messages.unshift({ id: nextId++, receivedAt: new Date(options.now()).toISOString(), ...message });
    messages.length = Math.min(messages.length, KEEP_NEWEST);
  };
  const mailer: Mailer = {
    async send(message) {
      const { subject, text } = renderMail(message.template, message.context);
      keep({ channel: 'e-mail', to: message.to, subject, text });
      if (options.echoToConsole) await consoleMailer.send(message);
    },
  };
  const sms: SmsSender = {
    async send(message) {
      keep({ channel: 'SMS', to: message.to, subject: 'Text message', text: message.message });
      if (options.echoToConsole) await consoleSms.send(message);
    },
  };
  return {
    messages,
    mailer,
    sms,
    router() {
      const router = express.Router();
      router.get('/dev/inbox', (_req, res) => {
        res.type('html').send(inboxPage(messages));
      });
      router.get('/dev/inbox.json', (_req, res) => {
        res.json({ data: messages });
      });
      return router;
    },
  };
}

const escapeHtml = (value: string) =>
  value.replace(/[&<>"']/g, (char) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[char] ?? char);

/** Escapes a message body and turns its URLs into links (the links the library mails). */
function linkify(text: string): string {
  return escapeHtml(text).replace(/https?:\/\/[^\s<]+/g, (url) => `<a href="${url}">${url}</a>`);
}

function inboxPage(messages: readonly InboxMessage[]): string {
  const items = messages.map(
    (message) => `
      <li>
        <article class="card message" aria-labelledby="message-${message.id}">
          <h2 id="message-${message.id}">${escapeHtml(message.subject)}</h2>
          <p class="meta">${message.channel} to <span class="to">${escapeHtml(message.to)}</span> at <time datetime="${message.receivedAt}">${message.receivedAt}</time></p>
          <pre class="body">${linkify(message.text)}</pre>
        </article>
      </li>`,
  );
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Development inbox · Identity Router Example</title>
  <link rel="stylesheet" href="/app.css">
</head>
<body>
  <header class="site-header"><a class="brand" href="/">Identity Router Example</a></header>
  <main id="main">
    <h1>Development inbox</h1>
    <p>What the example's development mailer and SMS sender captured, newest first. This page exists only while the example runs in development; reload it to see new messages.</p>
    ${messages.length === 0 ? '<p>No messages yet.</p>' : `<ol class="inbox">${items.join('')}</ol>`}
  </main>
</body>
</html>`;
}
