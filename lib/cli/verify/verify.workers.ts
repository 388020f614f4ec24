import { type ChildProcess, fork } from 'node:child_process';
import { join } from 'node:path';
import { verifyMessages } from './verify.messages';
import { isWorkerMessage, VERIFY_WORKER_ENV, type VerifyAck, type VerifyDeliveryMessage, type VerifyWorkerConfig } from './verify.protocol';
import type { Delivery } from './verify.records';

// The run's side of its worker processes: it starts them (`fork` of the worker entry that ships
// beside this file), answers their publishes as the recording destination, and kills, pauses,
// stops and replaces them. A worker that exits by itself is reported and replaced.

/** The worker entry, built beside this file (dist/cli/verify/ in the package). */
const WORKER_SCRIPT = join(__dirname, 'verify.worker.js');

/** Lines of output kept per worker, for the report of a failed run. */
const KEPT_LINES = 40;

/** A warning Node.js prints (`(node:1234) DeprecationWarning: ...`): node-postgres 8 warns so of a query sent on a busy connection, which 9 refuses. */
const NODE_WARNING = /^\(node:\d+\) (\w*Warning: .*)$/;

/** How long a worker may take to start (Nest, TypeORM, the schema check, the first registration). */
const READY_TIMEOUT_MS = 60_000;

/** A worker process. */
export interface VerifyWorker {
  name: string;
  /** The application name of its connections (its database sessions carry it). */
  applicationName: string;
  child: ChildProcess;
  pid: number;
  /** Resolves when it has exited, with how (`SIGKILL`, `0`, ...) and when. */
  exited: Promise<{ how: string; at: number }>;
  /** Set once it said it was ready: a worker that never started did not crash, it failed to start. */
  ready: boolean;
  /** Set once the run killed or stopped it: its exit is not a crash. */
  ending: boolean;
  paused: boolean;
  /** Its last lines of output. */
  output: string[];
}

/**
 * The recording destination: every publish the workers send arrives here, in one order (the
 * receipt order is the order a destination saw). A message marked flaky is refused the first time
 * it arrives (not recorded: the destination did not take it); a slow one is answered after
 * `slowMs`. What is recorded is what a real destination would hold, also when the worker is
 * killed right after: it arrived, whether or not the worker lived to hear the answer.
 */
export class RecordingDestination {
  readonly deliveries: Delivery[] = [];
  private readonly refused = new Set<string>();

  receive(worker: string, message: VerifyDeliveryMessage, answer: (ok: boolean) => void): void {
    const { payload } = message;
    if (payload.flaky && !this.refused.has(payload.name)) {
      this.refused.add(payload.name);
      answer(false);
      return;
    }
    this.deliveries.push({
      seq: this.deliveries.length + 1,
      name: payload.name,
      path: payload.path,
      key: message.key,
      messageId: message.messageId,
      worker,
      attempt: message.attempt,
      sentAt: message.sentAt,
      receivedAt: Date.now(),
    });
    if (payload.slowMs) setTimeout(() => answer(true), payload.slowMs);
    else answer(true);
  }
}

/** The worker processes of one run. */
export class VerifyWorkers {
  private readonly running = new Set<VerifyWorker>();
  /** Every worker of the run, for the output of those that died too. */
  private readonly everStarted = new Set<VerifyWorker>();
  private started = 0;
  /** Node.js warnings the workers printed (`DeprecationWarning: ...`), each once, with the workers that printed it. */
  readonly warnings = new Map<string, Set<string>>();
  /** Set once the run is being interrupted: no worker starts any more. */
  private halted = false;
  /** Kills every worker if the run's process exits without stopping them (a second Ctrl-C, a crash). */
  private readonly onExit = () => this.killAllNow();

  /** Called when a worker that had started exits without the run having killed or stopped it. */
  onCrash?: (worker: VerifyWorker, how: string) => void;

  constructor(
    private readonly configOf: (name: string) => VerifyWorkerConfig,
    private readonly destination: RecordingDestination,
  ) {
    process.on('exit', this.onExit);
  }

  /** The workers alive now. */
  live(): VerifyWorker[] {
    return [...this.running].filter((worker) => !worker.ending);
  }

