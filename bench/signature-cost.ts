/**
 * What one access token's RS256 signature costs on this machine, the part of a refresh no
 * code of the router can shorten (SPEC 2.1 requires RSA; the key ring makes 2048-bit keys):
 *
 *   npx tsx bench/signature-cost.ts [signatures]
 *
 * Signs a payload of an access token's size with a 2048-bit key as `src/crypto/jwt.ts` does:
 * first on the event loop, three times over (the first pass warms up), then all at once with
 * callbacks on libuv's pool. Prints the CPU each signature takes and the rate the two cores
 * could sign at with nothing else to do: the ceiling a refresh row cannot pass.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import { availableParallelism } from 'node:os';

const SIGNATURES = Number(process.argv[2] ?? 2000);
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
// An access token's signing input is about 600 bytes (header and claims, base64url).
const signingInput = Buffer.from('x'.repeat(600));

const cpuMicros = (since: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(since);
  return used.user + used.system;
};

for (let pass = 1; pass <= 3; pass += 1) {
  const started = process.cpuUsage();
  for (let index = 0; index < SIGNATURES; index += 1) sign('sha256', signingInput, privateKey);
  console.log(`on the event loop, pass ${pass}: ${(cpuMicros(started) / SIGNATURES).toFixed(0)} µs of CPU a signature`);
}

const started = process.cpuUsage();
const wall = process.hrtime.bigint();
await Promise.all(
  Array.from({ length: SIGNATURES }, () => new Promise<Buffer>((resolve, reject) => sign('sha256', signingInput, privateKey, (error, signature) => (error ? reject(error) : resolve(signature))))),
);
const wallMicros = Number(process.hrtime.bigint() - wall) / 1000;
const perSignature = cpuMicros(started) / SIGNATURES;
const cores = availableParallelism();
console.log(`on the pool: ${perSignature.toFixed(0)} µs of CPU a signature, ${(SIGNATURES / (wallMicros / 1_000_000)).toFixed(0)} a second`);
console.log(`ceiling: ${cores} cores ÷ ${perSignature.toFixed(0)} µs = ${Math.round((cores * 1_000_000) / perSignature)} signatures a second, before HTTP, the database and the load generator`);
