import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts'],
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  // import.meta.url is used to locate bcryptjs for the password worker; the CJS build needs the shim.
  shims: true,
  splitting: false,
});
