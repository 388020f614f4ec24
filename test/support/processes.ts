import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves with the exit signal or code. */
  exited: Promise<string>;
  /** The QueueBox counters the worker printed when it shut down (empty if it was killed). */
  metrics(): Record<string, number>;
  /** The log lines it printed so far (started with `printLogs`). */
  logs(): { level: string; message: string }[];
}

/**
 * Starts the fixture `test/fixtures/<file>` in its own process with `env` and waits until it
 * printed "ready". `output()` is everything it printed so far.
 */
export async function startFixture(
  file: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; exited: Promise<string>; output(): string }> {
  const child = spawn(process.execPath, [join(__dirname, '..', 'fixtures', file)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<string>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? String(code))));
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk) => {
      output += String(chunk);
      if (output.includes('ready')) resolve();
    });
    void exited.then((how) => reject(new Error(`${file} exited (${how}) before it was ready`)));
  });
  return { child, exited, output: () => output };
}

/** Starts `test/fixtures/worker` in its own process and waits until it has started. */
export async function startWorker(env: {
  dbUrl: string;
  publishUrl?: string;
  name: string;
  /** Lease of the fixture's pull handlers. */
  pullLeaseMs?: number;
  /** maxAttempts of the fixture's batch pull handler (default 10). */
  pullMaxAttempts?: number;
  /** How long each call of the fixture's batch pull handler takes (default 0). */
  batchHoldMs?: number;
  /** JSON-able QueueBox options: `workers`, `outbox`, `inbox.relay` (publisher and routes come from the fixture). */
  options: Record<string, unknown>;
  /** TypeORM's manualInitialization: the worker initializes its DataSource right after the application started. */
  manualInitialization?: boolean;
  /** Resolve as soon as the process runs, not when it is ready (for workers that may die while starting). */
  waitReady?: boolean;
  /** When it aborts, the worker is killed (SIGKILL), wherever it is, even still starting; an aborted signal starts none. */
  signal?: AbortSignal;
  /** Print its Nest log lines, for `logs()`. */
  printLogs?: boolean;
  /** Its outbox publisher has `publishBatch` too (requests sent with `x-batch: 1`): side by side, or `ordered` (one after another, `keepsBatchOrder`). */
  publishBatch?: boolean | 'ordered';
}): Promise<WorkerProcess> {
  env.signal?.throwIfAborted();
  const child = spawn(process.execPath, [join(__dirname, '..', 'fixtures', 'worker.js')], {
    env: {
      ...process.env,
      QUEUEBOX_TEST_DB_URL: env.dbUrl,
      QUEUEBOX_TEST_PUBLISH_URL: env.publishUrl ?? 'http://127.0.0.1:9',
      QUEUEBOX_TEST_WORKER: env.name,
      QUEUEBOX_TEST_OPTIONS: JSON.stringify(env.options),
      QUEUEBOX_TEST_PULL_LEASE_MS: String(env.pullLeaseMs ?? 5000),
      QUEUEBOX_TEST_PULL_MAX_ATTEMPTS: String(env.pullMaxAttempts ?? 10),
      QUEUEBOX_TEST_BATCH_HOLD_MS: String(env.batchHoldMs ?? 0),
      QUEUEBOX_TEST_MANUAL_INIT: env.manualInitialization ? '1' : '',
      ...(env.printLogs ? { QUEUEBOX_TEST_PRINT_LOGS: '1' } : {}),
      ...(env.publishBatch ? { QUEUEBOX_TEST_PUBLISH_BATCH: env.publishBatch === 'ordered' ? 'ordered' : '1' } : {}),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<string>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? String(code))));
  if (env.signal) {
    const kill = () => child.kill('SIGKILL');
    env.signal.addEventListener('abort', kill, { once: true });
    void exited.then(() => env.signal?.removeEventListener('abort', kill));
  }
  let output = '';
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk) => {
      output += String(chunk);
      // A line of its own: a printed log line may say "ready" too.
      if (/^ready$/m.test(output)) resolve();
    });
    void exited.then((how) => reject(new Error(`worker ${env.name} exited (${how}) before it was ready`)));
  });
  const metrics = () => JSON.parse(/^metrics (.*)$/m.exec(output)?.[1] ?? '{}') as Record<string, number>;
  const logs = () => [...output.matchAll(/^log (.*)$/gm)].map((line) => JSON.parse(line[1]) as { level: string; message: string });
  if (env.waitReady !== false) await ready;
  else ready.catch(() => undefined);
  return { child, exited, metrics, logs };
}

/**
 * The DeprecationWarnings QueueBox's lib/ raised in process `pid` (this one by default), as
 * scripts/deprecation-guard.mjs recorded them (their stacks); none when the run has no guard
 * (QUEUEBOX_DEPRECATIONS_FILE unset: not started by scripts/test.mjs).
 */
export function deprecationsRaisedByQueueBox(pid = process.pid): string[] {
  const file = process.env.QUEUEBOX_DEPRECATIONS_FILE;
  if (!file || !existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { ours: boolean; pid: number; stack: string })
    .filter((record) => record.ours && record.pid === pid)
    .map((record) => record.stack);
}
