import { createSign } from 'node:crypto';
import { servicesOf } from '../../src/create-identity-router.js';
import type { Harness } from './harness.js';

/** A JSON value as a JWT segment. */
export const b64 = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** Signs claims with the router's own active private key, so only the claim or header under test is wrong. */
export async function signWithRouterKey(h: Harness, header: Record<string, unknown>, claims: Record<string, unknown>): Promise<string> {
  const { kid, privateKey } = await servicesOf(h.identity).keyRing.signingKey();
  const input = `${b64({ alg: 'RS256', typ: 'at+jwt', kid, ...header })}.${b64(claims)}`;
  return `${input}.${createSign('sha256').update(input).sign(privateKey).toString('base64url')}`;
}
