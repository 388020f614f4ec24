// Every knob of the benchmark in one place. The defaults are the steady-state workloads of issue 29
// (backlogs large enough that every drain runs for seconds, W3 for 30 s); BENCH_QUICK=1 keeps the
// small sizes of the earlier rounds. The BENCH_* environment variables exist for quick partial runs
// and experiments (see README.md).

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

/**
 * BENCH_QUICK=1: the sizes of the earlier rounds (20,000 messages per drain, 10 s of W3, 20,000 in
 * the allocation run), a few minutes in all; at this speed the start of a drain is a large part of
 * what is timed, so use it to check the bench, not to compare systems. Default: steady state.
 */
export const quick = process.env.BENCH_QUICK === '1';

export const settings = {
  /** `steady` (the default) or `quick` (BENCH_QUICK=1). */
  mode: quick ? 'quick' : 'steady',
  /**
   * Messages per inbox drain (W5), and the default of the others. 200,000: the relay (about
   * 10,000 msg/s at this backlog) and the pull worker (about 4,500) run for 20 s and more.
   */
  messages: intFromEnv('BENCH_MESSAGES', quick ? 20_000 : 200_000),
  /**
   * Messages per unkeyed drain (W2). 300,000: the fastest system here, graphile-worker with its local
   * queue (about 54,000 msg/s in a steady-state run), still drains for 5 s or more; QueueBox about 8 s.
   */
  unorderedMessages: intFromEnv('BENCH_UNORDERED_MESSAGES', intFromEnv('BENCH_MESSAGES', quick ? 20_000 : 300_000)),
  /**
   * Messages per keyed drain (W1, W4). 100,000: QueueBox's W1 (about 10,000 msg/s) runs for about
   * 10 s, and the order-keeping peers (1,000 to 2,500 msg/s here) for one to two minutes each.
   * BENCH_MESSAGES sets it too, unless BENCH_ORDERED_MESSAGES is given.
   */
  orderedMessages: intFromEnv('BENCH_ORDERED_MESSAGES', intFromEnv('BENCH_MESSAGES', quick ? 20_000 : 100_000)),
  /**
   * Messages of the W2 allocation run (QueueBox alone, with V8's sampling heap profiler on): the
   * bytes allocated per message settle within a few thousand messages, and the profiler slows the drain.
   */
  allocMessages: intFromEnv('BENCH_ALLOC_MESSAGES', quick ? 20_000 : 50_000),
  /** Bytes between two samples of the sampling heap profiler (V8's default is 32 KiB; smaller is finer). */
  allocSamplingInterval: intFromEnv('BENCH_ALLOC_INTERVAL', 4096),
  /** Distinct keys of the ordered workloads (BENCH_KEYS; more keys, shorter runs of a key in the backlog). */
  keys: intFromEnv('BENCH_KEYS', 100),
  /** Messages per enqueue transaction in the drain workloads. */
  txSize: 100,
  /** Handlers in flight in each worker process, for every system. */
  concurrency: 10,
  /**
   * Worker processes of the system under test sharing each drain and W3 (BENCH_WORKERS, default 1):
   * replicas, each with the settings of one. The W2 allocation run always has one.
   */
  workers: intFromEnv('BENCH_WORKERS', 1),
  /** Connection pool of the worker process (graphile-worker advises max(10, concurrency + 2)). */
  poolSize: 12,
  /** W3: one message per transaction at this rate, for this long, while the worker runs. */
  latencyRate: intFromEnv('BENCH_LATENCY_RATE', 200),
  latencySeconds: intFromEnv('BENCH_LATENCY_SECONDS', quick ? 10 : 30),
  /** W4: finished rows put in the table before W1's backlog is enqueued. */
  finishedRows: intFromEnv('BENCH_FINISHED_ROWS', 1_000_000),
  /**
   * Hard limit of one workload for one system, set-up included; past it the cell is reported as
   * failed. Steady state: 10 minutes (pg-boss's order-keeping W1 runs at about 1,500 msg/s: over
   * two minutes for 200,000 messages, plus the enqueue and W4's prefill).
   */
  timeoutMs: intFromEnv('BENCH_TIMEOUT_MS', quick ? 180_000 : 600_000),
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
  /**
   * The peers' configurations that are fast but reorder messages of one key (W1, W4), run beside
   * their order-keeping ones; BENCH_REORDERING_PEERS=0 leaves them out (a shorter run).
   */
  reorderingPeers: process.env.BENCH_REORDERING_PEERS !== '0',
};

export const SYSTEMS = listFromEnv('BENCH_SYSTEMS', ['queuebox', 'graphile-worker', 'pg-boss']);

/**
 * The workloads, in the order they run. `kind`: `drain` enqueues a backlog first, then starts the
 * worker and times the drain; `latency` runs the worker first and paces the producer; `inbox`
 * receives a backlog into QueueBox's inbox first, then starts the inbox relay (`consumer: 'relay'`)
 * or a `@PullHandler` worker (`consumer: 'pull'`) and times the drain like `drain`. `queueboxOnly`:
 * the peers have no inbox, so they get no row. `allocProfile`: W2 once more, QueueBox alone, with
 * V8's sampling heap profiler on for the drain (its rate is not a result: the profiler slows it).
 */
const ALL_WORKLOADS = [
  { id: 'w1', title: 'W1 ordered', kind: 'drain', ordered: true },
  { id: 'w2', title: 'W2 unordered', kind: 'drain', ordered: false },
  {
    id: 'w2m',
    title: 'W2 allocation',
    kind: 'drain',
    ordered: false,
    queueboxOnly: true,
    allocProfile: true,
    like: 'w2',
    messages: settings.allocMessages,
  },
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
  if (workload.kind === 'latency') return settings.latencyRate * settings.latencySeconds;
  if (workload.messages) return workload.messages;
  if (workload.kind !== 'drain') return settings.messages;
  return workload.ordered ? settings.orderedMessages : settings.unorderedMessages;
}
