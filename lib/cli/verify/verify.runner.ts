import { randomBytes } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import { createQueueBoxAdmin } from '../../admin/create-queuebox-admin';
import type { QueueBoxAdmin } from '../../admin/queuebox.admin';
import { packageVersion } from '../../common/package-version';
import { sleepUntil } from '../../common/wait';
import { QueueBoxError } from '../../errors/queuebox.errors';
import { countByPath, outOfOrderCommits, runChecks } from './verify.checks';
import { VerifyDatabase } from './verify.database';
import { SHUTDOWN_GRACE_MS, VerifyFaults } from './verify.faults';
import { verifyMessages } from './verify.messages';
import { faultsOf, PATH_NAMES, type ResolvedVerifyOptions, resolveVerifyOptions, VERIFY_PATHS, type VerifyOptions } from './verify.options';
import { MessagePlan, producerApp, VerifyProducer } from './verify.producer';
import type { VerifyWorkerConfig } from './verify.protocol';
import type { Leftover, RowState } from './verify.records';
import { settingsLines, type VerifyReport } from './verify.report';
import { RecordingDestination, VerifyWorkers } from './verify.workers';

/** `runVerify` was interrupted (its `signal` aborted): the workers were stopped, and the tables dropped unless `tablesDropped` says otherwise. */
export class VerifyInterruptedError extends QueueBoxError {
  /** Whether the run's tables were dropped (set once its clean-up ended). */
  tablesDropped = false;

  constructor() {
    super('QUEUEBOX_VERIFY_INTERRUPTED', verifyMessages.interruptedError());
  }
}

/** Verify's tables exist and hold rows (another run, or one that was killed): nothing was changed. */
export class VerifyTablesInUseError extends QueueBoxError {
  constructor(message: string) {
    super('QUEUEBOX_VERIFY_TABLES_IN_USE', message);
  }
}

/** The run's own connections: the producers' transactions, the admin's reads and the faults' statements. */
const RUN_POOL_EXTRA = 4;

/** What a recovery may take beyond its lease or instance sweep and the messages' own slowness: polls, a busy machine. */
const RECOVERY_SLACK_MS = 5000;

/**
 * How soon after a kill -9 the keys the killed worker held must move again: the sooner of its
 * instance declared dead (deadAfterMs and two heartbeats; the sweep reclaims at once) and its
 * lease expired (then a reclaim interval, a fifth of the lease), then the held message's own way to
 * the destination, twice the slowest step (a slow pull handler may wait for a slot behind another),
 * and RECOVERY_SLACK_MS.
 */
export function recoveryBoundMs(
  options: Pick<ResolvedVerifyOptions, 'deadAfterMs' | 'heartbeatMs' | 'leaseMs' | 'handlerMs' | 'slowMs'>,
): number {
  const expiry = Math.min(options.deadAfterMs + 2 * options.heartbeatMs, options.leaseMs + options.leaseMs / 5);
  return expiry + 2 * Math.max(options.handlerMs, 2 * options.slowMs) + RECOVERY_SLACK_MS;
}

/** How long the run waits after production for every row to finish: `drainSeconds`, else enough for a run that works. */
export function drainBoundMs(options: Pick<ResolvedVerifyOptions, 'seconds' | 'leaseMs' | 'deadAfterMs' | 'drainSeconds'>): number {
  if (options.drainSeconds !== undefined) return options.drainSeconds * 1000;
  return 20_000 + 4 * options.leaseMs + options.deadAfterMs + (options.seconds * 1000) / 2;
}

/**
 * Runs QueueBox on `options.url` as an application would, under faults, and checks its delivery
 * guarantees (see docs/verify.md): worker processes of this package on tables of the run's own,
 * producers that commit rows of one key out of order, poison messages, a recording destination;
 * then kill -9, pauses past the lease, ended database sessions and graceful shutdowns; then the
 * checks. Resolves with the report (its `verdict` is FAIL when a check failed); rejects when the
 * run could not happen (no connection, tables in use: `VerifyTablesInUseError`) or was
 * interrupted (`VerifyInterruptedError`). Whatever happens, its workers are stopped and its
 * tables dropped before it settles.
 *
 * @example
 * const report = await runVerify({ url: process.env.DATABASE_URL!, seconds: 20 });
 * assert.equal(report.verdict, 'PASS', JSON.stringify(report.checks, null, 2));
 */
