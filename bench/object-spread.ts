/**
 * What building one object from another costs, the ways the hot path could write it:
 *
 *   npx tsx bench/object-spread.ts
 *
 * On Node 20 (V8 11.3) an object literal that starts with a spread and goes on with more
 * properties (`{ ...claims, jti, iat, exp }`) takes a slow path: several microseconds for a
 * dozen properties, where `Object.assign({}, claims, { jti, iat, exp })` or a spread written
 * last takes a fraction of one. A spread alone (`{ ...claims }`) is fast. The hot path builds
 * such objects on every refresh and login (the access token's claims, a refresh's values and
 * its recording's), so it uses `Object.assign` there (docs/performance.md). Each shape is run
 * 100,000 times after as many unmeasured; the figures are nanoseconds a call on this machine.
 */
const RUNS = 100_000;

function nanosPerCall(build: (index: number) => unknown): number {
  let kept: unknown;
  for (let index = 0; index < RUNS; index += 1) kept = build(index);
  const started = process.hrtime.bigint();
  for (let index = 0; index < RUNS; index += 1) kept = build(index);
  const elapsed = Number(process.hrtime.bigint() - started) / RUNS;
  if (kept === undefined) throw new Error('nothing built');
  return elapsed;
}

// An access token's subject, as SessionService builds it, and the claims a signature adds.
const subject = { sub: 'user', sid: 'session', email: 'ada@example.com', email_verified: true, org_id: null, roles: [], scope: ['orgs:read'], amr: ['pwd'], auth_time: 1, mfa: false };
// A refresh's update values and its audit row's, as valuesWithRecording joins them.
const write = { id: 'session', generation: 1, next: 2, now: 3, expiresAt: 4 };
const audit = { eventId: 'event', eventType: 'session.refreshed', occurredAt: 5, actorId: 'user', userId: 'user', organizationId: null, ip: '127.0.0.1', data: '{}' };

const shapes: Array<[string, (index: number) => unknown]> = [
  ['{ ...subject, jti, iss, iat, exp }', (index) => ({ ...subject, jti: `jti-${index}`, iss: 'issuer', iat: index, exp: index + 900 })],
  ['Object.assign({}, subject, { jti, iss, iat, exp })', (index) => Object.assign({}, subject, { jti: `jti-${index}`, iss: 'issuer', iat: index, exp: index + 900 })],
  ['{ jti, iss, iat, exp, ...subject }', (index) => ({ jti: `jti-${index}`, iss: 'issuer', iat: index, exp: index + 900, ...subject })],
  ['{ ...subject }', () => ({ ...subject })],
  ['{ ...write, ...audit }', () => ({ ...write, ...audit })],
  ['Object.assign({}, write, audit)', () => Object.assign({}, write, audit)],
];

console.log(`Node ${process.version} (V8 ${process.versions.v8}): nanoseconds a call, ${RUNS.toLocaleString('en-US')} calls each`);
for (const [name, build] of shapes) console.log(`  ${name.padEnd(52)} ${Math.round(nanosPerCall(build)).toLocaleString('en-US').padStart(7)} ns`);
