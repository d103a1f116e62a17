import { IdentityConfigError } from '../config/schema.js';

/** An object (or function) with each of `methods` as a function. */
function hasMethods(value: unknown, methods: string[]): boolean {
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return false;
  return methods.every((method) => typeof (value as Record<string, unknown>)[method] === 'function');
}

/** Each of the optional `methods` that `value` has is a function. */
function optionalMethods(value: object, methods: string[]): boolean {
  return methods.every((method) => {
    const member = (value as Record<string, unknown>)[method];
    return member === undefined || typeof member === 'function';
  });
}

/**
 * Each adapter has the shape docs/adapters.md names, checked when the router is created. A
 * wrong one otherwise starts fine and fails at every use: a nodemailer transporter passed as the
 * mailer answered every registration 202 and logged "mailer.send is not a function" for each mail.
 */
export function assertAdapterShapes(adapters: unknown): void {
  if (adapters === undefined) return;
  if (adapters === null || typeof adapters !== 'object') {
    throw new IdentityConfigError(['the adapters, the second argument of createIdentityRouter, must be an object: { mailer?, sms?, onEvent?, clock?, logger?, dns? } (docs/adapters.md)']);
  }
  const { mailer, sms, onEvent, clock, logger, dns } = adapters as Record<string, unknown>;
  const problems: string[] = [];
  if (mailer !== undefined && !hasMethods(mailer, ['send'])) {
    problems.push(
      hasMethods(mailer, ['sendMail'])
        ? '"mailer" is a nodemailer transporter, which has sendMail() but no send(message): pass createNodemailerMailer(transporter, { from }) (docs/adapters.md)'
        : '"mailer" must be an object with a send(message) method, e.g. createNodemailerMailer(...) (docs/adapters.md)',
    );
  }
  if (sms !== undefined && !hasMethods(sms, ['send'])) problems.push('"sms" must be an object with a send({ to, message }) method (docs/adapters.md)');
  if (onEvent !== undefined && typeof onEvent !== 'function') problems.push('"onEvent" must be a function taking the event (docs/adapters.md)');
  if (clock !== undefined && !hasMethods(clock, ['now'])) problems.push('"clock" must be an object with a now() method answering epoch milliseconds (docs/adapters.md)');
  if (logger !== undefined && (!hasMethods(logger, ['info', 'warn', 'error']) || !optionalMethods(logger as object, ['debug']))) {
    problems.push('"logger" must have info, warn and error methods (and debug, if any, a method too): console, pino or winston (docs/adapters.md)');
  }
  if (dns !== undefined && (dns === null || typeof dns !== 'object' || !optionalMethods(dns, ['lookup', 'resolveTxt']))) {
    problems.push('"dns" must be an object whose lookup and resolveTxt, each optional, are functions (docs/adapters.md)');
  }
  if (problems.length > 0) throw new IdentityConfigError(problems);
}
