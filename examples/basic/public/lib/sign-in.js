// The end of any sign-in (password, passwordless, social, passkey): the client answers
// {session}, or {mfa} for the gate, which asks for the second factor in `gate` and then signs in.
import { secondFactorChooser } from './second-factor.js';
import { h } from './ui.js';

/** Only our own paths: an open redirect would send a fresh session anywhere. */
export const safeReturnTo = (value) => (value?.startsWith('/') && !value.startsWith('//') ? value : '/account');

/** complete(result) for a first factor's answer; onGate runs when the second step shows (hide the first one). */
export function signInCompleter(ctx, { gate, returnTo, onGate }) {
  const finish = async () => {
    await ctx.reloadMe();
    await ctx.navigate(safeReturnTo(returnTo));
  };
  return async (result) => {
    if (result.session) return finish();
    gate.className = 'card';
    gate.replaceChildren(
      h('h2', {}, 'Second step'),
      secondFactorChooser({
        factors: result.mfa.factors,
        challenge: result.mfa.challenge,
        verify: async (body) => {
          await result.mfa.verify(body);
          await finish();
        },
      }),
    );
    onGate?.();
    gate.querySelector('input').focus();
  };
}
