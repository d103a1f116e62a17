import assert from 'node:assert/strict';

/**
 * Waits for something another part of the router does on its own (a delivery after commit),
 * checking every few milliseconds, for two seconds at most. Never a stand-in for the clock:
 * what depends on time moves with the harness's injected clock.
 */
export async function eventually(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let round = 0; round < 400; round += 1) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.fail(`never happened: ${what}`);
}
