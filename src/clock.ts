import type { Clock } from './adapters/types.js';

export const systemClock: Clock = { now: () => Date.now() };

export const toEpochSeconds = (ms: number): number => Math.floor(ms / 1000);
