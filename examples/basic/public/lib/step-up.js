// Step-up: when an operation answers 401 step_up_required, ask for a second factor in a
// dialog, trade it for a fresh access token, and let api() retry the operation.
import { acceptTokens, api, onStepUpRequired } from './api.js';
import { secondFactorChooser } from './second-factor.js';
import { h } from './ui.js';

export function installStepUp(dialog) {
  onStepUpRequired(async () => {
    const { data } = await api('GET', '/auth/mfa/factors');
    const factors = data.factors.filter((factor) => factor.confirmed);
    return new Promise((resolve) => {
      let passed = false;
      const chooser = secondFactorChooser({
        factors,
        challenge: async (factorId) => (await api('POST', '/auth/mfa/step-up/challenge', { factor_id: factorId })).data,
        verify: async (body) => {
          acceptTokens((await api('POST', '/auth/mfa/step-up', body)).data);
          passed = true;
          dialog.close();
        },
      });
      dialog.replaceChildren(
        h('h2', { id: 'step-up-title' }, 'Confirm it is you'),
        h('p', {}, 'This operation needs a recent second factor.'),
        chooser,
        h('button', { type: 'button', class: 'secondary', onclick: () => dialog.close() }, 'Cancel'),
      );
      dialog.addEventListener('close', () => {
        dialog.replaceChildren();
        resolve(passed);
      }, { once: true });
      dialog.showModal();
    });
  });
}
