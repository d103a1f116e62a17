/** docs/events.md: `<entity>.<past-verb>`. */
export const EVENT_TYPES = [
  'user.registered',
  'user.email_verified',
  'user.logged_in',
  'user.login_failed',
  'user.locked',
  'auth.token_refreshed',
  'auth.refresh_reuse_detected',
  'auth.sessions_revoked',
  'auth.org_switched',
  'user.password_reset_requested',
  'user.password_changed',
  'mfa.enrolled',
  'mfa.factor_added',
  'mfa.verified',
  'mfa.recovery_used',
  'mfa.verify_failed',
  'mfa.step_up_completed',
  'mfa.factor_removed',
  'mfa.recovery_regenerated',
  'mfa.passkey_counter_regressed',
  'org.created',
  'org.updated',
  'org.deleted',
  'member.invited',
  'member.joined',
  'member.roles_changed',
  'member.status_changed',
  'member.removed',
  'role.created',
  'role.updated',
  'role.deleted',
  'user.disabled',
  'user.enabled',
  'user.deleted',
  // Privilege changes made through identity.service or by an administrator.
  'user.superadmin_granted',
  'user.superadmin_revoked',
  'user.mfa_enforcement_changed',
  'api_key.created',
  'api_key.revoked',
  // docs/social-login.md
  'user.social_linked',
  'user.social_unlinked',
  // docs/sso.md: single sign-on per organization
  'org.domain_added',
  'org.domain_verified',
  'org.domain_removed',
  'sso.connection_created',
  'sso.connection_updated',
  'sso.connection_deleted',
  'user.sso_linked',
  // docs/webhooks.md: audited and handed to onEvent, never sent to a webhook (webhook.test goes only to its webhook)
  'webhook.created',
  'webhook.updated',
  'webhook.deleted',
  'webhook.secret_rotated',
  'webhook.disabled',
  'webhook.test',
] as const;

export type IdentityEventType = (typeof EVENT_TYPES)[number];

/** What `onEvent` receives after the change that caused it has committed (docs/events.md). */
export interface IdentityEvent {
  id: string;
  type: IdentityEventType;
  /** ISO 8601 */
  occurred_at: string;
  actor_id: string | null;
  user_id: string | null;
  organization_id: string | null;
  ip: string | null;
  /** Never a password, code, token or secret. */
  data: Record<string, unknown>;
}

export type IdentityEventListener = (event: IdentityEvent) => void | Promise<void>;

export interface EventInput {
  type: IdentityEventType;
  actorId?: string | null;
  userId?: string | null;
  organizationId?: string | null;
  data?: Record<string, unknown>;
}
