// Runs one workload for one system in a database of its own and measures it. See README.md for
// what each workload measures; the comments here say how.
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { spawnWorker, spawnWorkerGroup } from './child.mjs';
import { beforeDeadline, DeadlineError, now, sleep } from './clock.mjs';
import { messageCount, settings } from './config.mjs';
import { enableStatementStats, pollUntilFinished, statementCount, withClient } from './pg.mjs';
import { delivery, fmt, latencySummary, orderViolations } from './stats.mjs';

const PROFILE_DIR = fileURLToPath(new URL('./results/profiles/', import.meta.url));
const PROGRESS_LOG_EVERY_MS = 3000;
// W3: the worker idles this long before the producer starts, so it is in its steady waiting state.
const LATENCY_WARMUP_MS = 1000;
/** How long the postmaster is given to reap the backends that just closed before their CPU is read. */
const BACKEND_REAP_MS = 100;

/** A small seeded PRNG (mulberry32): the same keys in every run and for every system. */
function seededRandom(seed) {
  let state = seed | 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Messages `{ seq, key }`, seq = enqueue order. Keys are drawn at random (seeded) from k0..k99, so
 * an enqueue transaction of 100 messages usually holds several messages of one key, as when one
 * business transaction emits several events of one aggregate. Unordered workloads have no key.
 */
export function makeMessages(count, ordered) {
  const random = seededRandom(settings.seed);
  return Array.from({ length: count }, (_, seq) => ({ seq, key: ordered ? `k${Math.floor(random() * settings.keys)}` : null }));
}

function emptyResult(system, workload) {
  const variant = workload.variant ?? null;
  return {
    workload: workload.id,
    title: workload.title,
    system: system.name,
    /** The peer configuration (null: the system's only one), and whether it keeps each key's order (null: no keys). */
    variant: variant ? { id: variant.id, label: variant.label } : null,
    keepsOrder: workload.ordered ? (variant?.keepsOrder ?? true) : null,
    status: 'ok',
    error: null,
    messages: messageCount(workload),
    settings: system.describe(workload, settings),
    guarantee: system.guarantee(workload),
    ordered: Boolean(workload.ordered),
    orderLabel: workload.ordered ? system.orderLabel(workload) : null,
    drainMs: null,
    rate: null,
    /** From `go` to the first handler start (the start call, then the first fetch). */
    startupMs: null,
    startCallMs: null,
    /** W2 allocation run: bytes allocated per message over the drain (sampling heap profile). */
    allocBytesPerMsg: null,
    latency: null,
    achievedRate: null,
    duplicates: null,
    missing: null,
    orderViolations: null,
    rssKb: null,
    idleRssKb: null,
    xactsPerMsg: null,
    stmtsPerMsg: null,
    workerCpuUsPerMsg: null,
    databaseCpuUsPerMsg: null,
    notes: [],
  };
}

/**
 * Runs `workload` for `system` in one of its configurations (`variant`, from `system.variants`;
 * the system's methods read it as `workload.variant`); never throws: a failure is reported in the result.
 */
export async function runCell({ admin, runId, system, workload: baseWorkload, variant = null, repeat = 1, log }) {
  const workload = variant ? { ...baseWorkload, variant } : baseWorkload;
  if (workload.finishedRows && !system.prefill) {
    const result = emptyResult(system, workload);
    result.status = 'n/a';
    result.notes.push(system.prefillUnsupported);
    return result;
  }
  if (workload.kind === 'inbox' && !system.receiveBacklog) {
    const result = emptyResult(system, workload);
    result.status = 'n/a';
    result.notes.push('no inbox');
    return result;
  }
  const started = now();
  const database = `${runId}_${workload.id}_${system.short}${variant ? `_${variant.id}` : ''}${repeat > 1 ? `_${repeat}` : ''}`;
  const cell = { admin, database, url: null, deadline: started + settings.timeoutMs, system, workload, log, worker: null, progress: null };
  const result = emptyResult(system, workload);
  cell.result = result;
  try {
    cell.url = await admin.createDatabase(database);
    await within(cell, system.setup(cell.url, workload), 'setting up the schema');
    cell.statements = await enableStatementStats(cell.url);
    if (workload.kind === 'drain' || workload.kind === 'inbox') await runDrain(cell);
    else await runLatency(cell);
  } catch (error) {
    result.status = 'failed';
    result.error =
      error instanceof DeadlineError ? `${error.message} (limit ${fmt.seconds(settings.timeoutMs)})` : String(error?.message ?? error);
    if (cell.progress) {
      result.notes.push(
        `${fmt.int(cell.progress.distinct)}/${fmt.int(result.messages)} handled after ${fmt.seconds(now() - cell.progress.since)}`,
      );
    }
  } finally {
    if (cell.rejections) {
      result.notes.push(`${cell.rejections.count} unhandled rejection(s) in the worker, first: ${cell.rejections.first}`);
    }
    if (cell.worker) await cell.worker.kill();
    if (settings.keepDatabases) log(`  kept database ${database} (BENCH_KEEP_DATABASES=1)`);
    else await admin.dropDatabase(database).catch((error) => log(`  could not drop ${database}: ${error.message}`));
  }
  result.wallMs = now() - started;
  return result;
}

function within(cell, promise, what) {
  return beforeDeadline(promise, cell.deadline, what);
}

/**
 * Closes the producer, giving up after a few seconds past the deadline: a pool waits for its
 * clients, and one stuck in a query cut short by the deadline would hold it. DROP DATABASE ...
 * WITH (FORCE) ends such connections afterwards.
 */
async function closeProducer(cell, producer) {
  await beforeDeadline(producer.close(), Math.max(cell.deadline, now()) + 10_000, 'closing the producer').catch((error) =>
    cell.log(`  ${error.message}`),
  );
}

/**
 * Waits until the worker has seen every message. Fails at the deadline, or as soon as the worker
 * has handled nothing new for settings.stallMs (a stuck worker fails fast instead of waiting out
 * the 3-minute limit).
 */
async function untilHandledAll(cell, worker, what) {
  let timer;
  const stalled = new Promise((_, reject) => {
    let last = -1;
    let lastChange = now();
    timer = setInterval(() => {
      const distinct = cell.progress?.distinct ?? 0;
      if (distinct !== last) {
        last = distinct;
        lastChange = now();
      } else if (now() - lastChange > settings.stallMs) {
        reject(new Error(`no new message handled for ${fmt.seconds(settings.stallMs)} while ${what}`));
      }
    }, 1000);
  });
  try {
    return await within(cell, Promise.race([worker.handledAll, stalled]), what);
  } finally {
    clearInterval(timer);
  }
}

function untilFinished(cell) {
  const { sql, params } = cell.system.unfinished(cell.workload);
  return pollUntilFinished(cell.url, sql, params, { intervalMs: settings.donePollMs, deadline: cell.deadline, stallMs: settings.stallMs });
}

/**
 * W1, W2, W4, W5. The whole backlog is enqueued and committed first, with the worker not running;
 * then the worker process boots and connects; then it is told to go. Start-up = from `go` (the
 * worker's clock, just before it starts its system) to the first handler start; drain time = from
 * that first handler start to the first poll of the database that finds no unfinished message (the
 * parent's clock; it polls every 10 ms once the worker has seen every message). So the drain
 * leaves out the start call and the first fetch, and includes the marking of the last messages.
 */
async function runDrain(cell) {
  const { system, workload, url, result, log } = cell;
  const n = result.messages;
  const messages = makeMessages(n, workload.ordered);

  if (workload.finishedRows) {
    log(`  prefilling ${fmt.int(workload.finishedRows)} finished rows`);
    const t = now();
    const note = await within(cell, system.prefill(url, workload.finishedRows, workload), 'prefilling finished rows');
    // The prefill writes a few hundred MB of WAL: without a checkpoint now, the one it triggers
    // lands in the middle of the drain and is charged to the finished rows. Needs superuser or
    // pg_checkpoint; without them W4 runs anyway and says so.
    const checkpointed = await withClient(url, (client) => client.query('CHECKPOINT')).then(
      () => true,
      () => false,
    );
    result.notes.push(
      `${note} (VACUUM ANALYZE'd${checkpointed ? ', CHECKPOINT' : ', no CHECKPOINT allowed'}; ${fmt.seconds(now() - t)} to prepare)`,
    );
  }

  const enqueueStarted = now();
  if (workload.kind === 'inbox') {
    await within(cell, system.receiveBacklog(url, workload, messages, settings.txSize), 'receiving the backlog into the inbox');
  } else {
    const producer = await within(cell, system.openProducer(url, workload), 'opening the producer');
    try {
      for (let i = 0; i < n; i += settings.txSize) {
        await within(cell, producer.enqueueMany(messages.slice(i, i + settings.txSize)), 'enqueueing the backlog');
      }
    } finally {
      await closeProducer(cell, producer);
    }
  }
  const enqueueMs = now() - enqueueStarted;
  result.notes.push(`${workload.kind === 'inbox' ? 'receive' : 'enqueue'} ${fmt.int((n / enqueueMs) * 1000)} msg/s`);
  if (settings.analyzeBacklog)
    await within(
      cell,
      withClient(url, (client) => client.query(`ANALYZE ${(system.tablesOf?.(workload) ?? system.tables).join(', ')}`)),
      'analyzing',
    );
  log(
    `  ${workload.kind === 'inbox' ? 'received' : 'enqueued'} ${fmt.int(n)} messages in ${n / settings.txSize} transactions in ${fmt.seconds(enqueueMs)}; starting the worker`,
  );

  const before = await snapshot(cell, 'before');
  const worker = startWorker(cell, n);
  await within(cell, worker.ready, 'booting the worker');
  worker.go();
  const { at: startedAt, startMs } = await within(cell, worker.started, 'starting the worker');
  result.startCallMs = startMs;
  cell.progress = { distinct: 0, since: startedAt, loggedAt: now() };
  await untilHandledAll(cell, worker, 'draining');
  const { doneAt, polls } = await untilFinished(cell);
  const report = await within(cell, worker.stop(), 'stopping the worker');
  await within(cell, worker.exited, 'waiting for the worker to exit');
  const after = await snapshot(cell, 'after');

  result.startupMs = report.firstAt - startedAt;
  result.drainMs = doneAt - report.firstAt;
  result.rate = n / (result.drainMs / 1000);
  if (report.allocation) {
    result.allocBytesPerMsg = report.allocation.bytes / report.allocation.messages;
    result.notes.push(
      `${fmt.int(report.allocation.bytes / 1e6)} MB allocated over ${fmt.int(report.allocation.messages)} messages (profile: ${report.allocation.file.replace(/.*\/bench\//, 'bench/')}); the profiler slows the drain, its rate is not a result`,
    );
  }
  recordOutcome(cell, report, messages);
  // The done-poll connection: one transaction to connect, one per poll.
  perMessageCosts(cell, before, after, { parentTransactions: polls + 1, producerTransactions: 0, producerStatements: 0 });
  perMessageCpu(cell, before, after, report);
  // W5 inbox relay: delivery and order are judged on the outbox rows it wrote.
  if (workload.kind === 'inbox' && workload.consumer === 'relay') await outcomeInDatabase(cell, messages);
  result.notes.push(...(await system.afterCheck(url, workload)));
}

/**
 * W5 inbox relay: what counts is what reached the outbox, so delivery and order are read from the
 * database (after the `after` snapshot, so these reads are not charged to the worker): one outbox
 * row per inbox row, and per key the seqs in outbox id order must increase. The route calls the
 * worker recorded (the route records first thing) only give progress; if they disagree, a note says so.
 */
async function outcomeInDatabase(cell, messages) {
  const { result, system, url, workload } = cell;
  const rows = await within(cell, system.outcomeInDatabase(url, workload), 'reading the outcome');
  const seqs = rows.map((r) => r.seq);
  const d = delivery(seqs, messages.length);
  const recorded = { duplicates: result.duplicates, missing: result.missing, orderViolations: result.orderViolations };
  result.duplicates = d.duplicates;
  result.missing = d.missing;
  if (d.foreign > 0) result.notes.push(`${d.foreign} outbox rows with an unknown seq`);
  // Seq by key from the rows themselves, so a row forwarded with a wrong key would show too.
  const keyOf = new Map(rows.map((r) => [r.seq, r.key]));
  result.orderViolations = orderViolations(seqs, (seq) => keyOf.get(seq));
  const wrongKey = rows.filter((r) => r.seq >= 0 && r.seq < messages.length && r.key !== messages[r.seq].key).length;
  if (wrongKey > 0) {
    result.notes.push(`${wrongKey} outbox rows with the wrong key`);
    result.orderViolations += wrongKey;
  }
  result.notes.push(`order, dups and missing read from the ${fmt.int(rows.length)} outbox rows (id order)`);
  if (recorded.duplicates !== 0 || recorded.missing !== 0 || recorded.orderViolations !== 0)
    result.notes.push(
      `route calls: ${recorded.duplicates} repeated, ${recorded.missing} missing, ${recorded.orderViolations} out of order (a retried row calls its route again)`,
    );
}

/**
 * W3. The worker runs first (idle for a second), then the producer commits one message per
 * transaction at a steady rate (each send starts at its scheduled time, whatever the previous one
 * is doing, up to the pool's 4 connections). Latency = first handler start of a message (the
 * worker's clock) minus the moment its enqueue transaction's COMMIT returned (the producer's clock).
 */
async function runLatency(cell) {
  const { system, workload, url, result } = cell;
  const n = result.messages;
  const messages = makeMessages(n, workload.ordered);
  const commits = new Float64Array(n);

  // pg_stat_statements cannot tell the producer's statements from the worker's, so the producer's
  // cost per message is measured alone first, in a scratch database (see producerStatementsPerMessage).
  const producerStatements = cell.statements ? await within(cell, producerStatementsPerMessage(cell), 'measuring the producer') : 0;
  const before = await snapshot(cell, 'before');
  const producer = await within(cell, system.openProducer(url, workload), 'opening the producer');
  let report;
  let polls = 0;
  let paced;
  try {
    const worker = startWorker(cell, n);
    await within(cell, worker.ready, 'booting the worker');
    worker.go();
    const { at: startedAt, startMs } = await within(cell, worker.started, 'starting the worker');
    result.startCallMs = startMs;
    await sleep(LATENCY_WARMUP_MS);
    cell.log(`  worker idle for ${LATENCY_WARMUP_MS} ms; producing ${settings.latencyRate} msg/s for ${settings.latencySeconds} s`);
    cell.progress = { distinct: 0, since: startedAt, loggedAt: now() };
    paced = await within(cell, pacedProducer(producer, messages, commits, cell.deadline), 'producing');
    await untilHandledAll(cell, worker, 'waiting for the last messages');
    ({ polls } = await untilFinished(cell));
    report = await within(cell, worker.stop(), 'stopping the worker');
    await within(cell, worker.exited, 'waiting for the worker to exit');
  } finally {
    await closeProducer(cell, producer);
  }
  const after = await snapshot(cell, 'after');

  result.latency = latencySummary(report.seqs, report.times, commits);
  result.achievedRate = (n - 1) / ((paced.lastCommit - paced.firstCommit) / 1000);
  result.notes.push(`producer reached ${result.achievedRate.toFixed(1)} msg/s`);
  if (result.latency.negative > 0)
    result.notes.push(`${result.latency.negative} handler starts came before the producer saw its COMMIT return`);
  recordOutcome(cell, report, messages);
  perMessageCosts(cell, before, after, {
    parentTransactions: polls + 1,
    producerTransactions: n,
    producerStatements: n * producerStatements,
  });
  result.notes.push(
    `xacts/stmts exclude the producer (1 transaction${cell.statements ? ` and ${producerStatements.toFixed(2)} statements` : ''} per message; its connection set-ups not)`,
  );
  result.notes.push(...(await system.afterCheck(url, workload)));
}

const CALIBRATION_MESSAGES = 100;

/**
 * Statements the W3 producer causes per message, from pg_stat_statements, with no worker running:
 * its own (BEGIN, the enqueue, COMMIT) and whatever the database runs for it at top level (pg-boss's
 * deferred foreign-key check runs at COMMIT, for one). Measured on an open producer, so connecting
 * is left out; the counts of pg_stat_statements are updated as each statement ends.
 */
async function producerStatementsPerMessage(cell) {
  const { admin, system, workload } = cell;
  const database = `${cell.database}_cal`;
  const url = await admin.createDatabase(database);
  try {
    await system.setup(url, workload);
    await enableStatementStats(url);
    const producer = await system.openProducer(url, workload);
    try {
      const before = await statementCount(url);
      for (let seq = 0; seq < CALIBRATION_MESSAGES; seq++) await producer.enqueueOne({ seq, key: null });
      return ((await statementCount(url)) - before) / CALIBRATION_MESSAGES;
    } finally {
      await producer.close();
    }
  } finally {
    await admin.dropDatabase(database);
  }
}

/** Sends message i at start + i / rate; records when each COMMIT returned. Stops at the deadline. */
async function pacedProducer(producer, messages, commits, deadline) {
  const intervalMs = 1000 / settings.latencyRate;
  const maxInFlight = 4;
  const inFlight = new Set();
  let failure;
  const start = now() + 20;
  for (let i = 0; i < messages.length; i++) {
    const due = start + i * intervalMs;
    const wait = due - now();
    if (wait >= 1) await sleep(wait);
    while (inFlight.size >= maxInFlight) await Promise.race(inFlight);
    if (failure) throw failure;
    if (now() > deadline) throw new DeadlineError('timed out while producing');
    // Errors are kept, not left as rejected promises nobody awaits, and rethrown in order.
    const tracked = producer
      .enqueueOne(messages[i])
      .then(() => {
        commits[i] = now();
      })
      .catch((error) => {
        failure ??= error;
      })
      .finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  }
  await Promise.all(inFlight);
  if (failure) throw failure;
  let firstCommit = Number.POSITIVE_INFINITY;
  let lastCommit = 0;
  for (const c of commits) {
    firstCommit = Math.min(firstCommit, c);
    lastCommit = Math.max(lastCommit, c);
  }
  return { firstCommit, lastCommit };
}

function startWorker(cell, expected) {
  const { system, workload, url, database, log } = cell;
  const { script, options } = system.worker(workload, settings);
  const allocation = workload.allocProfile
    ? { file: `${PROFILE_DIR}${database}.heapprofile`, samplingInterval: settings.allocSamplingInterval }
    : undefined;
  if (allocation) mkdirSync(PROFILE_DIR, { recursive: true });
  const count = allocation ? 1 : settings.workers;
  if (count > 1) cell.result.notes.push(`${count} worker processes, each with these settings (BENCH_WORKERS)`);
  cell.worker = spawnWorkerGroup({
    count,
    script,
    config: { url, expected, poolSize: settings.poolSize, options, allocation },
    cpuProfile: settings.cpuProfile ? { dir: PROFILE_DIR, name: database } : undefined,
    onRejection: (error) => {
      cell.rejections ??= { count: 0, first: error };
      cell.rejections.count++;
    },
    onProgress: ({ distinct }) => {
      const progress = cell.progress;
      if (!progress) return;
      progress.distinct = distinct;
      if (now() - progress.loggedAt < PROGRESS_LOG_EVERY_MS) return;
      progress.loggedAt = now();
      const rate = (distinct / (now() - progress.since)) * 1000;
      log(`    ${fmt.int(distinct)}/${fmt.int(expected)} handled (${fmt.int(rate)} msg/s so far)`);
    },
  });
  return cell.worker;
}

/**
 * Counters at a quiet moment: no client connected to the database, so every backend has flushed
 * its transaction counters (see pg.mjs). pg_stat_statements is read over a connection of its own,
 * so it is read before the transactions at the start and after them at the end.
 */
async function snapshot(cell, phase) {
  const { admin, database, url } = cell;
  const readStatements = async () => (cell.statements ? statementCount(url) : null);
  // Read once no client is left: a backend's CPU reaches the postmaster's total when it is reaped.
  const readCpu = async () => {
    await sleep(BACKEND_REAP_MS);
    return admin.backendCpuMs();
  };
  const readTransactions = async () => {
    if (!(await admin.waitForNoClients(database))) cell.result.notes.push(`a connection was still open at the ${phase} snapshot`);
    return admin.transactions(database);
  };
  if (phase === 'before') {
    const statements = await readStatements();
    const transactions = await readTransactions();
    return { statements, transactions, backendCpuMs: await readCpu() };
  }
  const transactions = await readTransactions();
  const backendCpuMs = await readCpu();
  return { transactions, backendCpuMs, statements: await readStatements() };
}

function perMessageCosts(cell, before, after, { parentTransactions, producerTransactions, producerStatements }) {
  const { result } = cell;
  const n = result.messages;
  result.xactsPerMsg = (after.transactions - before.transactions - parentTransactions - producerTransactions) / n;
  result.stmtsPerMsg = cell.statements ? (after.statements - before.statements - producerStatements) / n : null;
}

/**
 * Drains only: CPU per message of the worker process (from its first handler start until the
 * parent saw the work done) and of the database's backends (every backend that exited between the snapshots: the
 * worker's connections, the parent's done-polls, autovacuum). W3 spends most of its time idle.
 */
function perMessageCpu(cell, before, after, report) {
  const { result } = cell;
  const n = result.messages;
  if (typeof report.cpuMs === 'number') result.workerCpuUsPerMsg = (report.cpuMs * 1000) / n;
  if (before.backendCpuMs !== null && after.backendCpuMs !== null)
    result.databaseCpuUsPerMsg = ((after.backendCpuMs - before.backendCpuMs) * 1000) / n;
}

function recordOutcome(cell, report, messages) {
  const { result, workload } = cell;
  const d = delivery(report.seqs, messages.length);
  result.duplicates = d.duplicates;
  result.missing = d.missing;
  if (d.foreign > 0) result.notes.push(`${d.foreign} handler calls with an unknown seq`);
  if (workload.ordered) result.orderViolations = orderViolations(report.seqs, (seq) => messages[seq].key);
  result.rssKb = report.maxRssKb;
  result.idleRssKb = report.idleRssKb ?? null;
}

/** Floor runs; the median is the floor (one boot takes a second or two). */
const FLOOR_RUNS = 3;

/**
 * The RSS floor: peak RSS of a process that boots the stack QueueBox runs on (Nest + TypeORM + pg,
 * worker-floor.mjs) the way the QueueBox worker boots, and handles nothing, in a scratch database.
 * Resolves to `{ rssKb, runsKb }` (rssKb the median of FLOOR_RUNS runs), or `{ error }`.
 */
export async function measureFloor({ admin, runId, log }) {
  const database = `${runId}_floor`;
  const runsKb = [];
  try {
    const url = await admin.createDatabase(database);
    for (let run = 0; run < FLOOR_RUNS; run++) {
      const deadline = now() + 60_000;
      const worker = spawnWorker({ script: './worker-floor.mjs', config: { url, expected: 0, poolSize: settings.poolSize, options: {} } });
      try {
        await beforeDeadline(worker.ready, deadline, 'booting the floor process');
        worker.go();
        await beforeDeadline(worker.started, deadline, 'starting the floor process');
        const report = await beforeDeadline(worker.stop(), deadline, 'stopping the floor process');
        await beforeDeadline(worker.exited, deadline, 'waiting for the floor process to exit');
        runsKb.push(report.maxRssKb);
      } finally {
        await worker.kill();
      }
    }
  } catch (error) {
    log(`  the floor could not be measured: ${error?.message ?? error}`);
    return { error: String(error?.message ?? error) };
  } finally {
    await admin.dropDatabase(database).catch(() => undefined);
  }
  const sorted = [...runsKb].sort((a, b) => a - b);
  return { rssKb: sorted[Math.floor(sorted.length / 2)], runsKb };
}
