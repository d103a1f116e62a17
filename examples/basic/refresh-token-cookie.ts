/**
 * A small backend-for-frontend in front of the router: for the browser mount, the refresh
 * token travels only in an httpOnly, SameSite=Strict cookie, so page scripts (and any script
 * injected into them) never see it, and the page survives a reload or a click on a mailed
 * link without keeping a token in localStorage. See "Tokens in the browser" in
 * docs/getting-started.md for the choice. The web app's identity-router/client runs in its
 * cookie mode (`storage: 'none'`, public/lib/identity.js): it refreshes with `{}`, and this route
 * adds the cookie's token (docs/client.md, "Cookie mode").
 */
import express, { type Request, type RequestHandler, type Response } from 'express';

export const REFRESH_COOKIE = 'example_refresh';
/**
 * A script-readable hint beside it, holding nothing but "1": the page refreshes on load only
 * when it is there, so a signed-out visit sends no request that must fail (a red 401 in the console).
 */
export const SESSION_HINT_COOKIE = 'example_session';

const REFRESH_PATH = '/auth/token/refresh';
const ENDS_SESSION = new Set(['/auth/logout', '/auth/logout-all']);

export interface RefreshTokenCookieOptions {
  /** The mount path of the browser API, e.g. `/api`: the cookie is sent to `<mount>/auth` only. */
  mountPath: string;
  maxAgeSeconds: number;
  /** Set `Secure` (true behind HTTPS; browsers treat http://localhost as secure too). */
  secure: boolean;
}

/**
 * The cookie's value, or undefined when the header holds it not at all or more than once. Two means
 * another cookie of the name was set beside ours (by a sibling subdomain, on a longer path, which the
 * browser sends first): taking either could sign the page in as whoever set it.
 */
function readCookie(header: string | undefined, name: string): string | undefined {
  const values = (header ?? '')
    .split(';')
    .map((part) => part.trim().split('='))
    .filter(([key]) => key === name)
    .map(([, ...value]) => value.join('='));
  if (values.length !== 1) return undefined;
  try {
    return decodeURIComponent(values[0]!);
  } catch {
    return undefined;
  }
}

/**
 * Whether no page of another origin could have sent this request without the browser asking this server
 * first: it carries a JSON body or an Authorization header (which a form or a no-cors fetch cannot), or
 * the browser says it comes from this origin. SameSite=Strict keeps the cookie from other sites' requests,
 * but not from another port of this host (a site ignores ports), nor the Set-Cookie of the answer to
 * another site's form: a form posted to /auth/logout cleared the cookie, signing the user out.
 */
function fromThisOrigin(req: Request): boolean {
  const mediaType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  return req.headers.authorization !== undefined || mediaType === 'application/json' || /^application\/[^/]*\+json$/.test(mediaType) || req.headers['sec-fetch-site'] === 'same-origin';
}

export function refreshTokenCookie(options: RefreshTokenCookieOptions): RequestHandler {
  const parseJson = express.json({ limit: '100kb' });
  const attributes = [`Path=${options.mountPath}/auth`, 'HttpOnly', 'SameSite=Strict', ...(options.secure ? ['Secure'] : [])];
  const hintAttributes = ['Path=/', 'SameSite=Strict', ...(options.secure ? ['Secure'] : [])];
  const setCookie = (res: Response, token: string) => {
    res.append('Set-Cookie', [`${REFRESH_COOKIE}=${encodeURIComponent(token)}`, `Max-Age=${options.maxAgeSeconds}`, ...attributes].join('; '));
    res.append('Set-Cookie', [`${SESSION_HINT_COOKIE}=1`, `Max-Age=${options.maxAgeSeconds}`, ...hintAttributes].join('; '));
  };
  const clearCookie = (res: Response) => {
    res.append('Set-Cookie', [`${REFRESH_COOKIE}=`, 'Max-Age=0', ...attributes].join('; '));
    res.append('Set-Cookie', [`${SESSION_HINT_COOKIE}=`, 'Max-Age=0', ...hintAttributes].join('; '));
  };

  return (req, res, next) => {
    // A request another origin could send unasked neither reads, sets nor clears the cookie: the router answers it alone.
    if (req.method !== 'POST' || !fromThisOrigin(req)) return next();
    const sendJson = res.json.bind(res);
    // Any answer that carries a refresh token (login, MFA verify, refresh, and whatever sign-in route comes
    // next) hands it to the cookie instead of the page. The cookie goes at a logout, whatever its answer (the
    // user asked to leave this browser), and when a refresh is refused (401). A refresh answered 429 or 5xx
    // keeps it: the session lives, and the next refresh may pass.
    res.json = (body: { data?: { refresh_token?: string } } | undefined) => {
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      if (ok && body?.data?.refresh_token) {
        setCookie(res, body.data.refresh_token);
        const { refresh_token: _moved, ...data } = body.data;
        return sendJson({ ...body, data });
      }
      if (ENDS_SESSION.has(req.path) || (req.path === REFRESH_PATH && res.statusCode === 401)) clearCookie(res);
      return sendJson(body);
    };
    if (req.path !== REFRESH_PATH) return next();
    parseJson(req, res, (error?: unknown) => {
      if (error) return next(error);
      const body = (req.body ?? {}) as { refresh_token?: unknown };
      if (body.refresh_token === undefined) {
        const fromCookie = readCookie(req.headers.cookie, REFRESH_COOKIE);
        if (!fromCookie) {
          clearCookie(res);
          return void res.status(401).json({ error: 'invalid_grant', message: 'No session cookie.' });
        }
        req.body = { ...body, refresh_token: fromCookie };
      }
      next();
    });
  };
}
