export const TABLES = [
  'users',
  'sessions',
  'refreshTokens',
  'oneTimeTokens',
  'signingKeys',
  'auditEvents',
  'mfaFactors',
  'otpChallenges',
  'mfaTickets',
  'recoveryCodes',
  'rateEvents',
  'organizations',
  'roles',
  'memberships',
  'memberRoles',
  'globalRoleGrants',
  'invites',
  'socialIdentities',
  'socialFlows',
  'rateLimitCounters',
  'webauthnChallenges',
  'apiKeys',
  'webhooks',
  'eventDeliveries',
  'orgDomains',
  'ssoConnections',
  'ssoIdentities',
  'passwordlessChallenges',
  'hostPermissions',
] as const;

export type TableKey = (typeof TABLES)[number];
export type TableNames = Record<TableKey, string>;

const snakeCase = (name: string) => name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

/** Physical table names: `identity_users`, `identity_refresh_tokens`, ... */
export function tableNames(prefix: string): TableNames {
  return Object.fromEntries(TABLES.map((key) => [key, `${prefix}${snakeCase(key)}`])) as TableNames;
}
