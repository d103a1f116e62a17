// Passkeys (docs/mfa.md, "Passkeys"): add one to the account (it is a `webauthn` second factor,
// listed with the others on the two-step sign-in page), and sign in with one, no password needed.
import { api, identity, withStepUp } from '../lib/identity.js';
import { showRecoveryCodes } from '../lib/recovery-codes.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

// The client runs the ceremonies, with or without the browser's JSON helpers.
const supported = () => Boolean(window.PublicKeyCredential && navigator.credentials);

export default {
  path: '/passkeys',
  title: 'Passkeys',
  order: 25,
  nav: 'account',
  auth: true,
  async render(main, ctx) {
    const reload = () => ctx.navigate('/passkeys', { replace: true });
    const data = await api('GET', '/auth/mfa/factors');
    const passkeys = data.factors.filter((factor) => factor.type === 'webauthn' && factor.confirmed);
    const addForm = form({
      name: 'Add a passkey',
      submit: 'Add a passkey',
      fields: [field({ name: 'label', label: 'Name for this passkey', required: false, hint: 'For example the device it lives on' })],
      onSubmit: async ({ label }) => {
        // Once you have a second factor, adding another asks for it first: the step-up dialog.
        const result = await withStepUp(() => identity.passkeys.register(label.trim() ? { label: label.trim() } : {}));
        // The codes are shown once: even if redrawing the page fails, they must reach the screen.
        try {
          await ctx.reloadMe();
          await reload();
        } finally {
          if (result.recovery_codes) showRecoveryCodes(result.recovery_codes, { lost: 'your passkey' });
        }
        const content = document.querySelector('#main > div');
        content.prepend(h('p', { role: 'status', class: 'notice' }, 'Passkey added.'));
      },
    });
    main.append(
      section(
        'Your passkeys',
        passkeys.length === 0 ? h('p', {}, 'None yet. A passkey signs you in without a password, and counts as a second factor after one.') : null,
        h(
          'ul',
          {},
          passkeys.map((passkey) =>
            h(
              'li',
              {},
              passkey.label ?? 'Passkey',
              passkey.default ? ' (default) ' : ' ',
              actionButton('Remove', async () => { await api('DELETE', `/auth/mfa/factors/${passkey.id}`); await reload(); }, { className: 'secondary', ariaLabel: `Remove passkey ${passkey.label ?? ''}`.trim() }),
            ),
          ),
        ),
      ),
      section('Add a passkey', supported() ? addForm : h('p', {}, 'This browser cannot create passkeys.')),
    );
  },
};

/** "Sign in with a passkey" on the sign-in page: a discoverable credential, no e-mail or password. */
export function signInOption(_ctx, complete) {
  if (!supported()) return null;
  return actionButton(
    'Sign in with a passkey',
    async () => {
      await complete(await identity.passkeys.login());
    },
    { className: 'secondary' },
  );
}