export async function runVerify(options: VerifyOptions): Promise<VerifyReport> {
  const resolved = resolveVerifyOptions(options);
  const log = options.log ?? (() => undefined);
  const signal = options.signal ?? new AbortController().signal;
  const startedAt = Date.now();
  const database = await VerifyDatabase.open(resolved, resolved.lanes + RUN_POOL_EXTRA);
  let created = false;
  let report: VerifyReport | undefined;
  let interrupted: VerifyInterruptedError | undefined;
  let producer: INestApplicationContext | undefined;
  let workers: VerifyWorkers | undefined;
  const halt = () => workers?.halt();
  signal.addEventListener('abort', halt, { once: true });
  try {
    signal.throwIfAborted();
    const base = {
      database: {
        type: database.target.type,
        displayName: database.displayName,
        url: database.target.masked,
        settings: await database.settings(),
      },
      settings: settingsOf(resolved, database),
    };
    log(verifyMessages.starting(packageVersion(), database.displayName, database.target.masked));
    if (resolved.defect) log(verifyMessages.defectBanner(resolved.defect));
    for (const line of settingsLines(base)) log(line);

    const rows = await database.rowsPresent();
    if (rows > 0 && !resolved.force) throw new VerifyTablesInUseError(verifyMessages.tablesHoldRows(database.tables.label, rows));
    created = true;
    await database.drop();
    await database.create();
    signal.throwIfAborted();
    const admin = await createQueueBoxAdmin(database.dataSource, { tables: database.tables.queuebox });
    const services = await producerApp(database.dataSource, database.tables);
    producer = services.app;

    const runId = randomBytes(4).toString('hex');
    const destination = new RecordingDestination();
    let restartFailure: unknown;
    workers = new VerifyWorkers((name) => workerConfig(resolved, database, `queuebox-verify-${runId}-${name}`, name), destination);
    const fault = new VerifyFaults(resolved, workers, database, admin, log);
    // A worker that exits by itself is a fault of its own (it explains duplicates as a kill does), and is replaced.
    workers.onCrash = (worker, how) => {
      fault.crashed(worker, how, Date.now());
      workers?.start().catch((error: unknown) => {
        restartFailure ??= error;
      });
    };
    const workersFrom = Date.now();
    await Promise.all(Array.from({ length: resolved.workers }, () => (workers as VerifyWorkers).start()));
    log(verifyMessages.workersStarted(resolved.workers, Date.now() - workersFrom));

    const plan = new MessagePlan(resolved);
    const producing = new VerifyProducer(database.dataSource, services.outbox, services.inbox, plan);
    log(verifyMessages.producing(resolved.seconds, resolved.rate, resolved.scenarios.join(', ') || 'none'));
    const from = Date.now();
    const until = from + resolved.seconds * 1000;
    const outcomes = await Promise.allSettled([
      producing.run({ rate: resolved.rate, lanes: resolved.lanes, until, signal }),
      fault.run(faultsOf(resolved), { from, until, signal }),
    ]);
    for (const outcome of outcomes) if (outcome.status === 'rejected') throw outcome.reason;
    if (restartFailure !== undefined) throw restartFailure;

    log(verifyMessages.draining());
    const boundMs = drainBoundMs(resolved);
    const drain = await drained(admin, boundMs, signal);
    const leftovers = await leftoversOf(admin);
    const states = await statesOf(database, producing);
    workers.onCrash = undefined;
    await workers.stopAll(resolved.shutdownTimeoutMs + SHUTDOWN_GRACE_MS);

    const checks = runChecks({
      produced: producing.produced,
      deliveries: destination.deliveries,
      faults: fault.records,
      states,
      leftovers,
      drain,
      scenarios: resolved.scenarios,
      leaseMs: resolved.leaseMs,
      maxAttempts: resolved.maxAttempts,
      recoveryBoundMs: recoveryBoundMs(resolved),
      shutdownBoundMs: fault.shutdownBoundMs,
    });
    const verdict = checks.some((check) => check.status === 'FAIL') ? 'FAIL' : 'PASS';
    report = {
      verdict,
      version: packageVersion(),
      startedAt: new Date(startedAt).toISOString(),
      durationMs: Date.now() - startedAt,
      ...base,
      ...(resolved.defect ? { defect: resolved.defect } : {}),
      produced: {
        total: producing.produced.length,
        byPath: countByPath(producing.produced),
        poison: producing.produced.filter((message) => message.poison).length,
        outOfOrderPairs: outOfOrderCommits(producing.produced),
      },
      deliveries: destination.deliveries.length,
      faults: fault.records.map((record) => ({ ...record, held: record.held.length })),
      warnings: [...workers.warnings].map(([warning, by]) => ({ warning, workers: [...by] })),
      skipped: fault.skipped,
      drain,
      checks,
      ...(verdict === 'FAIL' ? { workerOutput: workers.outputs() } : {}),
      tablesDropped: false,
    };
    return report;
  } catch (error) {
    if (!signal.aborted) throw error;
    interrupted = new VerifyInterruptedError();
    throw interrupted;
  } finally {
    signal.removeEventListener('abort', halt);
    await workers?.killAll();
    workers?.close();
    await producer?.close().catch(() => undefined);
    if (created) {
      try {
        await database.drop();
        if (report) report.tablesDropped = true;
        if (interrupted) interrupted.tablesDropped = true;
      } catch (error) {
        log(verifyMessages.tablesNotDropped(database.tables.label, error instanceof Error ? error.message : String(error)));
      }
    }
    await database.close();
  }
}

