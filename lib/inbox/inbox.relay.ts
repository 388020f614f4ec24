import { Inject, Injectable, Logger, type OnApplicationBootstrap, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { EntityManager } from 'typeorm';
import { describeError, isInstance } from '../common/errors';
import { encodeHeaderValue } from '../common/header-value';
import { withinTimeout } from '../common/time-limit';
import { uuidV5 } from '../common/uuid';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import { ClaimLostError, HandlerTimeoutError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import type { InboxMessage } from '../lease/claimed-messages';
import { LeaseService } from '../lease/lease.service';
import type { InboxClaim } from '../lease/lease.types';
import type { ResolvedQueueBoxOptions, ResolvedRelayOptions } from '../options/options.resolver';
import { asDuplicateMessageId } from '../outbox/outbox.service';
import { toOutboxRows } from '../outbox/outbox-rows';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { inSpan, processSpan } from '../tracing/trace-context';
import { CAUSATION_HEADER } from '../wire-headers';
import { ClaimLoop } from '../workers/claim-loop';
import { DatabaseRecovery } from '../workers/database-recovery';
import type { LeaseKeeper } from '../workers/lease-keeper';
import { LoopWorker } from '../workers/loop-worker';
import type { OutcomeRecorder } from '../workers/outcome-recorder';
import { ForwardBatcher, type RoutedRow, rowsOf } from './forward-batcher';
import { inboxMessageName, inboxOutcomeRecorder } from './inbox-outcomes';
import { InboxSources } from './inbox-sources';

const NAME = 'inbox relay';

/**
 * Forwards inbox rows of the routed sources (`inbox.relay.routes`) to the outbox. A row's outbox
 * row(s) are inserted in the transaction that marks it `processed`, fenced: a row whose claim is
 * lost gets no outbox row, so a row reaches the outbox once (I6). Rows routed at the same time
 * share that transaction (`ForwardBatcher`); a row whose batch failed is forwarded alone.
 * Outbox message ids derive from the inbox row, so a forward can be traced end to end.
 */
@Injectable()
export class InboxRelay extends LoopWorker<InboxClaim> implements OnApplicationBootstrap {
  protected readonly name = NAME;
  protected readonly logger = new Logger('QueueBox:InboxRelay');
  protected readonly options: ResolvedRelayOptions;
  protected readonly loop: ClaimLoop<InboxClaim>;
  private readonly batcher: ForwardBatcher;
  private readonly outcomes: OutcomeRecorder<InboxClaim>;
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
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    super();
    this.options = rootOptions.inbox.relay;
    // At most `batchSize` claims are held, so no batch could be bigger.
    this.batcher = new ForwardBatcher(dialect, lease, this.options.batchSize);
    this.outcomes = inboxOutcomeRecorder(lease, events, this.logger);
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:relay-reclaim:${rootOptions.tables.inbox.qualified}`, recovery },
      {
        claim: (limit) => this.claimWithFollowers(limit),
        process: (claim, keeper, yieldSlot) =>
          inSpan(
            claim.message.headers,
            () => processSpan(claim.message, 'inbox'),
            () => this.forward(claim, keeper, yieldSlot),
          ),
        reclaim: () => this.reclaim(),
      },
      lease,
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

  onApplicationBootstrap(): void {
    if (this.enabled) this.start();
  }

  /** The message id of the `index`-th outbox message forwarded from inbox row `inboxId`. */
  derivedMessageId(inboxId: string, index: number): string {
    return uuidV5(`${this.rootOptions.tables.inbox.qualified}/${inboxId}/${index}`);
  }

  /**
   * Claims heads (one row per aggregate in flight), then reads their followers: the rows right
   * after the heads of their aggregates (see LeaseService.followers), at most `batchSize` per head
   * and `concurrency × batchSize` held in all, routed after their head and forwarded in its
   * transaction. So an aggregate advances by more than one row per round trip of its head.
   */
  private async claimWithFollowers(limit: number): Promise<InboxClaim[]> {
    const heads = await this.lease.claimRelayBatch({ sources: this.sources.relaySources, limit, leaseMs: this.options.leaseMs });
    const room = this.options.concurrency * this.options.batchSize - this.followersHeld;
    if (heads.length === 0 || room < 1) return heads;
    try {
      const read = await this.lease.followers(heads, { room, maxPerHead: this.options.batchSize });
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

  private async forward(claim: InboxClaim, keeper: LeaseKeeper, yieldSlot: (until?: Promise<unknown>) => void): Promise<void> {
    const read = this.followersOf.get(claim)?.length ?? 0;
    try {
      await this.forwardWithFollowers(claim, keeper, yieldSlot);
    } finally {
      this.followersHeld -= read;
    }
  }

  private async forwardWithFollowers(claim: InboxClaim, keeper: LeaseKeeper, yieldSlot: (until?: Promise<unknown>) => void): Promise<void> {
    const { message } = claim;
    const startedAt = performance.now();
    let rows: OutboxInsertRow[] | undefined;
    let followers: RoutedRow[] = [];
    let failure: unknown;
    try {
      rows = await this.outboxRowsFor(message, keeper, yieldSlot, 'head');
      const routed = await this.routeFollowers(claim, keeper, yieldSlot);
      followers = routed.followers;
      // `concurrency` bounds routes running: the next route runs while this forward waits for its
      // batch, so a batch can gather up to `batchSize` forwards (a route that timed out and still
      // runs kept its slot above and never gets here).
      if (!routed.slotHeld) yieldSlot();
    } catch (error) {
      failure = error;
    }
    // Renewal stops before the transaction that holds the completing write (see LeaseKeeper).
    await keeper.stop();
    if (this.loop.abandoned) return;
    if (keeper.lost) {
      this.logger.warn(messages.relayClaimLost(message.source, message.idempotencyKey));
      return;
    }
    if (rows) {
      try {
        const outcome = await this.batcher.forward(claim, rows, followers);
        if (outcome === 'lost') throw new ClaimLostError(messages.claimLost('inbox', claim.id));
        if (outcome === 'alone') followers = await this.forwardAlone(claim, rows, followers);
        const durationMs = performance.now() - startedAt;
        this.outcomes.completed(claim, { durationMs, forwarded: rows.length });
        for (const follower of followers) this.outcomes.completed(follower.claim, { durationMs, forwarded: follower.rows.length });
        return;
      } catch (error) {
        if (isInstance(error, ClaimLostError)) {
          this.logger.error(messages.relayMarkLost(message.source, message.idempotencyKey));
          return;
        }
        failure = error;
      }
    }
    await this.outcomes.failed(claim, failure, {
      policy: this.options,
      durationMs: performance.now() - startedAt,
      retryLog: (error, delayMs) => messages.relayFailed(inboxMessageName(message), claim.attempt, error, delayMs),
    });
  }

  /**
   * Routes the head's followers in id order, up to the first whose route fails or times out: it
   * and the rows after it stay pending, and come again as heads, where a failure counts as an
   * attempt. `slotHeld`: a route timed out and still runs, holding the slot until it ends.
   */
  private async routeFollowers(
    head: InboxClaim,
    keeper: LeaseKeeper,
    yieldSlot: (until?: Promise<unknown>) => void,
  ): Promise<{ followers: RoutedRow[]; slotHeld: boolean }> {
    const followers = this.followersOf.get(head) ?? [];
    this.followersOf.delete(head);
    const routed: RoutedRow[] = [];
    for (const follower of followers) {
      if (keeper.lost || this.loop.abandoned) break;
      try {
        routed.push({ claim: follower, rows: await this.outboxRowsFor(follower.message, keeper, yieldSlot, 'follower') });
      } catch (error) {
        return { followers: routed, slotHeld: isInstance(error, HandlerTimeoutError) };
      }
    }
    return { followers: routed, slotHeld: false };
  }

  /**
   * One head's forward in a transaction of its own: its outbox row(s) and its followers', then the
   * fenced completion of the head and the completion of its followers. When that fails for any
   * reason but a lost claim, the head goes alone. Returns the followers forwarded.
   */
  private async forwardAlone(claim: InboxClaim, rows: OutboxInsertRow[], followers: RoutedRow[]): Promise<RoutedRow[]> {
    try {
      await this.dialect.transaction(async (manager) => {
        await this.insertForwarded(manager, rowsOf({ rows, followers }));
        if (!(await this.lease.complete(claim, manager))) throw new ClaimLostError(messages.claimLost('inbox', claim.id));
        await this.lease.completeFollowers(
          followers.map((follower) => follower.claim),
          manager,
        );
      });
      return followers;
    } catch (error) {
      // A follower that changed, or whose rows the outbox refused, must not fail its head: the head
      // goes alone, and the follower comes again as a head, where its own failure counts.
      if (followers.length === 0 || isInstance(error, ClaimLostError)) throw error;
      return this.forwardAlone(claim, rows, []);
    }
  }

  /** Inserts forwarded outbox rows; a message id the outbox already holds would collide on every attempt: final. */
  private async insertForwarded(manager: EntityManager, rows: OutboxInsertRow[]): Promise<void> {
    if (rows.length === 0) return;
    try {
      await this.dialect.outboxInsert({ manager, rows });
    } catch (error) {
      throw asDuplicateMessageId(error, messages.relayMessageIdTaken) ?? error;
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
    yieldSlot: (until?: Promise<unknown>) => void,
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
    // A route that ignores its aborted signal keeps its slot until it ends.
    const output = await withinTimeout(
      Promise.resolve().then(() => route(message, context)),
      timeoutMs,
      () =>
        new HandlerTimeoutError(messages.handlerTimedOut(`The relay route of ${message.source}`, 'inbox.relay.handlerTimeout', timeoutMs)),
      (error, settled) => {
        if (role === 'head') keeper.abort(error);
        yieldSlot(settled);
      },
    );
    const list = Array.isArray(output) ? output : [output];
    return toOutboxRows(
      list.map((outbound, index) => ({
        ...outbound,
        messageId: outbound?.messageId ?? this.derivedMessageId(message.id, index),
        headers: { [CAUSATION_HEADER]: encodeHeaderValue(message.idempotencyKey), ...outbound?.headers },
      })),
      this.rootOptions.maxPayloadBytes,
    );
  }

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.lease.reclaimInbox({
        sources: this.sources.relaySources,
        maxAttempts: this.options.maxAttempts,
      });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
