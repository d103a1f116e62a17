// Social sign-in (CONTRACT 9): "Sign in with …" buttons on the sign-in page, the page the
// provider's round trip lands on (/social-return), and the linked accounts on the account page.
//
// The handoff is the client's (docs/client.md): before leaving for the provider it keeps a random
// verifier in this tab's sessionStorage (only the verifier: tokens stay in memory and in the
// httpOnly cookie) and sends its SHA-256; back on /social-return it trades the one-time
// social_code for tokens together with the verifier, so a code planted in someone else's browser
// is useless.
import { api, identity, IdentityClientError, signedIn, withStepUp } from '../lib/identity.js';
import { signInCompleter } from '../lib/sign-in.js';
import { actionButton, formatTime, h, section, showError } from '../lib/ui.js';

const MESSAGES = {
  social_state_invalid: 'The sign-in took too long or was already used. Please start again.',
  handoff_missing: 'This page was opened without a sign-in in progress in this tab. Please start again.',
  provider_error: 'The provider did not sign you in (cancelled or refused).',
  provider_response_invalid: 'The provider answered something we cannot trust.',
  provider_unavailable: 'The provider cannot be reached right now.',
  social_email_required: 'The provider did not share an e-mail address.',
  account_link_required: 'An account with this e-mail already exists here. Sign in to it another way (its password, a passkey, or "Forgot your password?" to set one through the e-mail), then link this provider from your account page.',
  signup_disabled: 'New accounts cannot be created through this provider.',
  identity_already_linked: 'That provider account is already linked to another account here.',
  provider_already_linked: 'You already linked an account of this provider; unlink it first.',
  reauthentication_required: 'Linking needs a recent sign-in: sign in again, then link.',
  session_ended: 'The session that started the link has ended.',
  account_disabled: 'This account is disabled.',
  email_unverified: 'Verify your e-mail address first.',
  invalid_token: 'This sign-in code is invalid or already used. Please start again.',
  last_login_method_protected: 'This is your only way to sign in: set a password or link another account before unlinking it.',
};

const describe = (code, fallback) => `${MESSAGES[code] ?? fallback ?? 'Social sign-in failed.'} (${code})`;

const errorText = (error) => (error instanceof IdentityClientError ? describe(error.code, error.message) : (error?.message ?? String(error)));

/** "Sign in with …", one button per configured provider, on the sign-in page. */
export function signInOption() {
  const container = h('div', { class: 'actions' });
  const alert = h('p', { role: 'alert', class: 'error' });
  api('GET', '/auth/social/providers')
    .then((providers) => {
      container.replaceChildren(
        ...providers.map((provider) =>
          h(
            'button',
            {
              type: 'button',
              class: 'secondary',
              onclick: () => identity.social.start(provider.id).catch((error) => {
                  alert.textContent = errorText(error);
                }),
            },
            `Sign in with ${provider.name}`,
          ),
        ),
      );
    })
    // Without social login configured the router answers 404: no buttons.
    .catch(() => container.replaceChildren());
  return h('div', {}, container, alert);
}

/** The account page's list of linked provider accounts, with Link and Unlink. */
export function accountSection() {
  const body = h('div', {}, h('p', {}, 'Loading…'));
  const container = section('Linked sign-in accounts', body);
  const load = async () => {
    const [providers, linked] = await Promise.all([api('GET', '/auth/social/providers'), api('GET', '/auth/social/identities')]);
    const names = new Map(providers.map((provider) => [provider.id, provider.name]));
    const unlinkedProviders = providers.filter((provider) => !linked.identities.some((identity) => identity.provider === provider.id));
    body.replaceChildren(
      linked.identities.length === 0
        ? h('p', {}, 'No provider account is linked yet.')
        : h(
            'table',
            {},
            h('thead', {}, h('tr', {}, h('th', {}, 'Provider'), h('th', {}, 'Account e-mail'), h('th', {}, 'Linked'), h('th', {}, 'Last used'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
            h(
              'tbody',
              {},
              linked.identities.map((identity) => {
                const name = names.get(identity.provider) ?? identity.provider;
                return h(
                  'tr',
                  {},
                  h('td', {}, name),
                  h('td', {}, identity.email ?? '—'),
                  h('td', {}, formatTime(identity.created_at)),
                  h('td', {}, formatTime(identity.last_login_at)),
                  h(
                    'td',
                    {},
                    actionButton(
                      'Unlink',
                      async () => {
                        // Step-up (401 step_up_required) is asked for by api()'s dialog; the last way to sign in answers 409.
                        try {
                          await api('DELETE', `/auth/social/identities/${identity.id}`);
                        } catch (error) {
                          showError(container, { message: errorText(error) });
                          return;
                        }
                        await load();
                        body.prepend(h('p', { role: 'status', class: 'notice' }, `The ${name} account is unlinked.`));
                      },
                      { className: 'secondary', ariaLabel: `Unlink the ${name} account ${identity.email ?? ''}`.trim() },
                    ),
                  ),
                );
              }),
            ),
          ),
      // replaceChildren() would print a null as text: the Link buttons come only when a provider is left.
      ...(unlinkedProviders.length === 0
        ? []
        : [
            h(
              'div',
              { class: 'actions' },
              unlinkedProviders.map((provider) =>
                actionButton(`Link a ${provider.name} account`, async () => {
                  try {
                    await withStepUp(() => identity.social.start(provider.id, { link: true }));
                  } catch (error) {
                    if (error instanceof IdentityClientError && error.code === 'reauthentication_required') {
                      showError(container, { message: errorText(error) });
                      container.querySelector('.section-alert').append(' ', h('a', { href: '/login?return_to=/account' }, 'Sign in again'));
                      return;
                    }
                    showError(container, { message: errorText(error) });
                  }
                }),
              ),
            ),
          ]),
    );
  };
  load().catch((error) => {
    // Without social login configured the router answers 404: the section stays away.
    if (error instanceof IdentityClientError && error.status === 404) container.remove();
    else showError(container, { message: errorText(error) });
  });
  return container;
}

export default {
  path: '/social-return',
  title: 'Signing in',
  render(main, ctx) {
    const back = () => h('p', {}, signedIn() ? h('a', { href: '/account' }, 'Back to your account') : h('a', { href: '/login' }, 'Back to sign-in'));
    const fail = (text) => main.append(h('p', { role: 'alert', class: 'error' }, text), back());
    const progress = h('p', { role: 'status' }, 'Finishing the sign-in…');
    const gate = h('div', {});
    main.append(progress, gate);
    const exchange = async () => {
      let result;
      try {
        // The client takes social_code or social_error out of the address (and the history) and,
        // signed in (a link flow), sends the access token the exchange of a link needs.
        result = await identity.social.complete();
      } catch (error) {
        progress.remove();
        return fail(errorText(error));
      }
      progress.remove();
      if (result === null) return fail(describe('social_state_invalid', 'This page was opened without a sign-in in progress.'));
      if (result.identity) {
        await ctx.navigate('/account', { replace: true });
        document.getElementById('main').append(h('p', { role: 'status', class: 'notice' }, 'Your account is linked.'));
        return;
      }
      // A session signs in (the refresh token went to the cookie on the way); the MFA gate asks for the second factor.
      await signInCompleter(ctx, { gate, returnTo: '/account' })(result);
    };
    // After the shell has drawn this page: a navigation from inside render() would be drawn over.
    setTimeout(() => void exchange(), 0);
  },
};
