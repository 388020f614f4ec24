#!/usr/bin/env node
// The benchmark of issue 7 (steady state since issue 29): QueueBox, graphile-worker and pg-boss on
// the same workloads against the same PostgreSQL, one after the other. `npm run bench` at the repository root builds
// QueueBox, installs bench/'s dependencies and runs this. See bench/README.md.
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchNode } from './node.mjs';

// Everything runs on the benchmark's node (Node 26 unless BENCH_NODE=current): when this process
// is not it, this script runs again under it and this process only waits. The rest is imported
// after that, since the peers need a newer Node than the one that may have started the run.
const node = await benchNode(fileURLToPath(import.meta.url));
if ('exitCode' in node) process.exit(node.exitCode);

const { killAllWorkers } = await import('./child.mjs');
const { now } = await import('./clock.mjs');
const { SYSTEMS, settings, WORKLOADS } = await import('./config.mjs');
const { Admin, enableStatementStats, redact } = await import('./pg.mjs');
const { resolveFromBench, snapshotDist } = await import('./queuebox-lib.mjs');
const { cpuText, environment, gitDescription, renderReport, verdicts } = await import('./report.mjs');
const { fmt, median } = await import('./stats.mjs');
const { measureFloor, runCell } = await import('./workloads.mjs');
const ALL_SYSTEMS = {
  queuebox: (await import('./systems/queuebox.mjs')).default,
  'graphile-worker': (await import('./systems/graphile-worker.mjs')).default,
  'pg-boss': (await import('./systems/pg-boss.mjs')).default,
};
const benchDir = dirname(fileURLToPath(import.meta.url));
const log = (line) => console.log(line);

/** One copy of @nestjs/* and typeorm, the root's, and a built QueueBox. */
function preflight() {
  // Its real path: the root node_modules may be a symlink (git worktrees share one).
  const rootModules = `${realpathSync(join(dirname(benchDir), 'node_modules'))}${sep}`;
  for (const name of ['@nestjs/common', '@nestjs/core', '@nestjs/typeorm', 'typeorm']) {
    const resolved = resolveFromBench(name);
    if (!resolved.startsWith(rootModules))
      throw new Error(`${name} resolves to ${resolved}, not the root node_modules: remove it from bench/`);
  }
}

async function startServer() {
  if (process.env.BENCH_PG_URL)
    return { url: process.env.BENCH_PG_URL, label: `BENCH_PG_URL=${redact(process.env.BENCH_PG_URL)}`, stop: async () => {} };
  log('BENCH_PG_URL is not set: starting an embedded PostgreSQL (scripts/embedded-postgres.mjs)');
  const { startEmbeddedPostgres } = await import('../scripts/embedded-postgres.mjs');
  const server = await startEmbeddedPostgres({ log: process.env.BENCH_VERBOSE ? log : () => {} });
  return { url: server.url, label: 'embedded-postgres', stop: server.stop };
}

function timestamp(date) {
  return date.toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15);
}

function summary(r) {
  if (r.status !== 'ok') return `${r.status}${r.error ? `: ${r.error}` : ''}`;
  const main = r.latency
    ? `p50 ${fmt.ms(r.latency.p50)} p99 ${fmt.ms(r.latency.p99)} max ${fmt.ms(r.latency.max)} ms`
    : `${fmt.int(r.rate)} msg/s (drain ${fmt.seconds(r.drainMs)}, start-up ${fmt.ms(r.startupMs)} ms)`;
  const alloc = r.allocBytesPerMsg === null ? '' : `, ${fmt.int(r.allocBytesPerMsg)} B/msg allocated`;
  const order = r.ordered ? `, ${r.orderViolations} out of order` : '';
  const cpu = r.workerCpuUsPerMsg === null ? '' : `, CPU ${cpuText(r)} µs/msg (worker + database)`;
  return `${main}${order}${alloc}, ${r.duplicates} dups, RSS ${fmt.mb(r.rssKb)} MB${cpu}, ${fmt.perMsg(r.xactsPerMsg)} xacts/msg`;
}

