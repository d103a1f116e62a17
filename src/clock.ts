import type { Clock } from './adapters/types.js';

export const systemClock: Clock = { now: () => Date.now() };
