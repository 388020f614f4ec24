// What `npm pack` puts in the package: the build, the plain SQL, the docs, the licence; no tests,
// no sources of this repository's tooling. Every relative link of the README (which npm ships)
// must point to a file inside the package, so a user reading node_modules/queuebox finds it.
//   npm run test:package
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');

test('npm pack ships dist/, sql/, docs/, LICENSE, README and CHANGELOG, and no test files', () => {
  assert.ok(existsSync(join(repo, 'dist/index.js')), 'dist/ is missing: run `npm run build` first');
  const [pack] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json'], { cwd: repo, encoding: 'utf8', timeout: 120_000 }));
  const files = pack.files.map((file) => file.path);
  for (const required of [
    'LICENSE',
    'README.md',
    'CHANGELOG.md',
    'package.json',
    'dist/index.js',
    'dist/cli/main.js',
    'dist/cli/verify/verify.worker.js',
    'docs/verify.md',
    'sql/postgres/001_queuebox.up.sql',
    'docs/testing.md',
    'dist/dashboard/index.js',
    'dist/dashboard/index.d.ts',
    'dist/dashboard/ui/main.js',
    'dist/dashboard/ui/views.js',
    'dist/dashboard/ui/dashboard.css',
    'docs/dashboard.md',
  ]) {
    assert.ok(files.includes(required), `${required} is not in the package`);
  }
  const stray = files.filter(
    (path) => /(^|\/)(test|\.build|sample-app|bench|examples|scripts|\.ci)\//.test(path) || /\.test\.[cm]?[jt]s$/.test(path),
  );
  assert.deepEqual(stray, []);

  assert.deepEqual(
    files.filter((path) => path.startsWith('dist/dashboard/ui/') && !/\.(js|css|svg)$/.test(path)),
    [],
    'the page ships built files only (no TypeScript sources, no tsconfig)',
  );

  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const links = [...readme.matchAll(/\]\(((?!https?:|#)[^)#\s]+)(#[^)]*)?\)/g)].map((match) => match[1]);
  assert.ok(links.length > 0);
  assert.deepEqual(
    links.filter((link) => !files.includes(link)),
    [],
    'README links to files the package does not ship',
  );
});

test('queuebox/dashboard resolves to the built dashboard, with its types', () => {
  const require = createRequire(join(repo, 'package.json'));
  assert.equal(require.resolve('queuebox/dashboard'), join(repo, 'dist/dashboard/index.js'));
  const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8'));
  assert.ok(existsSync(join(repo, pkg.exports['./dashboard'].types)));
  assert.equal(typeof require('queuebox/dashboard').QueueBoxDashboardModule, 'function');
});
