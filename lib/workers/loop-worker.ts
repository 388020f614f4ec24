// Worker runtime: the Nest-facing shell (start, stop at shutdown, runOnce, status) of a worker that
// runs one ClaimLoop. Base class of OutboxPoller and InboxRelay.

import type { BeforeApplicationShutdown, Logger } from '@nestjs/common';
import type { Claim } from '../lease/lease.types';
import type { ResolvedWorkerOptions } from '../options/options.resolver';
import { messages } from '../queuebox.messages';
import type { ClaimLoop, WorkerLoopStatus } from './claim-loop';

/**
 * The public face of a worker that runs one claim loop (the outbox poller, the inbox relay):
 * start, stop (before TypeORM closes its DataSource), run one batch by hand, status.
 */
export abstract class LoopWorker<C extends Claim> implements BeforeApplicationShutdown {
  /** Names the worker in logs ("outbox poller", "inbox relay"). */
  protected abstract readonly name: string;
  protected abstract readonly logger: Logger;
  protected abstract readonly options: ResolvedWorkerOptions;
  protected abstract readonly loop: ClaimLoop<C>;

  /** Whether this process runs this worker: on in `workers`, and with work to do. Health checks list only these. */
  abstract get enabled(): boolean;

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts claiming (at bootstrap when this worker is on in `workers`). */
  start(): void {
    if (this.loop.running) return;
    this.logger.log(messages.workerStarted(this.name, this.options.concurrency, this.options.batchSize, this.options.leaseMs));
    this.loop.start();
  }

  /** Stops claiming and waits up to this worker's `shutdownTimeoutMs` for work in flight. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** Claims one batch, works through it and waits for the outcome. Returns how many rows it claimed. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  /** Like `runOnce()`, but resolves to the claims it worked on (`queuebox/testing` reports their outcome). */
  runBatch(): Promise<C[]> {
    return this.loop.runBatch();
  }

  /** Whether the loop runs and when it last claimed (read by health checks). */
  get status(): WorkerLoopStatus {
    return this.loop.status;
  }
}
