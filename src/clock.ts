import type { Clock } from './adapters/types.js';

export const systemClock: Clock = { now: () => Date.now() };

/**
 * How far ahead of this instance's clock a credential's issue time may lie (another instance's
 * clock running a little ahead) before it is not trusted: an access token's `iat`, an API key's
 * creation. Past it the credential was made under a clock since stepped back, and would outlive
 * its lifetime by the step.
 */
export const ISSUED_AHEAD_TOLERANCE_MS = 60_000;
