/** Times in answers and events (README.md): ISO 8601 in UTC, from the epoch milliseconds the store keeps. */
export const iso = (ms: number): string => new Date(ms).toISOString();

/** The same for a time that may not have happened yet (a last use, a last login). */
export const isoOrNull = (ms: number | null): string | null => (ms === null ? null : iso(ms));
