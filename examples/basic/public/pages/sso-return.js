// Single sign-on, identifier-first (docs/sso.md): "Sign in through my organization" on the sign-in
// page asks for the work address; the router finds the organization by its verified domain and
// the browser leaves for that organization's identity provider. It comes back to /sso-return,
// which trades the one-time social_code for tokens at POST /auth/social/exchange, the same
// exchange (and the same handoff verifier rule) as social sign-in: the client's identity.sso.start()
// and identity.social.complete() do it, so the session lands in the client as after a social sign-in.
import { identity, IdentityClientError } from '../lib/identity.js';
import { signInCompleter } from '../lib/sign-in.js';
import { field, form, h } from '../lib/ui.js';

const MESSAGES = {
  sso_not_configured: 'There is no single sign-on for this address. Sign in with your password or another way above.',
  sso_email_outside_domain: "Your identity provider answered with an address outside your organization's verified domains.",
  sso_not_member: 'You are not a member of this organization. Ask an administrator to invite you.',
  sso_member_suspended: 'Your membership of this organization is suspended.',
  social_state_invalid: 'The sign-in took too long or was already used. Please start again.',
  handoff_missing: 'This page was opened without a sign-in in progress in this tab. Please start again.',
  provider_error: 'Your identity provider did not sign you in (cancelled or refused).',
  provider_response_invalid: 'Your identity provider answered something we cannot trust.',
  provider_unavailable: 'Your identity provider cannot be reached right now.',
  social_email_required: 'Your identity provider did not share an e-mail address.',
  account_link_required: 'An account with this address exists here but cannot be linked (its address is not verified). Sign in to it another way first.',
  account_disabled: 'This account is disabled.',
  invalid_token: 'This sign-in code is invalid or already used. Please start again.',
};

const describe = (code, fallback) => `${MESSAGES[code] ?? fallback ?? 'Single sign-on failed.'} (${code})`;
const errorText = (error) => (error instanceof IdentityClientError ? describe(error.code, error.message) : (error?.message ?? String(error)));

/** The client keeps the handoff verifier in this tab and leaves for the organization's provider. */
async function leaveForProvider(email) {
  try {
    await identity.sso.start(email);
  } catch (error) {
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
    const fail = (text) => main.append(h('p', { role: 'alert', class: 'error' }, text), h('p', {}, h('a', { href: '/login' }, 'Back to sign-in')));
    const progress = h('p', { role: 'status' }, 'Finishing the sign-in…');
    const gate = h('div', {});
    main.append(progress, gate);
    const exchange = async () => {
      let result;
      try {
        // The client takes social_code or social_error out of the address (and the history), and
        // exchanges the code once with the verifier identity.sso.start() kept.
        result = await identity.social.complete();
      } catch (error) {
        progress.remove();
        return fail(errorText(error));
      }
      progress.remove();
      if (result === null) return fail(describe('social_state_invalid', 'This page was opened without a sign-in in progress.'));
      // A session signs in (the refresh token went to the cookie on the way); the MFA gate asks for the second factor.
      await signInCompleter(ctx, { gate, returnTo: '/account' })(result);
    };
    // After the shell has drawn this page: a navigation from inside render() would be drawn over.
    setTimeout(() => void exchange(), 0);
  },
};
