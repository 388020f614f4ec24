import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnApplicationBootstrap, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../common/errors';
import { settledWithin, Waker } from '../common/wait';
import { PermanentPublishError, QueueBoxStateError } from '../errors/queuebox.errors';
import { LeaseService } from '../lease/lease.service';
import type { OutboxClaim } from '../lease/lease.types';
import type { LeaseKeeper } from '../lease/lease-keeper';
import { QueueBoxMetrics } from '../metrics/queuebox.metrics';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { ResolvedOutboxOptions, ResolvedQueueBoxOptions } from '../queuebox.options';

const MAX_CLAIM_RETRY_MS = 30_000;

/**
 * Claims outbox rows, publishes them with bounded concurrency and records the outcome, fenced.
 *
 * Starts with the application when `workers.outbox` is on; on shutdown it stops claiming and waits
 * up to `outbox.shutdownTimeoutMs` for in-flight publishes, before TypeORM closes its DataSource.
 * A publish still running then keeps its row `processing` until the lease expires and the reclaim
 * step returns it to `pending`.
 */
@Injectable()
export class OutboxPoller implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('QueueBox:OutboxPoller');
  private readonly options: ResolvedOutboxOptions;
  private readonly inFlight = new Map<string, { keeper: LeaseKeeper; done: Promise<void> }>();
  private readonly waker = new Waker();
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private loop?: Promise<void>;
  private reclaimTimer?: NodeJS.Timeout;
  private readonly reclaimTimerName: string;
  // Set when shutdown stopped waiting: late publishes then leave their rows alone.
  private abandoned = false;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    private readonly lease: LeaseService,
    private readonly metrics: QueueBoxMetrics,
    @Optional() private readonly scheduler?: SchedulerRegistry,
  ) {
    this.options = rootOptions.outbox;
    this.reclaimTimerName = `queuebox:outbox-reclaim:${rootOptions.tables.outbox.qualified}`;
  }

  onApplicationBootstrap(): void {
    if (this.rootOptions.workers.outbox) this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts claiming. Called at bootstrap when `workers.outbox` is on. */
  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    this.logger.log(messages.pollerStarted(this.options.concurrency, this.options.batchSize, this.options.claimTimeoutMs));
    void this.reclaim();
    this.reclaimTimer = setInterval(() => void this.reclaim(), this.options.reclaimIntervalMs);
    this.scheduler?.addInterval(this.reclaimTimerName, this.reclaimTimer);
    this.loop = this.run();
  }

  /** Stops claiming and waits up to `outbox.shutdownTimeoutMs` for in-flight publishes. */
  async stop(): Promise<void> {
    if (this.state !== 'running') {
      this.state = 'stopped';
      return;
    }
    this.state = 'stopping';
    if (this.reclaimTimer) {
      clearInterval(this.reclaimTimer);
      if (this.scheduler?.doesExist('interval', this.reclaimTimerName)) this.scheduler.deleteInterval(this.reclaimTimerName);
    }
    this.waker.wake();
    await this.loop;
    if (this.inFlight.size > 0) {
      this.logger.log(messages.shutdownWaiting(this.inFlight.size, this.options.shutdownTimeoutMs));
      const finished = await settledWithin(
        [...this.inFlight.values()].map((work) => work.done),
        this.options.shutdownTimeoutMs,
      );
      if (!finished) {
        this.abandoned = true;
        this.logger.warn(messages.shutdownAbandoned(this.inFlight.size));
        const reason = new QueueBoxStateError(messages.notRunning('The outbox poller'));
        for (const work of this.inFlight.values()) work.keeper.abort(reason);
      }
    }
    this.state = 'stopped';
    this.logger.log(messages.shutdownDone());
  }

  /** Claims one batch, publishes it and waits for the outcome. Returns how many rows it claimed. */
  async runOnce(): Promise<number> {
    const claims = await this.lease.claimOutboxBatch({ limit: this.options.batchSize, leaseMs: this.options.claimTimeoutMs });
    await Promise.all(claims.map((claim) => this.dispatch(claim)));
    return claims.length;
  }

  /** How many publishes are running now. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (this.state === 'running') {
      const free = this.options.concurrency - this.inFlight.size;
      if (free <= 0) {
        await this.waker.sleep(Number.POSITIVE_INFINITY); // a finishing publish wakes us
        continue;
      }
      const limit = Math.min(this.options.batchSize, free);
      let claims: OutboxClaim[];
      try {
        claims = await this.lease.claimOutboxBatch({ limit, leaseMs: this.options.claimTimeoutMs });
        failures = 0;
      } catch (error) {
        failures++;
        const retryMs = Math.min(MAX_CLAIM_RETRY_MS, this.options.pollIntervalMs * 2 ** Math.min(failures, 10));
        this.logger.error(messages.pollerClaimFailed(describeError(error), retryMs));
        await this.waker.sleep(retryMs);
        continue;
      }
      // Rows claimed while stopping are published too: shutdown waits for them like any other.
      for (const claim of claims) void this.dispatch(claim);
      if (claims.length < limit) await this.waker.sleep(this.options.pollIntervalMs);
    }
  }

  private dispatch(claim: OutboxClaim): Promise<void> {
    const keeper = this.lease.keep(claim);
    const done = this.process(claim, keeper).finally(() => {
      this.inFlight.delete(claim.id);
      if (this.state === 'running') this.waker.wake();
    });
    this.inFlight.set(claim.id, { keeper, done });
    return done;
  }

  private async process(claim: OutboxClaim, keeper: LeaseKeeper): Promise<void> {
    const { message } = claim;
    let failure: unknown;
    let published = false;
    try {
      const name = this.options.route(message);
      const publisher = this.options.publishers[name];
      if (!publisher) throw new PermanentPublishError(messages.routeUnknown(name));
      await publisher.publish(message, keeper.signal);
      published = true;
    } catch (error) {
      failure = error;
    }
    await keeper.stop();
    if (this.abandoned) return;
    if (keeper.lost) {
      if (published) this.logger.error(messages.markSentLost(message.messageId));
      else this.logger.warn(messages.publishClaimLost(message.messageId));
      return;
    }
    let what = 'delivery';
    try {
      if (published) {
        if (await this.lease.complete(claim)) {
          this.metrics.increment('queuebox_outbox_messages_published_total', { destination: message.destination });
        } else {
          this.logger.error(messages.markSentLost(message.messageId));
        }
        return;
      }
      const exhausted = claim.attempt >= this.options.maxAttempts;
      if (failure instanceof PermanentPublishError || exhausted) {
        what = 'dead-letter';
        const reason =
          exhausted && !(failure instanceof PermanentPublishError)
            ? messages.attemptsExhausted(claim.attempt, describeError(failure))
            : describeError(failure);
        if (await this.lease.deadLetter(claim, reason)) {
          this.metrics.increment('queuebox_outbox_messages_dead_lettered_total', { destination: message.destination });
          this.logger.warn(messages.deadLettered(message.messageId, reason));
        } else {
          this.logger.warn(messages.finishLost(message.messageId, what));
        }
        return;
      }
      what = 'retry';
      const delayMs = Math.max(0, Math.round(this.options.backoff(claim.attempt, failure)));
      if (await this.lease.retry(claim, { delayMs, error: failure })) {
        this.metrics.increment('queuebox_outbox_messages_retried_total', { destination: message.destination });
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
      if (pending + dead > 0) this.logger.warn(messages.pollerReclaimed(pending, dead));
    } catch (error) {
      this.logger.error(messages.pollerReclaimFailed(describeError(error)));
    }
  }
}