/** The settings a run reports. */
function settingsOf(options: ResolvedVerifyOptions, database: VerifyDatabase): VerifyReport['settings'] {
  return {
    workers: options.workers,
    pool: options.pool,
    leaseMs: options.leaseMs,
    publishTimeoutMs: options.publishTimeoutMs,
    shutdownTimeoutMs: options.shutdownTimeoutMs,
    heartbeatMs: options.heartbeatMs,
    deadAfterMs: options.deadAfterMs,
    maxAttempts: options.maxAttempts,
    seconds: options.seconds,
    rate: options.rate,
    keys: options.keys,
    slowPercent: options.slowPercent,
    scenarios: options.scenarios,
    tables: database.tables.label,
    node: process.version,
  };
}

/** A worker process's configuration: the run's database, tables and settings, and its name. */
function workerConfig(options: ResolvedVerifyOptions, database: VerifyDatabase, applicationName: string, name: string): VerifyWorkerConfig {
  return {
    name,
    url: options.url,
    applicationName,
    pool: options.pool,
    schema: options.schema,
    tables: database.tables.queuebox,
    leaseMs: options.leaseMs,
    publishTimeoutMs: options.publishTimeoutMs,
    shutdownTimeoutMs: options.shutdownTimeoutMs,
    heartbeatMs: options.heartbeatMs,
    deadAfterMs: options.deadAfterMs,
    maxAttempts: options.maxAttempts,
  };
}

/** The run's destinations and sources, as `QueueBoxAdmin.backlog()` names them. */
function isRunRow(row: { component: 'outbox' | 'inbox'; name: string }): boolean {
  return VERIFY_PATHS.some((path) =>
    row.component === 'outbox' ? PATH_NAMES[path].destination === row.name : PATH_NAMES[path].source === row.name,
  );
}

/** Waits until no row of the run is pending or processing, or `boundMs` passed. */
async function drained(
  admin: QueueBoxAdmin,
  boundMs: number,
  signal: AbortSignal,
): Promise<{ drained: boolean; ms: number; boundMs: number }> {
  const from = Date.now();
  for (;;) {
    const busy = (await admin.backlog()).filter((row) => isRunRow(row) && (row.pending > 0 || row.processing > 0));
    if (busy.length === 0) return { drained: true, ms: Date.now() - from, boundMs };
    if (Date.now() - from >= boundMs) return { drained: false, ms: Date.now() - from, boundMs };
    await sleepUntil(Date.now() + 250, signal);
  }
}

/** The run's destinations and sources with rows still unfinished, with how many of their processing rows no live instance holds. */
async function leftoversOf(admin: QueueBoxAdmin): Promise<Leftover[]> {
  const busy = (await admin.backlog()).filter((row) => isRunRow(row) && (row.pending > 0 || row.processing > 0));
  const leftovers: Leftover[] = [];
  for (const row of busy) {
    const claims = row.processing > 0 ? await admin.listClaims({ component: row.component, limit: 1000 }) : [];
    const ownerless = claims.filter(
      (claim) => claim.name === row.name && (claim.ownerState === null || claim.ownerState === 'dead'),
    ).length;
    leftovers.push({ component: row.component, name: row.name, pending: row.pending, processing: row.processing, ownerless });
  }
  return leftovers;
}

/** Each produced message's row at the end, by message name. */
async function statesOf(database: VerifyDatabase, producing: VerifyProducer): Promise<Map<string, RowState>> {
  const states = new Map<string, RowState>();
  for (const component of ['outbox', 'inbox'] as const) {
    const messages = producing.produced.filter((message) => (message.path === 'outbox') === (component === 'outbox'));
    const byId = await database.rowStates(
      component,
      messages.map((message) => message.rowId),
    );
    for (const message of messages) {
      const state = byId.get(message.rowId);
      if (state) states.set(message.name, state);
    }
  }
  return states;
}
