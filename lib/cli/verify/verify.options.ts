import { QueueBoxConfigError } from '../../errors/queuebox.errors';
import { verifyMessages } from './verify.messages';

/**
 * A fault `queuebox verify` injects, or the poison messages it writes. Each is optional; by
 * default all run.
 * - `kill`: `kill -9` of the worker process holding the most claims, then a new one in its place.
 * - `pause`: SIGSTOP of the worker holding the most claims, past what takes its claims away (its
 *   lease, or its instance declared dead), then SIGCONT.
 * - `sessions`: every database session of the worker holding the most claims ended by the
 *   database (`pg_terminate_backend`; `KILL` on SQL Server when the login may).
 * - `shutdown`: a graceful shutdown (SIGTERM) of the worker holding the most claims, with its
 *   work in flight, then a new one in its place.
 * - `admin-pause`: `QueueBoxAdmin.pause` of the outbox path's destination and of one inbox
 *   path's source (relay, pull and batch in turn) for twice `pauseMs`, then `resume`, while the
 *   faults after it run (first in the order: the kill and the SIGSTOP meet the paused rows): no
 *   row of either may be claimed from a moment after the pause (the workers' poll interval and a
 *   second) to the resume, beyond the keys whose claims were in flight then; the rows wait, in
 *   order.
 * - `poison`: messages that fail on every attempt on each path, which must end `dead` after
 *   `maxAttempts`, never delivered.
 */
export type VerifyScenario = 'admin-pause' | 'kill' | 'pause' | 'sessions' | 'shutdown' | 'poison';

export const VERIFY_SCENARIOS: readonly VerifyScenario[] = ['admin-pause', 'kill', 'pause', 'sessions', 'shutdown', 'poison'];

/** Every worker's poll interval (outbox, relay, pull): a pause takes effect within it. */
export const VERIFY_POLL_INTERVAL_MS = 100;

/** The faults among the scenarios (everything but `poison`), in the order a run injects them. */
export type VerifyFault = Exclude<VerifyScenario, 'poison'>;

/**
 * The four ways a message travels in a run, each ending at the recording destination:
 * - `outbox`: enqueued by the producer, published by the outbox poller;
 * - `relay`: received into the inbox, forwarded to the outbox by the relay, then published;
 * - `pull`: received, handled by a `@PullHandler` that enqueues it to the outbox in its transaction;
 * - `batch`: the same through a batch `@PullHandler` (with followers).
 */
export type VerifyPath = 'outbox' | 'relay' | 'pull' | 'batch';

export const VERIFY_PATHS: readonly VerifyPath[] = ['outbox', 'relay', 'pull', 'batch'];

/** The inbox source of a path (none for `outbox`) and the outbox destination every path ends at. */
export const PATH_NAMES: Record<VerifyPath, { source?: string; destination: string }> = {
  outbox: { destination: 'verify.outbox' },
  relay: { source: 'verify.relay', destination: 'verify.relay' },
  pull: { source: 'verify.pull', destination: 'verify.pull' },
  batch: { source: 'verify.batch', destination: 'verify.batch' },
};

/**
 * A defect `queuebox verify` injects into its own worker processes to prove that it catches one
 * (its self-test; `QUEUEBOX_VERIFY_DEFECT=<name>` in the environment). Never for a real run:
 * the report says in its first line that the run was sabotaged.
 * - `fence-off`: every fenced write reports success whatever it changed: a worker that lost its
 *   claim goes on as if it held it (a pull handler's transaction commits, the relay's forward too).
 * - `renewal-off`: lease renewals report success without running: leases expire under work in flight.
 * - `followers-skip`: the followers read passes over the row right behind each claimed head, so a
 *   later row of the aggregate is handled before it.
 * - `pauses-off`: the workers read no pause: claims take the rows of a paused destination or source.
 */
export type VerifyDefect = 'fence-off' | 'renewal-off' | 'followers-skip' | 'pauses-off';

export const VERIFY_DEFECTS: readonly VerifyDefect[] = ['fence-off', 'renewal-off', 'followers-skip', 'pauses-off'];

/** The environment variable that injects a defect (`QUEUEBOX_VERIFY_DEFECT=fence-off`). */
export const VERIFY_DEFECT_ENV = 'QUEUEBOX_VERIFY_DEFECT';

