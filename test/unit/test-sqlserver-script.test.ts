import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { readCommittedSnapshot } from '../conformance/harness';

// scripts/test-sqlserver.mjs (npm run test:sqlserver) without Docker or SQL Server: its command
// line, the files and commands it runs, the check that every file ran a SQL Server case (on
// fixture files run by node's test runner), and its error when docker is missing. It was never
// run against a server here.

interface Run {
  rcsi: string;
  files: string[];
  report: string;
  command: string[];
  env: Record<string, string>;
}

interface Script {
  DEFAULT_IMAGE: string;
  CONFORMANCE_DIR: string;
  conformanceFiles(dir?: string): string[];
  parseArgs(argv: string[]): { url?: string; image: string; keep: boolean; help: boolean; dryRun: boolean; files: string[] };
  dockerRunArgs(p: { name: string; image: string; password: string }): string[];
  serverUrl(p: { password: string; port: string | number }): string;
  suiteRuns(url: string, files: string[], options?: { reportDir?: string; runner?: string[] }): Run[];
  filesWithoutSqlServerCases(files: string[], report: string): string[];
  checkDocker(run: (...args: unknown[]) => unknown): void;
  newPassword(): string;
  UsageError: new (message: string) => Error;
}

interface Reporter {
  SQL_SERVER_SUITE: string;
  countSqlServerCases(events: AsyncIterable<unknown> | Iterable<unknown>): Promise<Record<string, number>>;
}

const load = async () => (await import(pathToFileURL(join(process.cwd(), 'scripts/test-sqlserver.mjs')).href)) as Script;
const loadReporter = async () => (await import(pathToFileURL(join(process.cwd(), 'scripts/sqlserver-case-reporter.mjs')).href)) as Reporter;

/** The conformance suite as the source tree has it, compiled: what the default suite must be. */
const CONFORMANCE_SOURCES = readdirSync('test/conformance')
  .filter((name) => name.endsWith('.test.ts'))
  .map((name) => join('.build/test/conformance', name.replace(/\.ts$/, '.js')))
  .sort();

const URL_ = 'mssql://sa:s3cret@db.example:1433/master';

