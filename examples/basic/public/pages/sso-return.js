// Single sign-on, identifier-first (docs/sso.md): "Sign in through my organization" on the sign-in
// page asks for the work address; the router finds the organization by its verified domain and
// the browser leaves for that organization's identity provider. It comes back to /sso-return,
// which trades the one-time social_code for tokens at POST /auth/social/exchange, the same
// exchange (and the same handoff verifier rule) as social sign-in.
import { ApiError, api } from '../lib/api.js';
import { signInCompleter } from '../lib/sign-in.js';
import { field, form, h } from '../lib/ui.js';

const VERIFIER_KEY = 'sso_handoff_verifier';

const MESSAGES = {
  sso_not_configured: 'There is no single sign-on for this address. Sign in with your password or another way above.',
  sso_email_outside_domain: "Your identity provider answered with an address outside your organization's verified domains.",
  sso_not_member: 'You are not a member of this organization. Ask an administrator to invite you.',
  sso_member_suspended: 'Your membership of this organization is suspended.',
  social_state_invalid: 'The sign-in took too long or was already used. Please start again.',
  provider_error: 'Your identity provider did not sign you in (cancelled or refused).',
  provider_response_invalid: 'Your identity provider answered something we cannot trust.',
  provider_unavailable: 'Your identity provider cannot be reached right now.',
  social_email_required: 'Your identity provider did not share an e-mail address.',
  account_link_required: 'An account with this address exists here but cannot be linked (its address is not verified). Sign in to it another way first.',
  account_disabled: 'This account is disabled.',
  invalid_token: 'This sign-in code is invalid or already used. Please start again.',
};

const describe = (code, fallback) => `${MESSAGES[code] ?? fallback ?? 'Single sign-on failed.'} (${code})`;
const errorText = (error) => (error instanceof ApiError && error.code ? describe(error.code, error.message) : (error?.message ?? String(error)));

function base64url(bytes) {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * The handoff: a random verifier waits in sessionStorage (never a token) while the browser is
 * at the provider; only its SHA-256 travels. A social_code planted in another browser is useless.
 */
async function leaveForProvider(email) {
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const challenge = base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
  sessionStorage.setItem(VERIFIER_KEY, verifier);
  try {
    const { data } = await api('POST', '/auth/sso/authorize', { email, handoff_challenge: challenge, handoff_challenge_method: 'S256' });
    location.assign(data.authorization_url);
  } catch (error) {
    sessionStorage.removeItem(VERIFIER_KEY);
    throw new Error(errorText(error));
  }
}

/**
 * On the sign-in page: the work address first, then the organization's provider. The example
 * configures `sso` in development only (app.ts), so only there is the option offered.
 */
export function signInOption(ctx) {
  if (!ctx.development) return null;
  return form({
    name: 'Single sign-on',
    submit: 'Sign in through my organization',
    fields: [field({ name: 'email', label: 'Work address for single sign-on', type: 'email', autocomplete: 'username' })],
    onSubmit: async ({ email }) => leaveForProvider(String(email).trim()),
  });
}

export default {
  path: '/sso-return',
  title: 'Signing in with single sign-on',
  render(main, ctx) {
    const params = ctx.params();
    const code = params.get('social_code');
    const failure = params.get('social_error');
    // The one-time values leave the address bar (and the history) at once.
    history.replaceState(null, '', '/sso-return');
    const verifier = sessionStorage.getItem(VERIFIER_KEY);
    sessionStorage.removeItem(VERIFIER_KEY);
    const fail = (text) => main.append(h('p', { role: 'alert', class: 'error' }, text), h('p', {}, h('a', { href: '/login' }, 'Back to sign-in')));
    if (failure) return fail(describe(failure));
    if (!code || !verifier) return fail(describe('social_state_invalid', 'This page was opened without a sign-in in progress.'));

    const progress = h('p', { role: 'status' }, 'Finishing the sign-in…');
    const gate = h('div', {});
    main.append(progress, gate);
    const exchange = async () => {
      let data;
      try {
        ({ data } = await api('POST', '/auth/social/exchange', { code, handoff_verifier: verifier }));
      } catch (error) {
        progress.remove();
        return fail(errorText(error));
      }
      progress.remove();
      // Tokens sign in (the refresh token went to the cookie on the way); mfa_required shows the gate.
      await signInCompleter(ctx, { gate, returnTo: '/account' })(data);
    };
    // After the shell has drawn this page: a navigation from inside render() would be drawn over.
    setTimeout(() => void exchange(), 0);
  },
};
