import type { Logger } from './types.js';

const PREFIX = '[identity-router]';

// Read on every call rather than at import, so a host (or a test) can switch debug output on after loading.
function isDebugEnabled(): boolean {
  const flag = process.env.IDENTITY_ROUTER_DEBUG;
  return flag !== undefined && flag !== '' && flag !== '0' && flag.toLowerCase() !== 'false';
}

// Errors serialize to `{}` by default, which would hide the one thing a failed-delivery log is for.
function replaceErrors(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    return { name: value.name, message: value.message, ...(code === undefined ? {} : { code }) };
  }
  if (typeof value === 'bigint') return value.toString();
  return value;
}

// JSON escapes C0 (newlines, ESC) but not C1 (U+009B is the 8-bit CSI of terminal escapes, U+0085
// a line break) nor U+2028/U+2029, which many log viewers break lines on. Meta quotes what clients
// and providers sent (a passkey's origin, an IdP's error), so these are escaped too: still valid JSON.
const UNESCAPED_BY_JSON = /[\u007f-\u009f\u2028\u2029]/g;

function formatLine(level: string, msg: string, meta: object | undefined): string {
  if (meta === undefined) return `${PREFIX} ${level} ${msg}`;
  let serialized: string;
  try {
    serialized = (JSON.stringify(meta, replaceErrors) ?? '').replace(UNESCAPED_BY_JSON, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
  } catch {
    // A circular meta object must not turn a log call into a thrown error.
    serialized = '"[unserializable meta]"';
  }
  return `${PREFIX} ${level} ${msg} ${serialized}`;
}

/** The default logger: one line per call on the console; `debug` prints only when `IDENTITY_ROUTER_DEBUG` is set. */
export const consoleLogger: Logger = {
  debug(msg, meta) {
    if (isDebugEnabled()) console.debug(formatLine('debug', msg, meta));
  },
  info(msg, meta) {
    console.info(formatLine('info', msg, meta));
  },
  warn(msg, meta) {
    console.warn(formatLine('warn', msg, meta));
  },
  error(msg, meta) {
    console.error(formatLine('error', msg, meta));
  },
};