/** Runs scripts/test-sqlserver.mjs's main in a child process with `overrides` (a module path's default export), as the command would. */
function runMain(argv: string[], overrides = '{}') {
  const code = `import(${JSON.stringify(pathToFileURL(resolve('scripts/test-sqlserver.mjs')).href)}).then((m) => m.main(${JSON.stringify(argv)}, ${overrides})).then((code) => { process.exitCode = code; });`;
  // Outside this test's runner, as from npm: a node --test started under NODE_TEST_CONTEXT runs no file.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', code], { encoding: 'utf8', env });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe('npm run test:sqlserver', () => {
  it('parses its options; by default, every conformance file there is', async () => {
    const s = await load();
    assert.equal(s.DEFAULT_IMAGE, 'mcr.microsoft.com/mssql/server:2022-latest');
    assert.ok(CONFORMANCE_SOURCES.length >= 8, CONFORMANCE_SOURCES.join(' '));
    assert.deepEqual(s.conformanceFiles(), CONFORMANCE_SOURCES);
    assert.deepEqual(s.parseArgs([]), {
      url: undefined,
      image: s.DEFAULT_IMAGE,
      keep: false,
      help: false,
      dryRun: false,
      files: CONFORMANCE_SOURCES,
    });
    assert.deepEqual(s.parseArgs(['--url', 'mssql://sa:x@h:1433/master', '--keep', 'a.test.js']), {
      url: 'mssql://sa:x@h:1433/master',
      image: s.DEFAULT_IMAGE,
      keep: true,
      help: false,
      dryRun: false,
      files: ['a.test.js'],
    });
    assert.equal(s.parseArgs(['--dry-run']).dryRun, true);
    const empty = mkdtempSync(join(tmpdir(), 'qb-no-conformance-'));
    try {
      assert.throws(
        () => s.conformanceFiles(empty),
        (e: unknown) =>
          e instanceof s.UsageError && /no conformance test files in .*run npm run build:test first/.test((e as Error).message),
      );
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
    assert.equal(s.parseArgs(['--image', 'mssql:custom']).image, 'mssql:custom');
    assert.throws(
      () => s.parseArgs(['--url']),
      (e: unknown) => e instanceof s.UsageError && /--url needs a value/.test((e as Error).message),
    );
    assert.throws(() => s.parseArgs(['--url', 'postgres://x']), /--url must be an mssql:\/\/ URL/);
    assert.throws(() => s.parseArgs(['--bogus']), /unknown option --bogus/);
  });

  it('starts SQL Server 2022 on a local port only, and runs the suite with RCSI OFF, then ON, against it', async () => {
    const s = await load();
    const password = s.newPassword();
    assert.match(password, /^(?=.*[A-Z])(?=.*[a-z])(?=.*\d)(?=.*[^A-Za-z0-9]).{8,}$/, "SQL Server's password policy");
    assert.deepEqual(s.dockerRunArgs({ name: 'qb', image: s.DEFAULT_IMAGE, password }), [
      'run',
      '--detach',
      '--name',
      'qb',
      '--env',
      'ACCEPT_EULA=Y',
      '--env',
      `MSSQL_SA_PASSWORD=${password}`,
      '--publish',
      '127.0.0.1::1433',
      s.DEFAULT_IMAGE,
    ]);
    const url = s.serverUrl({ password: 'p@ss:w/rd', port: '49153' });
    assert.equal(url, 'mssql://sa:p%40ss%3Aw%2Frd@127.0.0.1:49153/master');
    const runs = s.suiteRuns(url, CONFORMANCE_SOURCES, { reportDir: '/reports' });
    const reporter = resolve('scripts/sqlserver-case-reporter.mjs');
    assert.deepEqual(
      runs.map((r) => [r.rcsi, r.command.slice(1), r.env]),
      (['OFF', 'ON'] as const).map((rcsi) => [
        rcsi,
        [
          'scripts/test.mjs',
          '--test-reporter=spec',
          '--test-reporter-destination=stdout',
          `--test-reporter=${reporter}`,
          `--test-reporter-destination=/reports/sqlserver-cases-rcsi-${rcsi.toLowerCase()}.json`,
          ...CONFORMANCE_SOURCES,
        ],
        { QUEUEBOX_MSSQL_URL: url, QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT: rcsi },
      ]),
    );
    // The harness sets what the runs ask for on each test database.
    assert.equal(readCommittedSnapshot('ON'), 'ON');
    assert.equal(readCommittedSnapshot('OFF'), 'OFF');
    assert.equal(readCommittedSnapshot(undefined), undefined);
    assert.throws(() => readCommittedSnapshot('yes'), /must be ON or OFF/);
    assert.match(readFileSync('test/conformance/harness.ts', 'utf8'), /SET READ_COMMITTED_SNAPSHOT \$\{rcsi\} WITH ROLLBACK IMMEDIATE/);
  });

  it('--dry-run lists every conformance file for both runs, with the URL masked, and starts nothing', () => {
    const { status, output } = runMain(['--dry-run', '--url', URL_]);
    assert.equal(status, 0, output);
    assert.doesNotMatch(output, /s3cret/);
    for (const rcsi of ['OFF', 'ON']) {
      const run = new RegExp(
        `READ_COMMITTED_SNAPSHOT ${rcsi}: (\\d+) files\n((?:  \\S+\\.test\\.js\n)+)  env: QUEUEBOX_MSSQL_URL=mssql://sa:\\*\\*\\*@db\\.example:1433/master QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT=${rcsi}\n  command: .*scripts/test\\.mjs .*--test-reporter=\\S+sqlserver-case-reporter\\.mjs`,
      ).exec(output);
      assert.ok(run, output);
      assert.equal(Number(run[1]), CONFORMANCE_SOURCES.length);
      assert.deepEqual(run[2].trim().split(/\s+/), CONFORMANCE_SOURCES);
    }
  });

  describe('given a URL, runs every conformance file and fails when a file runs no SQL Server case', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qb-test-sqlserver-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const fixture = (name: string, body: string) => {
      const file = join(dir, name);
      writeFileSync(file, `const { describe, it } = require('node:test');\n${body}\n`);
      return file;
    };
    // As test/conformance/suite.ts titles them: the PostgreSQL half runs, the SQL Server half only with QUEUEBOX_MSSQL_URL.
    const sqlServerSuite = `describe('dialect conformance: SQL Server: x', process.env.QUEUEBOX_MSSQL_URL ? {} : { skip: 'no URL' }, () => {
  it('case', () => {});
  describe('nested', () => { it('deep case', () => {}); });
});`;
    const withCases = fixture(
      'with-cases.test.js',
      `describe('dialect conformance: PostgreSQL: x', () => { it('case', () => {}); });\n${sqlServerSuite}`,
    );
    const alsoWithCases = fixture('also-with-cases.test.js', sqlServerSuite);
    const postgresOnly = fixture(
      'postgres-only.test.js',
      `describe('dialect conformance: PostgreSQL: x', () => { it('case', () => {}); });`,
    );
    const skipped = fixture(
      'skipped.test.js',
      `describe('dialect conformance: SQL Server: x', { skip: 'not here' }, () => { it('case', () => {}); });\nit('dialect conformance: SQL Server: not in a suite', () => {});`,
    );
    const noServer = `{ waitForServer: async () => {}, runner: [process.execPath, '--test'] }`;

    it('the runner gets every conformance file, in both runs, with the URL and the READ_COMMITTED_SNAPSHOT of each', () => {
      const calls = join(dir, 'calls.jsonl');
      const recorder = fixture(
        'recorder.js',
        `require('node:fs').appendFileSync(${JSON.stringify(calls)}, JSON.stringify({ argv: process.argv.slice(2), url: process.env.QUEUEBOX_MSSQL_URL, rcsi: process.env.QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT }) + '\\n');`,
      );
      const { status, output } = runMain(
        ['--url', URL_],
        `{ waitForServer: async () => {}, runner: [process.execPath, ${JSON.stringify(recorder)}] }`,
      );
      // The recorder runs no test: every file ran no SQL Server case, and both runs fail.
      assert.equal(status, 1, output);
      assert.match(output, /2 of 2 runs failed\./);
      const recorded = readFileSync(calls, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { argv: string[]; url: string; rcsi: string });
      assert.deepEqual(
        recorded.map((r) => [r.url, r.rcsi, r.argv.filter((a) => !a.startsWith('--'))]),
        [
          [URL_, 'OFF', CONFORMANCE_SOURCES],
          [URL_, 'ON', CONFORMANCE_SOURCES],
        ],
      );
      for (const file of CONFORMANCE_SOURCES) assert.ok(output.includes(`  ${file}\n`), `${file} named as running no SQL Server case`);
    });

    it('fails when one file runs no SQL Server case (none written, or all skipped), naming it; passes when each runs one', () => {
      const failing = runMain(['--url', URL_, withCases, postgresOnly, skipped], noServer);
      assert.equal(failing.status, 1, failing.output);
      const named = /These files ran no SQL Server case \(READ_COMMITTED_SNAPSHOT OFF\):\n((?: {2}.*\n)+)/.exec(failing.output);
      assert.deepEqual(named?.[1].trim().split(/\s+/), [postgresOnly, skipped], failing.output);
      assert.match(failing.output, /2 of 2 runs failed\./);
      const passing = runMain(['--url', URL_, withCases, alsoWithCases], noServer);
      assert.equal(passing.status, 0, passing.output);
      assert.match(passing.output, /Both runs passed\./);
      assert.doesNotMatch(passing.output, /ran no SQL Server case/);
    });

    it('a file that fails to load, or a failing SQL Server case, fails the run too', () => {
      const missing = join(dir, 'missing.test.js');
      const broken = runMain(['--url', URL_, withCases, missing], noServer);
      assert.equal(broken.status, 1, broken.output);
      assert.match(
        broken.output,
        new RegExp(`ran no SQL Server case \\(READ_COMMITTED_SNAPSHOT OFF\\):\n  ${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\n`),
      );
      const failingCase = fixture(
        'failing.test.js',
        `describe('dialect conformance: SQL Server: x', () => { it('case', () => { throw new Error('red'); }); });`,
      );
      const red = runMain(['--url', URL_, failingCase], noServer);
      assert.equal(red.status, 1, red.output);
      assert.doesNotMatch(red.output, /ran no SQL Server case/, 'it ran (and failed)');
    });

    it('the reporter counts SQL Server cases per file, nested ones included, never skipped ones; the harness titles its suites so', async () => {
      const { countSqlServerCases, SQL_SERVER_SUITE } = await loadReporter();
      const event = (type: string, file: string, nesting: number, name: string, extra: Record<string, unknown> = {}) => ({
        type,
        data: { file, nesting, name, details: { type: 'test' }, ...extra },
      });
      const counts = await countSqlServerCases([
        event('test:start', 'a', 0, `${SQL_SERVER_SUITE}: claims`),
        event('test:start', 'b', 0, 'dialect conformance: PostgreSQL: claims'),
        event('test:start', 'a', 1, 'claims one'),
        event('test:start', 'b', 1, 'claims one'),
        event('test:pass', 'b', 1, 'claims one'),
        event('test:pass', 'a', 1, 'claims one'),
        event('test:start', 'a', 1, 'skipped'),
        event('test:pass', 'a', 1, 'skipped', { skip: 'reason' }),
        event('test:start', 'a', 1, 'failing'),
        event('test:fail', 'a', 1, 'failing'),
        event('test:pass', 'a', 0, `${SQL_SERVER_SUITE}: claims`, { details: { type: 'suite' } }),
        event('test:start', 'a', 0, 'dialect conformance: PostgreSQL: claims'),
        event('test:start', 'a', 1, 'after the suite'),
        event('test:pass', 'a', 1, 'after the suite'),
      ]);
      assert.deepEqual(counts, { a: 2, b: 0 });
      const suite = readFileSync('test/conformance/suite.ts', 'utf8');
      assert.match(suite, /describe\(`dialect conformance: \$\{harness\.name\}: \$\{noun\}`/);
      assert.match(readFileSync('test/conformance/harness.ts', 'utf8'), /name: 'SQL Server',/);
      assert.equal(SQL_SERVER_SUITE, 'dialect conformance: SQL Server');
    });
  });

  it('says plainly when docker is missing or its daemon is down', async () => {
    const s = await load();
    const missing = () => ({ error: Object.assign(new Error('spawnSync docker ENOENT'), { code: 'ENOENT' }), status: null });
    assert.throws(
      () => s.checkDocker(missing),
      (e: unknown) => e instanceof s.UsageError && /docker was not found on PATH.*--url/.test((e as Error).message),
    );
    const down = () => ({ status: 1, stderr: 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n' });
    assert.throws(() => s.checkDocker(down), /daemon did not answer \(Cannot connect to the Docker daemon/);
    assert.doesNotThrow(() => s.checkDocker(() => ({ status: 0, stdout: '27.0.1\n' })));
  });

  it('package.json runs it, and the hosted-CI workflow runs it against a SQL Server 2022 service container', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
    assert.equal(pkg.scripts['test:sqlserver'], 'npm run build:test && node scripts/test-sqlserver.mjs');
    const workflow = readFileSync('.github/workflows/sqlserver.yml', 'utf8');
    assert.match(workflow, /image: mcr\.microsoft\.com\/mssql\/server:2022-latest/);
    assert.match(workflow, /npm run test:sqlserver -- --url "mssql:\/\/sa:\$\{MSSQL_SA_PASSWORD\}@localhost:1433\/master"/);
  });
});
