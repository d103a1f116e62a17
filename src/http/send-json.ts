import type { Response } from 'express';

/**
 * The answer as JSON, written directly: Express's res.json would also hash the body for an
 * ETag, which no client can use on a no-store answer, and would follow the host app's JSON
 * settings, which must not change the router's answers.
 */
export function sendJson(res: Response, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}
