// Passwordless sign-in by e-mail (CONTRACT 11, docs/passwordless.md): "E-mail me a code" on the
// sign-in page, and the page the mailed link opens (/passwordless/link).
//
// The link never signs in by being opened: mail scanners open every link in a mail. The page
// reads the token from the fragment (which never reaches a server) and POSTs it when the person
// clicks "Sign in".
import { identity } from '../lib/identity.js';
import { signInCompleter } from '../lib/sign-in.js';
import { field, form, h } from '../lib/ui.js';

/** Start, then ask for the mailed code; the answer (a session or the MFA gate) goes to complete(result). */
export function signInOption(_ctx, complete) {
  const container = h('div', {});
  const askForAddress = () =>
    form({
      name: 'Sign in with a code by mail',
      submit: 'E-mail me a code',
      fields: [field({ name: 'email', label: 'Address for a sign-in code', type: 'email', autocomplete: 'username' })],
      onSubmit: async ({ email }) => {
        const started = await identity.passwordless.start({ email });
        container.replaceChildren(askForCode(started.challenge_id));
        container.querySelector('input').focus();
      },
    });
  const askForCode = (challengeId) =>
    form({
      name: 'Sign-in code',
      submit: 'Sign in with the code',
      fields: [
        h('p', {}, 'If the address can sign in, a code is on its way. It also holds a link you can open instead.'),
        field({ name: 'code', label: 'Code we mailed you', autocomplete: 'one-time-code', inputmode: 'numeric' }),
      ],
      onSubmit: async ({ code }) => complete(await identity.passwordless.verify({ challenge_id: challengeId, code: code.trim() })),
    });
  // The router answers 404 without a passwordless config: then there is nothing to offer.
  container.replaceChildren(askForAddress());
  return container;
}

export default {
  path: '/passwordless/link',
  title: 'Sign in with the e-mailed link',
  render(main, ctx) {
    const token = new URLSearchParams(location.hash.slice(1)).get('token');
    if (!token) {
      main.append(h('p', {}, 'This link is incomplete. ', h('a', { href: '/login' }, 'Ask for a new code'), '.'));
      return;
    }
    const gate = h('div', {});
    const signIn = form({
      submit: 'Sign in',
      onSubmit: async () => {
        // Spent once: the token leaves the address bar before it is used.
        history.replaceState(null, '', location.pathname);
        await complete(await identity.passwordless.verify({ token }));
      },
    });
    const complete = signInCompleter(ctx, { gate, returnTo: '/account', onGate: () => signIn.remove() });
    main.append(h('p', {}, 'Click to finish signing in on this device.'), signIn, gate);
  },
};
