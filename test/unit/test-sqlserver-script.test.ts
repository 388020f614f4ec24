import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { readCommittedSnapshot } from '../conformance/harness';

// scripts/test-sqlserver.mjs (npm run test:sqlserver) without Docker or SQL Server: its command
// line, the docker and test commands it would run, and its error when docker is missing. It was
// never run against a server here.

interface Script {
  DEFAULT_IMAGE: string;
  DEFAULT_SUITE: string[];
  parseArgs(argv: string[]): { url?: string; image: string; keep: boolean; help: boolean; files: string[] };
  dockerRunArgs(p: { name: string; image: string; password: string }): string[];
  serverUrl(p: { password: string; port: string | number }): string;
  suiteRuns(url: string, files: string[]): { rcsi: string; command: string[]; env: Record<string, string> }[];
  checkDocker(run: (...args: unknown[]) => unknown): void;
  newPassword(): string;
  UsageError: new (message: string) => Error;
}

const load = async () => (await import(pathToFileURL(join(process.cwd(), 'scripts/test-sqlserver.mjs')).href)) as Script;

describe('npm run test:sqlserver (issue 14, item 9)', () => {
  it('parses its options; the conformance suite by default', async () => {
    const s = await load();
    assert.equal(s.DEFAULT_IMAGE, 'mcr.microsoft.com/mssql/server:2022-latest');
    assert.deepEqual(s.parseArgs([]), { url: undefined, image: s.DEFAULT_IMAGE, keep: false, help: false, files: s.DEFAULT_SUITE });
    assert.deepEqual(s.parseArgs(['--url', 'mssql://sa:x@h:1433/master', '--keep', 'a.test.js']), {
      url: 'mssql://sa:x@h:1433/master',
      image: s.DEFAULT_IMAGE,
      keep: true,
      help: false,
      files: ['a.test.js'],
    });
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
    const runs = s.suiteRuns(url, s.DEFAULT_SUITE);
    assert.deepEqual(
      runs.map((r) => [r.rcsi, r.command.slice(1), r.env]),
      [
        ['OFF', ['scripts/test.mjs', ...s.DEFAULT_SUITE], { QUEUEBOX_MSSQL_URL: url, QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT: 'OFF' }],
        ['ON', ['scripts/test.mjs', ...s.DEFAULT_SUITE], { QUEUEBOX_MSSQL_URL: url, QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT: 'ON' }],
      ],
    );
    // The harness sets what the runs ask for on each test database.
    assert.equal(readCommittedSnapshot('ON'), 'ON');
    assert.equal(readCommittedSnapshot('OFF'), 'OFF');
    assert.equal(readCommittedSnapshot(undefined), undefined);
    assert.throws(() => readCommittedSnapshot('yes'), /must be ON or OFF/);
    assert.match(readFileSync('test/conformance/harness.ts', 'utf8'), /SET READ_COMMITTED_SNAPSHOT \$\{rcsi\} WITH ROLLBACK IMMEDIATE/);
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
