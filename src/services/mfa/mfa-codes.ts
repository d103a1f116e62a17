import { randomUUID } from 'node:crypto';
import { renderSms } from '../../adapters/templates.js';
import { decrypt, encrypt } from '../../crypto/aead.js';
import { generateOtpCode, hashOtpCode, maskEmail, maskPhone, otpCodeMatches } from '../../crypto/otp-code.js';
import { generateRecoveryCode, hashRecoveryCode, normaliseRecoveryCode, RECOVERY_CODES_PER_BATCH } from '../../crypto/recovery-code.js';
import { matchTotpStep } from '../../crypto/totp.js';
import { errors } from '../../errors.js';
import type { MfaFactorRecord, OtpChannel, OtpPurpose } from '../../store/mfa-repository.js';
import type { Repositories } from '../../store/store.js';
import type { ServiceContext } from '../shared/service-context.js';
import type { UnitOfWork } from '../shared/unit-of-work.js';
import { assertWithinBudget, destinationBudgetName, recordInBudget, spendSendBudget, type BudgetBucket } from '../limits/send-budget.js';
import { ENDED_ROW_RETENTION_MS } from '../shared/occasional.js';

/** The masked destination of a factor (docs/mfa.md), or undefined for TOTP. */
export function maskedDestination(factor: Pick<MfaFactorRecord, 'type' | 'destination'>): string | undefined {
  if (!factor.destination) return undefined;
  return factor.type === 'sms' ? maskPhone(factor.destination) : maskEmail(factor.destination);
}

/** AAD of a sealed TOTP secret: a ciphertext copied onto another factor row does not decrypt. */
const totpSecretContext = (factorId: string) => `mfa-factor:${factorId}:totp-secret`;

/**
 * The code primitives of docs/mfa.md: sending SMS / e-mail codes under the cooldown and the
 * database-kept budgets, and checking TOTP, challenge and recovery codes with atomic
 * single-use updates.
 */
export class MfaCodes {
  constructor(private readonly context: ServiceContext) {}

  sealTotpSecret(factorId: string, secret: string): string {
    return encrypt(this.context.keys.totpSecretEncryption, secret, totpSecretContext(factorId));
  }

  private openTotpSecret(factor: MfaFactorRecord): string {
    return decrypt(this.context.keys.totpSecretEncryption, factor.secretSealed ?? '', totpSecretContext(factor.id)).toString('utf8');
  }

  /**
   * Sends a fresh code for an SMS or e-mail factor (after commit). Refuses inside the
   * factor's resend cooldown and over the per-destination / per-account send budgets.
   */
  async sendCode(
    uow: UnitOfWork,
    input: { factor: MfaFactorRecord; purpose: OtpPurpose; boundTo: string | null; cooldownCode: 'rate_limited' | 'too_many_requests' },
  ): Promise<{ channel: OtpChannel; destination: string }> {
    const { purpose } = input;
    const { otp } = this.context.config;
    // Serialise sends for one factor so the cooldown holds under concurrent requests. The locked
    // row is the one sent to: a factor removed or confirmed since it was read is not.
    const factor = await uow.repos.mfaFactors.findOwnedForUpdate(input.factor.id, input.factor.userId);
    if (!factor || factor.confirmedAt !== input.factor.confirmedAt) throw errors.notFound('Factor');
    const channel: OtpChannel = factor.type === 'sms' ? 'sms' : 'email';
    const destination = factor.destination ?? '';
    // Confirming a factor ends its enrollment cooldown: that code has been used.
    const lastSent = await uow.repos.otpChallenges.lastSentAt(factor.id, factor.confirmedAt !== null ? 'enroll' : undefined);
    if (lastSent !== undefined && uow.now - lastSent < otp.resendCooldown * 1000) {
      const resetsAt = lastSent + otp.resendCooldown * 1000;
      throw errors.rateLimited((resetsAt - uow.now) / 1000, input.cooldownCode, { limit: 1, resetsAt });
    }
    await spendSendBudget(uow, this.context, [
      { name: destinationBucket(channel, factor), budget: otp.sendBudget.perDestination },
      { name: `otp-send:account:${factor.userId}`, budget: otp.sendBudget.perAccount },
    ]);

    const challengeId = randomUUID();
    const code = generateOtpCode(otp.length);
    await uow.repos.otpChallenges.expireOutstanding(factor.id, uow.now);
    // Each send left its row for ever (every login through an SMS or e-mail factor): the factor's
    // challenges that ended a day ago go with its next send (docs/database.md).
    await uow.repos.otpChallenges.pruneEndedOfFactor(factor.id, uow.now - ENDED_ROW_RETENTION_MS);
    await uow.repos.otpChallenges.insert({
      id: challengeId,
      userId: factor.userId,
      factorId: factor.id,
      purpose,
      channel,
      codeHash: hashOtpCode(this.context.keys.otpCodeHash, challengeId, code),
      boundTo: input.boundTo,
      now: uow.now,
      expiresAt: uow.now + otp.ttl * 1000,
    });

    const { appName } = this.context.config;
    if (channel === 'sms') {
      uow.afterCommit(() => this.context.sms.send({ to: destination, message: renderSms(code, appName, otp.ttl) }));
    } else {
      uow.afterCommit(() => this.context.mailer.send({ to: destination, template: 'otp_code', context: { app_name: appName, code, ttl: otp.ttl, purpose } }));
    }
    return { channel, destination: maskedDestination(factor) ?? '' };
  }

