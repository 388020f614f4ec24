import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { describeError, isInstance } from '../common/errors';
import { encodeHeaderValue } from '../common/header-value';
import { withinTimeout } from '../common/time-limit';
import { uuidV5 } from '../common/uuid';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import { ClaimLostError, HandlerTimeoutError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { LeaseService } from '../lease/lease.service';
import type { LeaseKeeper } from '../lease/lease-keeper';
import type { ResolvedQueueBoxOptions, ResolvedRelayOptions } from '../options/options.resolved';
import { OutboxWriter } from '../outbox/outbox.writer';
import { QUEUEBOX_DIALECT, QUEUEBOX_INSTANCE, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { inSpan, processSpan } from '../tracing/trace-context';
import type { InboxClaim } from '../types/claims';
import type { QueueBoxInstanceName } from '../types/instance';
import type { InboxMessage } from '../types/messages';
import { CAUSATION_HEADER } from '../wire-headers';
import { ClaimLoop, type WorkerLoopStatus, type WorkSlot } from '../workers/claim-loop';
import { DatabaseRecovery } from '../workers/database-recovery';
import { InboxFollowers } from '../workers/inbox-followers';
import { inboxMessageName, inboxOutcomeRecorder } from '../workers/inbox-outcomes';
import { InboxSources } from '../workers/inbox-sources';
import { InstanceLiveness } from '../workers/instance-liveness';
import type { StepOutcome } from '../workers/outcome-recorder';
import { WorkerShell } from '../workers/worker-shell';
import { type Forward, ForwardBatcher, type RoutedRow, rowsOf } from './forward-batcher';
import { RelayClaims } from './inbox.claims';

const NAME = 'inbox relay';

/**
 * Forwards inbox rows of the routed sources (`inbox.relay.routes`) to the outbox. A row's outbox
 * row(s) are inserted in the transaction that marks it `processed`, fenced: a row whose claim is
 * lost gets no outbox row, so a row reaches the outbox once (I6). Rows routed at the same time
 * share that transaction (`ForwardBatcher`); a row whose batch failed is forwarded alone.
 * Outbox message ids derive from the inbox row, so a forward can be traced end to end.
 */
@Injectable()
export class InboxRelay extends WorkerShell<InboxClaim> {
  protected readonly logger = new Logger('QueueBox:InboxRelay');
  private readonly options: ResolvedRelayOptions;
  private readonly loop: ClaimLoop<InboxClaim>;
  private readonly claims: RelayClaims;
  private readonly followers: InboxFollowers;
  private readonly batcher: ForwardBatcher;
  /** Writes the forwarded outbox rows, as `OutboxService.enqueue` does (in the forward's transaction). */
  private readonly writer: OutboxWriter;
  /** The followers read for each claimed head, until its forward routes them. */
  private readonly followersOf = new WeakMap<InboxClaim, InboxClaim[]>();
  /** Followers read and not yet finished: at most `concurrency × batchSize`, as a batch pull handler holds. */
  private followersHeld = 0;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly lease: LeaseService,
    private readonly sources: InboxSources,
    events: QueueBoxEvents,
    recovery: DatabaseRecovery,
    @Inject(QUEUEBOX_INSTANCE) instance: QueueBoxInstanceName,
    private readonly liveness: InstanceLiveness,
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    super();
    this.options = rootOptions.inbox.relay;
    this.claims = new RelayClaims(dialect, events);
    this.followers = new InboxFollowers(dialect);
    this.writer = new OutboxWriter(dialect, rootOptions.maxPayloadBytes);
    // At most `batchSize` claims are held, so no batch could be bigger.
    this.batcher = new ForwardBatcher(dialect, lease, this.followers, this.writer, this.options.batchSize);
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:${instance.name}:relay-reclaim`, recovery },
      {
        claim: (limit) => this.claimWithFollowers(limit),
        step: (claim, keeper, slot) =>
          inSpan(
            claim.message.headers,
            () => processSpan(claim.message, 'inbox'),
            () => this.forward(claim, keeper, slot),
          ),
        keyOf: (claim) => claim.message.aggregateId,
        keep: (claim) => lease.keep(claim),
        reclaim: () => this.reclaim(),
      },
      inboxOutcomeRecorder(lease, events, this.logger),
      this.logger,
      scheduler,
    );
    sources.onReceived((source) => {
      if (Object.hasOwn(this.options.routes, source)) this.loop.wake();
    });
  }

  /** On in `workers.relay`, and some source has a relay route. */
  get enabled(): boolean {
    return this.rootOptions.workers.relay && this.sources.relaySources.length > 0;
  }

  protected loops() {
    const { concurrency, batchSize, leaseMs } = this.options;
    return [{ loop: this.loop, describe: { name: NAME, concurrency, batchSize, leaseMs } }];
  }

  /** Whether the loop runs and when it last claimed (read by health checks). */
  get status(): WorkerLoopStatus {
    return this.loop.status;
  }

  /** Claims one batch, forwards it and waits for the outcomes. Returns how many rows it claimed. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  /** Like `runOnce()`, but resolves to the claims it worked on (`queuebox/testing` reports their outcome). */
  runBatch(): Promise<InboxClaim[]> {
    return this.loop.runBatch();
  }

  /** The message id of the `index`-th outbox message forwarded from inbox row `inboxId`. */
  derivedMessageId(inboxId: string, index: number): string {
    return uuidV5(`${this.rootOptions.tables.inbox.qualified}/${inboxId}/${index}`);
  }

  /**
   * Claims heads (one row per aggregate in flight), then reads their followers: the rows right
   * after the heads of their aggregates (see InboxFollowers), at most `batchSize` per head and
   * `concurrency × batchSize` held in all, routed after their head and forwarded in its
   * transaction. So an aggregate advances by more than one row per round trip of its head.
   */
  private async claimWithFollowers(limit: number): Promise<InboxClaim[]> {
    const heads = await this.claims.claim({ sources: this.sources.relaySources, limit, leaseMs: this.options.leaseMs });
    const room = this.options.concurrency * this.options.batchSize - this.followersHeld;
    if (heads.length === 0 || room < 1) return heads;
    try {
      const read = await this.followers.read(heads, { room, maxPerHead: this.options.batchSize });
      for (const [head, followers] of read) {
        this.followersOf.set(head, followers);
        this.followersHeld += followers.length;
      }
    } catch (error) {
      // The heads are claimed: forward them alone rather than leave them to their leases.
      this.logger.warn(messages.relayFollowersReadFailed(describeError(error)));
    }
    return heads;
  }

  /**
   * The step: routes the head and its followers, then writes the forward (its outbox rows, its
   * fenced completion and its followers'), batched with the forwards ready at the same time.
   */
  private async forward(claim: InboxClaim, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<InboxClaim>> {
    const followers = this.followersOf.get(claim) ?? [];
    this.followersOf.delete(claim);
    try {
      return await this.routeAndWrite(claim, followers, keeper, slot);
    } finally {
      this.followersHeld -= followers.length;
    }
  }

  private async routeAndWrite(
    claim: InboxClaim,
    read: InboxClaim[],
    keeper: LeaseKeeper,
    slot: WorkSlot,
  ): Promise<StepOutcome<InboxClaim>> {
    const { message } = claim;
    const startedAt = performance.now();
    let forward: Forward | undefined;
    let failure: unknown;
    try {
      const rows = await this.outboxRowsFor(message, keeper, slot, 'head');
      forward = { claim, rows, followers: await this.routeFollowers(read, keeper, slot) };
      // `concurrency` bounds routes running: the next route runs while this forward waits for its
      // batch, so a batch can gather up to `batchSize` forwards (a route that timed out and still
      // runs kept its slot).
      slot.release();
    } catch (error) {
      failure = error;
    }
    // Renewal stops before the transaction that holds the completing write (see LeaseKeeper).
    await keeper.stop();
    if (this.loop.abandoned) return { kind: 'abandoned' };
    if (keeper.lost) {
      const silence = this.liveness.explainLoss(claim.leaseMs);
      return { kind: 'lost', level: 'warn', log: messages.relayClaimLost(message.source, message.idempotencyKey, silence) };
    }
    if (forward) {
      try {
        const written = await this.batcher.forward(forward);
        if (written === 'lost') throw new ClaimLostError(messages.claimLost('inbox', claim.id));
        const followers = written === 'alone' ? await this.forwardAlone(forward) : forward.followers;
        const durationMs = performance.now() - startedAt;
        return {
          kind: 'committed',
          details: { durationMs, forwarded: forward.rows.length },
          followers: followers.map((follower) => ({ claim: follower.claim, details: { durationMs, forwarded: follower.rows.length } })),
        };
      } catch (error) {
        if (isInstance(error, ClaimLostError)) {
          const silence = this.liveness.explainLoss(claim.leaseMs);
          return { kind: 'lost', level: 'error', log: messages.relayMarkLost(message.source, message.idempotencyKey, silence) };
        }
        failure = error;
      }
    }
    return {
      kind: 'failed',
      failure,
      durationMs: performance.now() - startedAt,
      policy: this.options,
      retryLog: (error, delayMs) => messages.relayFailed(inboxMessageName(message), claim.attempt, error, delayMs),
    };
  }

  /**
   * Routes a head's followers in id order, up to the first whose route fails or times out: it and
   * the rows after it stay pending, and come again as heads, where a failure counts as an attempt.
   */
  private async routeFollowers(followers: InboxClaim[], keeper: LeaseKeeper, slot: WorkSlot): Promise<RoutedRow[]> {
    const routed: RoutedRow[] = [];
    for (const follower of followers) {
      if (keeper.lost || this.loop.abandoned) break;
      try {
        routed.push({ claim: follower, rows: await this.outboxRowsFor(follower.message, keeper, slot, 'follower') });
      } catch {
        break;
      }
    }
    return routed;
  }

  /**
   * One head's forward in a transaction of its own: its outbox row(s) and its followers', then the
   * fenced completion of the head and the completion of its followers. When that fails for any
   * reason but a lost claim, the head goes alone. Returns the followers forwarded.
   */
  private async forwardAlone(forward: Forward): Promise<RoutedRow[]> {
    try {
      await this.dialect.transaction(async (manager) => {
        await this.writer.insert(manager, rowsOf(forward), messages.relayMessageIdTaken);
        if (!(await this.lease.complete(forward.claim, manager))) throw new ClaimLostError(messages.claimLost('inbox', forward.claim.id));
        await this.followers.complete(
          forward.followers.map((follower) => follower.claim),
          manager,
        );
      });
      return forward.followers;
    } catch (error) {
      // A follower that changed, or whose rows the outbox refused, must not fail its head: the head
      // goes alone, and the follower comes again as a head, where its own failure counts.
      if (forward.followers.length === 0 || isInstance(error, ClaimLostError)) throw error;
      return this.forwardAlone({ ...forward, followers: [] });
    }
  }

  /**
   * The outbox rows of `message`'s route. A route past its timeout keeps its slot until it ends;
   * a head's timeout also aborts its claim's signal (the attempt fails), a follower's only ends
   * its head's chain of followers.
   */
  private async outboxRowsFor(
    message: InboxMessage,
    keeper: LeaseKeeper,
    slot: WorkSlot,
    role: 'head' | 'follower',
  ): Promise<OutboxInsertRow[]> {
    const route = this.options.routes[message.source];
    // The signal is made only when the route reads it (see LeaseKeeper).
    const context = {
      get signal() {
        return keeper.signal;
      },
    };
    const timeoutMs = this.options.handlerTimeoutMs;
    const output = await withinTimeout(
      Promise.resolve().then(() => route(message, context)),
      timeoutMs,
      () =>
        new HandlerTimeoutError(messages.handlerTimedOut(`The relay route of ${message.source}`, 'inbox.relay.handlerTimeout', timeoutMs)),
      (error, settled) => {
        if (role === 'head') keeper.abort(error);
        slot.holdUntil(settled);
      },
    );
    const list = Array.isArray(output) ? output : [output];
    return this.writer.rows(
      list.map((outbound, index) => ({
        ...outbound,
        messageId: outbound?.messageId ?? this.derivedMessageId(message.id, index),
        headers: { [CAUSATION_HEADER]: encodeHeaderValue(message.idempotencyKey), ...outbound?.headers },
      })),
    );
  }

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.claims.reclaim({ sources: this.sources.relaySources, maxAttempts: this.options.maxAttempts });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
