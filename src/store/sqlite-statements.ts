/**
 * better-sqlite3 compiles a statement on every `prepare()`, which costs more than running it.
 * Each connection's statements are prepared once and kept with the connection: a connection
 * that goes away takes its statements with it.
 */
const preparedByConnection = new WeakMap<object, Map<string, unknown>>();

export function preparedOn<S>(connection: { prepare(sql: string): S }, sql: string): S {
  let statements = preparedByConnection.get(connection);
  if (!statements) {
    statements = new Map();
    preparedByConnection.set(connection, statements);
  }
  let statement = statements.get(sql) as S | undefined;
  if (statement === undefined) {
    statement = connection.prepare(sql);
    statements.set(sql, statement);
  }
  return statement;
}
