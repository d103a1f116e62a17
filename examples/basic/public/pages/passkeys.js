// Passkeys (docs/mfa.md, "Passkeys"): add one to the account (it is a `webauthn` second factor,
// listed with the others on the two-step sign-in page), and sign in with one, no password needed.
import { api } from '../lib/api.js';
import { showRecoveryCodes } from '../lib/recovery-codes.js';
import { passkeyAssertion } from '../lib/second-factor.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

const supported = () => Boolean(window.PublicKeyCredential?.parseCreationOptionsFromJSON && window.PublicKeyCredential?.parseRequestOptionsFromJSON);

export default {
  path: '/passkeys',
  title: 'Passkeys',
  order: 25,
  nav: 'account',
  auth: true,
  async render(main, ctx) {
    const reload = () => ctx.navigate('/passkeys', { replace: true });
    const { data } = await api('GET', '/auth/mfa/factors');
    const passkeys = data.factors.filter((factor) => factor.type === 'webauthn' && factor.confirmed);
    const addForm = form({
      name: 'Add a passkey',
      submit: 'Add a passkey',
      fields: [field({ name: 'label', label: 'Name for this passkey', required: false, hint: 'For example the device it lives on' })],
      onSubmit: async ({ label }) => {
        // Once you have a second factor, adding another asks for it first: api() runs the step-up dialog.
        const { data: options } = await api('POST', '/auth/passkeys/register/options', {});
        const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) });
        const { data: result } = await api('POST', '/auth/passkeys/register/verify', { response: credential.toJSON(), ...(label.trim() ? { label: label.trim() } : {}) });
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
      const { data } = await api('POST', '/auth/passkeys/login/options', {});
      const response = await passkeyAssertion(data.options);
      await complete((await api('POST', '/auth/passkeys/login/verify', { challenge_id: data.challenge_id, response })).data);
    },
    { className: 'secondary' },
  );
}
