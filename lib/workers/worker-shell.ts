// Worker runtime: the Nest-facing shell of a worker (started by the instance once it registered,
// stopped before TypeORM closes its DataSource, a batch run by hand, status) over its claim loops:
// one for the outbox poller and the inbox relay, one per handler for the pull worker.

import type { BeforeApplicationShutdown, Logger } from '@nestjs/common';
import { messages } from '../texts/queuebox.messages';
import type { WorkerClaim } from '../types/claims';
import type { ClaimLoop, WorkerLoopStatus } from './claim-loop';

/** How a worker describes one of its loops in the start-up log line. */
export interface LoopDescription {
  name: string;
  concurrency: number;
  batchSize: number;
  leaseMs: number;
}

/** The public face of a QueueBox worker (OutboxPoller, InboxRelay, PullWorker). */
export abstract class WorkerShell<C extends WorkerClaim<unknown>> implements BeforeApplicationShutdown {
  protected abstract readonly logger: Logger;

  /** Whether this process runs this worker: on in `workers`, and with work to do. Health checks list only these. */
  abstract get enabled(): boolean;

  /** The worker's loops, made when first asked for, each with its start-up log line. */
  protected abstract loops(): { loop: ClaimLoop<C>; describe: LoopDescription }[];

  /** Sets up what the loops need before they start (the pull worker's renewal connection). */
  protected async beforeStart(): Promise<void> {}

  /** Closes what `beforeStart` set up, after the loops stopped. */
  protected async afterStop(): Promise<void> {}

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /**
   * Starts claiming. `QueueBoxInstance` starts each enabled worker once the instance registered:
   * at bootstrap, or once a DataSource initialized after start-up is (a claim names its instance).
   */
  async start(): Promise<void> {
    const loops = this.loops();
    if (loops.every(({ loop }) => loop.running)) return;
    await this.beforeStart();
    for (const { loop, describe } of loops) {
      if (loop.running) continue;
      this.logger.log(messages.workerStarted(describe.name, describe.concurrency, describe.batchSize, describe.leaseMs));
      loop.start();
    }
  }

  /** Stops claiming and waits up to each loop's `shutdownTimeoutMs` for work in flight. */
  async stop(): Promise<void> {
    await Promise.all(this.loops().map(({ loop }) => loop.stop()));
    await this.afterStop();
  }

  /** Runs each loop's reclaim step now and claims at once (a dead instance's leases were ended). */
  async reclaimNow(): Promise<void> {
    await Promise.all(this.loops().map(({ loop }) => loop.reclaimNow()));
  }

  /** Whether each loop runs and when it last claimed (read by health checks). */
  get statuses(): WorkerLoopStatus[] {
    return this.loops().map(({ loop }) => loop.status);
  }
}

/**
 * A worker of one claim loop (the outbox poller, the inbox relay): its loop's status, and a batch
 * run by hand (scripts, tests, `queuebox/testing`).
 */
export abstract class SingleLoopWorker<C extends WorkerClaim<unknown>> extends WorkerShell<C> {
  protected abstract readonly loop: ClaimLoop<C>;
  /** Its start-up log line. */
  protected abstract get description(): LoopDescription;

  protected loops(): { loop: ClaimLoop<C>; describe: LoopDescription }[] {
    return [{ loop: this.loop, describe: this.description }];
  }

  /** Whether the loop runs and when it last claimed (read by health checks). */
  get status(): WorkerLoopStatus {
    return this.loop.status;
  }

  /** Claims one batch, works through it and waits for the outcomes. Returns how many rows it claimed. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  /** Like `runOnce()`, but resolves to the claims it worked on (`queuebox/testing` reports their outcome). */
  runBatch(): Promise<C[]> {
    return this.loop.runBatch();
  }

  /** How many claims it holds now (running, waiting for a slot, or having their outcome written). */
  get inFlightCount(): number {
    return this.loop.inFlightCount;
  }
}
