/** The transactional e-mails the router sends; each has a typed context below. */
export type TemplateName = 'verify_email' | 'password_reset' | 'invite' | 'otp_code' | 'login_code';

/**
 * One transactional e-mail, handed to a {@link Mailer} unrendered so a host can use its own
 * templates (or a provider's stored templates) instead of the bundled ones.
 */
export interface MailMessage {
  /** Recipient address. */
  to: string;
  template: TemplateName;
  /** The template's variables; see {@link TemplateContexts} for the shape per template. */
  context: Record<string, unknown>;
}

/** Delivers transactional e-mail. A rejected promise is logged by the router; it never fails the request that caused it. */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
}

/** One text message, already rendered. */
export interface SmsMessage {
  /** Recipient phone number in E.164 form, e.g. `+14155550123`. */
  to: string;
  message: string;
}

/** Delivers SMS one-time codes. A rejected promise is logged by the router; it never fails the request that caused it. */
export interface SmsSender {
  send(message: SmsMessage): Promise<void>;
}

/**
 * Where the router reports what it does not return to the caller (delivery failures, migrations, warnings).
 * Structurally compatible with pino, winston and `console`-like loggers; `debug` is optional.
 */
export interface Logger {
  debug?(msg: string, meta?: object): void;
  info(msg: string, meta?: object): void;
  warn(msg: string, meta?: object): void;
  error(msg: string, meta?: object): void;
}

/** Source of the current time; injectable so tests can move time without waiting. */
export interface Clock {
  /** epoch milliseconds */
  now(): number;
}

/** Variables present in every template's context. */
export interface BaseTemplateContext {
  /** The host application's display name (config `appName`, default `issuer`). */
  app_name: string;
}

/** Context of `verify_email`. */
export interface VerifyEmailContext extends BaseTemplateContext {
  /** Single-use e-mail verification token. */
  token: string;
  /** Verification link built from config `links.verifyEmail`, when configured. */
  url?: string;
}

/** Context of `password_reset`. */
export interface PasswordResetContext extends BaseTemplateContext {
  /** Single-use password reset token. */
  token: string;
  /** Reset link built from config `links.resetPassword`, when configured. */
  url?: string;
}

/** Context of `invite`. */
export interface InviteContext extends BaseTemplateContext {
  /** Single-use invitation token. */
  token: string;
  /** Acceptance link built from config `links.acceptInvite`, when configured. */
  url?: string;
  organization_name: string;
  /** E-mail address of the member who sent the invitation. */
  inviter_email: string;
  /** When the invitation lapses (ISO 8601 string). */
  expires_at: string;
}

/** Why a one-time code was sent. */
export type OtpPurpose = 'enroll' | 'login_mfa' | 'step_up';

/** Context of `otp_code`. */
export interface OtpCodeContext extends BaseTemplateContext {
  /** The one-time code, as digits. */
  code: string;
  /** Seconds until the code expires. */
  ttl: number;
  purpose: OtpPurpose;
}

/** Context of `login_code` (docs/passwordless.md): a passwordless sign-in. */
export interface LoginCodeContext extends BaseTemplateContext {
  /** The one-time code, as digits. */
  code: string;
  /** Seconds until the code (and link) expire. */
  ttl: number;
  /** Single-use sign-in token, present when `passwordless.link` is on. */
  token?: string;
  /** The host's page built from `links.passwordlessLogin`, which POSTs the token; present when `passwordless.link` is on. */
  url?: string;
}

/** The context shape of each template, for hosts that render their own mail. */
export interface TemplateContexts {
  verify_email: VerifyEmailContext;
  password_reset: PasswordResetContext;
  invite: InviteContext;
  otp_code: OtpCodeContext;
  login_code: LoginCodeContext;
}

/** One address a name resolves to. */
export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/**
 * Name resolution for outbound requests (webhooks, docs/webhooks.md; single sign-on, 12.2). Each
 * method is optional; an absent one uses `node:dns/promises`.
 */
export interface DnsResolver {
  resolveTxt?(name: string): Promise<string[][]>;
  lookup?(hostname: string): Promise<ResolvedAddress[]>;
}
