import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { describeError, isInstance } from '../common/errors';
import { SpareAbortControllers } from '../common/spare-abort-controllers';
import type { Dialect } from '../dialects/dialect';
import { PermanentPublishError, PublishError } from '../errors/queuebox.errors';
import { outboxEventMessage, QueueBoxEvents } from '../events/queuebox.events';
import { LeaseService } from '../lease/lease.service';
import { LeaseKeeper } from '../lease/lease-keeper';
import type { ResolvedOutboxOptions, ResolvedQueueBoxOptions } from '../options/options.resolved';
import { QUEUEBOX_DIALECT, QUEUEBOX_INSTANCE, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { activeTraceContext, inSpan, publishSpan } from '../tracing/trace-context';
import type { OutboxClaim } from '../types/claims';
import type { QueueBoxInstanceName } from '../types/instance';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';
import { BatchCompleter } from '../workers/batch-completer';
import { ClaimLoop, type WorkerLoopStatus, type WorkSlot } from '../workers/claim-loop';
import { DatabaseRecovery } from '../workers/database-recovery';
import { OutcomeRecorder, type StepOutcome } from '../workers/outcome-recorder';
import { WorkerShell } from '../workers/worker-shell';
import { OutboxClaims } from './outbox.claims';

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
export class OutboxPoller extends WorkerShell<OutboxClaim> {
  protected readonly logger = new Logger('QueueBox:OutboxPoller');
  private readonly options: ResolvedOutboxOptions;
  private readonly loop: ClaimLoop<OutboxClaim>;
  private readonly claims: OutboxClaims;
  /**
   * When each claim's lease ends at the latest, on this process's monotonic clock: the send time of
   * the claim (or last renewal) statement plus the lease. The database set the expiry to its own
   * clock plus the lease *after* that send, so this never overestimates what is left, whatever the
   * clock difference between the hosts.
   */
  private readonly leaseDeadlines = new WeakMap<OutboxClaim, number>();
  /** Publish signals nobody used, reused by later publishes (see `publishWithin`). */
  private readonly controllers: SpareAbortControllers;
  private overrunningPublishes = 0;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) dialect: Dialect,
    private readonly lease: LeaseService,
    events: QueueBoxEvents,
    recovery: DatabaseRecovery,
    @Inject(QUEUEBOX_INSTANCE) instance: QueueBoxInstanceName,
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    super();
    this.options = rootOptions.outbox;
    this.claims = new OutboxClaims(dialect, events);
    const completer = new BatchCompleter(lease);
    const recorder = new OutcomeRecorder<OutboxClaim>({
      lease,
      events,
      logger: this.logger,
      nameOf: (message) => message.messageId,
      eventMessage: (claim) => outboxEventMessage(claim.message),
      // Retrying cannot help.
      isFinal: (failure) => isInstance(failure, PermanentPublishError),
      complete: (claim) => completer.complete(claim),
      completionLost: (claim) => messages.markSentLost(claim.message.messageId),
    });
    this.controllers = new SpareAbortControllers(this.options.concurrency);
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:${instance.name}:outbox-reclaim`, recovery },
      {
        claim: (limit) => this.claim(limit),
        step: (claim, keeper, slot) => this.publish(claim, keeper, slot),
        keyOf: (claim) => claim.message.key,
        reclaim: () => this.reclaim(),
        keep: (claim) =>
          new LeaseKeeper(
            claim,
            () => this.renew(claim),
            (lost) => this.lease.markLost(lost),
          ),
      },
      recorder,
      this.logger,
      scheduler,
    );
  }

  get enabled(): boolean {
    return this.rootOptions.workers.outbox;
  }

  protected loops() {
    const { concurrency, batchSize, leaseMs } = this.options;
    return [{ loop: this.loop, describe: { name: NAME, concurrency, batchSize, leaseMs } }];
  }

  /** Whether the loop runs and when it last claimed (read by health checks). */
  get status(): WorkerLoopStatus {
    return this.loop.status;
  }

  /** Claims one batch, publishes it and waits for the outcomes. Returns how many rows it claimed. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
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

  private async claim(limit: number): Promise<OutboxClaim[]> {
    const sentAt = performance.now();
    const claims = await this.claims.claim({ limit, leaseMs: this.options.leaseMs });
    for (const claim of claims) this.leaseDeadlines.set(claim, sentAt + claim.leaseMs);
    return claims;
  }

  private async renew(claim: OutboxClaim): Promise<boolean> {
    const sentAt = performance.now();
    const renewed = await this.lease.renew(claim);
    if (renewed) this.leaseDeadlines.set(claim, sentAt + claim.leaseMs);
    return renewed;
  }

  /**
   * The step: publishes the claimed message within `publishTimeout`. Its outcome (`complete`: the
   * recorder marks it `sent`; `failed`; `lost`) is written outside the slot, so the next publish
   * starts while it is; a publish that ignored its aborted signal keeps the slot until it ends.
   */
  private async publish(claim: OutboxClaim, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<OutboxClaim>> {
    const { message } = claim;
    let failure: unknown;
    let published = false;
    let publisher: Publisher | undefined;
    const startedAt = performance.now();
    try {
      publisher = this.publisherFor(message);
    } catch (error) {
      failure = error;
    }
    if (publisher && (this.leaseLeftNow(claim, keeper) ?? (await this.leaseLeftAfterRenewal(claim, keeper)))) {
      try {
        const chosen = publisher;
        await inSpan(
          message.headers,
          () => publishSpan(message),
          () => {
            // Inside the publish span, the destination continues from it (a copy only when a span is active).
            const traced = activeTraceContext(message.headers);
            return this.publishWithin(chosen, traced ? { ...message, headers: traced } : message, keeper, (settled) =>
              slot.holdUntil(settled),
            );
          },
        );
        published = true;
      } catch (error) {
        failure = error;
      }
    } else if (publisher) {
      await keeper.stop();
      if (keeper.lost || this.lease.isLost(claim))
        return { kind: 'lost', level: 'warn', log: messages.publishClaimLost(message.messageId) };
      return { kind: 'abandoned' };
    }
    const durationMs = performance.now() - startedAt;
    slot.release();
    await keeper.stop();
    if (this.loop.abandoned) return { kind: 'abandoned' };
    if (keeper.lost) {
      return published
        ? { kind: 'lost', level: 'error', log: messages.markSentLost(message.messageId) }
        : { kind: 'lost', level: 'warn', log: messages.publishClaimLost(message.messageId) };
    }
    if (!published) {
      return {
        kind: 'failed',
        failure,
        durationMs,
        policy: this.options,
        retryLog: (error, delayMs) => messages.publishFailed(message.messageId, claim.attempt, error, delayMs),
      };
    }
    return { kind: 'complete', durationMs };
  }

  /** The publisher `outbox.route` names; a throwing route or an unknown name is permanent (retrying cannot help). */
  private publisherFor(message: OutboundMessage): Publisher {
    let name: unknown;
    try {
      name = this.options.route(message);
    } catch (error) {
      throw new PermanentPublishError(messages.routeFailed(describeError(error)), { cause: error });
    }
    const { publishers } = this.options;
    if (typeof name !== 'string' || !Object.hasOwn(publishers, name)) throw new PermanentPublishError(messages.routeUnknown(name));
    return publishers[name];
  }

  /**
   * Whether at least `publishTimeout` of the lease is left, so the publish ends (or is aborted)
   * while the claim is held. With less left (renewals were late, or the claim waited long for a
   * slot) it renews first; a lost or failed renewal means the message is not published now.
   * Renewing keeps the attempt; giving the claim back would cost a claim round trip and reorder nothing.
   */
  private leaseLeftNow(claim: OutboxClaim, keeper: LeaseKeeper): boolean | undefined {
    if (keeper.aborted) return false;
    const left = (this.leaseDeadlines.get(claim) ?? 0) - performance.now();
    // Undecided: renew first (asynchronous, so kept out of the common path).
    return left >= this.options.publishTimeoutMs ? true : undefined;
  }

  private async leaseLeftAfterRenewal(claim: OutboxClaim, keeper: LeaseKeeper): Promise<boolean> {
    try {
      return (await this.renew(claim)) && !keeper.aborted;
    } catch (error) {
      this.logger.warn(messages.leaseTooShortRenewFailed(claim.message.messageId, describeError(error)));
      return false;
    }
  }

  /**
   * Runs one publish with `outbox.publishTimeout`: at the deadline its signal aborts and the
   * attempt fails with a retryable `PublishError`, even if the publisher ignores the signal (then
   * `overran` gets a promise of its end: its concurrency slot stays taken until then). The
   * publisher's signal also aborts when the claim's does (lost claim, shutdown). One controller and
   * one timer per publish, and the keeper's abort forwarded to it: `AbortSignal.any` costs more per
   * call and, on Node.js 20, keeps its composed signals alive longer than the publish; the keeper
   * makes its own signal only when someone reads it. The controller of a publish that settled with
   * its signal untouched (not aborted, no listener left) serves a later publish: the signal is the
   * publisher's until its promise settles, not after.
   */
  private publishWithin(
    publisher: Publisher,
    message: OutboundMessage,
    keeper: LeaseKeeper,
    overran: (settled: Promise<void>) => void,
  ): Promise<void> {
    const timeoutMs = this.options.publishTimeoutMs;
    const controller = this.controllers.take();
    const { signal } = controller;
    return new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let unsubscribe: () => void = () => undefined;
      const settle = () => {
        clearTimeout(timer);
        unsubscribe();
      };
      let publishing: Promise<void> | undefined;
      const abort = (reason: unknown) => {
        settle();
        if (!signal.aborted) controller.abort(reason);
        reject(signal.reason);
        if (publishing) overran(this.overrunning(publishing, message.messageId, timeoutMs));
      };
      unsubscribe = keeper.onAbort(abort);
      if (signal.aborted) return;
      timer = setTimeout(() => abort(new PublishError(messages.publishTimedOut(timeoutMs))), timeoutMs);
      publishing = Promise.resolve().then(() => publisher.publish(message, signal));
      publishing.then(
        () => {
          settle();
          this.controllers.giveBack(controller);
          resolve();
        },
        (error) => {
          settle();
          this.controllers.giveBack(controller);
          reject(error);
        },
      );
    });
  }

  /**
   * Publishes that QueueBox stopped waiting for (their signal aborted: timeout, lost claim,
   * shutdown) and that have not ended yet: each still holds its `concurrency` slot.
   */
  get overrunningCount(): number {
    return this.overrunningPublishes;
  }

  /** Counts and logs a publish still running after its signal aborted; settles when it ends. */
  private overrunning(publishing: Promise<void>, messageId: string, timeoutMs: number): Promise<void> {
    this.overrunningPublishes++;
    this.logger.warn(messages.publishOverrunning(messageId, timeoutMs, this.overrunningPublishes));
    const ended = () => {
      this.overrunningPublishes--;
    };
    return publishing.then(ended, ended);
  }

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.claims.reclaim({ maxAttempts: this.options.maxAttempts });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
