import nodemailer from 'nodemailer';
import { renderMail } from './templates.js';
import type { Mailer } from './types.js';

/**
 * The one method this adapter needs; `nodemailer.createTransport(...)` satisfies it, and so does a test double.
 * `to` is one address object, never a string: nodemailer parses a string as an address list.
 */
export interface NodemailerTransportLike {
  sendMail(mail: { from: string; to: { name: string; address: string }; subject: string; text: string; html: string }): Promise<unknown>;
}

/**
 * What `nodemailer.createTransport` accepts: a connection URL, transport options or a
 * transport plugin. Typed structurally so the published declarations do not depend on
 * @types/nodemailer; nodemailer itself validates the shape.
 */
export type NodemailerTransportOptions = string | Record<string, unknown>;

export interface NodemailerMailerOptions {
  /** The From header, e.g. `"Acme <no-reply@acme.test>"`. */
  from: string;
  /** Put before every subject, e.g. `[staging]`. */
  subjectPrefix?: string;
}

function isTransportLike(value: unknown): value is NodemailerTransportLike {
  return (
    typeof value === 'object' && value !== null && typeof (value as { sendMail?: unknown }).sendMail === 'function'
  );
}

function resolveTransport(
  transport: NodemailerTransportLike | NodemailerTransportOptions,
): NodemailerTransportLike {
  if (isTransportLike(transport)) return transport;
  if (typeof transport !== 'string' && (typeof transport !== 'object' || transport === null)) {
    throw new TypeError('createNodemailerMailer: transport must be a nodemailer transporter, transport options or a URL');
  }
  // createTransport's overloads each take one option shape and TypeScript does not resolve overloads against a
  // union; at run time nodemailer itself dispatches on the shape, so this one signature is accurate.
  const createTransport = nodemailer.createTransport as unknown as (options: NodemailerTransportOptions) => NodemailerTransportLike;
  return createTransport(transport);
}

/**
 * A Mailer that renders the bundled templates and sends them through nodemailer. The first argument is
 * an existing transporter (`nodemailer.createTransport(...)`), or what you would pass to `createTransport`
 * (`{ host, port, auth }`, `'smtps://user:pass@smtp.example.com'`, `{ jsonTransport: true }`, ...).
 */
export function createNodemailerMailer(
  transport: NodemailerTransportLike | NodemailerTransportOptions,
  options: NodemailerMailerOptions,
): Mailer {
  const from: unknown = options?.from;
  if (typeof from !== 'string' || from.trim() === '') {
    throw new TypeError('createNodemailerMailer: options.from must be a non-empty string');
  }
  const prefix = options.subjectPrefix?.trim() ?? '';
  const transporter = resolveTransport(transport);
  return {
    async send(message) {
      const { subject, text, html } = renderMail(message.template, message.context);
      await transporter.sendMail({
        from,
        // One address object, which nodemailer takes as it is: a string would be parsed as an address
        // list (commas, display names, groups), and one message could reach other mailboxes.
        to: { name: '', address: message.to },
        subject: prefix === '' ? subject : `${prefix} ${subject}`,
        text,
        html,
      });
    },
  };
}
