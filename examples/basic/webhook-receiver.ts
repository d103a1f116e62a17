/**
 * A webhook endpoint the example starts for itself (development only), so the Webhooks page has
 * somewhere to deliver without a second server: it keeps the requests it received in memory and
 * answers 204, or the status the page asks for (to watch retries and replay).
 * A real receiver verifies the signature first: see docs/webhooks.md, "Verifying in Express".
 */
import express, { type Router } from 'express';

export interface ReceivedWebhook {
  webhook_id: string;
  type: string;
  received_at: string;
  answered: number;
  signatures: number;
}

const KEEP_NEWEST = 50;

export interface ExampleWebhookReceiver {
  /** Where the router delivers: `${publicUrl}${PATH}`. */
  readonly path: string;
  router(): Router;
}

export function createWebhookReceiver(options: { now: () => number }): ExampleWebhookReceiver {
  const received: ReceivedWebhook[] = [];
  let answerWith = 204;
  const path = '/dev/webhook-receiver';
  return {
    path,
    router() {
      const router = express.Router();
      router.post(path, express.raw({ type: 'application/json', limit: '1mb' }), (req, res) => {
        let type = 'unknown';
        try {
          type = String(JSON.parse(String(req.body)).type);
        } catch {
          // Not JSON: recorded as unknown.
        }
        received.unshift({
          webhook_id: String(req.get('webhook-id') ?? ''),
          type,
          received_at: new Date(options.now()).toISOString(),
          answered: answerWith,
          signatures: String(req.get('webhook-signature') ?? '').split(' ').filter(Boolean).length,
        });
        received.length = Math.min(received.length, KEEP_NEWEST);
        res.status(answerWith).end();
      });
      router.get(`${path}.json`, (_req, res) => {
        res.json({ data: { answer_with: answerWith, received } });
      });
      router.post(`${path}/answer`, express.json(), (req, res) => {
        const status = Number(req.body?.status);
        if (![204, 500].includes(status)) {
          res.status(422).json({ errors: ['status must be 204 or 500'] });
          return;
        }
        answerWith = status;
        res.json({ data: { answer_with: answerWith } });
      });
      return router;
    },
  };
}
