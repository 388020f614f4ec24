import { Inject, Injectable, Logger, type OnApplicationBootstrap, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import { describeError, isInstance } from '../common/errors';
import { withinTimeout } from '../common/time-limit';
import { uuidV5 } from '../common/uuid';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import { ClaimLostError, HandlerTimeoutError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import type { InboxMessage } from '../lease/claimed-messages';
import { LeaseService } from '../lease/lease.service';
import type { InboxClaim } from '../lease/lease.types';
import type { ResolvedQueueBoxOptions, ResolvedRelayOptions } from '../options/options.resolver';
import { toOutboxRows } from '../outbox/outbox-rows';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { inSpan, processSpan } from '../tracing/trace-context';
import { CAUSATION_HEADER } from '../wire-headers';
import { ClaimLoop } from '../workers/claim-loop';
import { DatabaseRecovery } from '../workers/database-recovery';
import type { LeaseKeeper } from '../workers/lease-keeper';
import { LoopWorker } from '../workers/loop-worker';
import type { OutcomeRecorder } from '../workers/outcome-recorder';
import { ForwardBatcher } from './forward-batcher';
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

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
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
    this.batcher = new ForwardBatcher(dataSource, dialect, lease, this.options.batchSize);
    this.outcomes = inboxOutcomeRecorder(lease, events, this.logger);
    this.loop = new ClaimLoop(
      { name: NAME, ...this.options, reclaimTimerName: `queuebox:relay-reclaim:${rootOptions.tables.inbox.qualified}`, recovery },
      {
        claim: (limit) => this.lease.claimRelayBatch({ sources: this.sources.relaySources, limit, leaseMs: this.options.leaseMs }),
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

  private async forward(claim: InboxClaim, keeper: LeaseKeeper, yieldSlot: (until?: Promise<unknown>) => void): Promise<void> {
    const { message } = claim;
    const startedAt = performance.now();
    let rows: OutboxInsertRow[] | undefined;
    let failure: unknown;
    try {
      rows = await this.outboxRowsFor(message, keeper, yieldSlot);
      // `concurrency` bounds routes running: the next route runs while this forward waits for its
      // batch, so a batch can gather up to `batchSize` forwards (a route that timed out and still
      // runs kept its slot above and never gets here).
      yieldSlot();
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
        const outcome = await this.batcher.forward(claim, rows);
        if (outcome === 'lost') throw new ClaimLostError(messages.claimLost('inbox', claim.id));
        if (outcome === 'alone') await this.forwardAlone(claim, rows);
        this.outcomes.completed(claim, { durationMs: performance.now() - startedAt, forwarded: rows.length });
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

  /** One row's forward in a transaction of its own: its outbox row(s), then its fenced completion. */
  private async forwardAlone(claim: InboxClaim, rows: OutboxInsertRow[]): Promise<void> {
    await this.dataSource.transaction(async (manager) => {
      if (rows.length > 0) await this.dialect.outboxInsert({ manager, rows });
      if (!(await this.lease.complete(claim, manager))) throw new ClaimLostError(messages.claimLost('inbox', claim.id));
    });
  }

  private async outboxRowsFor(
    message: InboxMessage,
    keeper: LeaseKeeper,
    yieldSlot: (until?: Promise<unknown>) => void,
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
        keeper.abort(error);
        yieldSlot(settled);
      },
    );
    const list = Array.isArray(output) ? output : [output];
    return toOutboxRows(
      list.map((outbound, index) => ({
        ...outbound,
        messageId: outbound?.messageId ?? this.derivedMessageId(message.id, index),
        headers: { [CAUSATION_HEADER]: message.idempotencyKey, ...outbound?.headers },
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
