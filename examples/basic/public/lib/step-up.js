// Step-up in a dialog: when a call answers 401 step_up_required, the client (withStepUp) asks for
// a second factor; this dialog is where the person answers, and where a wrong code is said.
import { secondFactorChooser } from './second-factor.js';
import { h } from './ui.js';

export async function withStepUpDialog(identity, call) {
  const dialog = document.getElementById('step-up');
  /** The client's open question: answered with a verify body, or null to cancel. */
  let answer = null;
  /** The form waiting to hear whether its answer was right. */
  let waiting = null;
  const settle = (error) => {
    if (error) waiting?.reject(error);
    else waiting?.resolve();
    waiting = null;
  };
  const open = ({ factors, challenge }) => {
    const chooser = secondFactorChooser({
      factors,
      challenge,
      verify: (body) =>
        new Promise((resolve, reject) => {
          waiting = { resolve, reject };
          answer?.(body);
          answer = null;
        }),
    });
    dialog.replaceChildren(
      h('h2', { id: 'step-up-title' }, 'Confirm it is you'),
      h('p', {}, 'This operation needs a recent second factor.'),
      chooser,
      h('button', { type: 'button', class: 'secondary', onclick: () => dialog.close() }, 'Cancel'),
    );
    dialog.addEventListener('close', () => answer?.(null), { once: true });
    dialog.showModal();
  };
  try {
    return await identity.withStepUp(call, (prompt) => {
      // Asked again: the previous code was wrong, and the open form says so.
      if (prompt.error) settle(prompt.error);
      else open(prompt);
      return new Promise((resolve) => {
        answer = resolve;
      });
    });
  } finally {
    answer = null;
    settle();
    if (dialog.open) dialog.close();
    dialog.replaceChildren();
  }
}