  /** Starts a worker and waits until it is ready (its QueueBox workers claim). */
  async start(): Promise<VerifyWorker> {
    if (this.halted) throw new Error(verifyMessages.interruptedError());
    const name = `w${++this.started}`;
    const config = this.configOf(name);
    const child = fork(WORKER_SCRIPT, [], {
      env: { ...process.env, [VERIFY_WORKER_ENV]: JSON.stringify(config), NO_COLOR: '1' },
      execArgv: [],
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const worker: VerifyWorker = {
      name,
      applicationName: config.applicationName,
      child,
      pid: child.pid ?? 0,
      ready: false,
      exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ how: signal ?? String(code), at: Date.now() }))),
      ending: false,
      paused: false,
      output: [],
    };
    this.running.add(worker);
    this.everStarted.add(worker);
    const keep = (chunk: Buffer) => {
      for (const line of String(chunk).split('\n')) {
        if (line.trim() === '') continue;
        worker.output.push(line);
        const warning = NODE_WARNING.exec(line)?.[1];
        if (warning) this.warnings.set(warning, (this.warnings.get(warning) ?? new Set()).add(name));
      }
      worker.output.splice(0, Math.max(0, worker.output.length - KEPT_LINES));
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(verifyMessages.workerNotReady(name, `no answer in ${READY_TIMEOUT_MS / 1000} s`, worker.output.join('\n'))));
      }, READY_TIMEOUT_MS);
      child.on('message', (message) => {
        if (!isWorkerMessage(message)) return;
        if (message.type === 'ready') {
          worker.ready = true;
          clearTimeout(timer);
          resolve();
          return;
        }
        this.destination.receive(name, message, (ok) => {
          const ack: VerifyAck = { type: 'ack', n: message.n, ok };
          if (child.connected) child.send(ack, () => undefined);
        });
      });
      void worker.exited.then(({ how }) => {
        clearTimeout(timer);
        reject(new Error(verifyMessages.workerNotReady(name, `it exited: ${how}`, worker.output.join('\n'))));
      });
    });
    void worker.exited.then(({ how }) => {
      this.running.delete(worker);
      if (worker.ready && !worker.ending) this.onCrash?.(worker, how);
    });
    try {
      await ready;
    } catch (error) {
      worker.ending = true;
      throw error;
    }
    return worker;
  }

  /** kill -9. */
  async kill(worker: VerifyWorker): Promise<void> {
    worker.ending = true;
    worker.child.kill('SIGKILL');
    await worker.exited;
  }

  pause(worker: VerifyWorker): void {
    worker.paused = true;
    worker.child.kill('SIGSTOP');
  }

  resume(worker: VerifyWorker): void {
    worker.child.kill('SIGCONT');
    worker.paused = false;
  }

  /** A graceful shutdown (SIGTERM); killed after `boundMs`. Resolves whether it ended by itself in time, and when. */
  async stop(worker: VerifyWorker, boundMs: number): Promise<{ inTime: boolean; at: number }> {
    worker.ending = true;
    if (worker.paused) this.resume(worker);
    worker.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), boundMs);
    });
    const outcome = await Promise.race([worker.exited, late]);
    clearTimeout(timer);
    if (outcome !== 'late') return { inTime: true, at: outcome.at };
    worker.child.kill('SIGKILL');
    return { inTime: false, at: (await worker.exited).at };
  }

  /** Stops every worker gracefully, in parallel, each killed after `boundMs`. */
  async stopAll(boundMs: number): Promise<void> {
    await Promise.all([...this.running].map((worker) => this.stop(worker, boundMs)));
  }

  /** Kills every worker now (a paused one is resumed first, so the signal is not left pending), and waits for them; none starts after. */
  async killAll(): Promise<void> {
    const workers = [...this.running];
    this.halted = true;
    this.killAllNow();
    await Promise.all(workers.map((worker) => worker.exited));
  }

  /** The run is interrupted: every worker killed now, and none started any more. */
  halt(): void {
    this.halted = true;
    this.killAllNow();
  }

  /** The run is over: no more exit hook. */
  close(): void {
    process.removeListener('exit', this.onExit);
  }

  private killAllNow(): void {
    for (const worker of this.running) {
      worker.ending = true;
      worker.child.kill('SIGCONT');
      worker.child.kill('SIGKILL');
    }
  }

  /** The last lines each worker printed, for a failed run's report. */
  outputs(): Record<string, string[]> {
    return Object.fromEntries([...this.everStarted].map((worker) => [worker.name, worker.output]));
  }
}