/** What `runVerify` (and `queuebox verify`) takes. Only `url` is required. */
export interface VerifyOptions {
  /** The database (`postgres://...`, `mssql://...`). Verify creates its own tables there and drops them at the end. */
  url: string;
  /** How long the producers write, in seconds. Default 30. */
  seconds?: number;
  /** Messages the producers write per second, over the four paths. Default 40. */
  rate?: number;
  /** The scenarios to run. Default: all of `VERIFY_SCENARIOS`. None: producers, workers and checks only. */
  scenarios?: readonly VerifyScenario[];
  /** Worker processes. Default 3. */
  workers?: number;
  /** Each worker's connection pool. Default 10. */
  pool?: number;
  /** The lease of every claim (`outbox.claimTimeoutMs`, `inbox.relay.claimTimeoutMs`, the pull handlers' `leaseMs`). Default 3000. */
  leaseMs?: number;
  /** `instances.heartbeatMs`. Default 500. */
  heartbeatMs?: number;
  /** `instances.deadAfterMs`. Default 5000. */
  deadAfterMs?: number;
  /** Attempts of every worker (`retry.attempts`). Default 5. */
  maxAttempts?: number;
  /** Keys (aggregates) per path. Default 6. */
  keys?: number;
  /**
   * The share of messages, in percent, that are slow: their publish, relay route and batch take
   * half a lease (at most 2 s), their pull handler 1.2 leases (renewals keep its claim; with a lease
   * of at most 10 s). Default 5.
   */
  slowPercent?: number;
  /** How long to wait after production for every row to finish, in seconds. Default: 20 s, four leases, deadAfterMs and half of `seconds`. */
  drainSeconds?: number;
  /** The prefix of verify's tables (`<prefix>_outbox`, `_inbox`, `_instances`, `_migrations`). Default `queuebox_verify`. */
  prefix?: string;
  /** A schema (that exists) to create the tables in. Default: the login's default schema. */
  schema?: string;
  /** Drop verify's tables first even when they hold rows (a run that was killed left them). Default false. */
  force?: boolean;
  /** Aborting it stops the run: workers killed, tables dropped; `runVerify` then rejects with `VerifyInterruptedError`. */
  signal?: AbortSignal;
  /** Progress, one line at a time (the CLI prints them). */
  log?: (line: string) => void;
}

/** `VerifyOptions` with every default filled in and checked, and what follows from them. */
export interface ResolvedVerifyOptions {
  url: string;
  seconds: number;
  rate: number;
  scenarios: VerifyScenario[];
  workers: number;
  pool: number;
  leaseMs: number;
  heartbeatMs: number;
  deadAfterMs: number;
  maxAttempts: number;
  keys: number;
  slowPercent: number;
  drainSeconds: number | undefined;
  prefix: string;
  schema: string | undefined;
  force: boolean;
  /** How long a slow message's publish, relay route and batch take: half a lease, at most SLOW_MS_MAX. */
  slowMs: number;
  /**
   * How long a slow message's pull handler takes: 1.2 leases, so only renewals keep its claim, with
   * a lease of at most RENEWED_LEASE_MAX_MS (beyond, a handler past its lease would take minutes: SLOW_MS_MAX).
   */
  handlerMs: number;
  /** `outbox.publishTimeout`: three quarters of the lease (it must stay below it). */
  publishTimeoutMs: number;
  /** Every worker's `shutdownTimeoutMs`: a third of the lease, at most a second, so a graceful shutdown abandons slow work. */
  shutdownTimeoutMs: number;
  /**
   * How long a pause lasts: 1.5 times what takes a frozen worker's claims away, its lease or its
   * instance declared dead (deadAfterMs and two heartbeats), whichever comes first.
   */
  pauseMs: number;
  /** Producer transactions open at once (rows of one key commit out of id order between them). */
  lanes: number;
  /** The defect of the self-test, when `QUEUEBOX_VERIFY_DEFECT` names one. */
  defect: VerifyDefect | undefined;
}

interface Bound {
  fallback: number;
  min: number;
  max: number;
}

const BOUNDS = {
  seconds: { fallback: 30, min: 5, max: 86_400 },
  rate: { fallback: 40, min: 1, max: 10_000 },
  workers: { fallback: 3, min: 2, max: 32 },
  pool: { fallback: 10, min: 4, max: 500 },
  leaseMs: { fallback: 3000, min: 1000, max: 300_000 },
  heartbeatMs: { fallback: 500, min: 100, max: 60_000 },
  deadAfterMs: { fallback: 5000, min: 1000, max: 300_000 },
  maxAttempts: { fallback: 5, min: 2, max: 100 },
  keys: { fallback: 6, min: 1, max: 1000 },
  slowPercent: { fallback: 5, min: 0, max: 100 },
  drainSeconds: { fallback: 0, min: 1, max: 86_400 },
} as const satisfies Record<string, Bound>;

