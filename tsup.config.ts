import { rmSync } from 'node:fs';
import { defineConfig } from 'tsup';

// Both builds write into dist/, so it is emptied once here rather than by either build's `clean`,
// which could run after the other build has written.
rmSync('dist', { recursive: true, force: true });

export default defineConfig([
  {
    entry: ['src/index.ts'],
    format: ['esm', 'cjs'],
    dts: true,
    // No source maps: dist/ is not minified, so a stack trace from a host already names readable
    // lines of dist/index.js, and maps would point at src/ files the package does not ship
    // (with their sources embedded they doubled the tarball).
    sourcemap: false,
    clean: false,
    target: 'node20',
    // import.meta.url is used to locate bcryptjs for the password worker; the CJS build needs the shim.
    shims: true,
    splitting: false,
  },
  {
    // The browser client (docs/client.md): ESM only, one file, no Node built-ins. Its types come
    // from src/client/openapi.d.ts, generated from docs/openapi.yaml by `npm run generate:client-types`.
    entry: { 'client/index': 'src/client/index.ts' },
    format: ['esm'],
    platform: 'browser',
    target: 'es2020',
    dts: true,
    sourcemap: false,
    clean: false,
    splitting: false,
  },
]);
