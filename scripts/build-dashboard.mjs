#!/usr/bin/env node
// Builds the dashboard's front end (lib/dashboard/ui: TypeScript for the browser, CSS, an icon)
// into a folder beside the compiled server code, which serves it from there:
//   node scripts/build-dashboard.mjs dist/dashboard/ui      (npm run build)
//   node scripts/build-dashboard.mjs .build/lib/dashboard/ui (npm run build:test)
// tsc only, no bundler: the browser loads the ES modules as they are. Prints each file's size and
// the gzipped total, the number docs/dashboard.md states.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(repo, 'lib/dashboard/ui');
const out = resolve(repo, process.argv[2] ?? 'dist/dashboard/ui');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin/tsc');
execFileSync(process.execPath, [tsc, '-p', join(source, 'tsconfig.json'), '--outDir', out], { stdio: 'inherit' });
for (const file of readdirSync(source)) {
  if (file.endsWith('.css') || file.endsWith('.svg')) copyFileSync(join(source, file), join(out, file));
}

let raw = 0;
let gzipped = 0;
const lines = [];
for (const file of readdirSync(out).sort()) {
  const body = readFileSync(join(out, file));
  const zipped = gzipSync(body, { level: 9 }).length;
  raw += body.length;
  gzipped += zipped;
  lines.push(`  ${file.padEnd(16)} ${String(body.length).padStart(7)} B  ${String(zipped).padStart(6)} B gzipped`);
}
if (process.env.QUEUEBOX_DASHBOARD_SIZES || process.argv.includes('--sizes')) {
  console.log(
    `dashboard assets in ${out}:\n${lines.join('\n')}\n  total            ${String(raw).padStart(7)} B  ${String(gzipped).padStart(6)} B gzipped`,
  );
}
