import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves with the exit signal or code. */
  exited: Promise<string>;
}

/** Starts `test/fixtures/worker` in its own process and waits until it has started. */
export async function startWorker(env: {
  dbUrl: string;
  publishUrl?: string;
  name: string;
  /** JSON-able QueueBox options: `workers`, `outbox`, `inbox.relay` (publisher and routes come from the fixture). */
  options: Record<string, unknown>;
  /** Resolve as soon as the process runs, not when it is ready (for workers that may die while starting). */
  waitReady?: boolean;
}): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [join(__dirname, '..', 'fixtures', 'worker.js')], {
    env: {
      ...process.env,
      QUEUEBOX_TEST_DB_URL: env.dbUrl,
      QUEUEBOX_TEST_PUBLISH_URL: env.publishUrl ?? 'http://127.0.0.1:9',
      QUEUEBOX_TEST_WORKER: env.name,
      QUEUEBOX_TEST_OPTIONS: JSON.stringify(env.options),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<string>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? String(code))));
  if (env.waitReady === false) return { child, exited };
  await new Promise<void>((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk) => {
      output += String(chunk);
      if (output.includes('ready')) resolve();
    });
    void exited.then((how) => reject(new Error(`worker ${env.name} exited (${how}) before it was ready`)));
  });
  return { child, exited };
}
