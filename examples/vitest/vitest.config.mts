// Vitest as the Nest 12 template ships it: no SWC plugin. Vite's own TypeScript transform reads
// `experimentalDecorators` and `emitDecoratorMetadata` from tsconfig.json, so Nest's injection by
// type works as compiled by tsc.
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The examples folder, so the app the test imports from ../orders-app.ts is transformed too.
    root: join(import.meta.dirname, '..'),
    include: ['vitest/**/*.e2e.test.ts'],
    // One database per run, made by the test itself; a generous bound only to stop a hang.
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
