/**
 * Start-up (migrations, the first signing key) as a retryable step: requests that arrive
 * while it runs wait for it; when it failed, for example because the database was down,
 * the next request after a pause tries again, so the router recovers by itself.
 */
export class Readiness {
  /** The first attempt: what `identity.ready` exposes. */
  readonly firstAttempt: Promise<void>;
  private current: Promise<void>;
  private succeeded = false;
  private failedAt: number | undefined;

  constructor(
    private readonly initialise: () => Promise<void>,
    private readonly retryAfterMs = 5000,
  ) {
    this.current = this.attempt();
    this.firstAttempt = this.current;
  }

  /** True once start-up has succeeded: requests then go on without waiting for a promise. */
  get ready(): boolean {
    return this.succeeded;
  }

  /** Resolves when the router can serve; rejects while start-up keeps failing. */
  ensure(): Promise<void> {
    if (this.succeeded) return Promise.resolve();
    if (this.failedAt !== undefined && Date.now() - this.failedAt >= this.retryAfterMs) this.current = this.attempt();
    return this.current;
  }

  private attempt(): Promise<void> {
    this.failedAt = undefined;
    const run = this.initialise().then(
      () => {
        this.succeeded = true;
      },
      (error: unknown) => {
        this.failedAt = Date.now();
        throw error;
      },
    );
    // The rejection is observed by whoever awaits it; an unawaited one must not crash the host.
    run.catch(() => undefined);
    return run;
  }
}
