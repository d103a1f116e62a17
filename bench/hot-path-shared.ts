/** What bench/run.ts and bench/hot-path-server.ts agree on. */
export const MOUNT = '/identity';
export const HOST_ROUTE = '/api/reports';
export const BCRYPT_COST = 10;
export const PASSWORD = 'bench password 1234';
/** Sessions for the refresh load: each run strands one token per connection in flight when it stops, so two runs of 20 need 40 and more (bench/compare.ts asks for more). */
export const REFRESH_SESSIONS = Number(process.env.BENCH_REFRESH_SESSIONS ?? 64);
export const ORGANIZATION_MEMBERS = 11;
/**
 * Accounts the login rows log in as, in turn. A storm is many users signing in: twenty
 * connections on one account would mostly measure the lockout, which lets at most
 * `auth.lockout.threshold` attempts on an account be compared at once and refuses
 * the rest.
 */
export const LOGIN_ACCOUNTS = 40;
/** Connections in the router's PostgreSQL pool, one per load connection. */
export const PG_POOL = 20;

export interface IdentitySeed {
  origin: string;
  /** Access token of the organization's owner, scoped to it. */
  token: string;
  organizationId: string;
  refreshTokens: string[];
  /** Credentials of the LOGIN_ACCOUNTS accounts the login rows use in turn. */
  logins: Array<{ email: string; password: string }>;
  passwordWorkers: number | undefined;
  /** What the scale bench bulk-inserted (BENCH_SCALE_USERS). */
  scale?: { users: number; organizations: number; membersAdded: number; seconds: number };
}


/**
 * The refresh row's autocannon requests: each takes a live refresh token from the pool and its
 * answer puts the next one back, so each connection rotates its own chain.
 */
export function refreshRequests(refreshTokens: string[]): Array<Record<string, unknown>> {
  const livePool = [...refreshTokens];
  const path = `${MOUNT}/auth/token/refresh`;
  return [
    {
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json' },
      setupRequest: (request: Record<string, unknown>) => Object.assign({}, request, { body: JSON.stringify({ refresh_token: livePool.shift() }) }),
      onResponse: (status: number, body: string) => {
        if (status === 200) livePool.push(JSON.parse(body).data.refresh_token);
      },
    },
  ];
}

/** The login row's autocannon requests: the seeded accounts in turn. */
export function loginRequests(logins: IdentitySeed['logins']): Array<Record<string, unknown>> {
  let next = 0;
  return [
    {
      method: 'POST',
      path: `${MOUNT}/auth/login`,
      headers: { 'content-type': 'application/json' },
      setupRequest: (request: Record<string, unknown>) => Object.assign({}, request, { body: JSON.stringify(logins[next++ % logins.length]) }),
    },
  ];
}

/** One row's load, as autocannon takes it with the server's origin (`autocannonOptions`). */
export interface LoadRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  requests?: unknown[];
}

/** The read rows' names, as the tools take them on their command lines. */
export const READ_ROWS = ['host', 'me', 'orgs', 'members'] as const;
export type ReadRow = (typeof READ_ROWS)[number];
export const isReadRow = (row: string): row is ReadRow => (READ_ROWS as readonly string[]).includes(row);

/** The read rows, each called with the organization owner's token. */
export function readLoads(seed: IdentitySeed): Record<ReadRow, LoadRequest> {
  const bearer = { authorization: `Bearer ${seed.token}` };
  return {
    host: { path: HOST_ROUTE, headers: bearer },
    me: { path: `${MOUNT}/auth/me`, headers: bearer },
    orgs: { path: `${MOUNT}/orgs`, headers: bearer },
    members: { path: `${MOUNT}/orgs/${seed.organizationId}/members`, headers: bearer },
  };
}

/** The refresh row: each connection rotates its own chain of refresh tokens. */
export function refreshLoad(seed: IdentitySeed): LoadRequest {
  return { method: 'POST', path: `${MOUNT}/auth/token/refresh`, requests: refreshRequests(seed.refreshTokens) };
}

/** Each login signs in as the next of the seeded accounts, as a storm of users would. */
export function loginLoad(seed: IdentitySeed): LoadRequest {
  return { method: 'POST', path: `${MOUNT}/auth/login`, requests: loginRequests(seed.logins) };
}

/** autocannon's options for `load` sent to `origin`. */
export function autocannonOptions(origin: string, load: LoadRequest): Record<string, unknown> {
  return {
    url: origin + load.path,
    method: load.method ?? 'GET',
    ...(load.headers ? { headers: load.headers } : {}),
    ...(load.requests ? { requests: load.requests } : {}),
  };
}
