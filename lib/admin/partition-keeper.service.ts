import { type BeforeApplicationShutdown, Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY } from '../common/queuebox.constants';
import type { Dialect, PartitionKeeping, PartitionUpkeepResult } from '../dialects/dialect';
import { messages } from '../texts/queuebox.messages';
import type { QueueTable } from '../types/claims';
import type { QueueBoxIdentity } from '../types/instance';

/** How often each process runs the partitions' upkeep (until it becomes an option). */
export const PARTITION_UPKEEP_EVERY_MS = 60_000;

/**
 * Keeps the partitions of the partitioned layout (issue 37, docs/partitioning.md): creates them
 * ahead of the ids in use and settles those no insert can reach, at start-up and then every
 * `PARTITION_UPKEEP_EVERY_MS`, in every process of the application, producers included (one at a
 * time: a process that finds another running it skips). Does nothing where the tables are plain.
 */
@Injectable()
export class PartitionKeeper implements BeforeApplicationShutdown {
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private keeping: PartitionKeeping | undefined;
  /** The tables are plain: nothing to keep. */
  private plain = false;
  private running: Promise<Record<QueueTable, PartitionUpkeepResult> | undefined> | undefined;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Optional() @Inject(QUEUEBOX_IDENTITY) instance?: QueueBoxIdentity,
  ) {
    this.logger = new Logger(logContext('QueueBox:Partitions', instance?.name));
  }

  /**
   * Where the tables are partitioned: one upkeep now, then one every `PARTITION_UPKEEP_EVERY_MS`.
   * Called with the workers' start by `QueueBoxInstance`. A failed run (the catalog read included)
   * is logged and tried again at the next one; where the tables are plain, nothing more runs.
   */
  async start(): Promise<void> {
    if (this.timer || this.plain) return;
    await this.runOnce();
    if (this.plain) return;
    this.timer = setInterval(() => void this.runOnce(), PARTITION_UPKEEP_EVERY_MS);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One upkeep of both tables (`undefined` where they are plain, or when it failed: logged). Concurrent calls share one run. */
  runOnce(): Promise<Record<QueueTable, PartitionUpkeepResult> | undefined> {
    this.running ??= this.upkeep().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async upkeep(): Promise<Record<QueueTable, PartitionUpkeepResult> | undefined> {
    try {
      if (!this.keeping) {
        this.keeping = await this.dialect.partitionKeeping?.();
        if (!this.keeping) {
          this.plain = true;
          return undefined;
        }
        this.logger.log(messages.partitionUpkeepStarted(PARTITION_UPKEEP_EVERY_MS));
      }
      return await this.keeping.upkeep();
    } catch (error) {
      this.logger.error(messages.partitionUpkeepFailed(describeError(error), PARTITION_UPKEEP_EVERY_MS));
      return undefined;
    }
  }
}
