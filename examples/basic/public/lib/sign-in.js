// The end of any sign-in (password, social, passkey): tokens sign in; an MFA gate answer asks
// for the second factor in `gate` and then signs in.
import { acceptTokens, api } from './api.js';
import { secondFactorChooser } from './second-factor.js';
import { h } from './ui.js';

/** Only our own paths: an open redirect would send a fresh session anywhere. */
export const safeReturnTo = (value) => (value?.startsWith('/') && !value.startsWith('//') ? value : '/account');

/** complete(data) for a first factor's answer; onGate runs when the second step shows (hide the first one). */
export function signInCompleter(ctx, { gate, returnTo, onGate }) {
  const finish = async (tokens) => {
    acceptTokens(tokens);
    await ctx.reloadMe();
    await ctx.navigate(safeReturnTo(returnTo));
  };
  return async (data) => {
    if (!data.mfa_required) return finish(data);
    // The ticket is good only for challenge and verify, and only here.
    const ticket = { token: data.mfa_token };
    gate.className = 'card';
    gate.replaceChildren(
      h('h2', {}, 'Second step'),
      secondFactorChooser({
        factors: data.factors,
        challenge: async (factorId) => (await api('POST', '/auth/mfa/challenge', { factor_id: factorId }, ticket)).data,
        verify: async (body) => finish((await api('POST', '/auth/mfa/verify', body, ticket)).data),
      }),
    );
    onGate?.();
    gate.querySelector('input').focus();
  };
}
