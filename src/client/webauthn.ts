/**
 * Passkey ceremonies in the browser: the router's options JSON in, the credential's JSON out.
 * `PublicKeyCredential.parse*OptionsFromJSON` and `toJSON()` where the browser has them,
 * base64url by hand where it does not.
 */
import { IdentityClientError } from './error.js';

type Json = Record<string, unknown>;

export function toBase64Url(bytes: ArrayBuffer | Uint8Array): string {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let binary = '';
  for (const byte of view) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(text: string): ArrayBuffer {
  const binary = atob(text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes.buffer;
}

const withIds = (list: unknown) => (Array.isArray(list) ? list.map((item: Json) => ({ ...item, id: fromBase64Url(String(item.id)) })) : undefined);

interface ParsingCredential {
  parseCreationOptionsFromJSON?(options: unknown): PublicKeyCredentialCreationOptions;
  parseRequestOptionsFromJSON?(options: unknown): PublicKeyCredentialRequestOptions;
}

function creationOptions(json: Json): PublicKeyCredentialCreationOptions {
  const native = globalThis.PublicKeyCredential as unknown as ParsingCredential | undefined;
  if (native?.parseCreationOptionsFromJSON) return native.parseCreationOptionsFromJSON(json);
  const user = json.user as Json;
  return {
    ...(json as unknown as PublicKeyCredentialCreationOptions),
    challenge: fromBase64Url(String(json.challenge)),
    user: { ...(user as unknown as PublicKeyCredentialUserEntity), id: fromBase64Url(String(user.id)) },
    excludeCredentials: withIds(json.excludeCredentials) as PublicKeyCredentialDescriptor[],
  };
}

function requestOptions(json: Json): PublicKeyCredentialRequestOptions {
  const native = globalThis.PublicKeyCredential as unknown as ParsingCredential | undefined;
  if (native?.parseRequestOptionsFromJSON) return native.parseRequestOptionsFromJSON(json);
  return {
    ...(json as unknown as PublicKeyCredentialRequestOptions),
    challenge: fromBase64Url(String(json.challenge)),
    allowCredentials: withIds(json.allowCredentials) as PublicKeyCredentialDescriptor[],
  };
}

function credentialJson(credential: PublicKeyCredential): Json {
  const native = credential as unknown as { toJSON?(): Json };
  if (typeof native.toJSON === 'function') return native.toJSON();
  const response = credential.response as AuthenticatorAttestationResponse & AuthenticatorAssertionResponse;
  const encoded: Json = { clientDataJSON: toBase64Url(response.clientDataJSON) };
  if (response.attestationObject) {
    encoded.attestationObject = toBase64Url(response.attestationObject);
    encoded.transports = response.getTransports?.() ?? [];
  } else {
    encoded.authenticatorData = toBase64Url(response.authenticatorData);
    encoded.signature = toBase64Url(response.signature);
    if (response.userHandle) encoded.userHandle = toBase64Url(response.userHandle);
  }
  return {
    id: credential.id,
    rawId: toBase64Url(credential.rawId),
    type: credential.type,
    response: encoded,
    clientExtensionResults: credential.getClientExtensionResults(),
    ...(credential.authenticatorAttachment ? { authenticatorAttachment: credential.authenticatorAttachment } : {}),
  };
}

/** Runs `navigator.credentials.create` or `.get` on the router's options; any refusal is `passkey_failed`. */
export async function runCeremony(kind: 'create' | 'get', options: unknown): Promise<Json> {
  try {
    const credential =
      kind === 'create'
        ? await navigator.credentials.create({ publicKey: creationOptions(options as Json) })
        : await navigator.credentials.get({ publicKey: requestOptions(options as Json) });
    if (!credential) throw new Error('no credential');
    return credentialJson(credential as PublicKeyCredential);
  } catch (cause) {
    throw new IdentityClientError(0, 'passkey_failed', { message: 'The passkey ceremony did not complete.', cause });
  }
}
