import { randomUUID, sign as signWithCallback } from 'node:crypto';
import { promisify } from 'node:util';
import jwt from 'jsonwebtoken';
import type { Clock } from '../adapters/types.js';
import { ISSUED_AHEAD_TOLERANCE_MS } from '../clock.js';
import type { KeyObject } from 'node:crypto';

/** node:crypto's sign with a callback runs on libuv's thread pool: an RS256 signature (about 0.25 ms) leaves the event loop free. */
const signOffThread = promisify(signWithCallback) as (algorithm: string, data: Buffer, key: KeyObject) => Promise<Buffer>;

/** Verified access tokens remembered, so a token presented again skips the RSA verification; the oldest go first. */
const VERIFIED_TOKEN_CACHE_SIZE = 4096;

/**
 * The remembered tokens are found by the last characters of their signature, and a hit counts
 * only if the whole token is equal: hashing a fresh thousand-character string for the lookup
 * cost more than the rest of the check.
 */
const LOOKUP_TAIL = 32;
const lookupKey = (token: string) => token.slice(-LOOKUP_TAIL);

interface VerifiedToken {
  /** The whole token: the map's key is only its tail. */
  token: string;
  claims: AccessTokenClaims;
  kid: string;
  /** The key that verified it: a hit counts only while the ring still publishes this very key for the kid. */
  publicKey: KeyObject;
}

/** Where the codec gets its RS256 keys (the key ring in services implements it; crypto never reads the store). */
export interface SigningKeySource {
  signingKey(): Promise<{ kid: string; privateKey: KeyObject }>;
  verificationKey(kid: string): Promise<KeyObject | undefined>;
  /** The same key without waiting, when the loaded keys are fresh enough to answer; undefined means "ask `verificationKey`". */
  loadedVerificationKey?(kid: string): KeyObject | undefined;
}

export const ACCESS_TOKEN_TYP = 'at+jwt';
export const MFA_TICKET_TYP = 'mfa+jwt';
export const MFA_TICKET_PURPOSE = 'login_mfa';

/** docs/database.md. */
export interface AccessTokenClaims {
  sub: string;
  jti: string;
  sid: string;
  org: string | null;
  roles: string[];
  scope: string[];
  email_verified: boolean;
  mfa: boolean;
  amr: string[];
  auth_time: number;
  iss: string;
  aud?: string;
  iat: number;
  exp: number;
}

export interface MfaTicketClaims {
  sub: string;
  /** The ticket row id: single use is enforced in the database. */
  jti: string;
  purpose: typeof MFA_TICKET_PURPOSE;
  iss: string;
  aud?: string;
  iat: number;
  exp: number;
}

export type AccessTokenSubject = Omit<AccessTokenClaims, 'jti' | 'iss' | 'aud' | 'iat' | 'exp'>;

export interface JwtSettings {
  /** HS256 key of MFA tickets, derived from `secret` and never in the JWKS. */
  mfaTicketKey: Buffer;
  issuer: string;
  audience: string | undefined;
  accessTtl: number;
  mfaTicketTtl: number;
}

/**
 * Signs and verifies the router's JWTs. jsonwebtoken alone accepts tokens without `exp`
 * and ignores `typ`, so both are checked here, and RS256 is pinned.
 */
export class JwtCodec {
  private readonly verified = new Map<string, VerifiedToken>();

  constructor(
    private readonly keyRing: SigningKeySource,
    private readonly clock: Clock,
    private readonly settings: JwtSettings,
  ) {}

  async signAccessToken(subject: AccessTokenSubject): Promise<{ token: string; claims: AccessTokenClaims }> {
    const iat = Math.floor(this.clock.now() / 1000);
    // Object.assign, not a spread followed by more claims: that costs microseconds on Node 20,
    // on every login and refresh (docs/performance.md).
    const claims: AccessTokenClaims = Object.assign(
      {},
      subject,
      { jti: randomUUID(), iss: this.settings.issuer },
      this.settings.audience ? { aud: this.settings.audience } : undefined,
      { iat, exp: iat + this.settings.accessTtl },
    );
    return { token: await this.sign(claims, ACCESS_TOKEN_TYP), claims };
  }

  async signMfaTicket(userId: string, ticketId: string): Promise<{ token: string; expiresAt: number }> {
    const iat = Math.floor(this.clock.now() / 1000);
    const claims: MfaTicketClaims = {
      sub: userId,
      jti: ticketId,
      purpose: MFA_TICKET_PURPOSE,
      iss: this.settings.issuer,
      ...(this.settings.audience ? { aud: this.settings.audience } : {}),
      iat,
      exp: iat + this.settings.mfaTicketTtl,
    };
    // HS256 with a private key: a resource server that trusts the JWKS cannot verify a ticket.
    const token = jwt.sign(claims, this.settings.mfaTicketKey, { algorithm: 'HS256', header: { alg: 'HS256', typ: MFA_TICKET_TYP } });
    return { token, expiresAt: claims.exp * 1000 };
  }

