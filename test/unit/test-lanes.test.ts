// The two lanes of scripts/test.mjs: `npm test` runs every test (CI runs it); `npm run test:fast`
// leaves out the slow ones (scripts/test-files.mjs's SLOW) for development. Checked on a fixture
// tree of compiled files, and against the source tree so that a renamed slow file cannot slip into
// the fast lane unnoticed.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

interface TestFiles {
  BUILD_DIR: string;
  SLOW: string[];
  PARTITIONED: string[];
  findTests(dir?: string): string[];
  laneFiles(options?: { fast?: boolean; dir?: string }): string[];
}

const load = async () => (await import(pathToFileURL(join(process.cwd(), 'scripts/test-files.mjs')).href)) as TestFiles;

describe('test lanes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'qb-test-lanes-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  for (const file of [
    'chaos/outbox.test.js',
    'chaos/nested/deep.test.js',
    'integration/query-plans.test.js',
    'integration/query-plans-of-something-else.test.js',
    'integration/schema.test.js',
    'e2e/dashboard-browser.test.js',
    'e2e/cli.test.js',
    'unit/sqlserver/claims.test.js',
    'support/database.js',
    'fixtures/worker.js',
  ]) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), '');
  }

  it('npm test runs every compiled test file; the fast lane all but chaos/, the query plans and the browser test', async () => {
    const { laneFiles } = await load();
    const under = (files: string[]) => files.map((file) => file.slice(dir.length + 1));
    assert.deepEqual(under(laneFiles({ dir })), [
      'chaos/nested/deep.test.js',
      'chaos/outbox.test.js',
      'e2e/cli.test.js',
      'e2e/dashboard-browser.test.js',
      'integration/query-plans-of-something-else.test.js',
      'integration/query-plans.test.js',
      'integration/schema.test.js',
      'unit/sqlserver/claims.test.js',
    ]);
    assert.deepEqual(under(laneFiles({ dir, fast: true })), [
      'e2e/cli.test.js',
      'integration/query-plans-of-something-else.test.js',
      'integration/schema.test.js',
      'unit/sqlserver/claims.test.js',
    ]);
  });

  it('every test the fast lane leaves out exists in test/ (a renamed one would run in the fast lane)', async () => {
    const { SLOW, BUILD_DIR } = await load();
    assert.equal(BUILD_DIR, '.build/test');
    for (const slow of SLOW) {
      const source = join('test', slow.endsWith('/') ? slow : slow.replace(/\.js$/, '.ts'));
      assert.ok(existsSync(source), `${slow}: test/ has no ${source}`);
      assert.equal(statSync(source).isDirectory(), slow.endsWith('/'), source);
    }
  });

  it('every test of the partitioned lane exists in test/', async () => {
    const { PARTITIONED } = await load();
    assert.ok(PARTITIONED.length > 0);
    for (const file of PARTITIONED) assert.ok(existsSync(join('test', file.replace(/\.js$/, '.ts'))), `${file}: test/ has no such test`);
  });

  it('package.json: npm test runs every test and is what CI runs; npm run test:fast is the fast lane', () => {
    const { scripts } = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
    assert.equal(scripts.test, 'npm run build:test && node scripts/test.mjs');
    assert.equal(scripts['test:fast'], 'npm run build:test && node scripts/test.mjs --fast');
    assert.match(readFileSync('.ci/run', 'utf8'), /^timeout \d+ npm test$/m);
    assert.doesNotMatch(readFileSync('.ci/run', 'utf8'), /--fast|test:fast/);
  });
});
