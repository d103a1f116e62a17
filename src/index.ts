export { createIdentityRouter, type IdentityAdapters, type IdentityRouter } from './create-identity-router.js';
export type { HostMiddlewareOptions } from './http/host-middleware.js';
export { createDevMailer } from './adapters/dev-mailer.js';
export { createDevSmsSender, noopSender } from './adapters/dev-sms.js';
export { createNodemailerMailer } from './adapters/nodemailer-mailer.js';
export { consoleLogger } from './adapters/console-logger.js';
export { renderMail, renderSms } from './adapters/templates.js';
export type {
  Clock,
  Logger,
  MailMessage,
  Mailer,
  SmsMessage,
  SmsSender,
  TemplateName,
  TemplateContexts,
  VerifyEmailContext,
  PasswordResetContext,
  InviteContext,
  OtpCodeContext,
  DnsResolver,
  ResolvedAddress,
} from './adapters/types.js';
export type { NodemailerTransportLike, NodemailerTransportOptions, NodemailerMailerOptions } from './adapters/nodemailer-mailer.js';
export { migrateIdentityDatabase } from './store/migration-source.js';
export type { IdentityConfig, RateLimitGroup, RateLimitRule, RateLimitStoreOption, PermissionDefinition, EventDeliveryConfig, WebhooksConfig } from './config/types.js';
export type { SocialConfig, SocialProviderConfig } from './config/social.js';
export { IdentityConfigError } from './config/schema.js';
export { IdentityError, type IdentityErrorCode, type SocialErrorCode, type WebhookErrorCode } from './errors.js';
export { EVENT_TYPES, type IdentityEvent, type IdentityEventType, type IdentityEventListener } from './events.js';
export type { IdentityService } from './services/build-services.js';
export { CORE_PERMISSIONS } from './services/access/permission-catalog.js';
export type { ApiKeyCaller, Caller, SessionCaller } from './services/access/access-policy.js';
