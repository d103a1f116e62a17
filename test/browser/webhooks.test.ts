/**
 * Webhooks in the example web app (docs/webhooks.md) in headless Chromium: an owner adds an
 * endpoint (the example's own receiver), sees the signing secret once, sends a test event and
 * watches it arrive in the delivery log and at the receiver; a failing receiver leaves the
 * delivery pending, and Replay delivers it again with the same webhook-id.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { BrowserSuite, browserSkipReason, expectHeading, finishFlow, navLink, uniqueEmail } from './browser-harness.js';
import { signedInPerson } from './flows.js';

const skip = browserSkipReason();

/** Clicks the log's Refresh until `text` shows in the delivery log (the attempt finishes just after the answer). */
async function refreshUntil(page: Page, text: RegExp): Promise<void> {
  for (let round = 0; round < 50; round += 1) {
    const log = page.locator('table[aria-label^="Deliveries of"] tbody tr').first();
    if (text.test((await log.textContent().catch(() => '')) ?? '')) return;
    await page.getByRole('button', { name: /^Refresh the delivery log/ }).click();
    await expectHeading(page, 'Webhooks');
  }
  assert.fail(`the delivery log never showed ${text}`);
}

describe('example web app: webhooks', { skip }, () => {
  let suite: BrowserSuite;
  before(async () => {
    suite = await BrowserSuite.start('webhooks');
  });
  after(async () => {
    await suite?.close();
  });

  test('add an endpoint (secret shown once), send a test event, see the log, replay a failed delivery', async () => {
    const { context, page } = await signedInPerson(suite, uniqueEmail('hooks'));
    await navLink(page, 'Organizations').click();
    await expectHeading(page, 'Organizations');
    await page.getByLabel('Name', { exact: true }).fill('Hooli');
    await page.getByRole('button', { name: 'Create organization' }).click();
    await page.getByRole('button', { name: 'Switch to Hooli' }).click();
    await page.getByText('active:').waitFor();

    await navLink(page, 'Webhooks').click();
    await expectHeading(page, 'Webhooks');
    await page.getByText('No webhooks yet.').waitFor();
    assert.equal(await page.getByLabel('Endpoint URL').inputValue(), `${suite.url}/dev/webhook-receiver`, 'the example receiver is offered');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const secret = (await page.locator('code.webhook-secret').textContent()) ?? '';
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/);

    await page.getByRole('button', { name: 'Send test event' }).click();
    await refreshUntil(page, /webhook\.test.*delivered/);
    assert.ok(!(await page.content()).includes(secret), 'the secret is not shown again');
    const received = page.getByRole('table', { name: 'Received by the example receiver' });
    await received.getByText('webhook.test').first().waitFor();
    await finishFlow(page, 'webhooks');

    // The receiver fails: the next test event stays pending with its 500.
    await page.getByRole('button', { name: 'Make the receiver fail (500)' }).click();
    await expectHeading(page, 'Webhooks');
    await page.getByRole('button', { name: 'Send test event' }).click();
    await refreshUntil(page, /webhook\.test.*pending.*500/);
    await page.getByRole('button', { name: 'Make the receiver succeed (204)' }).click();
    await expectHeading(page, 'Webhooks');
    await page.getByRole('button', { name: 'Replay webhook.test delivery' }).first().click();
    await refreshUntil(page, /webhook\.test.*delivered/);
    const ids = await received.locator('tbody tr td:nth-child(3)').allTextContents();
    assert.equal(ids[0], ids[1], 'the replay carried the same webhook-id as the failed attempt');
    await context.close();
  });
});
