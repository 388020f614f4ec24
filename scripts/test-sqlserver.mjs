#!/usr/bin/env node
// npm run test:sqlserver: runs the conformance suite against SQL Server 2022, twice: with
// READ_COMMITTED_SNAPSHOT OFF (SQL Server's default) and ON (Azure SQL's default).
//
// Without --url it starts mcr.microsoft.com/mssql/server:2022-latest in Docker on a free local
// port, waits until it accepts a login, runs the suite and removes the container (--keep leaves it).
// With --url mssql://sa:password@host:1433/master it uses that server instead (hosted CI's service
// container). Each run creates a database of its own and drops it (test/conformance/harness.ts).
// A run fails when any file in it ran no SQL Server case (a file whose SQL Server suites were
// skipped, or that has none): sqlserver-case-reporter.mjs counts them as the test runner reports.
// --dry-run prints the runs it would start, and starts nothing.
//
// Never run against a server where it was written (no Docker, no SQL Server there): see docs/sqlserver.md.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const DEFAULT_IMAGE = 'mcr.microsoft.com/mssql/server:2022-latest';
/** Where `npm run build:test` puts the compiled conformance suite, every file of which is the default suite. */
export const CONFORMANCE_DIR = '.build/test/conformance';
const CASE_REPORTER = fileURLToPath(new URL('./sqlserver-case-reporter.mjs', import.meta.url));

/** The compiled conformance files as they are on disk (sorted): the suite split by noun, whatever the nouns are today. */
export function conformanceFiles(dir = CONFORMANCE_DIR) {
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    names = [];
  }
  const files = names.filter((name) => name.endsWith('.test.js')).sort();
  if (files.length === 0) throw new UsageError(`no conformance test files in ${dir}: run npm run build:test first.`);
  return files.map((name) => join(dir, name));
}
/** How long SQL Server may take to accept a login after its container starts (a first pull excluded). */
export const READY_TIMEOUT_MS = 180_000;

export const USAGE = `Usage: npm run test:sqlserver -- [--url mssql://user:password@host:1433/master] [--image IMAGE] [--keep] [--dry-run] [test files...]

Runs the conformance suite against SQL Server with READ_COMMITTED_SNAPSHOT OFF, then ON. A run
fails when a file in it ran no SQL Server case.
  --url URL      use this server instead of starting one in Docker
  --image IMAGE  the Docker image (default ${DEFAULT_IMAGE})
  --keep         leave the container running afterwards (its name and URL are printed)
  --dry-run      print the runs (files, environment, command) and start nothing
  test files     compiled test files to run instead of every ${CONFORMANCE_DIR}/*.test.js`;

/** The command line: options and the test files to run (the conformance suite unless given). */
export function parseArgs(argv, suite = conformanceFiles) {
  const options = { url: undefined, image: DEFAULT_IMAGE, keep: false, help: false, dryRun: false, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined || next.startsWith('--')) throw new UsageError(`${arg} needs a value`);
      return next;
    };
    if (arg === '--url') options.url = value();
    else if (arg === '--image') options.image = value();
    else if (arg === '--keep') options.keep = true;
    else if (arg === '--dry-run') options.dryRun = true;
    else if (arg === '--help' || arg === '-h') options.help = true;
    else if (arg.startsWith('-')) throw new UsageError(`unknown option ${arg}`);
    else options.files.push(arg);
  }
  if (options.url !== undefined && !/^(mssql|sqlserver):\/\//.test(options.url)) throw new UsageError('--url must be an mssql:// URL');
  if (options.files.length === 0 && !options.help) options.files = suite();
  return options;
}

export class UsageError extends Error {}

/** A password SQL Server's policy accepts (upper, lower, digit, symbol; 8+ characters), URL-safe. */
export function newPassword() {
  return `Qb1-${randomBytes(12).toString('hex')}X`;
}

/** `docker run` arguments: the server on a free port of 127.0.0.1 only. */
export function dockerRunArgs({ name, image, password }) {
  return [
    'run',
    '--detach',
    '--name',
    name,
    '--env',
    'ACCEPT_EULA=Y',
    '--env',
    `MSSQL_SA_PASSWORD=${password}`,
    '--publish',
    '127.0.0.1::1433',
    image,
  ];
}

export function serverUrl({ password, host = '127.0.0.1', port }) {
  return `mssql://sa:${encodeURIComponent(password)}@${host}:${port}/master`;
}

/**
 * The two runs: READ_COMMITTED_SNAPSHOT OFF, then ON, set on each test database by the harness.
 * Each runs `runner` (scripts/test.mjs: the files with node's test runner, PostgreSQL provided)
 * with the usual output and the SQL Server cases counted per file into `report`.
 */
export function suiteRuns(url, files, { reportDir = tmpdir(), runner = [process.execPath, 'scripts/test.mjs'] } = {}) {
  return ['OFF', 'ON'].map((rcsi) => {
    const report = join(reportDir, `sqlserver-cases-rcsi-${rcsi.toLowerCase()}.json`);
    return {
      rcsi,
      files,
      report,
      command: [
        ...runner,
        '--test-reporter=spec',
        '--test-reporter-destination=stdout',
        `--test-reporter=${CASE_REPORTER}`,
        `--test-reporter-destination=${report}`,
        ...files,
      ],
      env: { QUEUEBOX_MSSQL_URL: url, QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT: rcsi },
    };
  });
}

/**
 * The files of a run that ran no SQL Server case, from its report (see sqlserver-case-reporter.mjs):
 * a file missing from the report (never loaded) counts as none.
 */
