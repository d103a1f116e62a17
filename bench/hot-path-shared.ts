/** What bench/run.ts and bench/hot-path-server.ts agree on. */
export const MOUNT = '/identity';
export const HOST_ROUTE = '/api/reports';
export const BCRYPT_COST = 10;
export const PASSWORD = 'bench password 1234';
/** Sessions for the refresh load: each run strands one token per connection in flight when it stops, so two runs of 20 need 40 and more. */
export const REFRESH_SESSIONS = 64;
export const ORGANIZATION_MEMBERS = 11;

export interface IdentitySeed {
  origin: string;
  /** Access token of the organization's owner, scoped to it. */
  token: string;
  organizationId: string;
  refreshTokens: string[];
  login: { email: string; password: string };
  passwordWorkers: number | undefined;
}

