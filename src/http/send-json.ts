import type { Response } from 'express';

/**
 * Every router answer with a body goes out here, through Express's `res.json`: hosts (and the
 * example's refresh-token cookie) wrap `res.json` to see or reshape answers, so the router
 * never writes around it.
 */
export function sendJson(res: Response, status: number, body: unknown): void {
  // The status set directly: Express's res.status() re-validates a code the router wrote itself.
  res.statusCode = status;
  res.json(body);
}
