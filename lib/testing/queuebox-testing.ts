import type { INestApplicationContext } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { TableName } from '../common/identifiers';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_MODULE_OPTIONS, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import { rowStatesQuery } from '../dialects/drivers';
import type { RowStateRow } from '../dialects/inspection.sql';
import { QueueBoxConfigError, QueueBoxStateError } from '../errors/queuebox.errors';
import { InboxRelay } from '../inbox/inbox.relay';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { OutboxPoller } from '../outbox/outbox.poller';
import { PullWorker } from '../pull/pull.worker';
import { PullHandlerExplorer } from '../pull/pull-handler.explorer';
import type { Claim } from '../types/claims';
import type { InboxMessage, OutboundMessage } from '../types/messages';
import type { QueueBoxModuleOptions } from '../types/options';
import { testingMessages } from './testing.messages';

const DEFAULT_MAX_BATCHES = 1000;

/** What became of a claimed row that did not succeed. */
export type FailureOutcome =
  /** Back to `pending`, to be tried again after its backoff. */
  | 'retried'
  /** Dead-lettered: a permanent error, or its last attempt. */
  | 'dead'
  /** Still `processing`: its finishing write failed or lost the claim (the logs say which); recovered when the lease expires. */
  | 'unfinished';

/** One failed attempt of a message. */
export interface FailedAttempt<M> {
  /** The message as the publisher or handler saw it (`message.attempt` is the attempt that failed). */
  message: M;
  outcome: FailureOutcome;
  /** The row's `last_error` after the attempt (error name and message, never a payload). */
  error: string | null;
}

/** What `drainOutbox()` did. */
export interface OutboxDrainResult {
  /** Messages published and marked `sent`, in the order they were claimed. */
  published: OutboundMessage[];
  /** Failed attempts, in order; a message retried within the drain appears once per failed attempt. */
  failed: FailedAttempt<OutboundMessage>[];
  /** Claim batches run, the last (empty) one included. */
  batches: number;
}

/** What `drainInbox()` (relay) or `runPullHandlers()` did. */
export interface InboxRunResult {
  /** Messages marked `processed` (forwarded to the outbox, or handled and committed), in the order they were claimed. */
  processed: InboxMessage[];
  failed: FailedAttempt<InboxMessage>[];
  batches: number;
}

/** What `drain()` did, per worker, over all its rounds. */
export interface DrainResult {
  outbox: OutboxDrainResult;
  relay: InboxRunResult;
  pull: InboxRunResult;
  /** Rounds of relay, then pull handlers, then outbox; the last one found nothing to do. */
  rounds: number;
}

/** The part of `@nestjs/testing`'s `TestingModuleBuilder` that `overrideOptions` uses (no import of it at run time). */
export interface OverridableModuleBuilder<B> {
  overrideProvider(token: string): { useValue(value: unknown): B };
}

export interface DrainOptions {
  /** Fail instead of looping forever when rows stay claimable (e.g. retried with no backoff and a high `maxAttempts`). Default 1000. */
  maxBatches?: number;
}

/**
 * Runs QueueBox's workers inside a test, in the test's own time: no sleeps, no polling, no
 * background loops racing the assertions. Each method claims, works and records outcomes through
 * the very code paths the workers use (`LeaseService`, the poller's publish, the relay's forward,
 * the pull worker's handler transaction), batch after batch, until nothing is claimable *now*:
 * rows with a future `availableAt` or waiting for a retry backoff stay where they are.
 *
 * The app under test must not run the background loop of a worker driven here: configure it with
 * `workers: false` (or that worker off), otherwise these methods throw.
 *
 * @example
 * const moduleRef = await Test.createTestingModule({
 *   imports: [TypeOrmModule.forRoot({ ... }), QueueBoxModule.forRoot({ workers: false, outbox: { publisher } }), OrdersModule],
 * }).compile();
 * const app = await moduleRef.init();
 * await app.get(OrdersService).placeOrder(order);
 * const { published } = await QueueBoxTesting.from(app).drainOutbox();
 */
