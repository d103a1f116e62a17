// The web app's only door to the router. The access token lives in this module's memory and
// nowhere else; the refresh token is an httpOnly cookie the server sets on /api/auth, which
// no script can read (see docs/getting-started.md, "Tokens in the browser").

const BASE = '/api';
let accessToken = null;
let stepUpHandler = null;

/** "in 54 minutes": when a 429 may be retried, from Retry-After (seconds) or the body's `retry_after`. */
export function retryWhen(seconds) {
  if (!Number.isFinite(seconds) || seconds <= 0) return 'in a moment';
  if (seconds < 60) return `in ${Math.ceil(seconds)} second${Math.ceil(seconds) === 1 ? '' : 's'}`;
  const minutes = Math.ceil(seconds / 60);
  if (minutes < 60) return `in ${minutes} minute${minutes === 1 ? '' : 's'}`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return `in ${hours} hour${hours === 1 ? '' : 's'}${rest ? ` ${rest} minute${rest === 1 ? '' : 's'}` : ''}`;
}

export class ApiError extends Error {
  constructor(status, body, retryAfterSeconds) {
    const message = body?.message ?? (body?.errors ? body.errors.join(' ') : `Request failed (${status})`);
    // Every 429 says when to come back, not only "later".
    super(status === 429 ? `${message.replace(/;? ?try again later\.?$/i, '.')} Try again ${retryWhen(retryAfterSeconds)}.` : message);
    this.retryAfterSeconds = retryAfterSeconds;
    this.status = status;
    this.code = body?.error;
    this.errors = body?.errors;
    this.body = body;
  }
}

/** Who asks the person for a second factor when an operation answers 401 step_up_required. */
export function onStepUpRequired(handler) {
  stepUpHandler = handler;
}

export function setAccessToken(token) {
  accessToken = token;
}

export const signedIn = () => accessToken !== null;

/** The access token's claims: hints for the UI (active organization), never authority. */
export function claims() {
  if (!accessToken) return null;
  const payload = accessToken.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
  return JSON.parse(atob(payload));
}

async function send(method, path, body, token) {
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(BASE + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  const text = await response.text();
  return { response, body: text ? JSON.parse(text) : null };
}

/**
 * Calls the router. An expired access token is refreshed once from the cookie; a
 * step_up_required answer asks for a second factor and retries with the new token.
 * Answers `{data, headers}` or throws ApiError.
 */
export async function api(method, path, body, { token } = {}) {
  const call = () => send(method, path, body, token ?? accessToken);
  let { response, body: answer } = await call();
  if (response.status === 401 && !token && answer?.error === 'unauthorized' && accessToken && (await refresh())) {
    ({ response, body: answer } = await call());
  }
  if (response.status === 401 && answer?.error === 'step_up_required' && stepUpHandler && (await stepUpHandler())) {
    ({ response, body: answer } = await call());
  }
  if (!response.ok) throw new ApiError(response.status, answer, Number(response.headers.get('retry-after') ?? answer?.retry_after));
  return { data: answer?.data ?? answer, headers: response.headers };
}

/**
 * Whether a refresh cookie may exist: the server sets a script-readable hint cookie (no token
 * in it) beside the httpOnly one, so a signed-out page load sends no refresh that must fail.
 */
export const mayHaveSession = () => document.cookie.split(';').some((part) => part.trim() === 'example_session=1');

/** A new access token from the refresh cookie; false when there is no live session. */
export async function refresh() {
  const { response, body } = await send('POST', '/auth/token/refresh', undefined, null);
  accessToken = response.ok ? body.data.access_token : null;
  return response.ok;
}

/** Keeps the access token from a token answer (login, MFA verify, step-up, switch-org). */
export function acceptTokens(data) {
  accessToken = data.access_token;
}

export async function logout(everywhere = false) {
  try {
    await api('POST', everywhere ? '/auth/logout-all' : '/auth/logout');
  } finally {
    accessToken = null;
  }
}

/** Forget the session locally (after the account is deleted, say). */
export function forget() {
  accessToken = null;
}
