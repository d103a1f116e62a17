import type { ErrorRequestHandler } from 'express';
import type { Logger } from '../adapters/types.js';
import { IdentityError } from '../errors.js';
import { isConnectionError, isDatabaseError } from '../database-errors.js';
import { describeError } from '../services/shared/unit-of-work.js';
import { sendJson } from './send-json.js';

interface BodyParserError {
  type?: string;
  status?: number;
  statusCode?: number;
  expose?: boolean;
  code?: unknown;
}

/** body-parser's failures, which arrive before any route code runs. */
function fromBodyParser(error: BodyParserError): IdentityError | undefined {
  switch (error.type) {
    case 'entity.parse.failed':
      return new IdentityError(400, 'invalid_json', 'The request body is not valid JSON.');
    case 'entity.too.large':
      return new IdentityError(413, 'payload_too_large', 'The request body is too large (limit 100 kB).');
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new IdentityError(415, 'unsupported_media_type', 'Unsupported request body encoding.');
    case 'request.aborted':
    case 'request.size.invalid':
    case 'stream.encoding.set':
      return new IdentityError(400, 'invalid_json', 'The request body could not be read.');
    default:
      break;
  }
  // A body that fails to decode (`Content-Encoding: gzip` on bytes that are not gzip) arrives as
  // zlib's error, which body-parser marks 400 without a type.
  const status = error.status ?? error.statusCode;
  if (status === 400 && (error.type !== undefined || typeof error.code === 'string')) {
    return new IdentityError(400, 'invalid_json', 'The request body could not be decoded.');
  }
  return undefined;
}

/** The single place an error becomes an HTTP response (STYLE 1). Unknown errors never leak. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, _req, res, next) => {
    if (res.headersSent) return next(error);
    let identityError = error instanceof IdentityError ? error : fromBodyParser(error as BodyParserError);
    if (!identityError && isConnectionError(error)) {
      logger.error('database unavailable', { error: describeError(error) });
      identityError = new IdentityError(503, 'unavailable', 'The identity service is unavailable; try again shortly.');
    }
    if (!identityError) {
      // A stack starts with the message, which for a database error may quote values.
      logger.error('unexpected error', { error: describeError(error), stack: error instanceof Error && !isDatabaseError(error) ? error.stack : undefined });
      sendJson(res, 500, { error: 'internal_error', message: 'Internal error' });
      return;
    }
    if (identityError.status === 503) logger.error('service unavailable', { error: describeError(identityError.cause ?? identityError) });
    for (const [name, value] of Object.entries(identityError.headers)) res.setHeader(name, value);
    if (identityError.code === 'validation_failed') {
      sendJson(res, 422, { errors: identityError.errors ?? [identityError.message] });
      return;
    }
    sendJson(res, identityError.status, { error: identityError.code, message: identityError.message, ...identityError.extra });
  };
}