export class QueueBoxTesting {
  private constructor(
    private readonly options: ResolvedQueueBoxOptions,
    private readonly dataSource: DataSource,
    private readonly dialect: Dialect,
    private readonly poller: OutboxPoller,
    private readonly relay: InboxRelay,
    private readonly pull: PullWorker,
    private readonly pullSources: string[],
  ) {}

  /**
   * Replaces the options of the app's `QueueBoxModule`, whether it was imported with `forRoot()` or
   * `forRootAsync()`, in a testing module built from the whole app. Use it instead of
   * `overrideModule(QueueBoxModule)`, which Nest ignores for a dynamic module (the app imports
   * `QueueBoxModule.forRoot(...)`, not the class). The DataSource and the module extras
   * (`dataSource`, `receiver`) stay the app's. Returns the builder, to chain.
   *
   * @example
   * const moduleRef = await QueueBoxTesting.overrideOptions(Test.createTestingModule({ imports: [AppModule] }), {
   *   workers: false,
   *   outbox: { publisher: new RecordingPublisher() },
   * }).compile();
   */
  static overrideOptions<B extends OverridableModuleBuilder<B>>(builder: B, options: QueueBoxModuleOptions): B {
    return builder.overrideProvider(QUEUEBOX_MODULE_OPTIONS).useValue(options);
  }

  /** The helpers for an initialized Nest application or testing module that imports `QueueBoxModule`. */
  static from(app: Pick<INestApplicationContext, 'get'>): QueueBoxTesting {
    let options: ResolvedQueueBoxOptions;
    try {
      options = app.get<ResolvedQueueBoxOptions>(QUEUEBOX_RESOLVED_OPTIONS, { strict: false });
    } catch {
      throw new QueueBoxConfigError('app', testingMessages.notAQueueBoxApp());
    }
    return new QueueBoxTesting(
      options,
      app.get<DataSource>(QUEUEBOX_DATA_SOURCE, { strict: false }),
      app.get<Dialect>(QUEUEBOX_DIALECT, { strict: false }),
      app.get(OutboxPoller, { strict: false }),
      app.get(InboxRelay, { strict: false }),
      app.get(PullWorker, { strict: false }),
      app.get(PullHandlerExplorer, { strict: false }).handlers.map((handler) => handler.source),
    );
  }

  /** Claims and publishes outbox messages, batch after batch, until none is claimable now. */
  async drainOutbox(options: DrainOptions = {}): Promise<OutboxDrainResult> {
    this.refuseRunning('outbox poller', 'workers.outbox', this.options.workers.outbox);
    const result: OutboxDrainResult = { published: [], failed: [], batches: 0 };
    await this.untilQuiet('outbox', options, async () => {
      result.batches++;
      const claims = await this.poller.runBatch();
      await this.recordOutcomes(claims, this.options.tables.outbox, 'sent', result.published, result.failed);
      return claims.length;
    });
    return result;
  }

  /** Runs the `@PullHandler` of `source` (or of every source) until none of its messages is claimable now. */
  async runPullHandlers(source?: string, options: DrainOptions = {}): Promise<InboxRunResult> {
    const result: InboxRunResult = { processed: [], failed: [], batches: 0 };
    if (source !== undefined && !this.pullSources.includes(source)) {
      throw new QueueBoxConfigError('source', testingMessages.noPullHandler(source, this.pullSources));
    }
    if (this.pullSources.length === 0) return result;
    this.refuseRunning('pull workers', 'workers.pull', this.options.workers.pull);
    await this.untilQuiet('pull workers', options, async () => {
      result.batches++;
      const claims = await this.pull.runBatch(source);
      await this.recordOutcomes(claims, this.options.tables.inbox, 'processed', result.processed, result.failed);
      return claims.length;
    });
    return result;
  }

