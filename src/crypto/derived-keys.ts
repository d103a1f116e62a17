import { hkdfSync } from 'node:crypto';

/**
 * Every key the router uses at rest is derived from `config.secret` with HKDF-SHA-256,
 * one per purpose, so that no two uses share key material and a host has one secret to guard.
 */
export interface DerivedKeys {
  /** AES-256-GCM key for signing-key private halves. */
  signingKeyEncryption: Buffer;
  /** AES-256-GCM key for TOTP secrets. */
  totpSecretEncryption: Buffer;
  /** HMAC key for refresh (from before refresh-token MACs), verification, reset and invite tokens. */
  tokenHash: Buffer;
  /** HMAC key that authenticates a refresh token's session and generation (src/crypto/refresh-token.ts). */
  refreshTokenMac: Buffer;
  /** HMAC key for SMS / e-mail one-time codes. */
  otpCodeHash: Buffer;
  /** HMAC key for recovery codes. */
  recoveryCodeHash: Buffer;
  /** HMAC key that pre-hashes passwords before bcrypt (bcrypt reads only 72 bytes). */
  passwordPepper: Buffer;
  /** HMAC key for identifiers kept out of plain sight: tombstone e-mails, rate-budget keys. */
  identifierHash: Buffer;
  /** AES-256-GCM key for the PKCE verifier and nonce of a social-login flow (docs/social-login.md). */
  socialFlowEncryption: Buffer;
  /** HMAC key for social-login `state` values and exchange codes. */
  socialFlowHash: Buffer;
  /** HS256 key of MFA tickets: never published, so no JWKS verifier can accept a ticket (docs/security.md). */
  mfaTicketSigning: Buffer;
  /** HMAC key for WebAuthn challenges (stored only as keyed hashes). */
  passkeyChallengeHash: Buffer;
  /** HMAC key for API keys (docs/api-keys.md), separate so no other digest can be replayed as one. */
  apiKeyHash: Buffer;
  /** AES-256-GCM key for webhook signing secrets (docs/webhooks.md). */
  webhookSecretEncryption: Buffer;
  /** HMAC key for passwordless sign-in links and the addresses they are started for (docs/passwordless.md). */
  passwordlessHash: Buffer;
  /** AES-256-GCM key for the address of a passwordless sign-up, kept until its verify creates the account. */
  passwordlessAddressEncryption: Buffer;
}

const SALT = Buffer.from('identity-router/v1');

function derive(secret: string, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), SALT, Buffer.from(purpose, 'utf8'), 32));
}

export function deriveKeys(secret: string): DerivedKeys {
  return {
    signingKeyEncryption: derive(secret, 'aead:signing-key'),
    totpSecretEncryption: derive(secret, 'aead:totp-secret'),
    tokenHash: derive(secret, 'hmac:token'),
    refreshTokenMac: derive(secret, 'hmac:refresh-token'),
    otpCodeHash: derive(secret, 'hmac:otp-code'),
    recoveryCodeHash: derive(secret, 'hmac:recovery-code'),
    passwordPepper: derive(secret, 'hmac:password-pepper'),
    identifierHash: derive(secret, 'hmac:identifier'),
    socialFlowEncryption: derive(secret, 'aead:social-flow'),
    socialFlowHash: derive(secret, 'hmac:social-flow'),
    mfaTicketSigning: derive(secret, 'hmac:mfa-ticket'),
    passkeyChallengeHash: derive(secret, 'hmac:passkey-challenge'),
    apiKeyHash: derive(secret, 'hmac:api-key'),
    webhookSecretEncryption: derive(secret, 'aead:webhook-secret'),
    passwordlessHash: derive(secret, 'hmac:passwordless'),
    passwordlessAddressEncryption: derive(secret, 'aead:passwordless-address'),
  };
}
