import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnApplicationBootstrap, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { ClaimLoop, type WorkerLoopStatus } from '../common/claim-loop';
import { describeError } from '../common/errors';
import { PermanentPublishError } from '../errors/queuebox.errors';
import { outboxEventMessage, QueueBoxEvents } from '../events/queuebox.events';
import { BatchCompleter } from '../lease/batch-completer';
import { LeaseService } from '../lease/lease.service';
import type { OutboxClaim } from '../lease/lease.types';
import type { LeaseKeeper } from '../lease/lease-keeper';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { ResolvedOutboxOptions, ResolvedQueueBoxOptions } from '../queuebox.options';
import { activeTraceContext, inSpan, publishSpan } from '../tracing/trace-context';

const NAME = 'outbox poller';

/**
 * Claims outbox rows, publishes them with bounded concurrency and records the outcome, fenced.
 *
 * Starts with the application when `workers.outbox` is on; on shutdown it stops claiming and waits
 * up to `outbox.shutdownTimeoutMs` for in-flight publishes, before TypeORM closes its DataSource.
 * A publish still running then keeps its row `processing` until the lease expires and the reclaim
 * step returns it to `pending`.
 *
 * @example
 * // A script or test without the background loop (workers: { outbox: false }):
 * while ((await app.get(OutboxPoller).runOnce()) > 0);
 */
@Injectable()
export class OutboxPoller implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('QueueBox:OutboxPoller');
  private readonly options: ResolvedOutboxOptions;
  private readonly loop: ClaimLoop<OutboxClaim>;
  private readonly completer: BatchCompleter;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    private readonly lease: LeaseService,
    private readonly events: QueueBoxEvents,
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    this.options = rootOptions.outbox;
    this.completer = new BatchCompleter(lease);
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:outbox-reclaim:${rootOptions.tables.outbox.qualified}` },
      {
        claim: (limit) => this.lease.claimOutboxBatch({ limit, leaseMs: this.options.claimTimeoutMs }),
        process: (claim, keeper) => this.publish(claim, keeper),
        reclaim: () => this.reclaim(),
      },
      lease,
      this.logger,
      scheduler,
    );
  }

  onApplicationBootstrap(): void {
    if (this.rootOptions.workers.outbox) this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts claiming. Called at bootstrap when `workers.outbox` is on. */
  start(): void {
    if (this.loop.running) return;
    this.logger.log(messages.workerStarted(NAME, this.options.concurrency, this.options.batchSize, this.options.claimTimeoutMs));
    this.loop.start();
  }

  /** Stops claiming and waits up to `outbox.shutdownTimeoutMs` for in-flight publishes. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** Claims one batch, publishes it and waits for the outcome. Returns how many rows it claimed. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  /** Whether the loop runs and when it last claimed (read by health checks). */
  get status(): WorkerLoopStatus {
    return this.loop.status;
  }

  /** Like `runOnce()`, but resolves to the claims it worked on (`queuebox/testing` reports their outcome). */
  runBatch(): Promise<OutboxClaim[]> {
    return this.loop.runBatch();
  }

  /** Claims now instead of at the end of the current sleep (new messages were committed). */
  wake(): void {
    this.loop.wake();
  }

  /** How many publishes are running now. */
  get inFlightCount(): number {
    return this.loop.inFlightCount;
  }

  private async publish(claim: OutboxClaim, keeper: LeaseKeeper): Promise<void> {
    const { message } = claim;
    let failure: unknown;
    let published = false;
    const startedAt = performance.now();
    try {
      const name = this.options.route(message);
      const publisher = this.options.publishers[name];
      if (!publisher) throw new PermanentPublishError(messages.routeUnknown(name));
      await inSpan(message.headers, publishSpan(message), () =>
        // The publish span is the parent of whatever the destination does with the message.
        publisher.publish({ ...message, headers: activeTraceContext(message.headers) ?? message.headers }, keeper.signal),
      );
      published = true;
    } catch (error) {
      failure = error;
    }
    const durationMs = performance.now() - startedAt;
    await keeper.stop();
    if (this.loop.abandoned) return;
    if (keeper.lost) {
      if (published) this.logger.error(messages.markSentLost(message.messageId));
      else this.logger.warn(messages.publishClaimLost(message.messageId));
      return;
    }
    const event = outboxEventMessage(message);
    let what = 'delivery';
    try {
      if (published) {
        if (await this.completer.complete(claim)) this.events.emit('queuebox:published', { ...event, durationMs });
        else this.logger.error(messages.markSentLost(message.messageId));
        return;
      }
      const permanent = failure instanceof PermanentPublishError;
      if (permanent || claim.attempt >= this.options.maxAttempts) {
        what = 'dead-letter';
        const reason = permanent ? describeError(failure) : messages.attemptsExhausted(claim.attempt, describeError(failure));
        if (await this.lease.deadLetter(claim, reason)) {
          this.events.emit('queuebox:dead-lettered', { ...event, reason, durationMs });
          this.logger.warn(messages.deadLettered(message.messageId, reason));
        } else {
          this.logger.warn(messages.finishLost(message.messageId, what));
        }
        return;
      }
      what = 'retry';
      const delayMs = Math.max(0, Math.round(this.options.backoff(claim.attempt, failure)));
      if (await this.lease.retry(claim, { delayMs, error: failure })) {
        this.events.emit('queuebox:retry-scheduled', { ...event, delayMs, error: describeError(failure), durationMs });
        this.logger.warn(messages.publishFailed(message.messageId, claim.attempt, describeError(failure), delayMs));
      } else {
        this.logger.warn(messages.finishLost(message.messageId, what));
      }
    } catch (error) {
      this.logger.error(messages.finishFailed(message.messageId, what, describeError(error)));
    }
  }

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.lease.reclaimOutbox({ maxAttempts: this.options.maxAttempts });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