export function filesWithoutSqlServerCases(files, report) {
  let counts = {};
  try {
    counts = JSON.parse(readFileSync(report, 'utf8'));
  } catch {}
  return files.filter((file) => !(counts[resolve(file)] > 0));
}

/** A URL with its password masked, for what the script prints. */
export function masked(url) {
  return url.replace(/^([a-z]+:\/\/[^:/@]*:)[^@]*@/i, '$1***@');
}

/** Throws a clear error when the docker command is missing or its daemon does not answer. */
export function checkDocker(run = spawnSync) {
  const result = run('docker', ['version', '--format', '{{.Server.Version}}'], { encoding: 'utf8' });
  if (result.error?.code === 'ENOENT') {
    throw new UsageError(
      'docker was not found on PATH. npm run test:sqlserver starts SQL Server 2022 in Docker: install Docker, ' +
        'or give a running server with --url mssql://sa:password@host:1433/master.',
    );
  }
  if (result.error || result.status !== 0) {
    const detail = (result.stderr || result.error?.message || '').trim().split('\n')[0];
    throw new UsageError(`docker is installed but its daemon did not answer (${detail}). Start Docker, or use --url.`);
  }
}

function docker(args) {
  const result = spawnSync('docker', args, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`docker ${args[0]} failed: ${(result.stderr || '').trim()}`);
  return result.stdout.trim();
}

/** Waits until the server accepts a login (mssql, as the tests connect). */
async function waitForServer(url, timeoutMs = READY_TIMEOUT_MS) {
  const { default: mssql } = await import('mssql');
  const parsed = new URL(url);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pool = new mssql.ConnectionPool({
      server: parsed.hostname,
      port: Number(parsed.port || 1433),
      user: decodeURIComponent(parsed.username),
      password: decodeURIComponent(parsed.password),
      database: 'master',
      options: { encrypt: true, trustServerCertificate: true },
      connectionTimeout: 5_000,
    });
    try {
      await pool.connect();
      const { recordset } = await pool.request().query('SELECT @@VERSION AS [version]');
      console.log(`SQL Server is up: ${String(recordset[0].version).split('\n')[0]}`);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`SQL Server did not accept a login within ${timeoutMs / 1000} s: ${error.message}`);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    } finally {
      await pool.close().catch(() => undefined);
    }
  }
}

/** Runs one of `suiteRuns`; it passes when its tests pass and every file ran a SQL Server case. */
async function runSuite(run) {
  console.log(`\n=== conformance suite, READ_COMMITTED_SNAPSHOT ${run.rcsi} (${run.files.length} files) ===`);
  rmSync(run.report, { force: true });
  const status = await new Promise((done) => {
    const child = spawn(run.command[0], run.command.slice(1), { stdio: 'inherit', env: { ...process.env, ...run.env } });
    child.on('exit', (code, signal) => done(code ?? (signal ? 1 : 0)));
  });
  const without = filesWithoutSqlServerCases(run.files, run.report);
  if (without.length > 0) {
    console.log(`\nThese files ran no SQL Server case (READ_COMMITTED_SNAPSHOT ${run.rcsi}):\n${without.map((f) => `  ${f}`).join('\n')}`);
  }
  return status === 0 && without.length === 0 ? 0 : 1;
}

function printDryRun(runs) {
  for (const run of runs) {
    console.log(`READ_COMMITTED_SNAPSHOT ${run.rcsi}: ${run.files.length} files`);
    for (const file of run.files) console.log(`  ${file}`);
    const env = Object.entries(run.env).map(([name, value]) => `${name}=${name === 'QUEUEBOX_MSSQL_URL' ? masked(value) : value}`);
    console.log(`  env: ${env.join(' ')}`);
    console.log(`  command: ${run.command.join(' ')}`);
  }
}

/**
 * The command. `overrides` replaces what a unit test cannot provide without a server: the wait
 * for it, and the runner (scripts/test.mjs also needs PostgreSQL).
 */
export async function main(argv, overrides = {}) {
  let options;
  try {
    options = parseArgs(argv);
    if (options.help) {
      console.log(USAGE);
      return 0;
    }
    if (options.dryRun) {
      printDryRun(suiteRuns(options.url ?? 'mssql://sa:<password>@127.0.0.1:<port>/master', options.files));
      return 0;
    }
    if (!options.url) checkDocker();
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`test:sqlserver: ${error.message}`);
    return 2;
  }
  let container;
  let url = options.url;
  try {
    if (!url) {
      const password = newPassword();
      container = `queuebox-mssql-${randomBytes(4).toString('hex')}`;
      console.log(`Starting ${options.image} as ${container} ...`);
      docker(dockerRunArgs({ name: container, image: options.image, password }));
      const port = docker(['port', container, '1433/tcp']).split('\n')[0].split(':').pop();
      url = serverUrl({ password, port });
    }
    await (overrides.waitForServer ?? waitForServer)(url);
    const reportDir = mkdtempSync(join(tmpdir(), 'queuebox-sqlserver-'));
    try {
      let failed = 0;
      for (const run of suiteRuns(url, options.files, { reportDir, runner: overrides.runner })) if ((await runSuite(run)) !== 0) failed++;
      console.log(failed === 0 ? '\nBoth runs passed.' : `\n${failed} of 2 runs failed.`);
      return failed === 0 ? 0 : 1;
    } finally {
      rmSync(reportDir, { recursive: true, force: true });
    }
  } finally {
    if (container && options.keep) console.log(`Kept container ${container}: ${url}`);
    else if (container) spawnSync('docker', ['rm', '--force', '--volumes', container], { stdio: 'ignore' });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv.slice(2));
}
