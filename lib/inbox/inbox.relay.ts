import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxEvents } from '../events/queuebox.events';
import { InboxFollowers } from '../inbox-runtime/inbox.followers';
import { inboxMessageName, inboxOutcomeRecorder } from '../inbox-runtime/inbox.outcomes';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import { LeaseService } from '../lease/lease.service';
import type { LeaseKeeper } from '../lease/lease-keeper';
import type { ResolvedQueueBoxOptions, ResolvedRelayOptions } from '../options/options.resolved';
import { OutboxWriter } from '../outbox/outbox.writer';
import { messages } from '../texts/queuebox.messages';
import { inSpan, processSpan } from '../tracing/trace-context';
import type { QueueBoxIdentity } from '../types/instance';
import { ClaimLoop } from '../workers/claim-loop';
import { ClaimPauses } from '../workers/claim-pauses';
import { DatabaseRecovery } from '../workers/database-recovery';
import { InstanceLiveness } from '../workers/instance-liveness';
import type { StepOutcome } from '../workers/outcome-recorder';
import type { WorkSlot } from '../workers/work-slots';
import { SingleLoopWorker } from '../workers/worker-shell';
import { type Forward, ForwardBatcher } from './forward-batcher';
import { claimShare, type RelayClaim, RelayClaims } from './relay.claims';
import { RelayRoutes } from './relay.routes';

const NAME = 'inbox relay';

/**
 * Forwards inbox rows of the routed sources (`inbox.relay.routes`) to the outbox. A row's outbox
 * row(s) are inserted in the transaction that marks it `processed`, fenced: a row whose claim is
 * lost gets no outbox row, so a row reaches the outbox once (I6). Each claimed head carries its
 * followers (`RelayClaims`), routed after it and forwarded in its transaction; forwards ready at
 * the same time share that transaction (`ForwardBatcher`). Outbox message ids derive from the
 * inbox row (`RelayRoutes`), so a forward can be traced end to end.
 */
