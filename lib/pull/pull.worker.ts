import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource, EntityManager } from 'typeorm';
import { AmbientTransactions } from '../common/ambient-transaction';
import { describeError, isInstance } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { withinTimeout } from '../common/time-limit';
import type { Dialect } from '../dialects/dialect';
import { byId } from '../dialects/records';
import { ClaimLostError, HandlerTimeoutError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { FollowersChangedError, InboxFollowers } from '../inbox-runtime/inbox.followers';
import { inboxMessageName, inboxOutcomeRecorder } from '../inbox-runtime/inbox.outcomes';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import { LeaseService } from '../lease/lease.service';
import { LeaseKeeper } from '../lease/lease-keeper';
import { MAX_PULL_CLAIM_LIMIT } from '../options/options.defaults';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { queryTimeoutFor } from '../options/query-timeout';
import { messages } from '../texts/queuebox.messages';
import { inSpan, processSpan } from '../tracing/trace-context';
import type { InboxClaim } from '../types/claims';
import type { QueueBoxIdentity } from '../types/instance';
import { BatchQueue } from '../workers/batch-queue';
import { ClaimLoop, type WorkerLoopStatus, type WorkSlot } from '../workers/claim-loop';
import { DatabaseRecovery } from '../workers/database-recovery';
import { InstanceLiveness } from '../workers/instance-liveness';
import type { OutcomeRecorder, StepOutcome } from '../workers/outcome-recorder';
import { RenewalConnection } from '../workers/renewal-connection';
import { WorkerShell } from '../workers/worker-shell';
import { PullClient } from './pull.client';
import type { PullBatchContext, PullContext } from './pull-handler.decorator';
import { type PullHandlerDefinition, PullHandlerExplorer } from './pull-handler.explorer';

/** A claim of the batch form, with the keeper renewing it since it was claimed. */
interface HeldClaim {
  claim: InboxClaim;
  keeper: LeaseKeeper;
}

type Outcome = StepOutcome<InboxClaim>;

/** How one transaction of a batch handler ended (see `attemptBatch`). */
type BatchAttempt =
  | { kind: 'done'; outcomes: Outcome[] }
  | { kind: 'given back'; outcomes: Outcome[] }
  | { kind: 'failed'; failure: unknown; timedOut: boolean; handled: number; durationMs: number };

/**
 * Runs every `@PullHandler`: per source, claims messages (expired claims included), runs the
 * handler in a TypeORM transaction and completes the row, fenced, in that same transaction.
 *
 * Each handler transaction holds a pooled connection while its lease must still be renewed; so
 * renewals run on one connection set aside for them at start, and can never wait behind handlers
 * for the pool (however high the concurrency).
 */
@Injectable()
export class PullWorker extends WorkerShell<InboxClaim> {
  protected readonly logger: Logger;
  private readonly byHandler = new Map<string, { loop: ClaimLoop<InboxClaim>; batches?: BatchQueue<HeldClaim, Outcome> }>();
  private readonly followers: InboxFollowers;
  private readonly recorder: OutcomeRecorder<InboxClaim>;
  private renewals?: RenewalConnection;
  private readonly ambient: AmbientTransactions;

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly explorer: PullHandlerExplorer,
    private readonly lease: LeaseService,
    private readonly client: PullClient,
    events: QueueBoxEvents,
    sources: InboxSources,
    private readonly recovery: DatabaseRecovery,
    private readonly liveness: InstanceLiveness,
    @Optional() private readonly scheduler?: SchedulerRegistry,
    @Optional() discovery?: DiscoveryService,
    @Optional() @Inject(QUEUEBOX_IDENTITY) instance?: QueueBoxIdentity,
  ) {
    super();
    this.logger = new Logger(logContext('QueueBox:PullWorker', instance?.name));
    this.ambient = new AmbientTransactions(dataSource, () => (discovery?.getProviders() ?? []).map((wrapper) => wrapper.instance));
    this.followers = new InboxFollowers(dialect);
    this.recorder = inboxOutcomeRecorder(lease, events, this.logger);
    sources.onReceived((source) => this.byHandler.get(source)?.loop.wake());
  }

  /** Whether this process runs pull workers: on in `workers.pull`, and some `@PullHandler` exists. */
  get enabled(): boolean {
    return this.options.workers.pull && this.explorer.handlers.length > 0;
  }

  protected loops() {
    return this.explorer.handlers.map((handler) => ({
      loop: this.loopFor(handler),
      describe: {
        name: `pull worker ${handler.source}`,
        concurrency: handler.concurrency,
        batchSize: handler.concurrency,
        leaseMs: handler.leaseMs,
      },
    }));
  }

  protected override async beforeStart(): Promise<void> {
    if (this.renewals) return;
    this.renewals = new RenewalConnection(this.dataSource, this.lease, queryTimeoutFor(this.options));
    await this.renewals.open();
  }

  protected override async afterStop(): Promise<void> {
    await this.renewals?.close();
    this.renewals = undefined;
  }

  /** Claims one batch of `source` (or of every source), runs the handlers and waits. Returns how many rows it claimed. */
  async runOnce(source?: string): Promise<number> {
    return (await this.runBatch(source)).length;
  }

  /** Like `runOnce()`, but resolves to the claims it worked on (`queuebox/testing` reports their outcome). */
  async runBatch(source?: string): Promise<InboxClaim[]> {
    const handlers = this.explorer.handlers.filter((handler) => source === undefined || handler.source === source);
    const batches = await Promise.all(handlers.map((handler) => this.loopFor(handler).runBatch()));
    return batches.flat();
  }

  /**
   * Runs `work` on the connection set aside for renewals while the worker runs (in turn with the
   * renewals: one statement at a time; the manager is `undefined`, the pool, while it reconnects),
   * else on the pool.
   */
  onRenewalConnection<T>(work: (manager: EntityManager | undefined) => Promise<T>): Promise<T> {
    return this.renewals ? this.renewals.run(work) : work(undefined);
  }

  /** One status per handler loop (read by health checks). */
  get status(): WorkerLoopStatus[] {
    return this.statuses;
  }

  private loopFor(handler: PullHandlerDefinition): ClaimLoop<InboxClaim> {
    const existing = this.byHandler.get(handler.source);
    if (existing) return existing.loop;
    // The batch form holds up to `concurrency` batches of claims; each claim is renewed on its
    // own from the moment it is held, and its step only joins a batch (see handleBatch).
    const held = handler.batch === undefined ? handler.concurrency : handler.concurrency * handler.batch;
    const entry: { loop: ClaimLoop<InboxClaim>; batches?: BatchQueue<HeldClaim, Outcome> } = {
      loop: new ClaimLoop(
        {
          name: `pull worker ${handler.source}`,
          concurrency: held,
          batchSize: held,
          pollIntervalMs: this.options.pull.pollIntervalMs,
          shutdownTimeoutMs: this.options.pull.shutdownTimeoutMs,
          recovery: this.recovery,
        },
        {
          claim: (limit) =>
            this.client.claimBatch({
              source: handler.source,
              limit: Math.min(limit, MAX_PULL_CLAIM_LIMIT),
              leaseMs: handler.leaseMs,
              maxAttempts: handler.maxAttempts,
            }),
          step: (claim, keeper, slot) =>
            entry.batches ? entry.batches.add({ claim, keeper }) : this.handle(handler, entry.loop, claim, keeper, slot),
          keyOf: (claim) => claim.message.aggregateId,
          keep: (claim) => this.keep(claim),
        },
        this.recorder,
        this.logger,
        this.scheduler,
        handler.batch === undefined
          ? undefined
          : {
              // A batch slot kept by a timed-out call stands for `batch` claims the loop must not hold.
              stuckSlots: () => (entry.batches?.stuckSlots ?? 0) * (handler.batch ?? 1),
              releaseUnstarted: async () => {
                const handedBack = await entry.batches?.takeWaiting(async ({ keeper }) => {
                  await keeper.stop();
                  return { kind: 'released' };
                });
                return (handedBack ?? []).map(({ claim }) => claim);
              },
            },
      ),
    };
    if (handler.batch !== undefined) {
      entry.batches = new BatchQueue(
        handler.batch,
        handler.concurrency,
        (batch, holdSlot) => this.handleBatch(handler, entry.loop, batch, holdSlot),
        () => entry.loop.wake(),
      );
    }
    this.byHandler.set(handler.source, entry);
    return entry.loop;
  }

  /**
   * The batch form: one transaction runs the handler on the claimed messages and the followers
   * read into the batch's room, and completes every claim, fenced, in one statement. All or
   * nothing. A claim lost before the commit rolls the whole batch back, and the claims still held
   * are released (their attempt not counted: they did not fail).
   *
   * A batch of more than one message that fails (throws or times out) charges no one: the failure
   * may be any one message's. Each claimed message then runs alone, in a transaction of its own and
   * without followers, and only a message that fails alone is charged (retried with backoff, or
   * dead after `maxAttempts`). Followers of a failed batch stay pending, their attempt uncounted,
   * and come again behind their head. After a message times out alone, the ones not yet run go
   * back uncharged: a handler that hangs for every message is charged one message per batch
   * instead of holding the batch's claims for a timeout each. Returns each claim's outcome.
   */
  private async handleBatch(
    handler: PullHandlerDefinition,
    loop: ClaimLoop<InboxClaim>,
    batch: HeldClaim[],
    holdSlot: (until: Promise<unknown>) => void,
  ): Promise<Outcome[]> {
    // Claims that waited for a batch slot past the point where shutdown stopped waiting: their
    // keepers are aborted; leave the rows to the instance's deregistration, as abandoned work does.
    if (loop.abandoned) return batch.map(() => ({ kind: 'abandoned' }));
    const first = await this.attemptBatch(handler, loop, batch, { followers: true, holdSlot });
    if (first.kind !== 'failed') return first.outcomes;
    if (first.handled === 1) return [failedOutcome(handler, batch[0].claim, first.failure, first.durationMs)];
    this.logger.warn(messages.pullBatchFailed(handler.name, first.handled, batch.length, describeError(first.failure)));
    const outcomes: Outcome[] = [];
    for (const { claim } of batch) {
      if (loop.abandoned) outcomes.push({ kind: 'abandoned' });
      else if (outcomes.some((outcome) => outcome.kind === 'failed' && isInstance(outcome.failure, HandlerTimeoutError)))
        outcomes.push({ kind: 'released' });
      else {
        const alone = await this.attemptBatch(handler, loop, [{ claim, keeper: this.keep(claim) }], { followers: false, holdSlot });
        outcomes.push(alone.kind === 'failed' ? failedOutcome(handler, claim, alone.failure, alone.durationMs) : alone.outcomes[0]);
      }
    }
    return outcomes;
  }

  /**
   * One transaction of a batch handler over `batch` (with followers in its room when
   * `p.followers`), ending every claim's keeper. `done`: committed (each claim's outcome
   * `committed`, its followers with it); `given back`: a claim was lost or a follower changed, and
   * the claims still held go back; `failed`: the handler threw or timed out, nothing was written,
   * the claims are still held.
   */
  private async attemptBatch(
    handler: PullHandlerDefinition,
    loop: ClaimLoop<InboxClaim>,
    batch: HeldClaim[],
    p: { followers: boolean; holdSlot: (until: Promise<unknown>) => void },
  ): Promise<BatchAttempt> {
    const claims = batch.map((held) => held.claim);
    const keepers = batch.map((held) => held.keeper);
    let followers: InboxClaim[] = [];
    let failure: unknown;
    let timedOut: Error | undefined;
    const startedAt = performance.now();
    try {
      const attempt = this.handlerTransaction(async (manager) => {
        // The batch's room beyond its claims goes to followers: the rows right after each claimed
        // head of an aggregate, read in the transaction, handled and completed with their heads.
        followers = p.followers
          ? [...(await this.followers.read(claims, { room: (handler.batch ?? 1) - claims.length, manager })).values()].flat()
          : [];
        await this.inBatchTransaction(manager, handler, loop, claims, followers, keepers, () => timedOut);
      });
      await withinTimeout(
        attempt,
        handler.handlerTimeoutMs,
        () => timeoutError(handler),
        (error, settled) => {
          timedOut = error;
          for (const keeper of keepers) keeper.abort(error);
          p.holdSlot(settled);
        },
      );
      const details = { durationMs: performance.now() - startedAt, handler: handler.name };
      return {
        kind: 'done',
        outcomes: claims.map((claim) => ({
          kind: 'committed',
          details,
          followers: followers.filter((follower) => follower.headId === claim.id).map((follower) => ({ claim: follower, details })),
        })),
      };
    } catch (error) {
      failure = error;
    }
    await Promise.all(keepers.map((keeper) => keeper.stop()));
    if (loop.abandoned) return { kind: 'given back', outcomes: claims.map(() => ({ kind: 'abandoned' })) };
    const followersChanged = isInstance(failure, FollowersChangedError);
    if (followersChanged) this.logger.warn(messages.followersChanged(handler.source));
    if (followersChanged || isInstance(failure, ClaimLostError) || keepers.some((keeper) => keeper.lost)) {
      return {
        kind: 'given back',
        outcomes: claims.map((claim, i) =>
          keepers[i].lost || this.lease.isLost(claim)
            ? { kind: 'lost', level: 'error', log: this.claimLostLog(claim, handler) }
            : { kind: 'released' },
        ),
      };
    }
    const handled = claims.length + followers.length;
    return { kind: 'failed', failure, timedOut: timedOut !== undefined, handled, durationMs: performance.now() - startedAt };
  }

  /**
   * A batch's transaction after its followers were read: the handler on the heads and followers in
   * id order, then, with every keeper stopped and every claim still held, the fenced completion of
   * the heads in one statement and the completion of the followers under them. Throws (and the
   * transaction rolls back) when the handler throws, timed out, or a claim or follower changed.
   */
  private async inBatchTransaction(
    manager: EntityManager,
    handler: PullHandlerDefinition,
    loop: ClaimLoop<InboxClaim>,
    claims: InboxClaim[],
    followers: InboxClaim[],
    keepers: LeaseKeeper[],
    timedOut: () => Error | undefined,
  ): Promise<void> {
    const lost = (claim: InboxClaim) => new ClaimLostError(messages.claimLost('pull', claim.id));
    let controller: AbortController | undefined;
    const context: PullBatchContext = {
      manager,
      // Made when first read (see PullContext); aborts with the first keeper that aborts.
      get signal() {
        if (!controller) {
          const made = new AbortController();
          controller = made;
          for (const keeper of keepers) keeper.onAbort((reason) => made.abort(reason));
        }
        return controller.signal;
      },
    };
    const handled = followers.length === 0 ? claims : [...claims, ...followers].sort(byId);
    await handler.handle(
      handled.map((claim) => claim.message),
      context,
    );
    const late = timedOut();
    if (late) throw late;
    await Promise.all(keepers.map((keeper) => keeper.stop()));
    const gone = claims.find((_claim, i) => keepers[i].lost);
    if (gone) throw lost(gone);
    if (loop.abandoned) throw lost(claims[0]);
    // One fenced statement; any claim it did not complete rolls back every completion and the handler's writes.
    const completed = await this.lease.completeBatch(claims, manager);
    const missed = claims.find((claim) => !completed.has(claim));
    if (missed) throw lost(missed);
    // A follower changed since it was read (an operator's write) throws: the whole batch waits for another try.
    await this.followers.complete(followers, manager);
  }

  /**
   * A handler's transaction (READ COMMITTED): through the `@nestjs-cls/transactional` host of this
   * DataSource when the application has one, so that it is the ambient transaction while the
   * handler runs (`TransactionHost.tx`, `@Transactional()` methods and `enqueue(message)` join it);
   * QueueBox's own otherwise.
   */
  private handlerTransaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.ambient.run(work, (inOwn) => this.dialect.transaction(inOwn));
  }

  /** The lost-claim line of a handler's claim: the lease blamed only when this instance's own silence does not explain it. */
  private claimLostLog(claim: InboxClaim, handler: PullHandlerDefinition): string {
    return messages.pullClaimLost(inboxMessageName(claim.message), handler.name, this.liveness.explainLoss(claim.leaseMs));
  }

  /** A keeper renewing `claim` on the set-aside renewal connection (with the renewals due with it), or on the pool while the worker is not started. */
  private keep(claim: InboxClaim): LeaseKeeper {
    return this.lease.keep(claim, { renewer: this.renewer });
  }

  /** Renews on the set-aside connection while the worker runs, through the pool before it starts. */
  private readonly renewer = { renew: (claim: InboxClaim) => (this.renewals ? this.renewals.renew(claim) : this.lease.renew(claim)) };

  /** The one-message form's step: the handler and the fenced completion in one transaction. */
  private async handle(
    handler: PullHandlerDefinition,
    loop: ClaimLoop<InboxClaim>,
    claim: InboxClaim,
    keeper: LeaseKeeper,
    slot: WorkSlot,
  ): Promise<Outcome> {
    const { message } = claim;
    const lost = () => new ClaimLostError(messages.claimLost('pull', claim.id));
    let failure: unknown;
    let timedOut: Error | undefined;
    const startedAt = performance.now();
    try {
      const attempt = inSpan(
        message.headers,
        () => processSpan(message, 'pull'),
        () =>
          this.handlerTransaction(async (manager) => {
            // `signal` is made when the handler first reads it: most never do, and an AbortSignal is
            // costly on Node.js 20 (see LeaseKeeper).
            const context: PullContext = {
              manager,
              get signal() {
                return keeper.signal;
              },
              attempt: claim.attempt,
            };
            await handler.handle(message, context);
            // Past the timeout the attempt is already recorded as failed and the row may have a
            // new owner: this transaction must not commit (the fenced completion would refuse too).
            if (timedOut) throw timedOut;
            // Renewal stops before the completing write: a renewal racing it would wait for it and
            // then see zero rows, which is not a lost claim.
            await keeper.stop();
            if (keeper.lost || loop.abandoned) throw lost();
            // Fenced by the database's current time (clock_timestamp), not the transaction's start.
            if (!(await this.lease.complete(claim, manager))) throw lost();
          }),
      );
      // At the timeout the signal aborts and the attempt is recorded now; a handler that ignores
      // the signal keeps its transaction (rolled back when it returns) and its slot until it ends.
      await withinTimeout(
        attempt,
        handler.handlerTimeoutMs,
        () => timeoutError(handler),
        (error, settled) => {
          timedOut = error;
          keeper.abort(error);
          slot.holdUntil(settled);
        },
      );
      return { kind: 'committed', details: { durationMs: performance.now() - startedAt, handler: handler.name } };
    } catch (error) {
      failure = error;
    }
    await keeper.stop();
    if (loop.abandoned) return { kind: 'abandoned' };
    if (isInstance(failure, ClaimLostError) || keeper.lost) {
      return { kind: 'lost', level: 'error', log: this.claimLostLog(claim, handler) };
    }
    return failedOutcome(handler, claim, failure, performance.now() - startedAt);
  }
}

/** A failed attempt: retried with the handler's backoff, or dead after its `maxAttempts`. */
function failedOutcome(handler: PullHandlerDefinition, claim: InboxClaim, failure: unknown, durationMs: number): Outcome {
  return {
    kind: 'failed',
    failure,
    durationMs,
    policy: handler,
    retryLog: (error, delayMs) => messages.pullHandlerFailed(inboxMessageName(claim.message), handler.name, claim.attempt, error, delayMs),
  };
}

function timeoutError(handler: PullHandlerDefinition): HandlerTimeoutError {
  return new HandlerTimeoutError(messages.handlerTimedOut(`Pull handler ${handler.name}`, 'handlerTimeout', handler.handlerTimeoutMs));
}
