import type { OtpPurpose, TemplateName } from './types.js';

/** A rendered transactional e-mail. */
export interface RenderedMail {
  subject: string;
  text: string;
  html: string;
}

// Each message is written once as blocks, then rendered to both text and HTML, so the two bodies cannot drift apart
// and escaping happens in exactly one place.
type Block =
  | { kind: 'paragraph'; text: string }
  | { kind: 'link'; url: string; label: string }
  | { kind: 'code'; value: string; large: boolean };

interface MailContent {
  subject: string;
  blocks: Block[];
}

const HTML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Escapes a value for HTML text and double- or single-quoted attributes. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (char) => HTML_ESCAPES[char] ?? char);
}

const PURPOSE_WORDS: Readonly<Record<OtpPurpose, string>> = {
  enroll: 'confirm your new sign-in method',
  login_mfa: 'finish signing in',
  step_up: "confirm it's you",
};

function plural(count: number, unit: string): string {
  return `${count} ${unit}${count === 1 ? '' : 's'}`;
}

/** "5 minutes", "1 minute", "30 seconds": rounded down so a message never promises more time than the code has. */
export function describeDuration(seconds: number): string {
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) return plural(whole, 'second');
  return plural(Math.floor(whole / 60), 'minute');
}

function optionalText(context: Record<string, unknown>, key: string): string | undefined {
  const value = context[key];
  if (typeof value === 'string') return value.trim() === '' ? undefined : value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}

// A mail without its token, code or app name is useless to the recipient; failing loudly lets the router log it.
function requiredText(template: TemplateName, context: Record<string, unknown>, key: string): string {
  const value = optionalText(context, key);
  if (value === undefined) {
    throw new TypeError(`renderMail('${template}'): context.${key} must be a non-empty string`);
  }
  return value;
}

function optionalSeconds(context: Record<string, unknown>, key: string): number | undefined {
  const value = context[key];
  const seconds = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof seconds === 'number' && Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

/** Accepts an ISO string, a Date or epoch milliseconds; prints UTC to the minute, e.g. "2025-03-01 14:30 UTC". */
function formatExpiry(value: unknown): string | undefined {
  let date: Date | undefined;
  if (value instanceof Date) date = value;
  else if (typeof value === 'string' || typeof value === 'number') date = new Date(value);
  if (date === undefined || Number.isNaN(date.getTime())) {
    // An unparseable string is still more useful shown as given than dropped.
    return typeof value === 'string' && value.trim() !== '' ? value : undefined;
  }
  return `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

// Either a link or, when the host configured no link template, the raw token with instructions to paste it.
function linkOrToken(
  context: Record<string, unknown>,
  template: TemplateName,
  appName: string,
  link: { intro: string; label: string },
  tokenName: string,
): Block[] {
  const url = optionalText(context, 'url');
  if (url !== undefined) {
    return [
      { kind: 'paragraph', text: link.intro },
      { kind: 'link', url, label: link.label },
    ];
  }
  const token = requiredText(template, context, 'token');
  return [
    {
      kind: 'paragraph',
      text: `Copy the ${tokenName} below and paste it into ${appName} where you are asked for it:`,
    },
    { kind: 'code', value: token, large: false },
  ];
}

function composeVerifyEmail(context: Record<string, unknown>): MailContent {
  const appName = requiredText('verify_email', context, 'app_name');
  return {
    subject: `Confirm your email address for ${appName}`,
    blocks: [
      { kind: 'paragraph', text: `Please confirm that this is the email address for your ${appName} account.` },
      ...linkOrToken(
        context,
        'verify_email',
        appName,
        { intro: 'Open this link to confirm it:', label: 'Confirm email address' },
        'verification token',
      ),
      { kind: 'paragraph', text: `If you didn't create an account with ${appName}, you can ignore this email.` },
    ],
  };
}

function composePasswordReset(context: Record<string, unknown>): MailContent {
  const appName = requiredText('password_reset', context, 'app_name');
  return {
    subject: `Reset your ${appName} password`,
    blocks: [
      { kind: 'paragraph', text: `We received a request to reset the password for your ${appName} account.` },
      ...linkOrToken(
        context,
        'password_reset',
        appName,
        { intro: 'Open this link to choose a new password:', label: 'Reset password' },
        'reset token',
      ),
      {
        kind: 'paragraph',
        text: "If you didn't ask to reset your password, you can ignore this email; your password will not change.",
      },
    ],
  };
}

function composeInvite(context: Record<string, unknown>): MailContent {
  const appName = requiredText('invite', context, 'app_name');
  const organizationName = requiredText('invite', context, 'organization_name');
  const inviterEmail = optionalText(context, 'inviter_email');
  const expiresAt = formatExpiry(context.expires_at);
  const blocks: Block[] = [
    {
      kind: 'paragraph',
      text:
        inviterEmail === undefined
          ? `You have been invited to join ${organizationName} on ${appName}.`
          : `${inviterEmail} has invited you to join ${organizationName} on ${appName}.`,
    },
    ...linkOrToken(
      context,
      'invite',
      appName,
      { intro: 'Open this link to accept the invitation:', label: 'Accept invitation' },
      'invitation token',
    ),
  ];
  if (expiresAt !== undefined) blocks.push({ kind: 'paragraph', text: `This invitation expires on ${expiresAt}.` });
  blocks.push({ kind: 'paragraph', text: "If you weren't expecting this invitation, you can ignore this email." });
  return {
    subject:
      inviterEmail === undefined
        ? `You're invited to join ${organizationName} on ${appName}`
        : `${inviterEmail} invited you to join ${organizationName} on ${appName}`,
    blocks,
  };
}