@Injectable()
export class InboxRelay extends SingleLoopWorker<RelayClaim> {
  protected readonly logger: Logger;
  protected readonly loop: ClaimLoop<RelayClaim>;
  private readonly options: ResolvedRelayOptions;
  private readonly claims: RelayClaims;
  private readonly routes: RelayRoutes;
  private readonly batcher: ForwardBatcher;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly rootOptions: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DIALECT) dialect: Dialect,
    lease: LeaseService,
    private readonly sources: InboxSources,
    events: QueueBoxEvents,
    recovery: DatabaseRecovery,
    @Inject(QUEUEBOX_IDENTITY) instance: QueueBoxIdentity,
    private readonly liveness: InstanceLiveness,
    private readonly pauses: ClaimPauses,
    @Optional() scheduler?: SchedulerRegistry,
  ) {
    super();
    this.logger = new Logger(logContext('QueueBox:InboxRelay', instance.name));
    this.options = rootOptions.inbox.relay;
    const { batchSize, maxFollowers } = this.options;
    const followers = new InboxFollowers(dialect);
    const writer = new OutboxWriter(dialect, rootOptions.maxPayloadBytes);
    this.claims = new RelayClaims(dialect, events, { reader: followers, maxFollowers, logger: this.logger });
    this.routes = new RelayRoutes(this.options, rootOptions.tables.inbox.qualified, writer);
    // At most `batchSize` claims are held, so no batch could be bigger.
    this.batcher = new ForwardBatcher(dialect, lease, followers, writer, batchSize);
    this.loop = new ClaimLoop(
      {
        name: NAME,
        ...this.options,
        // Half of batchSize a claim: the loop then holds two claims' heads (see RelayClaims).
        claimLimit: claimShare(batchSize),
        reclaimTimerName: `queuebox:${instance.name}:relay-reclaim`,
        recovery,
      },
      {
        claim: (limit) => this.claim(limit),
        step: (claim, keeper, slot) =>
          inSpan(
            claim.message.headers,
            () => processSpan(claim.message, 'relay'),
            () => this.forward(claim, keeper, slot),
          ),
        keyOf: (claim) => claim.message.aggregateId,
        keep: (claim) => lease.keep(claim),
        reclaim: () => this.reclaim(),
        // A head given back unstarted never runs its step, whose end would count its followers off.
        released: (claim) => this.claims.finished(claim),
      },
      inboxOutcomeRecorder(lease, events, this.logger),
      this.logger,
      scheduler,
    );
    sources.onReceived((source) => {
      if (Object.hasOwn(this.options.routes, source)) this.loop.wake();
    });
  }

  /** Claims heads of the relay's sources but the paused ones (issue 40; read at most once per poll interval). */
  private async claim(limit: number): Promise<RelayClaim[]> {
    const { pollIntervalMs, leaseMs } = this.options;
    const paused = this.pauses.namesNow('inbox', pollIntervalMs) ?? (await this.pauses.names('inbox', pollIntervalMs));
    const all = this.sources.relaySources;
    const sources = paused.length === 0 ? all : all.filter((source) => !paused.includes(source));
    return this.claims.claim({ sources, limit, leaseMs });
  }

  /** On in `workers.relay`, and some source has a relay route. */
  get enabled(): boolean {
    return this.rootOptions.workers.relay && this.sources.relaySources.length > 0;
  }

  protected get description() {
    const { concurrency, batchSize, leaseMs } = this.options;
    return { name: NAME, concurrency, batchSize, leaseMs };
  }

  /** The message id of the `index`-th outbox message forwarded from inbox row `inboxId`. */
  derivedMessageId(inboxId: string, index: number): string {
    return this.routes.derivedMessageId(inboxId, index);
  }

  /**
   * The step: routes the head and its followers, then writes the forward (its outbox rows, its
   * fenced completion and its followers'), batched with the forwards ready at the same time.
   */
  private async forward(claim: RelayClaim, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<RelayClaim>> {
    try {
      return await this.routeAndWrite(claim, keeper, slot);
    } finally {
      this.claims.finished(claim);
    }
  }

  private async routeAndWrite(claim: RelayClaim, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<RelayClaim>> {
    const { message } = claim;
    const startedAt = performance.now();
    let forward: Forward | undefined;
    let failure: unknown;
    try {
      const rows = await this.routes.head(message, keeper, slot);
      const followers = await this.routes.followers(claim.followers, keeper, slot, () => keeper.lost || this.loop.abandoned);
      forward = { claim, rows, followers };
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
    const silence = () => this.liveness.explainLoss(claim.leaseMs);
    if (keeper.lost)
      return { kind: 'lost', level: 'warn', log: messages.relayClaimLost(message.source, message.idempotencyKey, silence()) };
    if (forward) {
      try {
        const written = await this.batcher.forward(forward);
        if (written === 'lost') {
          return { kind: 'lost', level: 'error', log: messages.relayMarkLost(message.source, message.idempotencyKey, silence()) };
        }
        const durationMs = performance.now() - startedAt;
        return {
          kind: 'committed',
          details: { durationMs, forwarded: forward.rows.length },
          followers: written.followers.map((follower) => ({
            claim: follower.claim,
            details: { durationMs, forwarded: follower.rows.length },
          })),
        };
      } catch (error) {
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

  private async reclaim(): Promise<void> {
    try {
      const { pending, dead } = await this.claims.reclaim({
        sources: this.sources.relaySources,
        maxAttempts: this.options.maxAttempts,
        attemptHistory: this.rootOptions.attemptHistory,
      });
      if (pending + dead > 0) this.logger.warn(messages.reclaimed(NAME, pending, dead));
    } catch (error) {
      this.logger.error(messages.reclaimFailed(NAME, describeError(error)));
    }
  }
}
