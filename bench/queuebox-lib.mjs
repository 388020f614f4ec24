// Loads QueueBox from the repository's build (`npm run build` writes dist/) and the Nest/TypeORM
// packages from the root node_modules. bench/package.json lists none of them on purpose: a second
// copy of @nestjs/* or typeorm would give the app two module registries and two DataSource classes.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const DIST_ENV = 'BENCH_QUEUEBOX_DIST';

/**
 * Copies dist/ to .tmp/bench-dist-<runId>/ (git-ignored, inside the repository so that it resolves
 * @nestjs/* and typeorm from the root node_modules exactly as dist/ does) and points the parent and
 * every worker at the copy. A rebuild of dist/ during the run (`npm run build` removes it first)
 * then changes nothing: every workload runs the same QueueBox. Returns a function that removes it.
 */
export function snapshotDist(runId) {
  const source = join(repoRoot, 'dist');
  if (!existsSync(join(source, 'index.js'))) throw new Error('dist/index.js is missing: run `npm run build` at the repository root first');
  const copy = join(repoRoot, '.tmp', `bench-dist-${runId}`);
  cpSync(source, copy, { recursive: true });
  process.env[DIST_ENV] = copy;
  return () => rmSync(copy, { recursive: true, force: true });
}

/** A module of QueueBox's build by its path inside dist/ (`dialects/postgres/lease.sql.js`): for benches that measure one statement. */
export function requireFromDist(path) {
  return require(join(process.env[DIST_ENV] ?? join(repoRoot, 'dist'), path));
}

export function loadQueueBox() {
  const distEntry = join(process.env[DIST_ENV] ?? join(repoRoot, 'dist'), 'index.js');
  if (!existsSync(distEntry)) throw new Error(`${distEntry} is missing: run \`npm run build\` at the repository root first`);
  require('reflect-metadata');
  return {
    queuebox: require(distEntry),
    nestCommon: require('@nestjs/common'),
    nestCore: require('@nestjs/core'),
    nestTypeorm: require('@nestjs/typeorm'),
    typeorm: require('typeorm'),
  };
}

/**
 * QueueBox's schema on `url`, by the migrations an application runs (README: all of them); with
 * `BENCH_QB_LAYOUT=partitioned`, then the partitioned layout's migration (issue 37, not exported
 * yet: read from dist/).
 */
export async function migrateQueueBox(url) {
  const { queuebox, typeorm } = loadQueueBox();
  const layout =
    process.env.BENCH_QB_LAYOUT === 'partitioned'
      ? [requireFromDist('migrations/queuebox.migration.js').createQueueBoxPartitionedLayoutMigration()]
      : [];
  const migrations = [...queuebox.QueueBoxMigrations, ...layout];
  const dataSource = new typeorm.DataSource({ type: 'postgres', url, migrations, logging: false });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/**
 * A Nest application context with TypeORM on `url` and QueueBoxModule with `options`, like an
 * application that uses QueueBox, plus the application's own `providers` (W5's @PullHandler class).
 * Logs only warnings and errors.
 */
export async function createQueueBoxApp({ url, poolSize, options, providers = [] }) {
  const { queuebox, nestCommon, nestCore, nestTypeorm } = loadQueueBox();
  class BenchAppModule {}
  nestCommon.Module({
    imports: [
      nestTypeorm.TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: poolSize }, logging: false }),
      queuebox.QueueBoxModule.forRoot(options),
    ],
    providers,
  })(BenchAppModule);
  const app = await nestCore.NestFactory.createApplicationContext(BenchAppModule, { logger: ['error', 'warn'], abortOnError: false });
  return { app, queuebox, nestTypeorm };
}

/**
 * The stack QueueBox runs on, without QueueBox: a Nest application context with TypeORM on `url`
 * (its pool of `poolSize`, connected at boot), nothing else. QueueBox is not even loaded. Its peak
 * RSS is the floor the RSS target is measured from (worker-floor.mjs).
 */
export async function createStackApp({ url, poolSize }) {
  require('reflect-metadata');
  const nestCommon = require('@nestjs/common');
  const nestCore = require('@nestjs/core');
  const nestTypeorm = require('@nestjs/typeorm');
  class FloorAppModule {}
  nestCommon.Module({
    imports: [nestTypeorm.TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: poolSize }, logging: false })],
  })(FloorAppModule);
  const app = await nestCore.NestFactory.createApplicationContext(FloorAppModule, { logger: ['error', 'warn'], abortOnError: false });
  return { app, dataSource: app.get(require('typeorm').DataSource) };
}

/** Where a package resolves from bench/, to check that only the root copy is used. */
export function resolveFromBench(name) {
  return require.resolve(name);
}

/**
 * Messages per pull handler call: BENCH_PULL_BATCH (1 = one message per call), default 100 when
 * the QueueBox under test accepts `batch` (older builds refuse it as an unknown option).
 */
export function pullBatchSize() {
  const raw = process.env.BENCH_PULL_BATCH;
  if (raw !== undefined && raw !== '') {
    const value = Number(raw);
    if (!Number.isInteger(value) || value < 1) throw new Error(`BENCH_PULL_BATCH must be a positive integer, got ${JSON.stringify(raw)}`);
    return value;
  }
  return offersPullBatch(loadQueueBox().queuebox) ? 100 : 1;
}

/** Whether the QueueBox build under test has the batch form (older builds refuse `batch` as an unknown option at boot). */
function offersPullBatch(queuebox) {
  return typeof queuebox.PullWorker?.prototype?.handleBatch === 'function';
}
