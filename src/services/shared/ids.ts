/**
 * The shape of every id the router issues (UUIDs) and accepts back. Values of any other
 * shape never reach SQL: PostgreSQL refuses a NUL byte in text with an error.
 */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export const isWellFormedId = (value: unknown): value is string => typeof value === 'string' && ID_PATTERN.test(value);
