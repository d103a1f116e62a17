import assert from 'node:assert/strict';
import speakeasy from 'speakeasy';
import type { Harness, SignedUpUser } from './harness.js';

/** The TOTP code an authenticator app would show at the harness clock (plus `offsetSteps` periods). */
export function totpCodeAt(h: Harness, secret: string, offsetSteps = 0): string {
  return speakeasy.totp({ secret, encoding: 'base32', time: Math.floor(h.clock.now() / 1000) + offsetSteps * 30, step: 30, digits: 6 });
}

/**
 * The next usable TOTP code: the clock moves one period first, because a code of a
 * time-step already accepted for the factor is a replay.
 */
export function nextTotpCode(h: Harness, secret: string): string {
  h.clock.advance(30);
  return totpCodeAt(h, secret);
}

export interface EnrolledTotp {
  factorId: string;
  secret: string;
  recoveryCodes: string[];
}

/** Enrolls and confirms a TOTP factor for a signed-in user. */
export async function enrollTotp(h: Harness, accessToken: string): Promise<EnrolledTotp> {
  const enrolled = await h.post('/auth/mfa/totp/enroll', undefined, { token: accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const { factor_id: factorId, secret } = enrolled.body.data;
  const confirmed = await h.post('/auth/mfa/totp/confirm', { factor_id: factorId, code: totpCodeAt(h, secret) }, { token: accessToken });
  assert.equal(confirmed.status, 200, confirmed.text);
  return { factorId, secret, recoveryCodes: confirmed.body.data.recovery_codes ?? [] };
}

/** The code of the newest SMS to a number (the message starts with it). */
export function lastSmsCode(h: Harness, to: string): string {
  const message = [...h.sms].reverse().find((candidate) => candidate.to === to);
  if (!message) throw new Error(`no SMS to ${to}`);
  const match = /^(\d+) /.exec(message.message);
  if (!match) throw new Error(`no code in SMS "${message.message}"`);
  return match[1]!;
}

/** The code of the newest otp_code mail to an address. */
export function lastMailCode(h: Harness, to: string): string {
  const message = h.lastMail(to, 'otp_code');
  if (!message) throw new Error(`no otp_code mail to ${to}`);
  return String(message.context.code);
}

/** Enrolls and confirms an SMS factor. */
export async function enrollSms(h: Harness, accessToken: string, phone: string): Promise<{ factorId: string; recoveryCodes: string[] }> {
  const enrolled = await h.post('/auth/mfa/sms/enroll', { phone_e164: phone }, { token: accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const factorId = enrolled.body.data.factor_id;
  const confirmed = await h.post('/auth/mfa/sms/confirm', { factor_id: factorId, code: lastSmsCode(h, phone) }, { token: accessToken });
  assert.equal(confirmed.status, 200, confirmed.text);
  return { factorId, recoveryCodes: confirmed.body.data.recovery_codes ?? [] };
}

/** Enrolls and confirms an e-mail factor (the account address unless given). */
export async function enrollEmail(h: Harness, user: SignedUpUser, email = user.email): Promise<{ factorId: string; recoveryCodes: string[] }> {
  const enrolled = await h.post('/auth/mfa/email/enroll', email === user.email ? {} : { email }, { token: user.accessToken });
  assert.equal(enrolled.status, 200, enrolled.text);
  const factorId = enrolled.body.data.factor_id;
  const confirmed = await h.post('/auth/mfa/email/confirm', { factor_id: factorId, code: lastMailCode(h, email) }, { token: user.accessToken });
  assert.equal(confirmed.status, 200, confirmed.text);
  return { factorId, recoveryCodes: confirmed.body.data.recovery_codes ?? [] };
}

/** Password login of a user with a confirmed factor: answers the MFA ticket and the factor list. */
export async function loginForTicket(h: Harness, user: Pick<SignedUpUser, 'email' | 'password'>): Promise<{ ticket: string; factors: any[] }> {
  const login = await h.post('/auth/login', { email: user.email, password: user.password });
  assert.equal(login.status, 200, login.text);
  assert.equal(login.body.data.mfa_required, true, login.text);
  return { ticket: login.body.data.mfa_token, factors: login.body.data.factors };
}

/** A signed-in user with a confirmed TOTP factor, and a fresh MFA-backed session from the gate. */
export async function signUpWithTotp(h: Harness): Promise<SignedUpUser & EnrolledTotp> {
  const user = await h.signUp();
  const totp = await enrollTotp(h, user.accessToken);
  const { ticket } = await loginForTicket(h, user);
  const verified = await h.post('/auth/mfa/verify', { factor_id: totp.factorId, code: nextTotpCode(h, totp.secret) }, { token: ticket });
  assert.equal(verified.status, 200, verified.text);
  return { ...user, ...totp, accessToken: verified.body.data.access_token, refreshToken: verified.body.data.refresh_token };
}

let phoneCounter = 0;
/** A distinct valid E.164 number per call. */
export function uniquePhone(): string {
  phoneCounter += 1;
  return `+1555${String(Date.now() % 100000).padStart(5, '0')}${String(phoneCounter).padStart(2, '0')}`;
}
