import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { describeError, isInstance } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { settledWithin } from '../common/wait';
import type { Dialect } from '../dialects/dialect';
import { PermanentPublishError, PublishError } from '../errors/queuebox.errors';
import { outboxEventMessage, QueueBoxEvents } from '../events/queuebox.events';
import { LeaseService } from '../lease/lease.service';
import { LeaseKeeper, LeaseKeeperGroup } from '../lease/lease-keeper';
import type { ResolvedOutboxOptions, ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import { activeTraceContext, inSpan, publishSpan, spanNeeded } from '../tracing/trace-context';
import type { OutboxClaim } from '../types/claims';
import type { QueueBoxIdentity } from '../types/instance';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';
import { BatchCompleter } from '../workers/batch-completer';
import { ClaimLoop, type WorkSlot } from '../workers/claim-loop';
import { ClaimPauses } from '../workers/claim-pauses';
import { DatabaseRecovery } from '../workers/database-recovery';
import { InstanceLiveness } from '../workers/instance-liveness';
import { type FinishedFollower, OutcomeRecorder, type StepOutcome } from '../workers/outcome-recorder';
import { SingleLoopWorker } from '../workers/worker-shell';
import { OutboxClaims } from './outbox.claims';
import { OutboxFollowers } from './outbox.followers';
import { OutboxRateLimits } from './outbox.rate-limits';
import { configuredDestinations } from './outbox-publishers';
import { PublishBatches } from './publish-batches';
import { ABORT_GRACE_MS, type PublishAbort, PublishCall, PublishDeadlines, type PublishFailure } from './publish-call';

const NAME = 'outbox poller';

export { ABORT_GRACE_MS } from './publish-call';

/** How a publish (one message's, or a batch call's: shared by its messages) abandoned at shutdown ended, as far as QueueBox saw it. */
type AbandonedPublish = { ended?: 'published' | 'failed'; settled: Promise<void> };

/** A head's publish in its followers' first call (`publishLeading`): the head's failure, the followers published, and whether a failure stopped them. */
interface LedCall {
  failure: PublishFailure | undefined;
  published: FinishedFollower<OutboxClaim>[];
  stopped: boolean;
}

/**
 * Claims outbox rows, publishes them with bounded concurrency and records the outcome, fenced.
 * A publisher with `publishBatch` gets the messages claimed together in calls of up to
 * `outbox.publishBatchSize` (`PublishBatches`), each message's outcome recorded on its own.
 *
 * Starts with the application when `workers.outbox` is on; on shutdown it stops claiming and waits
 * up to `outbox.shutdownTimeoutMs` for in-flight publishes, before TypeORM closes its DataSource.
 * A publish still running then has its signal aborted and its outcome is not written: the row is
 * released when the instance deregisters (`pending`, no attempt charged; `QueueBoxInstance`), and
 * a publish that ignores its signal is named there as a possible duplicate.
 *
 * @example
 * // A script or test without the background loop (workers: { outbox: false }):
 * while ((await app.get(OutboxPoller).runOnce()) > 0);
 */
@Injectable()
export class OutboxPoller extends SingleLoopWorker<OutboxClaim> {
  protected readonly logger: Logger;
  private readonly options: ResolvedOutboxOptions;
  protected readonly loop: ClaimLoop<OutboxClaim>;
  private readonly claims: OutboxClaims;
  /** `outbox.maxFollowers` (issue 36): the rows of a claimed head's key published after it, in its slot; none when 0. */
  private readonly followers?: OutboxFollowers;
  /** The followers each head's step published, for `runBatch` (`queuebox/testing` reports them too). */
  private readonly publishedFollowers = new WeakMap<OutboxClaim, readonly FinishedFollower<OutboxClaim>[]>();
  /**
   * Each claim statement's batch: the one renewal timer of its claims, and when the statement was
   * sent (their leases began no earlier: see `LeaseKeeper.leaseFrom`). Keyed by the array the loop
   * hands back to `keep`.
   */
  private readonly batches = new WeakMap<readonly OutboxClaim[], { group: LeaseKeeperGroup; sentAt: number }>();
  /** The `publishTimeout` of every publish in flight, on one timer. */
  private readonly deadlines: PublishDeadlines;
  /** The `publishBatch` calls of the publishers that have the method (`outbox.publishBatchSize` messages a call at most). */
  private readonly publishBatches: PublishBatches;
  private overrunningPublishes = 0;
  /** `outbox.rateLimits` (issue 41), and the claims of the current batches that got no token: how long each is put off. */
  private readonly rateLimits?: OutboxRateLimits;
  private readonly deferrals?: WeakMap<OutboxClaim, number>;
  /** Publishes whose signal the shutdown aborted while they ran, by message id. */
  private readonly abandoned = new Map<string, AbandonedPublish>();

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) dialect: Dialect,
    private readonly lease: LeaseService,
    events: QueueBoxEvents,
    recovery: DatabaseRecovery,
    @Inject(QUEUEBOX_IDENTITY) instance: QueueBoxIdentity,
    private readonly liveness: InstanceLiveness,
    private readonly pauses: ClaimPauses,
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    super();
    this.logger = new Logger(logContext('QueueBox:OutboxPoller', instance.name));
    this.options = rootOptions.outbox;
    this.claims = new OutboxClaims(dialect, events);
    if (this.options.maxFollowers > 0) this.followers = new OutboxFollowers(dialect, lease, this.options.maxFollowers, this.logger);
    const rateLimits = new OutboxRateLimits(dialect, this.options.rateLimits, this.logger);
    if (rateLimits.enabled) {
      this.rateLimits = rateLimits;
      this.deferrals = new WeakMap();
    }
    const completer = new BatchCompleter(lease);
    const recorder = new OutcomeRecorder<OutboxClaim>({
      lease,
      events,
      logger: this.logger,
      nameOf: (message) => message.messageId,
      eventMessage: (claim) => outboxEventMessage(claim.message),
      // Retrying cannot help.
      isFinal: (failure) => isInstance(failure, PermanentPublishError),
      complete: (waiter) => completer.complete(waiter),
      completeWithFollowers: (claim, followers) =>
        (this.followers as OutboxFollowers).complete(
          claim,
          followers.map((follower) => follower.id),
        ),
      completionLost: (claim) => messages.markSentLost(claim.message.messageId, this.liveness.explainLoss(claim.leaseMs)),
    });
    const timeoutMs = this.options.publishTimeoutMs;
    this.deadlines = new PublishDeadlines(timeoutMs, () => new PublishError(messages.publishTimedOut(timeoutMs)));
    this.publishBatches = new PublishBatches(
      { size: this.options.publishBatchSize, concurrency: this.options.concurrency },
      this.deadlines,
      {
        abandoned: () => this.loop.abandoned,
        overran: (publishing, messageIds, abortedBy) => this.overrunning(publishing, messageIds, abortedBy),
        slotFreed: () => this.loop.wake(),
      },
    );
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:${instance.name}:outbox-reclaim`, recovery },
      {
        claim: (limit) => this.claim(limit),
        step: (claim, keeper, slot) => this.publish(claim, keeper, slot),
        keyOf: (claim) => claim.message.key,
        reclaim: () => this.reclaim(),
        keep: (claim, batch) => this.keep(claim, batch),
        released: (claim) => void this.followers?.take(claim),
      },
      recorder,
      this.logger,
      scheduler,
      // Call slots of publishBatch calls that timed out and still run; messages waiting for a call
      // are handed back when every slot is.
      { stuckSlots: () => this.publishBatches.stuckSlots, releaseUnstarted: () => this.publishBatches.releaseWaiting() },
    );
  }

  get enabled(): boolean {
    return this.rootOptions.workers.outbox;
  }

  protected get description() {
    const { concurrency, batchSize, leaseMs } = this.options;
    return { name: NAME, concurrency, batchSize, leaseMs };
  }

  /** The destinations the options name (`configuredDestinations`): the metrics show each from start-up. */
  configuredDestinations(): string[] {
    return configuredDestinations(this.options);
  }

  /** Like `runOnce()`, but resolves to the claims it worked on, each followed by the followers its step published. */
  override async runBatch(): Promise<OutboxClaim[]> {
    const claims = await super.runBatch();
    return claims.flatMap((claim) => [
      claim,
      ...(this.publishedFollowers.get(claim) ?? []).map((follower) => follower.claim as OutboxClaim),
    ]);
  }

  /** Claims now instead of at the end of the current sleep (new messages were committed). */
  wake(): void {
    this.loop.wake();
  }

  private async claim(limit: number): Promise<OutboxClaim[]> {
    const sentAt = performance.now();
    // Issue 40: the paused destinations, read at most once per poll interval (none: the plain claim).
    const { pollIntervalMs, leaseMs } = this.options;
    const paused = this.pauses.namesNow('outbox', pollIntervalMs) ?? (await this.pauses.names('outbox', pollIntervalMs));
    const claims = await this.claims.claim({ limit, leaseMs, paused });
    // Issue 41: the batch's claims of rate-limited destinations take their tokens now, together.
    if (this.rateLimits && claims.length > 0) {
      for (const [claim, delayMs] of (await this.rateLimits.admit(claims)) ?? []) this.deferrals?.set(claim, delayMs);
    }
    // The rows right after the claimed heads of their keys; a head put off (no token) takes none, and
    // each head's run stops before a row of a paused or rate-limited destination (claimed on its own).
    if (this.followers && claims.length > 0) {
      const { rateLimits } = this;
      await this.followers.read(
        this.deferrals ? claims.filter((claim) => !this.deferrals?.has(claim)) : claims,
        (destination) => paused.includes(destination) || (rateLimits?.limited(destination) ?? false),
      );
    }
    // One renewal timer for the batch (its claims are due together), and when their leases began.
    this.batches.set(claims, { group: new LeaseKeeperGroup(this.options.leaseMs), sentAt });
    return claims;
  }

  /**
   * A keeper for a claim of `batch`: renewed on the batch's timer, its lease counted from the
   * claim's send time (a claim from elsewhere counts no lease left: its publish renews first).
   */
  private keep(claim: OutboxClaim, batch: readonly OutboxClaim[]): LeaseKeeper {
    const found = this.batches.get(batch);
    return this.lease.keep(claim, { group: found?.group, leaseFrom: found?.sentAt ?? Number.NEGATIVE_INFINITY });
  }

  /**
   * The step: publishes the claimed message within `publishTimeout`. Its outcome (`succeeded`: the
   * recorder marks it `sent`; `failed`; `lost`) is written outside the slot, so the next publish
   * starts while it is; a publish that ignored its aborted signal keeps the slot until it ends. A
   * lease too short for the publish is renewed first: a lost or failed renewal means the message
   * is not published now. A message for a `publishBatch` publisher (without followers)
   * joins that publisher's next call instead, and gives its slot to the next claim while it waits.
   */
  private async publish(claim: OutboxClaim, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<OutboxClaim>> {
    const followers = this.followers?.take(claim);
    const deferMs = this.deferrals?.get(claim);
    if (deferMs !== undefined) return this.putOff(claim, keeper, slot, deferMs);
    const { message } = claim;
    const startedAt = performance.now();
    let failure: PublishFailure | undefined;
    let led: LedCall | undefined;
    try {
      const publisher = this.publisherFor(message);
      if (!(this.leaseLeftNow(claim, keeper) ?? (await this.leaseLeftAfterRenewal(claim, keeper)))) {
        slot.release();
        await keeper.stop();
        if (keeper.lost || this.lease.isLost(claim)) {
          return {
            kind: 'lost',
            level: 'warn',
            log: messages.publishClaimLost(message.messageId, this.liveness.explainLoss(claim.leaseMs)),
          };
        }
        return { kind: 'abandoned' };
      }
      if (publisher.publishBatch && !followers?.length) {
        // With the messages claimed beside it, in a call of up to `publishBatchSize`. The slot goes
        // to the next claim at once: `concurrency` bounds the calls, which is where messages wait.
        const joined = this.publishBatches.publish(publisher, { claim, keeper });
        slot.release();
        const ended = await joined;
        if (ended === 'released') {
          await keeper.stop();
          return this.loop.abandoned ? { kind: 'abandoned' } : { kind: 'released' };
        }
        failure = ended;
      } else if (followers?.length && this.leadsItsFollowers(publisher)) {
        // The head goes in its followers' first call: the key's messages in one round trip.
        led = await this.publishLeading(publisher, claim, followers, keeper, slot);
        failure = led.failure;
      } else if (spanNeeded(message.headers)) failure = await this.publishInSpan(publisher, message, keeper, slot);
      else {
        // Awaited here rather than in a function of its own: one async frame per message fewer.
        const call = this.publishCall(message, keeper);
        failure = this.slotKeptIfOverran(call, await call.start(publisher), slot);
      }
    } catch (error) {
      failure = { error, overran: false };
    }
    const durationMs = performance.now() - startedAt;
    const published = failure === undefined && followers ? await this.publishFollowers(claim, followers, keeper, slot, led) : undefined;
    // The list the outcome carries, kept as it is: no copy per head on the publish path.
    if (published?.length) this.publishedFollowers.set(claim, published);
    slot.release();
    // Renewals stop before the finishing write (a renewal under way is waited for).
    await keeper.stop();
    return this.outcomeOf(claim, keeper, durationMs, failure, published);
  }

  /**
   * After its head published: the head's followers in key order, in the head's slot and under its
   * claim (its lease checked before each publish, and renewed when short): one at a time, or, for
   * a publisher that `keepsBatchOrder`, in `publishBatch` calls of up to `publishBatchSize`. Stops
   * at the first that fails (it stays `pending`, its attempt not counted, and is claimed next as a
   * head, where a failure counts), when the claim is lost, or when the poller stops. Returns those
   * published, which the recorder marks sent with the head, in one statement.
   */
  private async publishFollowers(
    claim: OutboxClaim,
    followers: readonly OutboxClaim[],
    keeper: LeaseKeeper,
    slot: WorkSlot,
    led?: LedCall,
  ): Promise<FinishedFollower<OutboxClaim>[]> {
    // Those of the head's own call (`publishLeading`) first.
    const published: FinishedFollower<OutboxClaim>[] = led?.published ?? [];
    if (led?.stopped) return published;
    let next = published.length;
    while (next < followers.length) {
      if (this.loop.stopped || !(this.leaseLeftNow(claim, keeper) ?? (await this.leaseLeftAfterRenewal(claim, keeper)))) break;
      const startedAt = performance.now();
      // Routed once: the publisher serves the run, or this follower's publish alone.
      const publisher = this.routedOrNone(followers[next].message);
      if (publisher?.publishBatch && publisher.keepsBatchOrder === true) {
        const run = this.orderedRun(publisher, followers, next);
        const ends = await this.publishBatches.call(
          publisher,
          run.map((follower) => ({ claim: follower, keeper })),
          (until) => slot.holdUntil(until),
        );
        if (!this.takeOrderedEnds(claim, run, ends, performance.now() - startedAt, published)) break;
        next += run.length;
        continue;
      }
      const follower = followers[next++];
      const failure = await this.publishFollower(follower.message, publisher, keeper, slot);
      if (failure !== undefined) {
        this.followerFailed(follower, claim, failure);
        break;
      }
      published.push({ claim: follower, details: { durationMs: performance.now() - startedAt } });
    }
    return published;
  }

  /** A head's publisher takes the head in its followers' first call: it `keepsBatchOrder`, and a call holds more than one message. */
  private leadsItsFollowers(publisher: Publisher): boolean {
    return publisher.publishBatch !== undefined && publisher.keepsBatchOrder === true && this.options.publishBatchSize > 1;
  }

  /**
   * The head and the followers after it routed to the same publisher (which `keepsBatchOrder`), in
   * one `publishBatch` call of up to `publishBatchSize`: the head's end is its publish's, and the
   * followers' ends are taken as `publishFollowers` takes a call's. A head that failed (or whose
   * claim was lost during the call) stops its followers, whatever the call reported for them.
   */
  private async publishLeading(
    publisher: Publisher,
    head: OutboxClaim,
    followers: readonly OutboxClaim[],
    keeper: LeaseKeeper,
    slot: WorkSlot,
  ): Promise<LedCall> {
    const startedAt = performance.now();
    const run =
      this.routedOrNone(followers[0].message) === publisher
        ? [head, ...this.orderedRun(publisher, followers, 0, this.options.publishBatchSize - 1)]
        : [head];
    const ends = await this.publishBatches.call(
      publisher,
      run.map((claimed) => ({ claim: claimed, keeper })),
      (until) => slot.holdUntil(until),
    );
    const published: FinishedFollower<OutboxClaim>[] = [];
    const [headEnd] = ends;
    if (headEnd !== undefined) {
      this.reportBrokenOrder(run, ends, 0);
      return { failure: headEnd, published, stopped: true };
    }
    const taken = this.takeOrderedEnds(head, run.slice(1), ends.slice(1), performance.now() - startedAt, published);
    return { failure: undefined, published, stopped: !taken };
  }

  /**
   * How an ordered call of `head`'s followers (`run`) ended (`ends`, in the same order): those
   * before the first failure join `published`; the failed one is logged, and one reported published
   * after it is not counted and logged as a broken promise. False when one failed (stop there).
   */
  private takeOrderedEnds(
    head: OutboxClaim,
    run: readonly OutboxClaim[],
    ends: readonly (PublishFailure | undefined)[],
    durationMs: number,
    published: FinishedFollower<OutboxClaim>[],
  ): boolean {
    const failed = ends.findIndex((end) => end !== undefined);
    for (const follower of failed === -1 ? run : run.slice(0, failed)) published.push({ claim: follower, details: { durationMs } });
    if (failed === -1) return true;
    this.followerFailed(run[failed], head, ends[failed]);
    this.reportBrokenOrder(run, ends, failed);
    return false;
  }

  /** Logs a message of an ordered call (`run`) reported published after the one at `failed` failed: the publisher broke `keepsBatchOrder`. */
  private reportBrokenOrder(run: readonly OutboxClaim[], ends: readonly (PublishFailure | undefined)[], failed: number): void {
    const later = ends.findIndex((end, i) => i > failed && end === undefined);
    if (later !== -1) this.logger.error(messages.outboxBatchOrderBroken(run[failed].message.messageId, run[later].message.messageId));
  }

  /**
   * The followers from `from` that go out in one `publishBatch` call of `publisher` (the one the
   * follower at `from` is routed to, which `keepsBatchOrder`): those routed to it, up to `room`
   * (`publishBatchSize`, or less beside a head).
   */
  private orderedRun(
    publisher: Publisher,
    followers: readonly OutboxClaim[],
    from: number,
    room = this.options.publishBatchSize,
  ): OutboxClaim[] {
    const run = [followers[from]];
    for (let i = from + 1; i < followers.length && run.length < room; i++) {
      if (this.routedOrNone(followers[i].message) !== publisher) break;
      run.push(followers[i]);
    }
    return run;
  }

  /** The publisher `outbox.route` names, or none when the route fails (`publishFollower` then fails with the route's error). */
  private routedOrNone(message: OutboundMessage): Publisher | undefined {
    try {
      return this.publisherFor(message);
    } catch {
      return undefined;
    }
  }

  private followerFailed(follower: OutboxClaim, head: OutboxClaim, failure: PublishFailure | 'released' | undefined): void {
    const error = typeof failure === 'object' ? describeError(failure.error) : String(failure);
    this.logger.warn(messages.outboxFollowerFailed(follower.message.messageId, head.message.messageId, error));
  }

  /** One follower's publish, by `routed` (none: the route failed, and fails again here); as the head's, in a span when traced; how it failed, if it did. */
  private async publishFollower(
    message: OutboundMessage,
    routed: Publisher | undefined,
    keeper: LeaseKeeper,
    slot: WorkSlot,
  ): Promise<PublishFailure | undefined> {
    try {
      const publisher = routed ?? this.publisherFor(message);
      if (spanNeeded(message.headers)) return await this.publishInSpan(publisher, message, keeper, slot);
      const call = this.publishCall(message, keeper);
      return this.slotKeptIfOverran(call, await call.start(publisher), slot);
    } catch (error) {
      return { error, overran: false };
    }
  }

  /** A claim its destination's rate limit had no token for: not published, put off for `delayMs` (no attempt charged). */
  private async putOff(claim: OutboxClaim, keeper: LeaseKeeper, slot: WorkSlot, delayMs: number): Promise<StepOutcome<OutboxClaim>> {
    slot.release();
    await keeper.stop();
    if (this.loop.abandoned) return { kind: 'abandoned' };
    if (keeper.lost) return { kind: 'lost', level: 'warn', log: messages.publishClaimLost(claim.message.messageId) };
    return { kind: 'deferred', delayMs };
  }

  /** How a publish ended, once its keeper stopped: abandoned (shutdown), lost, failed or succeeded (with the followers published after it). */
  private outcomeOf(
    claim: OutboxClaim,
    keeper: LeaseKeeper,
    durationMs: number,
    failure: PublishFailure | undefined,
    followers?: readonly FinishedFollower<OutboxClaim>[],
  ): StepOutcome<OutboxClaim> {
    const { message } = claim;
    if (this.loop.abandoned) return { kind: 'abandoned' };
    if (keeper.lost) {
      const silence = this.liveness.explainLoss(claim.leaseMs);
      return failure === undefined
        ? { kind: 'lost', level: 'error', log: messages.markSentLost(message.messageId, silence) }
        : { kind: 'lost', level: 'warn', log: messages.publishClaimLost(message.messageId, silence) };
    }
    if (failure !== undefined) {
      return {
        kind: 'failed',
        failure: failure.error,
        durationMs,
        policy: this.options,
        retryLog: (error, delayMs) => messages.publishFailed(message.messageId, claim.attempt, error, delayMs),
      };
    }
    return { kind: 'succeeded', durationMs, followers };
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
   * Renewing keeps the attempt; giving the claim back would cost a claim round trip and reorder
   * nothing. The lease is counted from when the statement that set it was sent (`keeper.leaseFrom`).
   */
  private leaseLeftNow(claim: OutboxClaim, keeper: LeaseKeeper): boolean | undefined {
    if (keeper.aborted) return false;
    const left = keeper.leaseFrom + claim.leaseMs - performance.now();
    // Undecided: renew first (asynchronous, so kept out of the common path).
    return left >= this.options.publishTimeoutMs ? true : undefined;
  }

  private async leaseLeftAfterRenewal(claim: OutboxClaim, keeper: LeaseKeeper): Promise<boolean> {
    try {
      const sentAt = performance.now();
      const renewed = await this.lease.renew(claim);
      if (renewed) keeper.renewedAt(sentAt);
      return renewed && !keeper.aborted;
    } catch (error) {
      this.logger.warn(messages.leaseTooShortRenewFailed(claim.message.messageId, describeError(error)));
      return false;
    }
  }

  /**
   * One publish of `message` within `outbox.publishTimeout`: at the deadline its signal aborts and
   * the attempt fails with a retryable `PublishError`, even if the publisher ignores the signal.
   * The publisher's signal also aborts when the claim's does (lost claim, shutdown). The
   * destination continues from the active trace (a copy of the message only then).
   */
  private publishCall(message: OutboundMessage, keeper: LeaseKeeper): PublishCall {
    const traced = activeTraceContext(message.headers);
    return new PublishCall(traced ? { ...message, headers: traced } : message, keeper, new AbortController(), this.deadlines);
  }

  /** Returns how `call` ended; one still running after its abort keeps its concurrency slot until it ends. */
  private slotKeptIfOverran(call: PublishCall, failure: PublishFailure | undefined, slot: WorkSlot): PublishFailure | undefined {
    if (failure?.overran && call.publishing) slot.holdUntil(this.overrunning(call.publishing, [call.message.messageId], failure.abortedBy));
    return failure;
  }

  /** The publish inside a publish span (a trace to continue, or a tracer set up), which records its failure. */
  private async publishInSpan(
    publisher: Publisher,
    message: OutboundMessage,
    keeper: LeaseKeeper,
    slot: WorkSlot,
  ): Promise<PublishFailure | undefined> {
    let failure: PublishFailure | undefined;
    try {
      await inSpan(
        message.headers,
        () => publishSpan(message),
        async () => {
          const call = this.publishCall(message, keeper);
          failure = this.slotKeptIfOverran(call, await call.start(publisher), slot);
          if (failure) throw failure.error;
        },
      );
    } catch (error) {
      failure ??= { error, overran: false };
    }
    return failure;
  }

  /**
   * Publishes that QueueBox stopped waiting for (their signal aborted: timeout, lost claim,
   * shutdown) and that have not ended yet: each still holds its `concurrency` slot.
   */
  get overrunningCount(): number {
    return this.overrunningPublishes;
  }

  /**
   * Counts a publish QueueBox stopped waiting for while it ran (its slot stays taken until it
   * ends) and settles when it ends. Only one still running `ABORT_GRACE_MS` after its abort is
   * logged as ignoring its signal, with the cause that aborted it (a timed-out one has had that
   * grace already: it is logged at once); one abandoned at shutdown is kept for the instance's
   * deregistration, which names it when it may be delivered twice.
   */
  private overrunning(publishing: PromiseLike<unknown>, messageIds: readonly string[], abortedBy: PublishAbort = 'timeout'): Promise<void> {
    this.overrunningPublishes++;
    let running = true;
    const warn = () => {
      if (running) this.logger.warn(this.overrunningLog(messages.publishBatchMessages(messageIds[0], messageIds.length), abortedBy));
    };
    // A timed-out publish was given up only after its grace (`afterTimeout`): it ignores its signal now.
    let ignoring: NodeJS.Timeout | undefined;
    if (abortedBy === 'timeout') warn();
    else ignoring = setTimeout(warn, ABORT_GRACE_MS).unref();
    const end = (how: 'published' | 'failed') => {
      running = false;
      clearTimeout(ignoring);
      this.overrunningPublishes--;
      if (abandoned) abandoned.ended = how;
    };
    const settled = Promise.resolve(publishing).then(
      () => end('published'),
      () => end('failed'),
    );
    // Shared by the messages of a batch call; `end` runs later, once `publishing` settles.
    const abandoned: AbandonedPublish | undefined = abortedBy === 'shutdown' ? { settled } : undefined;
    if (abandoned) {
      for (const messageId of messageIds) this.abandoned.set(messageId, abandoned);
    }
    return settled;
  }

  private overrunningLog(messageId: string, abortedBy: PublishAbort): string {
    const count = this.overrunningPublishes;
    if (abortedBy === 'shutdown')
      return messages.publishOverrunningShutdown(messageId, this.options.shutdownTimeoutMs, ABORT_GRACE_MS, count);
    if (abortedBy === 'claim lost') return messages.publishOverrunningClaimLost(messageId, ABORT_GRACE_MS, count);
    return messages.publishOverrunningTimeout(messageId, this.options.publishTimeoutMs, ABORT_GRACE_MS, count);
  }

  /**
   * After the loop stopped: gives the publishes the shutdown aborted up to `ABORT_GRACE_MS` to
   * end, so that those that honour their signal are not named as duplicates at deregistration.
   */
  protected override async afterStop(): Promise<void> {
    // Messages still waiting for a publishBatch call (every call slot kept by an overrunning call): their steps end abandoned.
    await this.publishBatches.releaseWaiting();
    const running = [...new Set(this.abandoned.values())].filter((publish) => publish.ended === undefined);
    if (running.length > 0)
      await settledWithin(
        running.map((publish) => publish.settled),
        ABORT_GRACE_MS,
      );
  }

  /**
   * The message ids of the publishes the shutdown aborted that ignored their signal: still
   * running, or that published after the abort. Their rows are released at deregistration and
   * published again by another replica, so each may be delivered twice.
   */
  publishesOutlivingShutdown(): string[] {
    return [...this.abandoned].filter(([, publish]) => publish.ended !== 'failed').map(([messageId]) => messageId);
  }

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.claims.reclaim({
        maxAttempts: this.options.maxAttempts,
        attemptHistory: this.rootOptions.attemptHistory,
      });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
