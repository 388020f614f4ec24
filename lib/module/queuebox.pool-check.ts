import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import { dialectDriver } from '../dialects/drivers';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { PullHandlerExplorer } from '../pull/pull-handler.explorer';
import { messages } from '../texts/queuebox.messages';

/** The size of the DataSource's pool, read from its options as its driver reads them. */
export function poolSizeOf(dataSource: DataSource): number {
  return dialectDriver(dataSource.options.type).poolSize(dataSource.options);
}

/** The connections QueueBox holds for as long as it runs, and what the pool must have at least. */
export interface PoolNeeds {
  /** One connection LISTENing for work (PostgreSQL, when any worker runs). */
  listen: number;
  /** One for lease renewals while pull handlers hold theirs in transactions (when pull handlers run). */
  renewals: number;
  /** The two above plus one to work with (claims, completions, a handler's transaction, enqueue). */
  minimum: number;
}

/**
 * Checks at start-up that the TypeORM pool can hold what QueueBox keeps for itself plus one
 * connection to work with. Below that, nothing moves: with pool 1 the LISTEN connection holds the
 * only connection and the poller never claims; with pool 2 and a `@PullHandler`, LISTEN and the
 * renewal connection leave none for the handler's transaction, nor for `receive()`. Start-up fails
 * with a `QueueBoxConfigError` naming the minimum; a pool above it but below the handlers' total
 * concurrency only makes handlers wait, which is logged as a warning.
 */
@Injectable()
export class QueueBoxPoolCheck implements OnModuleInit {
  private readonly logger = new Logger('QueueBox');

  constructor(
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly explorer: PullHandlerExplorer,
  ) {}

  onModuleInit(): void {
    const needs = this.needs();
    const poolSize = poolSizeOf(this.dataSource);
    if (poolSize < needs.minimum) {
      throw new QueueBoxConfigError('dataSource', messages.poolTooSmall(poolSize, needs.minimum, needs.listen, needs.renewals));
    }
    const concurrency = this.pullHandlersRun() ? this.explorer.handlers.reduce((sum, handler) => sum + handler.concurrency, 0) : 0;
    if (needs.renewals > 0 && !this.dialect.reservesConnections) {
      // No connection can be set aside (SQL Server): renewals share the pool with handler
      // transactions and claims. Unless the pool holds every handler transaction, every claim
      // waiting for its lock and one more, a full pool makes renewals wait until leases expire,
      // and the expired rows are claimed and handled a second time.
      const claimers = this.claimers();
      const retention = this.retentionConnections();
      const starvationFree = concurrency + claimers + retention + needs.renewals;
      if (poolSize < starvationFree) {
        throw new QueueBoxConfigError('pool.max', messages.renewalsCouldStarve(poolSize, starvationFree, concurrency, claimers, retention));
      }
      return;
    }
    const forHandlers = poolSize - needs.listen - needs.renewals;
    if (concurrency > forHandlers) this.logger.warn(messages.pullPoolTight(concurrency, poolSize, forHandlers));
  }

  /** What QueueBox keeps of the pool with the configured workers and the handlers found. */
  needs(): PoolNeeds {
    const { outbox, relay, pull } = this.options.workers;
    // As WorkNotifications decides: it listens when the dialect can and any worker is on.
    const listen = this.dialect.workListen && (outbox || relay || pull) ? 1 : 0;
    const renewals = this.pullHandlersRun() ? 1 : 0;
    return { listen, renewals, minimum: listen + renewals + 1 };
  }

  /** The claim loops that may each hold a connection while they wait for a claim lock: the outbox poller, the relay, one per pull handler. */
  private claimers(): number {
    const { outbox, relay } = this.options.workers;
    return (outbox ? 1 : 0) + (relay ? 1 : 0) + (this.pullHandlersRun() ? this.explorer.handlers.length : 0);
  }

  /**
   * What retention holds while it runs (RetentionService runs it when enabled and a worker runs
   * here): the connection whose transaction owns the retention lock for the whole run, and the one
   * each delete batch takes for its own transaction meanwhile.
   */
  private retentionConnections(): number {
    const { outbox, relay, pull } = this.options.workers;
    return this.options.retention.enabled && (outbox || relay || pull) ? 2 : 0;
  }

  private pullHandlersRun(): boolean {
    return this.options.workers.pull && this.explorer.handlers.length > 0;
  }
}
