// The web app's one door to the router: identity-router/client (docs/client.md), which the example
// server serves as /client/identity-client.js. Cookie mode: the access token lives in the client's
// memory and nowhere else; the refresh token is an httpOnly cookie the server sets on /api/auth,
// which no script can read (see docs/getting-started.md, "Tokens in the browser"). The client
// refreshes, shares the session with the app's other tabs, and after a reload recovers it through
// that cookie.
import { createIdentityClient, IdentityClientError } from '/client/identity-client.js';
import { withStepUpDialog } from './step-up.js';

export { IdentityClientError };

/**
 * The server sets a script-readable hint cookie (no token in it) beside the httpOnly one, so a
 * signed-out page load sends no refresh that must fail.
 */
const mayHaveSession = () => document.cookie.split(';').some((part) => part.trim() === 'example_session=1');

const baseUrl = '/api';

export const identity = createIdentityClient({ baseUrl, storage: 'none', restore: mayHaveSession });

/** Runs a call; when it answers 401 step_up_required the dialog asks for a second factor, and the call runs again. */
export const withStepUp = (call) => withStepUpDialog(identity, call);

/** Calls the router (answers the body's `data`, or throws IdentityClientError), with step-up when the call needs it. */
export const api = (method, path, body) => withStepUp(() => identity.request(method, path, body === undefined ? {} : { body }));

export const signedIn = () => identity.getSession() !== null;

/** The access token's claims: hints for the UI (active organization, scope), never authority. */
export const claims = () => identity.getSession()?.claims ?? null;

/**
 * After the router ended this session itself (account or active organization deleted, password
 * reset): end it here too, in every tab. The router may refuse the logout; the client ends it anyway.
 */
export async function endSession() {
  if (signedIn()) await identity.logout().catch(() => undefined);
}
