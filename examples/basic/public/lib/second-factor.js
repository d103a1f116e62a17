// Choosing a second factor and typing its code: the login gate and step-up share this.
import { field, form, h } from './ui.js';

export function factorLabel(factor) {
  const name = factor.label ? ` (${factor.label})` : '';
  if (factor.type === 'totp') return `Authenticator app${name}`;
  if (factor.type === 'sms') return `Text message to ${factor.destination}${name}`;
  if (factor.type === 'email') return `E-mail to ${factor.destination}${name}`;
  if (factor.type === 'webauthn') return `Passkey${name}`;
  return factor.type;
}

/**
 * factors: confirmed factors; challenge(factorId) sends an SMS or e-mail code; verify(body) checks
 * `{factor_id, code}`, `{code}` (a recovery code) or `{factor_id}` of a passkey, whose ceremony
 * the client runs (the gate's and withStepUp's verify bodies, docs/client.md).
 */
export function secondFactorChooser({ factors, challenge, verify }) {
  const container = h('div', { class: 'second-factor' });
  const choices = [...factors.map((factor) => ({ value: factor.id, label: factorLabel(factor), factor })), { value: 'recovery', label: 'A recovery code' }];
  const preferred = factors.find((factor) => factor.default) ?? factors[0];
  const chooser = form({
    name: 'Choose a second factor',
    submit: 'Continue',
    fields: [
      h(
        'fieldset',
        {},
        h('legend', {}, 'How do you want to confirm it is you?'),
        ...choices.map((choice) =>
          h('label', {}, h('input', { type: 'radio', name: 'factor', value: choice.value, checked: choice.value === (preferred?.id ?? 'recovery') }), choice.label),
        ),
      ),
    ],
    onSubmit: async ({ factor }) => {
      const choice = choices.find((candidate) => candidate.value === factor);
      // A passkey answers the challenge itself: no code to type.
      if (choice.factor?.type === 'webauthn') return verify({ factor_id: choice.factor.id });
      let sentTo = null;
      if (choice.factor && choice.factor.type !== 'totp') sentTo = (await challenge(choice.factor.id)).destination;
      container.replaceChildren(codeForm(choice, sentTo));
      container.querySelector('input').focus();
    },
  });
  const codeForm = (choice, sentTo) => {
    const isRecovery = !choice.factor;
    const label = isRecovery ? 'Recovery code' : choice.factor.type === 'totp' ? 'Code from your authenticator app' : `Code sent to ${sentTo}`;
    return form({
      name: 'Enter your code',
      submit: 'Verify',
      fields: [
        field({ name: 'code', label, autocomplete: 'one-time-code', inputmode: isRecovery ? 'text' : 'numeric' }),
      ],
      extra: [h('button', { type: 'button', class: 'secondary', onclick: () => container.replaceChildren(chooser) }, 'Use another way')],
      onSubmit: ({ code }) => verify(isRecovery ? { code: code.trim() } : { factor_id: choice.factor.id, code: code.trim() }),
    });
  };
  container.append(chooser);
  return container;
}