async function main() {
  const startedAt = Date.now();
  const t0 = now();
  preflight();
  const runId = `qb_bench_${timestamp(new Date(startedAt))}`;
  // The QueueBox under test, frozen now with its git description.
  const removeSnapshot = snapshotDist(runId);
  const git = gitDescription();
  const server = await startServer().catch((error) => {
    removeSnapshot();
    throw error;
  });
  const admin = new Admin(server.url);
  const results = [];
  let statements = null;
  let floor = null;
  let interrupted = false;

  // Ctrl-C: stop after cleaning up (databases of this run, the embedded server). Workers exit by
  // themselves when their parent disconnects.
  const cleanup = async () => {
    await killAllWorkers();
    if (!settings.keepDatabases) {
      for (const name of await admin.databasesLike(runId).catch(() => [])) await admin.dropDatabase(name).catch(() => undefined);
    }
    await admin.close();
    await server.stop();
    removeSnapshot();
  };
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => {
      interrupted = true;
      log(`\n${signal}: cleaning up`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  // A stray rejection from a phase already given up on (a timed-out query, say) must not end the run.
  process.on('unhandledRejection', (error) => log(`  (ignored late error: ${error?.message ?? error})`));

  try {
    await admin.open();
    const env = environment({
      systems: SYSTEMS.map((s) => ALL_SYSTEMS[s]),
      postgres: admin.version.split(' on ')[0].replace('PostgreSQL ', ''),
      postgresSettings: admin.settings,
      git,
      nodeLabel: node.label,
    });
    log(
      `QueueBox benchmark ${runId}: PostgreSQL ${env.postgres} (${server.label}; ${admin.settings}), Node.js ${env.node} (${env.nodeLabel}; every worker process too), ${env.cores} cores`,
    );
    log(
      `Systems: ${SYSTEMS.join(', ')}; workloads: ${WORKLOADS.map((w) => w.id).join(', ')}; ${settings.mode} mode (${fmt.int(settings.orderedMessages)} messages per W1/W4 drain, ${fmt.int(settings.unorderedMessages)} per W2 drain, ${fmt.int(settings.messages)} per W5 drain, W3 ${settings.latencySeconds} s); limit ${fmt.seconds(settings.timeoutMs)} each`,
    );

    // pg_stat_statements is per server: probe it once, in a scratch database.
    const probe = `${runId}_probe`;
    statements = await enableStatementStats(await admin.createDatabase(probe));
    await admin.dropDatabase(probe);
    if (!statements) log('pg_stat_statements is not loaded on this server: stmts/msg will be n/a');

    // The RSS target is QueueBox's peak RSS above what its stack (Nest + TypeORM + pg) takes alone.
    if (SYSTEMS.includes('queuebox')) {
      log('\n[RSS floor] Nest + TypeORM + pg booted as the QueueBox worker boots, without QueueBox');
      floor = await measureFloor({ admin, runId, log });
      if (floor.rssKb) log(`  => ${fmt.mb(floor.rssKb)} MB (median of ${floor.runsKb.map((kb) => fmt.mb(kb)).join(', ')} MB)`);
    }

    for (const workload of WORKLOADS) {
      // The inbox workloads (W5) and the allocation run are QueueBox's alone.
      const systems = workload.queueboxOnly ? SYSTEMS.filter((s) => s === 'queuebox') : SYSTEMS;
      // Each system in each of its configurations for this workload (the peers' order-keeping one
      // and, in W1/W4, the fast but reordering one beside it).
      const entries = systems.flatMap((name) => {
        const system = ALL_SYSTEMS[name];
        const variants = workload.finishedRows && !system.prefill ? [null] : (system.variants?.(workload, settings) ?? [null]);
        return variants.map((variant) => ({ name, system, variant, key: `${name}:${variant?.id ?? ''}` }));
      });
      const repeats = settings.repeat;
      const runs = new Map(entries.map((entry) => [entry.key, []]));
      // With BENCH_REPEAT, the systems take turns (qb, gw, pgb, qb, gw, pgb, ...) so that a slow
      // spell of the machine lands on all of them, not on one system's every run.
      for (let repeat = 1; repeat <= repeats; repeat++) {
        for (const { system, variant, key } of entries) {
          if (interrupted) return;
          const which = repeats > 1 ? ` (run ${repeat} of ${repeats})` : '';
          const cellWorkload = variant ? { ...workload, variant } : workload;
          const label = variant?.label ? `${system.name}, ${variant.label}` : system.name;
          log(`\n[${workload.title} / ${label}]${which} ${system.describe(cellWorkload, settings)}`);
          const result = await runCell({ admin, runId, system, workload, variant, repeat, log });
          runs.get(key).push(result);
          log(`  => ${summary(result)}${result.wallMs ? ` [${fmt.seconds(result.wallMs)} in all]` : ''}`);
        }
      }
      for (const { key } of entries) results.push(median(runs.get(key)));
    }

    // Ctrl-C during the last cell: the clean-up is under way and exits; no report of a cut run.
    if (interrupted) return;
    const runMs = now() - t0;
    const report = renderReport({ startedAt, runMs, env, serverLabel: server.label, statements, settings, results, floor });
    const resultsDir = new URL('./results/', import.meta.url);
    mkdirSync(resultsDir, { recursive: true });
    const base = timestamp(new Date(startedAt));
    const file = new URL(`${base}.md`, resultsDir);
    writeFileSync(file, report);
    writeFileSync(new URL(`${base}.json`, resultsDir), `${JSON.stringify({ startedAt, runMs, env, settings, floor, results }, null, 2)}\n`);
    log(`\n${report}`);
    log(`Written to ${fileURLToPath(file)} (raw numbers beside it in ${base}.json)`);
    // The verdicts once more, last, as plain lines (the report has them after the table).
    log(`\nVerdicts (issue 29, against the best peer of this run):\n${verdicts(results).join('\n')}`);
  } finally {
    if (!interrupted) await cleanup();
  }
  // A peer that fails is a result to read in the table. QueueBox failing a workload, or losing,
  // duplicating or reordering a message (nothing crashes in these workloads), fails the command.
  const bad = results.filter(
    (r) => r.system === 'queuebox' && (r.status === 'failed' || r.missing > 0 || r.duplicates > 0 || r.orderViolations > 0),
  );
  if (bad.length > 0) {
    log(`QueueBox failed or misdelivered in: ${bad.map((r) => r.workload).join(', ')}`);
    process.exitCode = 1;
  }
}

main().catch((error) => {
  console.error(error?.stack ?? error);
  process.exit(1);
});
