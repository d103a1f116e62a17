/** Every failure of the client: `code` is the router's `error`, or a client-side code with `status` 0 (docs/client.md). */
export class IdentityClientError extends Error {
  override readonly name = 'IdentityClientError';
  readonly status: number;
  readonly code: string;
  readonly errors?: string[];
  readonly body?: unknown;

  constructor(status: number, code: string, details: { message?: string; errors?: string[]; body?: unknown; cause?: unknown } = {}) {
    super(details.message ?? code, details.cause === undefined ? undefined : { cause: details.cause });
    this.status = status;
    this.code = code;
    if (details.errors) this.errors = details.errors;
    if (details.body !== undefined) this.body = details.body;
  }

  /** The error of a router answer that is not 2xx. */
  static fromAnswer(status: number, body: unknown): IdentityClientError {
    const shaped = (body ?? {}) as { error?: unknown; message?: unknown; errors?: unknown };
    const errors = Array.isArray(shaped.errors) ? shaped.errors.map(String) : undefined;
    const code = typeof shaped.error === 'string' ? shaped.error : errors ? 'validation_failed' : `http_${status}`;
    const message = typeof shaped.message === 'string' ? shaped.message : errors ? errors.join('; ') : code;
    return new IdentityClientError(status, code, { message, ...(errors ? { errors } : {}), body });
  }
}