  /** Runs the inbox relay (`inbox.relay.routes`) until none of its messages is claimable now. */
  async drainInbox(options: DrainOptions = {}): Promise<InboxRunResult> {
    const result: InboxRunResult = { processed: [], failed: [], batches: 0 };
    if (Object.keys(this.options.inbox.relay.routes).length === 0) return result;
    this.refuseRunning('inbox relay', 'workers.relay', this.options.workers.relay);
    await this.untilQuiet('inbox relay', options, async () => {
      result.batches++;
      const claims = await this.relay.runBatch();
      await this.recordOutcomes(claims, this.options.tables.inbox, 'processed', result.processed, result.failed);
      return claims.length;
    });
    return result;
  }

  /**
   * Runs the relay, the pull handlers and the outbox in rounds until a whole round finds nothing
   * claimable: messages the relay forwards, or handlers enqueue, are published in the same call.
   */
  async drain(options: DrainOptions = {}): Promise<DrainResult> {
    const total: DrainResult = {
      outbox: { published: [], failed: [], batches: 0 },
      relay: { processed: [], failed: [], batches: 0 },
      pull: { processed: [], failed: [], batches: 0 },
      rounds: 0,
    };
    const maxRounds = options.maxBatches ?? DEFAULT_MAX_BATCHES;
    for (;;) {
      if (total.rounds >= maxRounds) throw new QueueBoxStateError(testingMessages.notQuiet('drain', total.rounds));
      total.rounds++;
      const relay = await this.drainInbox(options);
      const pull = await this.runPullHandlers(undefined, options);
      const outbox = await this.drainOutbox(options);
      mergeInbox(total.relay, relay);
      mergeInbox(total.pull, pull);
      total.outbox.published.push(...outbox.published);
      total.outbox.failed.push(...outbox.failed);
      total.outbox.batches += outbox.batches;
      const worked = relay.processed.length + relay.failed.length + pull.processed.length + pull.failed.length;
      if (worked + outbox.published.length + outbox.failed.length === 0) return total;
    }
  }

  private refuseRunning(worker: string, option: string, running: boolean): void {
    if (running) throw new QueueBoxConfigError(option, testingMessages.workerRunning(worker, option));
  }

  private async untilQuiet(what: string, options: DrainOptions, batch: () => Promise<number>): Promise<void> {
    const maxBatches = options.maxBatches ?? DEFAULT_MAX_BATCHES;
    for (let batches = 0; ; batches++) {
      if (batches >= maxBatches) throw new QueueBoxStateError(testingMessages.notQuiet(what, batches));
      if ((await batch()) === 0) return;
    }
  }

  /** Reads what the worker left in each claimed row: the database is the record of the outcome. */
  private async recordOutcomes<M>(
    claims: (Claim & { message: M })[],
    table: TableName,
    finished: string,
    succeeded: M[],
    failed: FailedAttempt<M>[],
  ): Promise<void> {
    if (claims.length === 0) return;
    const query = rowStatesQuery(
      this.dialect.type,
      table,
      claims.map((claim) => claim.id),
    );
    const rows: RowStateRow[] = await this.dataSource.query(query.sql, query.params);
    const byId = new Map(rows.map((row) => [String(row.id), row]));
    for (const claim of claims) {
      const row = byId.get(claim.id);
      if (row?.state === finished) {
        succeeded.push(claim.message);
        continue;
      }
      const outcome: FailureOutcome = row?.state === 'pending' ? 'retried' : row?.state === 'dead' ? 'dead' : 'unfinished';
      failed.push({ message: claim.message, outcome, error: row?.last_error ?? null });
    }
  }
}

function mergeInbox(into: InboxRunResult, from: InboxRunResult): void {
  into.processed.push(...from.processed);
  into.failed.push(...from.failed);
  into.batches += from.batches;
}
