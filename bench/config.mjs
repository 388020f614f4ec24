// Every knob of the benchmark in one place. The defaults are the workloads of issue 7; the
// BENCH_* environment variables exist for quick partial runs and experiments (see README.md).

function intFromEnv(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

/** `groups` maps a name to several (`w5` = `w5a,w5b`). */
function listFromEnv(name, all, groups = {}) {
  const raw = process.env[name];
  if (!raw) return all;
  const wanted = raw.split(',').flatMap((s) => groups[s.trim().toLowerCase()] ?? [s.trim().toLowerCase()]);
  const known = [...all, ...Object.keys(groups)];
  const unknown = wanted.filter((w) => !all.includes(w));
  if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(', ')} (known: ${known.join(', ')})`);
  return all.filter((a) => wanted.includes(a));
}

export const settings = {
  /** Messages per drain workload (W1, W2, W4). */
  messages: intFromEnv('BENCH_MESSAGES', 20_000),
  /** Distinct keys of the ordered workloads. */
  keys: 100,
  /** Messages per enqueue transaction in the drain workloads. */
  txSize: 100,
  /** Handlers in flight in the one worker process, for every system. */
  concurrency: 10,
  /** Connection pool of the worker process (graphile-worker advises max(10, concurrency + 2)). */
  poolSize: 12,
  /** W3: one message per transaction at this rate, for this long, while the worker runs. */
  latencyRate: intFromEnv('BENCH_LATENCY_RATE', 200),
  latencySeconds: intFromEnv('BENCH_LATENCY_SECONDS', 10),
  /** W4: finished rows put in the table before W1's backlog is enqueued. */
  finishedRows: intFromEnv('BENCH_FINISHED_ROWS', 1_000_000),
  /** Hard limit of one workload for one system, set-up included; past it the cell is reported as failed. */
  timeoutMs: intFromEnv('BENCH_TIMEOUT_MS', 180_000),
  /** A worker that makes no progress for this long fails its workload at once, instead of waiting out the limit. */
  stallMs: intFromEnv('BENCH_STALL_MS', 30_000),
  /** How often the parent asks the database whether everything is finished, once the worker has seen every message. */
  donePollMs: 10,
  /** Seed of the key assignment, so every run and every system gets the same keys. */
  seed: 7,
  /**
   * ANALYZE the system's tables once the backlog is enqueued (drain workloads), so the planner
   * knows them as autovacuum would on a running system, instead of planning against a fresh,
   * never-analyzed table. W4's prefill is VACUUM ANALYZE'd either way; this keeps W1 and W4 alike.
   */
  analyzeBacklog: process.env.BENCH_ANALYZE !== '0',
  /** Jobs per fetch of each of pg-boss's `localConcurrency` workers; unset: 10 ordered, 100 unordered (see systems/pg-boss.mjs). */
  pgBossBatchSize: process.env.BENCH_PGBOSS_BATCH_SIZE ? intFromEnv('BENCH_PGBOSS_BATCH_SIZE', 100) : null,
  /** Runs of each workload per system; the table shows the median run (by msg/s, or by p99 in W3). */
  repeat: intFromEnv('BENCH_REPEAT', 1),
  /** Keep each workload's database after it ran, for inspection (drop them by hand). */
  keepDatabases: process.env.BENCH_KEEP_DATABASES === '1',
  /** `--cpu-prof` on every worker process (`go`: the drain only), profiles written to bench/results/profiles/. */
  cpuProfile: process.env.BENCH_CPU_PROF === '1' || process.env.BENCH_CPU_PROF === 'go',
};

export const SYSTEMS = listFromEnv('BENCH_SYSTEMS', ['queuebox', 'graphile-worker', 'pg-boss']);

/**
 * The workloads, in the order they run. `kind`: `drain` enqueues a backlog first, then starts the
 * worker and times the drain; `latency` runs the worker first and paces the producer; `inbox`
 * receives a backlog into QueueBox's inbox first, then starts the inbox relay (`consumer: 'relay'`)
 * or a `@PullHandler` worker (`consumer: 'pull'`) and times the drain like `drain`. `queueboxOnly`:
 * the peers have no inbox, so they get no row.
 */
const ALL_WORKLOADS = [
  { id: 'w1', title: 'W1 ordered', kind: 'drain', ordered: true },
  { id: 'w2', title: 'W2 unordered', kind: 'drain', ordered: false },
  { id: 'w3', title: 'W3 latency', kind: 'latency', ordered: false },
  { id: 'w4', title: 'W4 scale', kind: 'drain', ordered: true, finishedRows: settings.finishedRows, baseline: 'w1' },
  { id: 'w5a', title: 'W5 inbox relay', kind: 'inbox', consumer: 'relay', source: 'bench-relay', ordered: true, queueboxOnly: true },
  { id: 'w5b', title: 'W5 pull worker', kind: 'inbox', consumer: 'pull', source: 'bench-pull', ordered: true, queueboxOnly: true },
];

export const WORKLOADS = listFromEnv(
  'BENCH_WORKLOADS',
  ALL_WORKLOADS.map((w) => w.id),
  { w5: ['w5a', 'w5b'] },
).map((id) => ALL_WORKLOADS.find((w) => w.id === id));

/** How many messages a workload sends. */
export function messageCount(workload) {
  return workload.kind === 'latency' ? settings.latencyRate * settings.latencySeconds : settings.messages;
}
