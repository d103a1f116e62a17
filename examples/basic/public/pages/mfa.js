import { api } from '../lib/identity.js';
import { showRecoveryCodes } from '../lib/recovery-codes.js';
import { factorLabel } from '../lib/second-factor.js';
import { actionButton, field, form, h, section } from '../lib/ui.js';

export default {
  path: '/mfa',
  title: 'Two-step sign-in',
  order: 20,
  nav: 'account',
  auth: true,
  async render(main, ctx) {
    const reload = () => ctx.navigate('/mfa', { replace: true });
    const data = await api('GET', '/auth/mfa/factors');
    const confirmed = data.factors.filter((factor) => factor.confirmed);
    const enrollArea = h('div', {});

    /** Enrollment ends the same way for every factor type: confirm the code, maybe show recovery codes. */
    const confirmForm = (type, factorId, label) =>
      form({
        name: `Confirm ${type}`,
        submit: 'Confirm',
        fields: [field({ name: 'code', label, autocomplete: 'one-time-code', inputmode: 'numeric' })],
        onSubmit: async ({ code }) => {
          const result = await api('POST', `/auth/mfa/${type}/confirm`, { factor_id: factorId, code: code.trim() });
          // The codes are shown once: even if redrawing the page fails, they must reach the screen.
          try {
            await ctx.reloadMe();
            await reload();
          } finally {
            if (result.recovery_codes) showRecoveryCodes(result.recovery_codes);
            document.querySelector('#main > div').prepend(h('p', { role: 'status', class: 'notice' }, 'Second factor confirmed.'));
          }
        },
      });

    const enrollTotp = async () => {
      const enrollment = await api('POST', '/auth/mfa/totp/enroll');
      enrollArea.replaceChildren(
        section(
          'Scan this code with your authenticator app',
          h('img', { class: 'qr', src: `data:image/svg+xml;base64,${btoa(enrollment.qr_svg)}`, alt: 'QR code to add this account to an authenticator app' }),
          h('p', {}, 'Cannot scan it? Enter this key: ', h('code', { class: 'totp-secret' }, enrollment.secret)),
          confirmForm('totp', enrollment.factor_id, 'Six-digit code from the app'),
        ),
      );
      enrollArea.querySelector('input').focus();
    };

    const sendCodeForm = (type) =>
      form({
        name: `Add ${type === 'sms' ? 'text message' : 'e-mail'} codes`,
        submit: 'Send code',
        fields: [
          type === 'sms'
            ? field({ name: 'phone_e164', label: 'Mobile number', type: 'tel', autocomplete: 'tel', hint: 'International format, e.g. +14155550123' })
            : field({ name: 'email', label: 'E-mail for codes', type: 'email', required: false, hint: 'Leave empty to use your account address' }),
        ],
        onSubmit: async (values) => {
          const body = type === 'sms' ? { phone_e164: values.phone_e164.trim() } : values.email ? { email: values.email } : {};
          const sent = await api('POST', `/auth/mfa/${type}/enroll`, body);
          enrollArea.replaceChildren(section(`Confirm ${factorLabel({ type, destination: sent.destination })}`, confirmForm(type, sent.factor_id, `Code sent to ${sent.destination}`)));
          enrollArea.querySelector('input').focus();
        },
      });

    main.append(
      enrollArea,
      section(
        'Your second factors',
        confirmed.length === 0 ? h('p', {}, 'None yet. Add one below: after that, signing in asks for it.') : null,
        h(
          'ul',
          {},
          confirmed.map((factor) =>
            h(
              'li',
              {},
              factorLabel(factor),
              factor.default ? ' (default) ' : ' ',
              h(
                'span',
                { class: 'actions' },
                factor.default ? null : actionButton('Make default', async () => { await api('PATCH', `/auth/mfa/factors/${factor.id}`, { default: true }); await reload(); }, { className: 'secondary', ariaLabel: `Make default: ${factorLabel(factor)}` }),
                actionButton('Remove', async () => { await api('DELETE', `/auth/mfa/factors/${factor.id}`); await reload(); }, { className: 'secondary', ariaLabel: `Remove ${factorLabel(factor)}` }),
              ),
            ),
          ),
        ),
      ),
      section(
        'Add a second factor',
        h('h3', {}, 'Authenticator app'),
        actionButton('Set up an authenticator app', enrollTotp),
        h('h3', {}, 'Text message codes'),
        sendCodeForm('sms'),
        h('h3', {}, 'E-mail codes'),
        sendCodeForm('email'),
        h('h3', {}, 'Passkey'),
        h('p', {}, h('a', { href: '/passkeys' }, 'Add a passkey'), ': your device confirms it is you with a fingerprint, face or PIN.'),
      ),
      ...(confirmed.length === 0
        ? []
        : [section(
            'Recovery codes',
            h('p', {}, `${ctx.me.recovery_codes_remaining} left. New codes replace the old ones.`),
            actionButton('Generate new recovery codes', async () => {
              const fresh = await api('POST', '/auth/mfa/recovery-codes/regenerate');
              showRecoveryCodes(fresh.recovery_codes);
              await ctx.reloadMe();
            }),
          )]),
    );
  },
};
