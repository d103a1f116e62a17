import { errors } from '../../errors.js';
import { isWellFormedId } from './ids.js';

/** What one part of a cursor may be: a safe integer (a time, a sequence) or an id. */
export type CursorPartKind = 'integer' | 'id';

type CursorParts<Shape extends readonly CursorPartKind[]> = { [K in keyof Shape]: Shape[K] extends 'integer' ? number : string };

export function encodeCursor(parts: Array<string | number>): string {
  return Buffer.from(JSON.stringify(parts), 'utf8').toString('base64url');
}

/**
 * Decodes a cursor into exactly the parts the list issued. Only values the router could
 * have issued reach SQL: PostgreSQL refuses a fractional bigint or a NUL byte with an
 * error, so anything else is a 422 here, for every list alike.
 */
export function decodeCursor<const Shape extends readonly CursorPartKind[]>(cursor: string | undefined, shape: Shape): CursorParts<Shape> | undefined {
  if (!cursor) return undefined;
  let parts: unknown;
  try {
    parts = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    parts = undefined;
  }
  const valid =
    Array.isArray(parts) &&
    parts.length === shape.length &&
    shape.every((kind, index) => (kind === 'integer' ? Number.isSafeInteger(parts[index]) : isWellFormedId(parts[index])));
  if (!valid) throw errors.validation(['"cursor" is not a valid cursor']);
  return parts as CursorParts<Shape>;
}

/**
 * Keyset paging: the repository is asked for `limit + 1` rows; the extra row only tells
 * whether another page exists, and the cursor names the last row shown.
 */
export function keysetPage<Row>(rows: Row[], limit: number, cursorOf: (row: Row) => Array<string | number>): { items: Row[]; nextCursor: string | null } {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, nextCursor: rows.length > limit && last !== undefined ? encodeCursor(cursorOf(last)) : null };
}
