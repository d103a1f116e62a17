import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts'],
  format: ['esm', 'cjs'],
  dts: true,
  // No source maps: dist/ is not minified, so a stack trace from a host already names readable
  // lines of dist/index.js, and maps would point at src/ files the package does not ship
  // (with their sources embedded they doubled the tarball).
  sourcemap: false,
  clean: true,
  target: 'node20',
  // import.meta.url is used to locate bcryptjs for the password worker; the CJS build needs the shim.
  shims: true,
  splitting: false,
});