  /**
   * The claims of a valid access token, or undefined. MFA tickets and any other `typ` are refused.
   *
   * A token verified before is answered from memory while it is unexpired and its key is
   * still published: a signature never changes, so only the time and the key ring can make
   * it invalid. Whether its session is still live is the caller's check, every time.
   */
  verifyAccessToken(token: string): AccessTokenClaims | undefined | Promise<AccessTokenClaims | undefined> {
    const remembered = this.verified.get(lookupKey(token));
    if (remembered && remembered.token === token) {
      if (this.inTime(remembered.claims)) {
        // Answered within the request's own event when the key is loaded (docs/performance.md).
        const key = this.keyRing.loadedVerificationKey?.(remembered.kid);
        if (key === undefined) return this.verifyRemembered(token, remembered);
        if (key === remembered.publicKey) return remembered.claims;
      }
      this.verified.delete(lookupKey(token));
    }
    return this.verifyAfresh(token);
  }

  /**
   * The claims of a token verified before, when memory alone shows that it still verifies: in
   * time, and its key loaded and still published. Undefined means "ask `verifyAccessToken`".
   */
  rememberedClaims(token: string): AccessTokenClaims | undefined {
    const remembered = this.verified.get(lookupKey(token));
    if (!remembered || remembered.token !== token || !this.inTime(remembered.claims)) return undefined;
    return this.keyRing.loadedVerificationKey?.(remembered.kid) === remembered.publicKey ? remembered.claims : undefined;
  }

  private inTime(claims: AccessTokenClaims): boolean {
    const now = Math.floor(this.clock.now() / 1000);
    return now < claims.exp && claims.iat <= now + 60;
  }

  /** A remembered token whose key is not loaded: the key ring is asked, and a key that changed means verifying again. */
  private async verifyRemembered(token: string, remembered: VerifiedToken): Promise<AccessTokenClaims | undefined> {
    if ((await this.keyRing.verificationKey(remembered.kid)) === remembered.publicKey) return remembered.claims;
    this.verified.delete(lookupKey(token));
    return this.verifyAfresh(token);
  }

  private async verifyAfresh(token: string): Promise<AccessTokenClaims | undefined> {
    const decoded = jwt.decode(token, { complete: true });
    if (!decoded || typeof decoded.payload === 'string') return undefined;
    const { header } = decoded;
    if (header.alg !== 'RS256' || header.typ !== ACCESS_TOKEN_TYP || typeof header.kid !== 'string') return undefined;
    const publicKey = await this.keyRing.verificationKey(header.kid);
    if (!publicKey) return undefined;
    const payload = this.checkedPayload(token, publicKey, 'RS256');
    if (!payload || 'purpose' in payload) return undefined;
    const candidate = payload as Partial<AccessTokenClaims>;
    const wellFormed =
      typeof candidate.sub === 'string' &&
      typeof candidate.sid === 'string' &&
      typeof candidate.jti === 'string' &&
      Array.isArray(candidate.amr) &&
      typeof candidate.auth_time === 'number' &&
      typeof candidate.mfa === 'boolean';
    if (!wellFormed) return undefined;
    if (this.verified.size >= VERIFIED_TOKEN_CACHE_SIZE) this.verified.delete(this.verified.keys().next().value!);
    // Frozen: every later request that presents the token shares this object.
    const claims = Object.freeze(payload) as unknown as AccessTokenClaims;
    Object.freeze(claims.amr);
    if (Array.isArray(claims.roles)) Object.freeze(claims.roles);
    if (Array.isArray(claims.scope)) Object.freeze(claims.scope);
    this.verified.set(lookupKey(token), { token, claims, kid: header.kid, publicKey });
    return claims;
  }

  async verifyMfaTicket(token: string): Promise<MfaTicketClaims | undefined> {
    const payload = this.verifyTicketSignature(token);
    if (!payload || payload.purpose !== MFA_TICKET_PURPOSE || typeof payload.sub !== 'string' || typeof payload.jti !== 'string') return undefined;
    return payload as unknown as MfaTicketClaims;
  }

  /** A JWS compact serialisation (RFC 7515 section 7.1) signed RS256 off the event loop. */
  private async sign(claims: object, typ: string): Promise<string> {
    const { kid, privateKey } = await this.keyRing.signingKey();
    const signingInput = `${base64url({ alg: 'RS256', typ, kid })}.${base64url(claims)}`;
    const signature = await signOffThread('sha256', Buffer.from(signingInput), privateKey);
    return `${signingInput}.${signature.toString('base64url')}`;
  }

  private verifyTicketSignature(token: string): Record<string, unknown> | undefined {
    const decoded = jwt.decode(token, { complete: true });
    if (!decoded || typeof decoded.payload === 'string') return undefined;
    if (decoded.header.alg !== 'HS256' || decoded.header.typ !== MFA_TICKET_TYP) return undefined;
    return this.checkedPayload(token, this.settings.mfaTicketKey, 'HS256');
  }

  private checkedPayload(token: string, key: jwt.Secret, algorithm: 'RS256' | 'HS256'): Record<string, unknown> | undefined {
    try {
      const payload = jwt.verify(token, key, {
        algorithms: [algorithm],
        issuer: this.settings.issuer,
        ...(this.settings.audience ? { audience: this.settings.audience } : {}),
        clockTimestamp: Math.floor(this.clock.now() / 1000),
      });
      if (typeof payload === 'string' || typeof payload.exp !== 'number' || typeof payload.iat !== 'number') return undefined;
      // A token issued in the future (by more than a little clock skew) is not trusted either.
      if (payload.iat * 1000 > this.clock.now() + ISSUED_AHEAD_TOLERANCE_MS) return undefined;
      return payload as Record<string, unknown>;
    } catch {
      return undefined;
    }
  }
}

const base64url = (value: object): string => Buffer.from(JSON.stringify(value)).toString('base64url');
