// A CommonJS app of the Nest 10 era, whose tsconfig resolves modules the node10 way (TypeScript 5,
// `moduleResolution: node10`, which reads no `exports`), imports `queuebox` and each of its
// subpaths (`/testing`, `/terminus`, `/prometheus`, `/dashboard`) from the packed package and
// type-checks: package.json's `typesVersions` is what lets it find their types. The same app then
// fails without `typesVersions` (the check is not vacuous), and the compiled app loads every
// subpath at run time.
//   npm run test:package
// Offline where it can be: `npm install --prefer-offline` takes what the npm cache holds.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');
const STEP_TIMEOUT_MS = 300_000;
const SUBPATHS = ['testing', 'terminus', 'prometheus', 'dashboard'];

const run = (command, args, cwd) => execFileSync(command, args, { cwd, stdio: 'pipe', timeout: STEP_TIMEOUT_MS, encoding: 'utf8' });

/** Runs the app's TypeScript 5 compiler; returns its exit status and output. */
function tsc(dir) {
  const result = spawnSync(process.execPath, [join(dir, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
    cwd: dir,
    encoding: 'utf8',
    timeout: STEP_TIMEOUT_MS,
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

// Each subpath is used as an app would, and each imported name is shown to be typed: assigning a
// class or module to a number is an error only when its type is known (an `any` import would
// leave the `@ts-expect-error` unused, which is an error too).
const APP = `import 'reflect-metadata';
import type { INestApplicationContext } from '@nestjs/common';
import { type Publisher, QueueBoxModule } from 'queuebox';
import { QueueBoxDashboardModule } from 'queuebox/dashboard';
import { QueueBoxPrometheusModule } from 'queuebox/prometheus';
import { QueueBoxHealthIndicator, QueueBoxHealthModule } from 'queuebox/terminus';
import { QueueBoxTesting, RecordingPublisher } from 'queuebox/testing';

const publisher: Publisher = new RecordingPublisher();
export const modules = [
  QueueBoxModule.forRoot({ outbox: { publisher } }),
  QueueBoxHealthModule,
  QueueBoxPrometheusModule,
  QueueBoxDashboardModule.forRoot({ path: 'ops/queuebox', public: true }),
];
export const probes = [
  (app: INestApplicationContext) => QueueBoxTesting.from(app).drainOutbox(),
  (app: INestApplicationContext) => app.get(QueueBoxHealthIndicator).readiness(),
];

// @ts-expect-error typed: a class is not a number
export const testing: number = QueueBoxTesting;
// @ts-expect-error typed
export const terminus: number = QueueBoxHealthIndicator;
// @ts-expect-error typed
export const prometheus: number = QueueBoxPrometheusModule;
// @ts-expect-error typed
export const dashboard: number = QueueBoxDashboardModule;
// @ts-expect-error typed
export const main: number = QueueBoxModule;

console.log(
  'loaded',
  [QueueBoxModule, QueueBoxTesting, RecordingPublisher, QueueBoxHealthIndicator, QueueBoxHealthModule, QueueBoxPrometheusModule, QueueBoxDashboardModule]
    .map((value) => typeof value)
    .join(' '),
);
`;

let dir;
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a node10 CommonJS app (TypeScript 5) sees the types of queuebox and of each subpath', () => {
  assert.ok(existsSync(join(repo, 'dist/index.js')), 'dist/ is missing: run `npm run build` first');
  const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8'));
  assert.deepEqual(
    Object.keys(pkg.exports)
      .filter((path) => path !== '.' && path !== './package.json')
      .map((path) => path.slice(2))
      .sort(),
    [...SUBPATHS].sort(),
    'this test imports every subpath package.json exports',
  );

  dir = mkdtempSync(join(tmpdir(), 'queuebox-node10-'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'node10-app', private: true }, null, 2));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'commonjs',
        moduleResolution: 'node10',
        target: 'es2021',
        outDir: 'dist',
        rootDir: 'src',
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        strict: true,
        skipLibCheck: true,
        types: ['node'],
      },
      include: ['src'],
    }),
  );
  mkdirSync(join(dir, 'src'));
  writeFileSync(join(dir, 'src/main.ts'), APP);

  const [packed] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', dir], repo));
  run(
    'npm',
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      join(dir, packed.filename),
      '@nestjs/common@12',
      '@nestjs/core@12',
      '@nestjs/typeorm@12',
      '@nestjs/schedule@12',
      '@nestjs/terminus@12',
      '@willsoto/nestjs-prometheus@6',
      'prom-client@15',
      'typeorm@1',
      'pg@8',
      'reflect-metadata@0.2',
      'rxjs@7',
      'typescript@5',
      '@types/node@22',
    ],
    dir,
  );
  const version = JSON.parse(readFileSync(join(dir, 'node_modules/typescript/package.json'), 'utf8')).version;
  assert.match(version, /^5\./, 'TypeScript 5, the last major with moduleResolution node10');

  const typed = tsc(dir);
  assert.equal(typed.status, 0, `tsc (TypeScript ${version}, node10) failed:\n${typed.output}`);
  const loaded = spawnSync(process.execPath, ['dist/main.js'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  assert.equal(loaded.status, 0, loaded.stderr);
  assert.equal(loaded.stdout.trim(), `loaded ${Array(7).fill('function').join(' ')}`);

  // Red check: the same app against the package without typesVersions cannot see a subpath's types.
  const installed = join(dir, 'node_modules/queuebox/package.json');
  const manifest = JSON.parse(readFileSync(installed, 'utf8'));
  assert.ok(manifest.typesVersions, 'the packed package.json has typesVersions');
  delete manifest.typesVersions;
  writeFileSync(installed, JSON.stringify(manifest, null, 2));
  const untyped = tsc(dir);
  assert.notEqual(untyped.status, 0);
  for (const subpath of SUBPATHS) {
    assert.match(untyped.output, new RegExp(`Cannot find module 'queuebox/${subpath}'`), untyped.output);
  }
  assert.doesNotMatch(untyped.output, /Cannot find module 'queuebox'/, 'the main entry needs no typesVersions');
});
