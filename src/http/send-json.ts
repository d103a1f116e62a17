import express, { type Application, type Response } from 'express';

/** Express's own `res.json`, to tell whether the host has wrapped it. */
const expressJson = express.response.json;

/**
 * Every router answer with a body goes out here.
 *
 * An uncacheable answer (`Cache-Control: no-store`, every answer but the JWKS) is written
 * directly: Express's `res.json` also computes an ETag and checks the request's freshness,
 * which no-store makes useless, and the two cost a read route about a fifth of its CPU
 * (docs/performance.md). Express's own path is kept wherever it can matter: when the host (or
 * the example's refresh-token cookie) has wrapped `res.json` to see or reshape answers, when
 * the host's app sets how JSON is written, and for the cacheable JWKS.
 */
export function sendJson(res: Response, status: number, body: unknown): void {
  // The status set directly: Express's res.status() re-validates a code the router wrote itself.
  res.statusCode = status;
  const text = res.json === expressJson && res.getHeader('Cache-Control') === 'no-store' && !shapesJson(res.app) ? JSON.stringify(body) : undefined;
  if (text === undefined) {
    res.json(body);
    return;
  }
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  // Node writes no body for HEAD and keeps the length, as Express does.
  res.end(text);
}

/** Express settings that change how `res.json` writes: the host's choice wins. */
function shapesJson(app: Application | undefined): boolean {
  return app !== undefined && (app.get('json replacer') !== undefined || app.get('json spaces') !== undefined || app.get('json escape') === true);
}
