/**
 * Runs every benchmark in bench/ one after the other. Each reports ratios against a
 * baseline measured in the same run; none of them is a pass/fail test.
 *
 *   npm run bench
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const benchmarks = ['login-under-load.ts', 'org-members-page.ts'].filter((file) => existsSync(join(here, file)));

let failed = false;
for (const file of benchmarks) {
  console.log(`\n== bench/${file} ==`);
  const result = spawnSync(process.execPath, ['--import', 'tsx', join(here, file)], { stdio: 'inherit' });
  if (result.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