function composeOtpCode(context: Record<string, unknown>): MailContent {
  const appName = requiredText('otp_code', context, 'app_name');
  const code = requiredText('otp_code', context, 'code');
  const purpose = context.purpose;
  const purposeWords =
    typeof purpose === 'string' && Object.hasOwn(PURPOSE_WORDS, purpose)
      ? PURPOSE_WORDS[purpose as OtpPurpose]
      : 'complete your request';
  const ttl = optionalSeconds(context, 'ttl');
  const blocks: Block[] = [
    { kind: 'paragraph', text: `Enter this code in ${appName} to ${purposeWords}:` },
    { kind: 'code', value: code, large: true },
  ];
  if (ttl !== undefined) blocks.push({ kind: 'paragraph', text: `It expires in ${describeDuration(ttl)}.` });
  blocks.push({
    kind: 'paragraph',
    text: "If you didn't request this code, someone may be trying to use your account; consider changing your password.",
  });
  // The code stays out of the subject, which notification previews and mail logs show to more eyes than the body.
  return { subject: `Your ${appName} verification code`, blocks };
}

function composeLoginCode(context: Record<string, unknown>): MailContent {
  const appName = requiredText('login_code', context, 'app_name');
  const code = requiredText('login_code', context, 'code');
  const ttl = optionalSeconds(context, 'ttl');
  const url = optionalText(context, 'url');
  const blocks: Block[] = [
    { kind: 'paragraph', text: `Enter this code in ${appName} to sign in:` },
    { kind: 'code', value: code, large: true },
  ];
  if (url !== undefined) blocks.push({ kind: 'paragraph', text: 'Or open this link to sign in:' }, { kind: 'link', url, label: `Sign in to ${appName}` });
  if (ttl !== undefined) blocks.push({ kind: 'paragraph', text: `It expires in ${describeDuration(ttl)}.` });
  blocks.push({ kind: 'paragraph', text: "If you didn't ask to sign in, you can ignore this email; nobody can sign in without this code." });
  return { subject: `Sign in to ${appName}`, blocks };
}

function renderTextBody(blocks: readonly Block[]): string {
  return `${blocks
    .map((block) => {
      switch (block.kind) {
        case 'paragraph':
          return block.text;
        case 'link':
          return block.url;
        case 'code':
          return `    ${block.value}`;
      }
    })
    .join('\n\n')}\n`;
}

// Only web links become anchors; anything else (a custom scheme, a mistyped template) is shown as text to copy.
function isWebUrl(url: string): boolean {
  return /^https?:\/\//i.test(url);
}

const CODE_STYLE = 'font-family:Menlo,Consolas,monospace;background:#f3f4f6;padding:8px 12px;border-radius:4px;';

function renderHtmlBlock(block: Block): string {
  switch (block.kind) {
    case 'paragraph':
      return `<p>${escapeHtml(block.text)}</p>`;
    case 'link': {
      const url = escapeHtml(block.url);
      if (!isWebUrl(block.url)) return `<p style="${CODE_STYLE}word-break:break-all;">${url}</p>`;
      return (
        `<p><a href="${url}" style="display:inline-block;padding:10px 18px;background:#2563eb;color:#ffffff;` +
        `text-decoration:none;border-radius:4px;">${escapeHtml(block.label)}</a></p>\n` +
        `<p style="font-size:13px;color:#555555;">Or paste this link into your browser: ` +
        `<span style="word-break:break-all;">${url}</span></p>`
      );
    }
    case 'code': {
      const size = block.large ? 'font-size:28px;letter-spacing:4px;font-weight:bold;' : 'word-break:break-all;';
      return `<p style="${CODE_STYLE}${size}">${escapeHtml(block.value)}</p>`;
    }
  }
}

function renderHtmlBody(subject: string, blocks: readonly Block[]): string {
  return [
    '<!DOCTYPE html>',
    '<html>',
    '<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(subject)}</title></head>`,
    '<body style="margin:0;padding:24px;font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;' +
      'font-size:15px;line-height:1.5;color:#111111;">',
    '<div style="max-width:560px;margin:0 auto;">',
    ...blocks.map(renderHtmlBlock),
    '</div>',
    '</body>',
    '</html>',
    '',
  ].join('\n');
}

function compose(template: TemplateName, context: Record<string, unknown>): MailContent {
  switch (template) {
    case 'verify_email':
      return composeVerifyEmail(context);
    case 'password_reset':
      return composePasswordReset(context);
    case 'invite':
      return composeInvite(context);
    case 'otp_code':
      return composeOtpCode(context);
    case 'login_code':
      return composeLoginCode(context);
    default: {
      // Reachable from plain JavaScript callers; the `never` keeps the switch exhaustive for TypeScript ones.
      const unknownTemplate: never = template;
      throw new TypeError(`renderMail: unknown template ${JSON.stringify(unknownTemplate)}`);
    }
  }
}

/**
 * Renders one of the bundled transactional e-mails as a subject plus text and HTML bodies.
 * Every interpolated value is HTML-escaped in `html`. Throws a TypeError when the context lacks
 * `app_name` or the token/code the message exists to deliver.
 */
export function renderMail(template: TemplateName, context: Record<string, unknown>): RenderedMail {
  const { subject, blocks } = compose(template, context);
  return { subject, text: renderTextBody(blocks), html: renderHtmlBody(subject, blocks) };
}

/** The SMS body for a one-time code, e.g. "123456 is your Acme code. It expires in 5 minutes." */
export function renderSms(code: string, appName: string, ttlSeconds: number): string {
  return `${code} is your ${appName} code. It expires in ${describeDuration(ttlSeconds)}.`;
}