export type VerifyIntegerOption = keyof typeof BOUNDS;

/** The bounds of each integer option, for the CLI's help. */
export const VERIFY_BOUNDS: Readonly<Record<VerifyIntegerOption, Bound>> = BOUNDS;

/** The longest a slow message's step takes (ms), whatever the lease: a run stays minutes long. */
const SLOW_MS_MAX = 2000;
/** Up to this lease (ms), slow pull handlers outlast their lease, so that renewals must keep them. */
const RENEWED_LEASE_MAX_MS = 10_000;

const PREFIX = /^[a-z_][a-z0-9_]{0,30}$/;
const SCHEMA = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

function integer(options: VerifyOptions, name: VerifyIntegerOption): number {
  const { fallback, min, max } = BOUNDS[name];
  const value = options[name] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new QueueBoxConfigError(name, verifyMessages.integerInvalid(name, value, min, max));
  }
  return value;
}

/** The defect `QUEUEBOX_VERIFY_DEFECT` names in `env`, if any; an unknown name is an error. */
export function defectOf(env: NodeJS.ProcessEnv): VerifyDefect | undefined {
  const value = env[VERIFY_DEFECT_ENV];
  if (value === undefined || value === '') return undefined;
  if (!VERIFY_DEFECTS.includes(value as VerifyDefect)) {
    throw new QueueBoxConfigError(VERIFY_DEFECT_ENV, verifyMessages.defectUnknown(value, VERIFY_DEFECTS));
  }
  return value as VerifyDefect;
}

/** Checks `options` and fills in the defaults; throws `QueueBoxConfigError` naming the option. */
export function resolveVerifyOptions(options: VerifyOptions, env: NodeJS.ProcessEnv = process.env): ResolvedVerifyOptions {
  if (typeof options?.url !== 'string' || options.url === '') throw new QueueBoxConfigError('url', verifyMessages.urlMissing());
  const scenarios = [...(options.scenarios ?? VERIFY_SCENARIOS)];
  for (const scenario of scenarios) {
    if (!VERIFY_SCENARIOS.includes(scenario)) {
      throw new QueueBoxConfigError('scenarios', verifyMessages.scenarioUnknown(String(scenario), VERIFY_SCENARIOS));
    }
  }
  const prefix = options.prefix ?? 'queuebox_verify';
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) throw new QueueBoxConfigError('prefix', verifyMessages.prefixInvalid(prefix));
  const schema = options.schema;
  if (schema !== undefined && (typeof schema !== 'string' || !SCHEMA.test(schema))) {
    throw new QueueBoxConfigError('schema', verifyMessages.schemaInvalid(schema));
  }
  const leaseMs = integer(options, 'leaseMs');
  const heartbeatMs = integer(options, 'heartbeatMs');
  const deadAfterMs = integer(options, 'deadAfterMs');
  if (deadAfterMs < 2 * heartbeatMs) {
    throw new QueueBoxConfigError('deadAfterMs', verifyMessages.deadAfterTooShort(deadAfterMs, heartbeatMs));
  }
  return {
    url: options.url,
    seconds: integer(options, 'seconds'),
    rate: integer(options, 'rate'),
    scenarios: VERIFY_SCENARIOS.filter((scenario) => scenarios.includes(scenario)),
    workers: integer(options, 'workers'),
    pool: integer(options, 'pool'),
    leaseMs,
    heartbeatMs,
    deadAfterMs,
    maxAttempts: integer(options, 'maxAttempts'),
    keys: integer(options, 'keys'),
    slowPercent: integer(options, 'slowPercent'),
    drainSeconds: options.drainSeconds === undefined ? undefined : integer(options, 'drainSeconds'),
    prefix,
    schema,
    force: options.force === true,
    slowMs: Math.min(Math.floor(leaseMs / 2), SLOW_MS_MAX),
    handlerMs: leaseMs <= RENEWED_LEASE_MAX_MS ? Math.floor(leaseMs * 1.2) : SLOW_MS_MAX,
    publishTimeoutMs: Math.floor((leaseMs * 3) / 4),
    shutdownTimeoutMs: Math.min(Math.floor(leaseMs / 3), 1000),
    pauseMs: Math.floor(Math.min(leaseMs, deadAfterMs + 2 * heartbeatMs) * 1.5),
    lanes: 6,
    defect: defectOf(env),
  };
}

/** The faults a run injects, in order. */
export function faultsOf(options: ResolvedVerifyOptions): VerifyFault[] {
  return options.scenarios.filter((scenario): scenario is VerifyFault => scenario !== 'poison');
}
