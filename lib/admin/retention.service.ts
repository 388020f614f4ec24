import { type BeforeApplicationShutdown, Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { settledWithin } from '../common/wait';
import type { Dialect, PartitionKeeping } from '../dialects/dialect';
import type { RetentionKind } from '../dialects/dialect-rows';
import type { ResolvedQueueBoxOptions, ResolvedRetentionOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import type { RetentionResult } from './admin.types';

/**
 * Deletes `sent` outbox rows and `processed` inbox rows older than their configured age (and dead
 * rows when `retention.deadAfterMs` is set; dead inbox rows only once they are also older than the
 * dedupe window, `retention.inboxFinishedAfterMs`), in batches of `retention.batchSize`, each batch its
 * own statement and transaction, so claims never wait behind it. One replica at a time: a run
 * first tries the retention lock and is skipped when another replica holds it.
 *
 * Runs every `retention.intervalMs` when `retention.enabled` is on and this process runs a worker;
 * `runOnce()` runs it on demand anywhere.
 *
 * @example
 * const { outboxDeleted, skipped } = await app.get(RetentionService).runOnce();
 */
@Injectable()
export class RetentionService implements BeforeApplicationShutdown {
  private readonly logger: Logger;
  private readonly options: ResolvedRetentionOptions;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<RetentionResult> | undefined;
  private stopping = false;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Optional() @Inject(QUEUEBOX_IDENTITY) instance?: QueueBoxIdentity,
  ) {
    this.logger = new Logger(logContext('QueueBox:Retention', instance?.name));
    this.options = rootOptions.retention;
  }

  /** Starts the timer when retention is enabled and a worker runs here; called with the workers' start by `QueueBoxInstance`. */
  startWithWorkers(): void {
    const { workers } = this.rootOptions;
    if (this.options.enabled && (workers.outbox || workers.relay || workers.pull)) this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts the timer (the first run comes one interval after start-up). */
  start(): void {
    if (this.timer) return;
    this.stopping = false;
    this.logger.log(messages.retentionStarted(this.options.intervalMs));
    this.timer = setInterval(() => {
      if (this.running) return;
      this.runOnce().catch((error) => this.logger.error(messages.retentionFailed(describeError(error), this.options.intervalMs)));
    }, this.options.intervalMs);
    this.timer.unref();
  }

  /**
   * Stops the timer and waits for a run in progress to finish its current batch, as long as
   * shutdown waits for the workers' work (the longest `shutdownTimeoutMs`). Retention's statements
   * are not bounded (a batch may take long), so a batch that a silent partition never answers
   * would otherwise hold shutdown for as long as the partition lasts. One left running ends with
   * its connection when the DataSource closes: each batch is one statement, nothing is half done.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    this.timer = undefined;
    const running = this.running;
    if (!running) return;
    const { outbox, inbox, pull } = this.rootOptions;
    const waitMs = Math.max(outbox.shutdownTimeoutMs, inbox.relay.shutdownTimeoutMs, pull.shutdownTimeoutMs);
    if (!(await settledWithin([running.catch(() => undefined)], waitMs))) this.logger.warn(messages.retentionLeftRunning(waitMs));
  }

  /** One run: skipped (`skipped: true`) when another replica holds the lock. Concurrent calls share one run. */
  runOnce(): Promise<RetentionResult> {
    if (!this.running) {
      // `stop()` cuts short the run in progress only; a run asked for afterwards runs in full.
      this.stopping = false;
      this.running = this.run().finally(() => {
        this.running = undefined;
      });
    }
    return this.running;
  }

  private async run(): Promise<RetentionResult> {
    const started = Date.now();
    const keeping = await this.dialect.partitionKeeping?.();
    const result = await this.dialect.retentionWithLock(async () => {
      const o = this.options;
      // A dead inbox row still dedupes its key: deleting it inside the dedupe window would let a
      // redelivery in as a new message. So the window bounds it too (its last attempt came after
      // its receive, so this age also covers the receive).
      const inboxDeadAfterMs = o.deadAfterMs === false ? false : Math.max(o.deadAfterMs, o.inboxFinishedAfterMs);
      if (keeping) return this.dropPartitions(keeping, inboxDeadAfterMs);
      const outboxDeleted = await this.drain('outbox-sent', o.finishedAfterMs);
      const inboxDeleted = await this.drain('inbox-processed', o.inboxFinishedAfterMs);
      const deadDeleted =
        o.deadAfterMs === false || inboxDeadAfterMs === false
          ? 0
          : (await this.drain('outbox-dead', o.deadAfterMs)) + (await this.drain('inbox-dead', inboxDeadAfterMs));
      return { outboxDeleted, inboxDeleted, deadDeleted, skipped: false };
    });
    if (result === null) {
      this.logger.log(messages.retentionSkipped());
      return { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: true };
    }
    if (!result.partitionsDropped) {
      this.logger.log(messages.retentionDone(result.outboxDeleted, result.inboxDeleted, result.deadDeleted, Date.now() - started));
    }
    return result;
  }

  /**
   * The partitioned layout's retention: settled partitions whose rows are all past their ages
   * dropped whole, oldest first (no row deletes: nothing to vacuum). Each drop is logged.
   */
  private async dropPartitions(keeping: PartitionKeeping, inboxDeadAfterMs: number | false): Promise<RetentionResult> {
    const o = this.options;
    const { outbox, inbox } = await keeping.dropExpired({
      outbox: { finishedAfterMs: o.finishedAfterMs, deadAfterMs: o.deadAfterMs },
      inbox: { finishedAfterMs: o.inboxFinishedAfterMs, deadAfterMs: inboxDeadAfterMs },
    });
    this.logger.log(messages.partitionsDropped(outbox.dropped, inbox.dropped));
    return { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: false, partitionsDropped: [...outbox.dropped, ...inbox.dropped] };
  }

  /** Deletes batch after batch until one comes back short (or shutdown begins). */
  private async drain(kind: RetentionKind, olderThanMs: number): Promise<number> {
    let total = 0;
    for (;;) {
      const deleted = await this.dialect.retentionDeleteBatch({ kind, olderThanMs, limit: this.options.batchSize });
      total += deleted;
      if (deleted < this.options.batchSize || this.stopping) return total;
    }
  }
}
