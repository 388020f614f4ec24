// The partitioned layout's upkeep and retention for both tables, behind the Dialect seam
// (`Dialect.partitionKeeping`): what the module's PartitionKeeper and RetentionService run
// (issue 37, docs/partitioning.md). A dialect leaf: its statements go through the functions its
// creator gives it.

import type { PartitionKeeping, QueueBoxTables } from '../dialect';
import type { DialectLog } from '../dialect-driver';
import { PartitionRetention } from './partition-retention';
import { type PartitionSql, PartitionUpkeep } from './partition-upkeep';

/**
 * The upkeep's sizes until they become options (docs/partitioning.md): a partition holds about an
 * hour of traffic at the recent rate, at least 100,000 ids; partitions are kept for two days of
 * traffic ahead at the highest rate seen, and never fewer than two.
 */
export const PARTITION_SIZES = { intervalMs: 3_600_000, aheadMs: 2 * 86_400_000, minSpan: 100_000 };

export function createPartitionKeeping(sql: PartitionSql, tables: QueueBoxTables, log: DialectLog): PartitionKeeping {
  const logger = { log: (message: string) => log.log?.(message), warn: (message: string) => log.warn(message) };
  const kinds = ['outbox', 'inbox'] as const;
  const upkeeps = kinds.map((kind) => new PartitionUpkeep(sql, { table: tables[kind], kind, logger, ...PARTITION_SIZES }));
  const retentions = kinds.map((kind) => new PartitionRetention(sql, { table: tables[kind], kind, logger }));
  return {
    async upkeep() {
      const [outbox, inbox] = [await upkeeps[0].runOnce(), await upkeeps[1].runOnce()];
      return { outbox, inbox };
    },
    async dropExpired(ages) {
      const [outbox, inbox] = [await retentions[0].runOnce(ages.outbox), await retentions[1].runOnce(ages.inbox)];
      return { outbox, inbox };
    },
  };
}