  /**
   * Checks a code for a factor: TOTP against the secret (a time-step at or before the
   * last accepted one is a replay), SMS / e-mail against the live challenge of that
   * purpose and binding. True only for the one caller that may act on it.
   */
  async checkFactorCode(uow: UnitOfWork, factor: MfaFactorRecord, code: string, purpose: OtpPurpose, boundTo: string | null): Promise<boolean> {
    if (factor.type === 'totp') {
      const step = matchTotpStep({ secret: this.openTotpSecret(factor), code, timeSeconds: Math.floor(uow.now / 1000) });
      if (step === undefined) return false;
      return uow.repos.mfaFactors.advanceTotpStep(factor.id, step);
    }
    const { otp } = this.context.config;
    const challenge = await uow.repos.otpChallenges.findLive(factor.id, purpose, boundTo, uow.now);
    if (!challenge) return false;
    // The attempt is taken before comparing; a caller without one never compares.
    if (!(await uow.repos.otpChallenges.claimAttempt(challenge.id, otp.maxAttempts, uow.now))) return false;
    if (!otpCodeMatches(this.context.keys.otpCodeHash, challenge.id, code, otp.length, challenge.codeHash)) return false;
    return uow.repos.otpChallenges.consume(challenge.id, uow.now);
  }

  /** Spends one recovery code of the current batch; true only for the caller whose update took it. */
  async spendRecoveryCode(uow: UnitOfWork, userId: string, code: string): Promise<boolean> {
    const normalised = normaliseRecoveryCode(code);
    if (!normalised) return false;
    return uow.repos.recoveryCodes.consume(userId, hashRecoveryCode(this.context.keys.recoveryCodeHash, userId, normalised), uow.now);
  }

  /** Retires the old batch and stores a new one as keyed hashes; the plaintext is returned once. */
  async issueRecoveryCodes(uow: UnitOfWork, userId: string): Promise<string[]> {
    const codes = Array.from({ length: RECOVERY_CODES_PER_BATCH }, () => generateRecoveryCode());
    await uow.repos.recoveryCodes.retireAll(userId, uow.now);
    await uow.repos.recoveryCodes.insertBatch({
      userId,
      batchId: randomUUID(),
      codes: codes.map((code) => ({ id: randomUUID(), codeHash: hashRecoveryCode(this.context.keys.recoveryCodeHash, userId, normaliseRecoveryCode(code)!) })),
      now: uow.now,
    });
    return codes;
  }

  /** The per-account verify window (docs/configuration.md `otp.verifyBudget`): over it, no code is even looked at. */
  async assertVerifyBudget(repos: Repositories, userId: string, now: number): Promise<void> {
    await assertWithinBudget(repos, this.context, this.verifyBucket(userId), now);
  }

  async recordVerifyFailure(uow: UnitOfWork, userId: string): Promise<void> {
    await recordInBudget(uow, this.context, this.verifyBucket(userId));
  }

  private verifyBucket(userId: string): BudgetBucket {
    return { name: `otp-verify-failed:account:${userId}`, budget: this.context.config.otp.verifyBudget };
  }
}

/**
 * The per-destination bucket a send counts in (docs/configuration.md `otp.sendBudget`). A send to a
 * destination that is not yet a confirmed factor (an enrollment) counts per destination across
 * all accounts, so many accounts cannot pump texts to one number. A send to the user's own
 * confirmed factor (login, step-up) counts in a bucket of that user and destination, which no
 * other account's enrollments can exhaust. See docs/security.md (send budgets).
 */
function destinationBucket(channel: OtpChannel, factor: Pick<MfaFactorRecord, 'userId' | 'destination' | 'confirmedAt'>): string {
  const destination = destinationBudgetName(channel, factor.destination ?? '');
  return factor.confirmedAt === null ? destination : `${destination}:confirmed-of:${factor.userId}`;
}
